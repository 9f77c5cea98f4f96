-- Operators of the admin API (`/api/v1/admin/...`): `marketplace operator token create
-- NAME`. Tokens are kept as sha256 hashes, apart from publishers' and reviewers'; the
-- name is who every admin action is logged under. A revoked operator keeps its row
-- (when it was revoked) and gets a new token when created again.
CREATE TABLE operators (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT NOT NULL UNIQUE,
    token_sha256 TEXT NOT NULL UNIQUE,
    created_at   BIGINT NOT NULL,
    revoked_at   BIGINT
);
