-- Atom feeds of new versions (`/feed.atom` and per publisher and plugin).
--
-- When a version was yanked, so a feed entry can say so with the time it changed.
-- NULL for versions yanked before this column existed (their entries keep the time
-- they were published) and for every version not yanked.
ALTER TABLE plugin_versions ADD COLUMN yanked_at BIGINT;
-- Feeds read the newest versions first.
CREATE INDEX plugin_versions_published ON plugin_versions (published_at);
