-- Image signature policy (issue 12): cosign public keys a publisher registered with the
-- operator. An image pinned by a publisher with keys is served only once a cosign
-- signature of it verifies with one of them.
CREATE TABLE publisher_cosign_keys (
    publisher_id INTEGER NOT NULL REFERENCES publishers(id) ON DELETE CASCADE,
    key_id       TEXT    NOT NULL,   -- hex sha256 of the key's DER SubjectPublicKeyInfo
    pem          TEXT    NOT NULL,   -- the PEM public key as cosign writes it
    added_at     BIGINT  NOT NULL,
    PRIMARY KEY (publisher_id, key_id)
);

-- The key that verified a mirrored image's signature, when a policy applied.
ALTER TABLE mirror_images ADD COLUMN signature_key TEXT;
