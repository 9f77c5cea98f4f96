-- Summaries now count what a definition's `spec.permissions.capabilities` implies:
-- `internet_access` means internet access must be approved (issue 10). Cached summaries
-- are marked stale here (NULL for sources, as rows from before 0002; the empty text for
-- sideloads, whose column is NOT NULL) and `SyncStore::open` recomputes them from the
-- stored bytes, once. A later change to that rule marks them again.
UPDATE source_definitions SET summary = NULL;
UPDATE sideloads SET summary = '';
