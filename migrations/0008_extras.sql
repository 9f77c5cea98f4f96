-- The marketplace's own metadata about a version (dependencies, suggested plugins,
-- cluster capabilities), as its publisher signed it beside the definition (the TUF
-- target's custom.extras), in JSON. NULL for versions published before: what their own
-- fields of the older design said stands in for it.
ALTER TABLE plugin_versions ADD COLUMN extras TEXT;
-- Why Fundament cannot install a version: the fields of the older design it carries,
-- '' when it can. SQL cannot parse the stored definitions, so NULL marks the versions
-- stored before and `Store::open` checks each once.
ALTER TABLE plugin_versions ADD COLUMN not_installable TEXT;
