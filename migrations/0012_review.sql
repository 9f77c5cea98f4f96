-- Publishing with review (registry.v1.PublicationService, admin.v1.ReviewService).
--
-- A plugin's listing is what its publisher edits apart from its definitions: what
-- catalog pages, the JSON API and catalog.v1 show where set. Its id is the plugin's
-- stable id (ids::plugin), so a listing and the published plugin it describes share it.
-- Lists are JSON arrays: a listing is read and written whole.
CREATE TABLE listings (
    id                  TEXT PRIMARY KEY,
    publisher           TEXT NOT NULL REFERENCES publishers(name),
    name                TEXT NOT NULL,
    display_name        TEXT NOT NULL,
    description_short   TEXT NOT NULL DEFAULT '',
    description         TEXT NOT NULL DEFAULT '',
    category_ids        TEXT NOT NULL DEFAULT '[]',
    tags                TEXT NOT NULL DEFAULT '[]',
    image               TEXT NOT NULL DEFAULT '',
    repository_url      TEXT NOT NULL DEFAULT '',
    license             TEXT NOT NULL DEFAULT '',
    author_name         TEXT NOT NULL DEFAULT '',
    author_url          TEXT NOT NULL DEFAULT '',
    documentation_links TEXT NOT NULL DEFAULT '[]',
    features            TEXT NOT NULL DEFAULT '[]',
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    UNIQUE (publisher, name)
);

-- Versions uploaded for review: the exact bytes, their hash and where review stands.
-- Nothing here is public; a version enters the signed index only when its publisher
-- signs and publishes it (plugin_versions), and `published` is read from there.
-- The id is the version's stable id (ids::version), the one catalog.v1 gives it once
-- published. `canonical` (semver without a leading v) is its identity, as in
-- plugin_versions.
CREATE TABLE review_versions (
    id               TEXT PRIMARY KEY,
    listing_id       TEXT NOT NULL REFERENCES listings(id) ON DELETE CASCADE,
    version          TEXT NOT NULL,
    canonical        TEXT NOT NULL,
    definition       BLOB NOT NULL,
    hash             TEXT NOT NULL,
    image            TEXT NOT NULL,
    release_notes    TEXT NOT NULL DEFAULT '',
    status           TEXT NOT NULL CHECK (status IN
                     ('draft', 'pending', 'changes_requested', 'approved', 'rejected', 'withdrawn')),
    created_at       INTEGER NOT NULL,
    uploaded_at      INTEGER NOT NULL,
    submitted_at     INTEGER,
    reviewed_at      INTEGER,
    reviewer         TEXT,
    rejection_reason TEXT,
    feedback         TEXT NOT NULL DEFAULT '',
    UNIQUE (listing_id, canonical)
);
CREATE INDEX review_versions_status ON review_versions (status);

-- Who did what to a version under review, and when: uploads, submissions,
-- withdrawals and every reviewer's decision, with the hash it applied to.
CREATE TABLE review_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    version_id  TEXT NOT NULL REFERENCES review_versions(id) ON DELETE CASCADE,
    action      TEXT NOT NULL,
    actor       TEXT NOT NULL,
    hash        TEXT NOT NULL,
    feedback    TEXT NOT NULL DEFAULT '',
    at          INTEGER NOT NULL
);
CREATE INDEX review_events_version ON review_events (version_id);

-- The marketplace's reviewers; only a hash of each token is stored.
CREATE TABLE reviewers (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT NOT NULL UNIQUE,
    token_sha256 TEXT NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL,
    revoked_at   INTEGER
);
