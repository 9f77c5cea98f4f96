-- The change feed, explicit: SQLite's migration 0010 of the same name (see there). The
-- baseline had no triggers to drop; its catalog_generation becomes the `catalog` row.
CREATE TABLE change_feed (
    domain     TEXT COLLATE "C" PRIMARY KEY CHECK (domain IN ('catalog', 'metadata')),
    generation BIGINT NOT NULL
);
INSERT INTO change_feed (domain, generation) SELECT 'catalog', n FROM catalog_generation;
INSERT INTO change_feed (domain, generation) VALUES ('metadata', 0);
DROP TABLE catalog_generation;
