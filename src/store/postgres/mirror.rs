//! Mirrored images: one row per image a published definition pins, which is also its
//! mirror job (status, attempts, next attempt, a lease while a worker holds it), and
//! the manifests, blobs and tags a mirrored image serves. The bytes live in the blob
//! store; this is what they are and who may be served them.

use std::collections::HashSet;

use sqlx::Row;

use super::PgStore;
use crate::definition::ImageRef;
use crate::store::rows::status_row;
use crate::store::{Content, MirrorJob, MirrorStatus, Referrer, ServedManifest, StoreError};

const STATUS_COLUMNS: &str = "host, repository, digest, status, attempts, next_attempt_at, last_error, last_error_detail, size, signature_key, updated_at";

/// Enqueues `image` for mirroring (once per host, repository and digest) and returns its
/// row id; called in the transaction that publishes a version pinning it.
pub(super) async fn enqueue_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    image: &ImageRef,
    now: i64,
) -> Result<i64, StoreError> {
    let (host, repository) = image.upstream();
    sqlx::query(
        "INSERT INTO mirror_images (host, repository, digest, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $4) ON CONFLICT (host, repository, digest) DO NOTHING",
    )
    .bind(&host)
    .bind(&repository)
    .bind(&image.digest)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(sqlx::query_scalar(
        "SELECT id FROM mirror_images WHERE host = $1 AND repository = $2 AND digest = $3",
    )
    .bind(&host)
    .bind(&repository)
    .bind(&image.digest)
    .fetch_one(&mut **tx)
    .await?)
}

impl PgStore {
    /// Enqueues the images of versions stored before mirroring existed (or by a build
    /// without it); returns how many versions were linked.
    pub(crate) async fn enqueue_unlinked_images(&self, now: i64) -> Result<usize, StoreError> {
        let mut tx = super::begin_write(&self.pool).await?;
        let rows: Vec<(i64, String)> =
            sqlx::query_as("SELECT id, image FROM plugin_versions WHERE image_id IS NULL")
                .fetch_all(&mut *tx)
                .await?;
        let mut linked = 0;
        for (version, image) in rows {
            // Every stored image was validated on the way in; one that no longer parses
            // (a rule tightened since) is left unlinked rather than failing the start.
            let Ok(image) = ImageRef::parse(&image) else {
                tracing::warn!(version, image, "stored image reference no longer parses");
                continue;
            };
            let id = enqueue_in(&mut tx, &image, now).await?;
            sqlx::query("UPDATE plugin_versions SET image_id = $1 WHERE id = $2")
                .bind(id)
                .bind(version)
                .execute(&mut *tx)
                .await?;
            linked += 1;
        }
        tx.commit().await?;
        Ok(linked)
    }

    /// Claims up to `limit` jobs that are due: pending, failed with their next attempt
    /// reached, or mirroring under a lease that ran out (the worker died). Each claimed
    /// job is leased until `lease_until`. With `hosts`, only jobs on those hosts.
    pub(crate) async fn claim_mirror_jobs(
        &self,
        now: i64,
        lease_until: i64,
        limit: i64,
        hosts: Option<&[String]>,
    ) -> Result<Vec<MirrorJob>, StoreError> {
        // SKIP LOCKED: replicas claiming at once each take other jobs, none waits.
        let rows = sqlx::query(
            "UPDATE mirror_images SET status = 'mirroring', leased_until = $2, updated_at = $1
             WHERE id IN (SELECT id FROM mirror_images
                          WHERE ((status IN ('pending', 'failed') AND next_attempt_at <= $1)
                                 OR (status = 'mirroring' AND leased_until < $1))
                            AND ($4::text[] IS NULL OR host = ANY($4))
                          ORDER BY next_attempt_at, id LIMIT $3 FOR UPDATE SKIP LOCKED)
             RETURNING id, host, repository, digest, attempts",
        )
        .bind(now)
        .bind(lease_until)
        .bind(limit)
        .bind(hosts)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| MirrorJob {
                id: r.get("id"),
                host: r.get("host"),
                repository: r.get("repository"),
                digest: r.get("digest"),
                attempts: r.get("attempts"),
            })
            .collect())
    }

    /// Extends a running job's lease; false if the job is no longer ours.
    pub(crate) async fn renew_mirror_lease(&self, id: i64, until: i64) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE mirror_images SET leased_until = $1 WHERE id = $2 AND status = 'mirroring'",
        )
        .bind(until)
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Gives jobs back unfinished (a server shutting down): due again at once, for
    /// whichever server looks next.
    pub(crate) async fn release_mirror_jobs(
        &self,
        ids: &[i64],
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE mirror_images SET status = 'pending', leased_until = 0, updated_at = $1
             WHERE status = 'mirroring' AND id = ANY($2)",
        )
        .bind(now)
        .bind(ids)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Replaces the cosign public keys (id, PEM) registered for `publisher`.
    pub(crate) async fn set_cosign_keys(
        &self,
        publisher: &str,
        keys: &[(String, String)],
        now: i64,
    ) -> Result<(), StoreError> {
        let mut tx = super::begin_write(&self.pool).await?;
        let id: Option<i64> = sqlx::query_scalar("SELECT id FROM publishers WHERE name = $1")
            .bind(publisher)
            .fetch_optional(&mut *tx)
            .await?;
        let id = id.ok_or_else(|| StoreError::NoSuchPublisher(publisher.to_owned()))?;
        sqlx::query("DELETE FROM publisher_cosign_keys WHERE publisher_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        for (key_id, pem) in keys {
            sqlx::query(
                "INSERT INTO publisher_cosign_keys (publisher_id, key_id, pem, added_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT DO NOTHING",
            )
            .bind(id)
            .bind(key_id)
            .bind(pem)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The cosign keys (id, PEM) of every publisher whose published versions pin image
    /// `id`: when there are any, the image is served only with a signature by one.
    pub(crate) async fn cosign_keys_for_image(
        &self,
        id: i64,
    ) -> Result<Vec<(String, String)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT DISTINCT k.key_id, k.pem FROM publisher_cosign_keys k
             JOIN plugins p ON p.publisher_id = k.publisher_id
             JOIN plugin_versions v ON v.plugin_id = p.id
             WHERE v.image_id = $1 ORDER BY k.key_id",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Records a finished mirror: what the image consists of and its tags replace what
    /// was recorded before, and the image becomes servable, in one transaction.
    /// `verified_by` is the cosign key that verified its signature, if a policy applied.
    pub(crate) async fn record_mirrored(
        &self,
        id: i64,
        content: &[Content],
        tags: &[(String, String)],
        verified_by: Option<&str>,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut tx = super::begin_write(&self.pool).await?;
        sqlx::query("DELETE FROM mirror_content WHERE image_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM mirror_tags WHERE image_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let mut size = 0i64;
        let mut seen = HashSet::new();
        for c in content {
            // One digest may appear twice (a layer shared by two platforms): once is enough.
            if !seen.insert(c.digest.as_str()) {
                continue;
            }
            size += i64::try_from(c.size).unwrap_or(i64::MAX);
            sqlx::query(
                "INSERT INTO mirror_content (image_id, digest, kind, media_type, size, subject, artifact_type, annotations)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(id)
            .bind(&c.digest)
            .bind(c.kind.as_str())
            .bind(&c.media_type)
            .bind(i64::try_from(c.size).unwrap_or(i64::MAX))
            .bind(&c.subject)
            .bind(&c.artifact_type)
            .bind(&c.annotations)
            .execute(&mut *tx)
            .await?;
        }
        for (tag, digest) in tags {
            sqlx::query("INSERT INTO mirror_tags (image_id, tag, digest) VALUES ($1, $2, $3)")
                .bind(id)
                .bind(tag)
                .bind(digest)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query(
            "UPDATE mirror_images SET status = 'mirrored', attempts = 0, last_error = NULL,
               last_error_detail = NULL,
               size = $1, signature_key = $2, leased_until = 0, updated_at = $3 WHERE id = $4",
        )
        .bind(size)
        .bind(verified_by)
        .bind(now)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Records a failed attempt: `error` for everyone, `detail` for the operator. The
    /// job is due again at `next_attempt_at`.
    pub(crate) async fn record_mirror_failure(
        &self,
        id: i64,
        error: &str,
        detail: &str,
        next_attempt_at: i64,
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE mirror_images SET status = 'failed', attempts = attempts + 1, last_error = $1,
               last_error_detail = $2, next_attempt_at = $3, leased_until = 0, updated_at = $4
             WHERE id = $5",
        )
        .bind(error)
        .bind(detail)
        .bind(next_attempt_at)
        .bind(now)
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Makes failed jobs due now (all of them, or those whose repository or digest
    /// contains `filter`); returns how many.
    pub(crate) async fn retry_mirrors(
        &self,
        filter: Option<&str>,
        now: i64,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE mirror_images SET next_attempt_at = 0, updated_at = $1
             WHERE status = 'failed'
               AND ($2::text IS NULL OR strpos(host || '/' || repository || '@' || digest, $2) > 0)",
        )
        .bind(now)
        .bind(filter)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Queues every image that records one of `digests` for a new mirror (damaged
    /// content): not served until mirrored again. Returns how many.
    pub(crate) async fn remirror_images_with(
        &self,
        digests: &[String],
        now: i64,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE mirror_images SET status = 'pending', next_attempt_at = 0, leased_until = 0,
               updated_at = $1
             WHERE id IN (SELECT image_id FROM mirror_content
                          WHERE digest = ANY($2))",
        )
        .bind(now)
        .bind(digests)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Every mirrored image's status, by host, repository and digest.
    pub(crate) async fn mirror_statuses(&self) -> Result<Vec<MirrorStatus>, StoreError> {
        let sql =
            format!("SELECT {STATUS_COLUMNS} FROM mirror_images ORDER BY host, repository, digest");
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(status_row).collect())
    }

    /// Images and their bytes per status, for metrics and the CLI; every status is
    /// listed, with zeros, so a metric never disappears.
    pub(crate) async fn mirror_counts(&self) -> Result<Vec<(String, i64, i64)>, StoreError> {
        let found: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT status, COUNT(*), COALESCE(SUM(size), 0)::bigint FROM mirror_images GROUP BY status",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(["pending", "mirroring", "mirrored", "failed"]
            .into_iter()
            .map(|s| {
                found
                    .iter()
                    .find(|(status, ..)| status == s)
                    .cloned()
                    .unwrap_or((s.to_owned(), 0, 0))
            })
            .collect())
    }

    /// Whether any mirrored image lives in `host`/`repository`.
    pub(crate) async fn served_repository(
        &self,
        host: &str,
        repository: &str,
    ) -> Result<bool, StoreError> {
        Ok(sqlx::query_scalar::<_, i64>(
            "SELECT 1::bigint FROM mirror_images WHERE host = $1 AND repository = $2 AND status = 'mirrored' LIMIT 1",
        )
        .bind(host)
        .bind(repository)
        .fetch_optional(&self.pool)
        .await?
        .is_some())
    }

    /// A manifest `host`/`repository` serves, by digest.
    pub(crate) async fn served_manifest(
        &self,
        host: &str,
        repository: &str,
        digest: &str,
    ) -> Result<Option<ServedManifest>, StoreError> {
        let row: Option<(String, i64)> = sqlx::query_as(
            "SELECT c.media_type, c.size FROM mirror_content c
             JOIN mirror_images m ON m.id = c.image_id
             WHERE m.host = $1 AND m.repository = $2 AND m.status = 'mirrored'
               AND c.digest = $3 AND c.kind = 'manifest' LIMIT 1",
        )
        .bind(host)
        .bind(repository)
        .bind(digest)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(media_type, size)| ServedManifest {
            media_type,
            size: size.max(0) as u64,
        }))
    }

    /// A blob `host`/`repository` serves (manifests count as blobs too, as in any
    /// registry), with its size.
    pub(crate) async fn served_blob(
        &self,
        host: &str,
        repository: &str,
        digest: &str,
    ) -> Result<Option<u64>, StoreError> {
        let size: Option<i64> = sqlx::query_scalar(
            "SELECT c.size FROM mirror_content c
             JOIN mirror_images m ON m.id = c.image_id
             WHERE m.host = $1 AND m.repository = $2 AND m.status = 'mirrored' AND c.digest = $3
             LIMIT 1",
        )
        .bind(host)
        .bind(repository)
        .bind(digest)
        .fetch_optional(&self.pool)
        .await?;
        Ok(size.map(|s| s.max(0) as u64))
    }

    /// The digest a tag of `host`/`repository` points at.
    pub(crate) async fn served_tag(
        &self,
        host: &str,
        repository: &str,
        tag: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT t.digest FROM mirror_tags t JOIN mirror_images m ON m.id = t.image_id
             WHERE m.host = $1 AND m.repository = $2 AND m.status = 'mirrored' AND t.tag = $3
             LIMIT 1",
        )
        .bind(host)
        .bind(repository)
        .bind(tag)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Every tag `host`/`repository` serves, sorted, after `last` and at most `limit`.
    pub(crate) async fn served_tags(
        &self,
        host: &str,
        repository: &str,
        last: Option<&str>,
        limit: i64,
    ) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT DISTINCT t.tag FROM mirror_tags t JOIN mirror_images m ON m.id = t.image_id
             WHERE m.host = $1 AND m.repository = $2 AND m.status = 'mirrored'
               AND ($3::text IS NULL OR t.tag > $3)
             ORDER BY t.tag LIMIT $4",
        )
        .bind(host)
        .bind(repository)
        .bind(last)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Manifests of `host`/`repository` whose subject is `digest`.
    pub(crate) async fn referrers(
        &self,
        host: &str,
        repository: &str,
        digest: &str,
    ) -> Result<Vec<Referrer>, StoreError> {
        let rows = sqlx::query(
            "SELECT DISTINCT c.digest, c.media_type, c.size, c.artifact_type, c.annotations
             FROM mirror_content c JOIN mirror_images m ON m.id = c.image_id
             WHERE m.host = $1 AND m.repository = $2 AND m.status = 'mirrored'
               AND c.kind = 'manifest' AND c.subject = $3
             ORDER BY c.digest",
        )
        .bind(host)
        .bind(repository)
        .bind(digest)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| Referrer {
                digest: r.get("digest"),
                media_type: r.get("media_type"),
                size: r.get::<i64, _>("size").max(0) as u64,
                artifact_type: r.get("artifact_type"),
                annotations: r.get("annotations"),
            })
            .collect())
    }

    /// Every digest a mirrored (or mirroring) image records: what `mirror gc` keeps.
    pub(crate) async fn referenced_digests(&self) -> Result<HashSet<String>, StoreError> {
        let digests: Vec<String> = sqlx::query_scalar("SELECT DISTINCT digest FROM mirror_content")
            .fetch_all(&self.pool)
            .await?;
        Ok(digests.into_iter().collect())
    }
}
