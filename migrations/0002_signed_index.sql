-- The signed index (TUF). Every version of every role's metadata is kept: clients fetch
-- N.<role>.json by version, and the newest timestamp is served as timestamp.json.
CREATE TABLE tuf_metadata (
    role        TEXT    NOT NULL,   -- root, targets, snapshot, timestamp, or a publisher name
    version     BIGINT  NOT NULL,
    bytes       BLOB    NOT NULL,   -- the exact signed JSON that is served
    sha256      TEXT    NOT NULL,   -- hex, for ETags and snapshot/timestamp meta
    expires_at  BIGINT  NOT NULL,
    created_at  BIGINT  NOT NULL,
    PRIMARY KEY (role, version)
);

-- A publisher's ed25519 public keys (space-separated hex) and signature threshold. The
-- signed delegation in targets.json is written with the publisher's first role
-- metadata, so a delegation never exists without a snapshot entry (tough stops loading
-- later delegations at one without).
ALTER TABLE publishers ADD COLUMN public_keys TEXT NOT NULL DEFAULT '';
ALTER TABLE publishers ADD COLUMN threshold BIGINT NOT NULL DEFAULT 1;

-- API tokens of publishers; only a hash is stored.
CREATE TABLE publisher_tokens (
    id           INTEGER PRIMARY KEY,
    publisher_id INTEGER NOT NULL REFERENCES publishers(id),
    token_sha256 TEXT    NOT NULL UNIQUE,
    created_at   BIGINT  NOT NULL,
    revoked_at   BIGINT
);

-- Which publisher key(s) signed the role version that published each definition.
ALTER TABLE plugin_versions ADD COLUMN signer_key_ids TEXT NOT NULL DEFAULT '';
