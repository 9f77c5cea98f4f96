-- The requirement flags of `plugins` (internet_access, privileged, kube_system) now also
-- count what a definition's `spec.permissions.capabilities` implies: `internet_access`
-- means internet access (issue 10). SQL cannot parse the stored definitions, so every
-- row written before is marked here and `Store::open` recomputes it from the plugin's
-- latest listed definition, once. A later change to that rule marks rows again.
ALTER TABLE plugins ADD COLUMN approval_stale BOOLEAN NOT NULL DEFAULT FALSE;
UPDATE plugins SET approval_stale = TRUE;
