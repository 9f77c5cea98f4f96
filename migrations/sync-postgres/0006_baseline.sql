-- The sync worker's database on PostgreSQL (issue 21): today's schema in one step, the
-- SQLite side's migrations 0001 to 0006 as they leave `sync.db`. Versions pair across
-- backends: a later change is one migration with the same number in `migrations/sync`
-- and here. `tests/schema_parity.rs` checks that both give the same tables, columns,
-- types and nullability.
-- Every text column uses the "C" collation: byte order, as SQLite compares text, whatever
-- the database's default locale, so lists, pages after a given tag and names sort the
-- same on both backends (a locale's order would put `a-b` after `ab`).

CREATE TABLE sources (
    name                 TEXT COLLATE "C" PRIMARY KEY,
    url                  TEXT COLLATE "C"    NOT NULL,
    last_attempt_at      BIGINT,
    last_success_at      BIGINT,
    -- Why the last round failed (NULL after a success): unreachable, expired,
    -- rolled_back, bad_signature, invalid_metadata, invalid_definition, local.
    last_reason          TEXT COLLATE "C",
    last_error           TEXT COLLATE "C",
    consecutive_failures BIGINT  NOT NULL DEFAULT 0,
    -- Trusted metadata as of the last good round.
    root_version         BIGINT,
    timestamp_version    BIGINT,
    snapshot_version     BIGINT,
    targets_version      BIGINT,
    timestamp_expires_at BIGINT,
    trusted_root         BYTEA,
    trusted_timestamp    BYTEA,
    trusted_snapshot     BYTEA,
    expires_at           BIGINT,
    expires_role         TEXT COLLATE "C",
    definitions          BIGINT  NOT NULL DEFAULT 0
);

CREATE TABLE source_definitions (
    source         TEXT COLLATE "C"    NOT NULL REFERENCES sources(name) ON DELETE CASCADE,
    target         TEXT COLLATE "C"    NOT NULL,   -- PUBLISHER/NAME/VERSION.yaml
    publisher      TEXT COLLATE "C"    NOT NULL,
    name           TEXT COLLATE "C"    NOT NULL,
    version        TEXT COLLATE "C"    NOT NULL,   -- canonical semver
    hash           TEXT COLLATE "C"    NOT NULL,   -- sha256:HEX of the bytes
    yanked         BOOLEAN NOT NULL,
    signer_key_ids TEXT COLLATE "C"    NOT NULL,   -- key ids that signed the role listing it
    definition     BYTEA   NOT NULL,
    summary        TEXT COLLATE "C",
    extras         TEXT COLLATE "C"    NOT NULL DEFAULT '',
    PRIMARY KEY (source, target)
);
CREATE INDEX source_definitions_by_name ON source_definitions (publisher, name);

CREATE TABLE publisher_failures (
    source               TEXT COLLATE "C"    NOT NULL REFERENCES sources(name) ON DELETE CASCADE,
    publisher            TEXT COLLATE "C"    NOT NULL,
    reason               TEXT COLLATE "C"    NOT NULL,   -- expired, bad_signature, tampered, invalid_metadata
    message              TEXT COLLATE "C"    NOT NULL,
    since                BIGINT  NOT NULL,   -- the first failing round in a row
    consecutive_failures BIGINT  NOT NULL,
    PRIMARY KEY (source, publisher)
);

CREATE TABLE sideloads (
    org        TEXT COLLATE "C"    NOT NULL,
    name       TEXT COLLATE "C"    NOT NULL,
    version    TEXT COLLATE "C"    NOT NULL,   -- canonical semver
    hash       TEXT COLLATE "C"    NOT NULL,   -- sha256:HEX of the bytes
    summary    TEXT COLLATE "C"    NOT NULL,
    definition BYTEA   NOT NULL,
    created_at BIGINT  NOT NULL,
    token_id   TEXT COLLATE "C"    NOT NULL,   -- which token uploaded it
    extras     TEXT COLLATE "C"    NOT NULL DEFAULT '',
    PRIMARY KEY (org, name, version)
);

CREATE TABLE tokens (
    id         TEXT COLLATE "C"    PRIMARY KEY,   -- short public id, shown in lists
    sha256     TEXT COLLATE "C"    NOT NULL UNIQUE,
    -- The organization the token acts for; NULL for a reader token (reads every
    -- organization, writes none).
    org        TEXT COLLATE "C",
    created_at BIGINT  NOT NULL,
    revoked_at BIGINT
);

-- Bumped by every change to what sources offer, so a process serving views (which
-- caches the merged view) notices rounds run by another process.
CREATE TABLE generation (
    id    BIGINT  PRIMARY KEY CHECK (id = 1),
    value BIGINT  NOT NULL
);
INSERT INTO generation (id, value) VALUES (1, 0);
