-- The marketplace's own metadata about a version (dependencies, suggested plugins,
-- cluster capabilities) travels beside the definition: in a marketplace's signed target
-- (custom.extras) or with a sideload. Kept as JSON, '' when there is none.
ALTER TABLE source_definitions ADD COLUMN extras TEXT NOT NULL DEFAULT '';
ALTER TABLE sideloads ADD COLUMN extras TEXT NOT NULL DEFAULT '';
-- Summaries now carry suggested plugins and whether Fundament can install the version
-- (issue 19). Marked stale as in 0003; `SyncStore::open` recomputes them, once.
UPDATE source_definitions SET summary = NULL;
UPDATE sideloads SET summary = '';
