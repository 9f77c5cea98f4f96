-- An operator can suspend a publisher (`marketplace publisher suspend NAME`): its
-- delegation leaves targets.json, so clients stop loading its roles, and its plugins
-- leave the catalog listings. The removed delegation (role entry and keys, JSON) is kept
-- so `publisher resume` restores exactly what the publisher's current role was signed
-- under.
ALTER TABLE publishers ADD COLUMN suspended_at BIGINT;
ALTER TABLE publishers ADD COLUMN suspended_delegation TEXT;
