-- The change feed, explicit (issue 21): one generation per domain that readers keep
-- copies of, bumped by every writing transaction that changes the domain, in that
-- transaction. It replaces migration 0005's nine row triggers (which PostgreSQL's store
-- would have had to imitate) and the `stat` of SQLite's write-ahead log that told
-- `/tuf/` readers another process had committed metadata (no such file on PostgreSQL,
-- nor across replicas).
--   catalog:  what listings and facets read (plugins, publishers' names and suspension,
--             plugin_tags, the search index); the catalog cache is kept per value.
--   metadata: signed TUF metadata (tuf_metadata); `/tuf/` readers keep the newest
--             timestamp and root per value.
CREATE TABLE change_feed (
    domain     TEXT   PRIMARY KEY CHECK (domain IN ('catalog', 'metadata')),
    generation BIGINT NOT NULL
);
INSERT INTO change_feed (domain, generation) SELECT 'catalog', n FROM catalog_generation;
INSERT INTO change_feed (domain, generation) VALUES ('metadata', 0);

DROP TRIGGER catalog_plugins_insert;
DROP TRIGGER catalog_plugins_update;
DROP TRIGGER catalog_plugins_delete;
DROP TRIGGER catalog_publishers_insert;
DROP TRIGGER catalog_publishers_update;
DROP TRIGGER catalog_publishers_delete;
DROP TRIGGER catalog_tags_insert;
DROP TRIGGER catalog_tags_update;
DROP TRIGGER catalog_tags_delete;
DROP TABLE catalog_generation;
