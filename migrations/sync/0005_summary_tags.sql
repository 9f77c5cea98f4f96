-- Summaries now carry `metadata.tags` and the version as written, which Fundament's
-- organization.v1.PluginService returns (issue 13). Marked stale as in 0003;
-- `SyncStore::open` recomputes them from the stored bytes, once.
UPDATE source_definitions SET summary = NULL;
UPDATE sideloads SET summary = '';
