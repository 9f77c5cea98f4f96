-- Mirrored images (issue 12). One row per image a published definition pins: the
-- upstream registry host, the repository on it and the pinned digest. The row is also
-- the mirror job: its status survives restarts, and a worker leases it while working.

CREATE TABLE mirror_images (
    id              INTEGER PRIMARY KEY,
    host            TEXT    NOT NULL,   -- upstream registry host[:port], normalized (docker.io)
    repository      TEXT    NOT NULL,   -- path on that registry, normalized (library/x)
    digest          TEXT    NOT NULL,   -- the pinned manifest or index
    status          TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'mirroring', 'mirrored', 'failed')),
    attempts        BIGINT  NOT NULL DEFAULT 0,   -- failed attempts since the last success
    next_attempt_at BIGINT  NOT NULL DEFAULT 0,
    leased_until    BIGINT  NOT NULL DEFAULT 0,   -- a worker's claim while mirroring
    last_error      TEXT,
    size            BIGINT,                       -- bytes of every manifest and blob, once mirrored
    created_at      BIGINT  NOT NULL,
    updated_at      BIGINT  NOT NULL,
    UNIQUE (host, repository, digest)
);
CREATE INDEX mirror_images_due ON mirror_images (status, next_attempt_at);

-- Which image a published version pins; NULL until the server has enqueued it (rows
-- published before this migration are enqueued on the next start).
ALTER TABLE plugin_versions ADD COLUMN image_id INTEGER REFERENCES mirror_images(id);
CREATE INDEX plugin_versions_image ON plugin_versions (image_id);

-- What a mirrored image consists of: each manifest (the pinned one, platform manifests,
-- signature and attestation manifests) and each blob. A repository serves exactly
-- these, and `mirror gc` keeps exactly the blobs listed here.
CREATE TABLE mirror_content (
    image_id      INTEGER NOT NULL REFERENCES mirror_images(id) ON DELETE CASCADE,
    digest        TEXT    NOT NULL,
    kind          TEXT    NOT NULL CHECK (kind IN ('manifest', 'blob')),
    media_type    TEXT    NOT NULL,
    size          BIGINT  NOT NULL,
    subject       TEXT,             -- a referrer manifest: the digest it refers to
    artifact_type TEXT,             -- a referrer manifest: what the referrers API lists
    annotations   TEXT,             -- a referrer manifest: its annotations, JSON
    PRIMARY KEY (image_id, digest)
);
CREATE INDEX mirror_content_digest ON mirror_content (digest);
CREATE INDEX mirror_content_subject ON mirror_content (subject);

-- Tags served for a repository: cosign's `sha256-<hex>.sig` and `.att` tags found
-- upstream for a mirrored digest.
CREATE TABLE mirror_tags (
    image_id  INTEGER NOT NULL REFERENCES mirror_images(id) ON DELETE CASCADE,
    tag       TEXT    NOT NULL,
    digest    TEXT    NOT NULL,
    PRIMARY KEY (image_id, tag)
);
