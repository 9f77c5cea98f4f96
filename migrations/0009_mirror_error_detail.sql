-- Issue 20: a mirror failure has two texts. `last_error` is what pages and the public
-- API show, in our words only (a status code, "redirect refused", "timed out");
-- `last_error_detail` is the operator's (`mirror status`), and may quote the upstream,
-- cut and escaped.
ALTER TABLE mirror_images ADD COLUMN last_error_detail TEXT;

-- Failures recorded before this migration kept the upstream's own text where anyone
-- could read it: it moves to the detail, and the public text says only that it failed.
UPDATE mirror_images
   SET last_error_detail = last_error,
       last_error = host || '/' || repository || '@' || digest
                    || ': the last attempt failed (the reason is in `marketplace mirror status`)'
 WHERE last_error IS NOT NULL;
