-- A publisher whose delegated roles fail verification (expired, missing, wrongly
-- signed, malformed) fails alone: the round keeps that publisher's last good
-- definitions and records why here, while every other publisher's changes arrive.
-- Rows are replaced in the same transaction as the source's definitions.
CREATE TABLE publisher_failures (
    source               TEXT    NOT NULL REFERENCES sources(name) ON DELETE CASCADE,
    publisher            TEXT    NOT NULL,
    reason               TEXT    NOT NULL,   -- expired, bad_signature, tampered, invalid_metadata
    message              TEXT    NOT NULL,
    since                BIGINT  NOT NULL,   -- the first failing round in a row
    consecutive_failures BIGINT  NOT NULL,
    PRIMARY KEY (source, publisher)
);
-- last_reason may also be `timeout` (a request or the round past its deadline).
