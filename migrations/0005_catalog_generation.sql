-- A counter that changes whenever anything a catalog listing or its facets read changes,
-- in the same transaction as the change. The server caches ranked results, pages and
-- facets per value of `n` and reads it on every request, so a write is seen at once by
-- the next request whoever made it: this process, or another one writing the same file
-- (`marketplace publisher suspend` while `serve` runs).
--
-- Listings read plugins, publishers (name, suspension), plugin_tags and the plugin_search
-- index. The index cannot carry triggers (virtual table); it is only ever rewritten
-- together with its plugins row, which bumps the counter in the same transaction.
-- SQLite-specific: a PostgreSQL store would use statement-level triggers.
CREATE TABLE catalog_generation (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    n   BIGINT  NOT NULL
);
INSERT INTO catalog_generation (id, n) VALUES (1, 0);

CREATE TRIGGER catalog_plugins_insert AFTER INSERT ON plugins
BEGIN UPDATE catalog_generation SET n = n + 1; END;
CREATE TRIGGER catalog_plugins_update AFTER UPDATE ON plugins
BEGIN UPDATE catalog_generation SET n = n + 1; END;
CREATE TRIGGER catalog_plugins_delete AFTER DELETE ON plugins
BEGIN UPDATE catalog_generation SET n = n + 1; END;

-- Keys, thresholds and tokens of publishers are not shown in listings.
CREATE TRIGGER catalog_publishers_insert AFTER INSERT ON publishers
BEGIN UPDATE catalog_generation SET n = n + 1; END;
CREATE TRIGGER catalog_publishers_update AFTER UPDATE OF name, suspended_at ON publishers
BEGIN UPDATE catalog_generation SET n = n + 1; END;
CREATE TRIGGER catalog_publishers_delete AFTER DELETE ON publishers
BEGIN UPDATE catalog_generation SET n = n + 1; END;

CREATE TRIGGER catalog_tags_insert AFTER INSERT ON plugin_tags
BEGIN UPDATE catalog_generation SET n = n + 1; END;
CREATE TRIGGER catalog_tags_update AFTER UPDATE ON plugin_tags
BEGIN UPDATE catalog_generation SET n = n + 1; END;
CREATE TRIGGER catalog_tags_delete AFTER DELETE ON plugin_tags
BEGIN UPDATE catalog_generation SET n = n + 1; END;
