-- Catalog schema. Portable SQL (no SQLite-only types) so a PostgreSQL store can share it
-- closely, except the full-text index at the end; times are Unix seconds.

CREATE TABLE publishers (
    id          INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL UNIQUE,
    created_at  BIGINT  NOT NULL
);

CREATE TABLE plugins (
    id              INTEGER PRIMARY KEY,
    publisher_id    INTEGER NOT NULL REFERENCES publishers(id),
    name            TEXT    NOT NULL,
    created_at      BIGINT  NOT NULL,
    -- Summary of the latest listed version (highest non-yanked, stable preferred),
    -- rewritten in the same transaction as any change to the plugin's versions.
    -- latest_version (as written) is NULL while no version is listed.
    latest_version  TEXT,
    display_name    TEXT    NOT NULL DEFAULT '',
    description     TEXT    NOT NULL DEFAULT '',
    tags            TEXT    NOT NULL DEFAULT '',   -- space-separated, for display
    internet_access BOOLEAN NOT NULL DEFAULT FALSE,
    privileged      BOOLEAN NOT NULL DEFAULT FALSE,
    kube_system     BOOLEAN NOT NULL DEFAULT FALSE,
    updated_at      BIGINT  NOT NULL,
    UNIQUE (publisher_id, name)
);
CREATE INDEX plugins_name ON plugins (name);
CREATE INDEX plugins_updated ON plugins (updated_at);

CREATE TABLE plugin_versions (
    id            INTEGER PRIMARY KEY,
    plugin_id     INTEGER NOT NULL REFERENCES plugins(id),
    version       TEXT    NOT NULL,   -- as the author wrote it, e.g. v1.19.3
    canonical     TEXT    NOT NULL,   -- semver without the leading v: identity of a version
    major         BIGINT  NOT NULL,
    hash          TEXT    NOT NULL,   -- sha256:<hex> of definition
    definition    BLOB    NOT NULL,   -- the exact published bytes
    image         TEXT    NOT NULL,
    published_at  BIGINT  NOT NULL,
    yanked        BOOLEAN NOT NULL DEFAULT FALSE,
    UNIQUE (plugin_id, canonical)
);
CREATE INDEX plugin_versions_hash ON plugin_versions (hash);

-- Tags and links describe the latest listed version and are rewritten with it.
CREATE TABLE plugin_tags (
    plugin_id  INTEGER NOT NULL REFERENCES plugins(id) ON DELETE CASCADE,
    tag        TEXT    NOT NULL,
    PRIMARY KEY (plugin_id, tag)
);
CREATE INDEX plugin_tags_tag ON plugin_tags (tag);

CREATE TABLE plugin_links (
    plugin_id  INTEGER NOT NULL REFERENCES plugins(id) ON DELETE CASCADE,
    kind       TEXT    NOT NULL CHECK (kind IN ('dependency', 'suggestion')),
    target     TEXT    NOT NULL,
    PRIMARY KEY (plugin_id, kind, target)
);
CREATE INDEX plugin_links_target ON plugin_links (target);

-- Full-text index over the latest listed version of each plugin (rowid = plugins.id),
-- rewritten with the summary. SQLite-specific: a PostgreSQL store would use tsvector.
CREATE VIRTUAL TABLE plugin_search USING fts5(
    name, display_name, description, tags,
    tokenize = 'unicode61 remove_diacritics 2',
    prefix = '2 3'
);
