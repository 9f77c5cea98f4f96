-- Leases: SQLite's migration 0011 of the same name (see there).
CREATE TABLE leases (
    name       TEXT COLLATE "C" PRIMARY KEY,
    holder     TEXT COLLATE "C" NOT NULL,
    expires_at BIGINT NOT NULL
);
