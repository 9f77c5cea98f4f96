-- A plugin's versions by when they were published.
--
-- Listings show when a plugin's oldest listed version was published: `MIN(published_at)`
-- over the plugin's versions. With only `plugin_versions_published` (0014, for the
-- feeds) PostgreSQL's planner answers that minimum by walking every version in
-- published order until it meets one of the plugin's: about 10 ms per plugin at 11,500
-- versions. With this index it reads the plugin's first entry.
CREATE INDEX plugin_versions_plugin_published ON plugin_versions (plugin_id, published_at);
