-- The sync worker's own database (not the marketplace server's).

-- Each configured marketplace and the outcome of its last rounds.
CREATE TABLE sources (
    name                 TEXT PRIMARY KEY,
    url                  TEXT    NOT NULL,
    last_attempt_at      BIGINT,
    last_success_at      BIGINT,
    -- Why the last round failed (NULL after a success): unreachable, expired,
    -- rolled_back, bad_signature, invalid_metadata, invalid_definition, local.
    last_reason          TEXT,
    last_error           TEXT,
    consecutive_failures BIGINT  NOT NULL DEFAULT 0,
    -- Trusted metadata as of the last good round.
    root_version         BIGINT,
    timestamp_version    BIGINT,
    snapshot_version     BIGINT,
    targets_version      BIGINT,
    timestamp_expires_at BIGINT
);

-- Every definition the last good round of a source verified. Replaced per source in
-- one transaction, so a failed or interrupted round leaves the previous state whole.
CREATE TABLE source_definitions (
    source         TEXT    NOT NULL REFERENCES sources(name) ON DELETE CASCADE,
    target         TEXT    NOT NULL,   -- PUBLISHER/NAME/VERSION.yaml
    publisher      TEXT    NOT NULL,
    name           TEXT    NOT NULL,
    version        TEXT    NOT NULL,   -- canonical semver
    hash           TEXT    NOT NULL,   -- sha256:HEX of the bytes
    yanked         BOOLEAN NOT NULL,
    signer_key_ids TEXT    NOT NULL,   -- key ids that signed the role listing it
    definition     BLOB    NOT NULL,
    PRIMARY KEY (source, target)
);
CREATE INDEX source_definitions_by_name ON source_definitions (publisher, name);
