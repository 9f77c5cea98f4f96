-- Leases: work that several server processes on one database must do once at a time
-- (re-signing the index before it expires). A row names the holder and when its claim
-- runs out; a holder renews before then, anyone may take it after. Times are the
-- database's clock, so replicas with skewed clocks still agree.
CREATE TABLE leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);
