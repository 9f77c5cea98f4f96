-- Following an upstream marketplace (`serve --upstream`, `bundle import`).
--
-- A publisher followed from an upstream keeps the keys the upstream's signed
-- delegation names, and its roles are the upstream's bytes; `origin` names the
-- upstream it comes from. NULL: a publisher registered here.
ALTER TABLE publishers ADD COLUMN origin TEXT COLLATE "C";

-- What this server trusts of each upstream it follows, as a TUF client keeps it: the
-- newest verified root (rotations followed), timestamp and snapshot (so an older index,
-- online or in a bundle, is refused as a rollback); and how the last round went.
CREATE TABLE upstreams (
    url             TEXT COLLATE "C" PRIMARY KEY,
    root            BYTEA NOT NULL,
    timestamp       BYTEA,
    snapshot        BYTEA,
    last_attempt_at BIGINT,
    last_success_at BIGINT,
    -- The last round's report (JSON, `upstream::Report`).
    report          TEXT COLLATE "C" NOT NULL DEFAULT ''
);
