-- last_reason may also be `tampered` (bytes that do not match their signed hash).

-- Trusted TUF metadata moves into the database, written in the same transaction as the
-- definitions it vouches for: tough's own datastore writes files in place, so a crash
-- could leave a half-written file that it would then silently ignore (losing rollback
-- protection). Each round rebuilds tough's datastore from these columns.
ALTER TABLE sources ADD COLUMN trusted_root BLOB;
ALTER TABLE sources ADD COLUMN trusted_timestamp BLOB;
ALTER TABLE sources ADD COLUMN trusted_snapshot BLOB;
-- The earliest expiry among every trusted role (root, timestamp, snapshot, targets and
-- each delegated role), and which role it is: a round that sees nothing new still
-- refuses to vouch past this time.
ALTER TABLE sources ADD COLUMN expires_at BIGINT;
ALTER TABLE sources ADD COLUMN expires_role TEXT;
-- How many definitions the last good round stored, kept so status and warm rounds
-- need not count them.
ALTER TABLE sources ADD COLUMN definitions BIGINT NOT NULL DEFAULT 0;
UPDATE sources SET definitions = (SELECT COUNT(*) FROM source_definitions d WHERE d.source = sources.name);

-- What the merged views need of a definition (requirements, dependencies, titles),
-- extracted once when the round validates it. NULL on rows from before this
-- migration; readers then parse the bytes.
ALTER TABLE source_definitions ADD COLUMN summary TEXT;

-- Definitions an organization's admin inserted by hand; only that organization sees them.
CREATE TABLE sideloads (
    org        TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    version    TEXT    NOT NULL,   -- canonical semver
    hash       TEXT    NOT NULL,   -- sha256:HEX of the bytes
    summary    TEXT    NOT NULL,
    definition BLOB    NOT NULL,
    created_at BIGINT  NOT NULL,
    token_id   TEXT    NOT NULL,   -- which token uploaded it
    PRIMARY KEY (org, name, version)
);

-- Bearer tokens of the local API, stored as SHA-256 of the token.
CREATE TABLE tokens (
    id         TEXT    PRIMARY KEY,   -- short public id, shown in lists
    sha256     TEXT    NOT NULL UNIQUE,
    -- The organization the token acts for; NULL for a reader token (reads every
    -- organization, writes none).
    org        TEXT,
    created_at BIGINT  NOT NULL,
    revoked_at BIGINT
);

-- Bumped by every change to what sources offer, so a process serving views (which
-- caches the merged view) notices rounds run by another process.
CREATE TABLE generation (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value BIGINT  NOT NULL
);
INSERT INTO generation (id, value) VALUES (1, 0);
