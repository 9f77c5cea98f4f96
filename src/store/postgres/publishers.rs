//! Publishers: their public keys, signature threshold and API tokens (stored hashed).

use sqlx::Row;

use super::PgStore;
use super::tuf::put_metadata_in;
use crate::store::{Domain, PublisherRecord, StoreError, StoredMetadata};

impl PgStore {
    /// Registers a publisher with its keys and first token. A name already in use is
    /// refused, except a publisher known only from definitions and without keys.
    pub(crate) async fn add_publisher(
        &self,
        name: &str,
        public_keys: &[String],
        threshold: u64,
        token_sha256: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut tx = super::begin_write(&self.pool).await?;
        let existing: Option<String> =
            sqlx::query_scalar("SELECT public_keys FROM publishers WHERE name = $1")
                .bind(name)
                .fetch_optional(&mut *tx)
                .await?;
        match existing {
            Some(keys) if !keys.is_empty() => {
                return Err(StoreError::PublisherExists(name.to_owned()));
            }
            Some(_) => {
                sqlx::query(
                    "UPDATE publishers SET public_keys = $1, threshold = $2 WHERE name = $3",
                )
                .bind(public_keys.join(" "))
                .bind(i64::try_from(threshold).unwrap_or(i64::MAX))
                .bind(name)
                .execute(&mut *tx)
                .await?;
            }
            None => {
                sqlx::query("INSERT INTO publishers (name, created_at, public_keys, threshold) VALUES ($1, $2, $3, $4)")
                    .bind(name)
                    .bind(now)
                    .bind(public_keys.join(" "))
                    .bind(i64::try_from(threshold).unwrap_or(i64::MAX))
                    .execute(&mut *tx)
                    .await?;
            }
        }
        insert_token(&mut tx, name, token_sha256, now).await?;
        // A new publisher is one more in the catalog's publisher filter.
        super::bump(&mut tx, Domain::Catalog).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Sets the keys of a publisher that may not exist yet (the built-in publisher).
    pub(crate) async fn set_publisher_keys(
        &self,
        name: &str,
        public_keys: &[String],
        threshold: u64,
    ) -> Result<(), StoreError> {
        let mut tx = super::begin_write(&self.pool).await?;
        sqlx::query(
            "INSERT INTO publishers (name, created_at, public_keys, threshold) VALUES ($1, $2, $3, $4)
             ON CONFLICT (name) DO UPDATE SET public_keys = excluded.public_keys, threshold = excluded.threshold",
        )
        .bind(name)
        .bind(crate::clock::now())
        .bind(public_keys.join(" "))
        .bind(i64::try_from(threshold).unwrap_or(i64::MAX))
        .execute(&mut *tx)
        .await?;
        // It may be new: one more in the catalog's publisher filter.
        super::bump(&mut tx, Domain::Catalog).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Replaces the keys and threshold of a registered publisher (key rotation). Uploads
    /// are checked against these from now on; the signed delegation follows when the
    /// publisher re-signs its role with them.
    pub(crate) async fn replace_publisher_keys(
        &self,
        name: &str,
        public_keys: &[String],
        threshold: u64,
    ) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE publishers SET public_keys = $1, threshold = $2 WHERE name = $3 AND public_keys <> ''",
        )
        .bind(public_keys.join(" "))
        .bind(i64::try_from(threshold).unwrap_or(i64::MAX))
        .bind(name)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NoSuchPublisher(name.to_owned()));
        }
        Ok(())
    }

    /// Issues another token for an existing publisher.
    pub(crate) async fn add_token(
        &self,
        name: &str,
        token_sha256: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut tx = super::begin_write(&self.pool).await?;
        insert_token(&mut tx, name, token_sha256, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Revokes every active token of a publisher; returns how many were active.
    pub(crate) async fn revoke_tokens(&self, name: &str, now: i64) -> Result<u64, StoreError> {
        let publisher = self
            .publisher(name)
            .await?
            .ok_or_else(|| StoreError::NoSuchPublisher(name.to_owned()))?;
        let done = sqlx::query(
            "UPDATE publisher_tokens SET revoked_at = $1 WHERE revoked_at IS NULL
             AND publisher_id = (SELECT id FROM publishers WHERE name = $2)",
        )
        .bind(now)
        .bind(&publisher.name)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// The publisher an active token belongs to.
    pub(crate) async fn publisher_for_token(
        &self,
        token_sha256: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT p.name FROM publisher_tokens t JOIN publishers p ON p.id = t.publisher_id
             WHERE t.token_sha256 = $1 AND t.revoked_at IS NULL",
        )
        .bind(token_sha256)
        .fetch_optional(&self.pool)
        .await?)
    }

    pub(crate) async fn publisher(
        &self,
        name: &str,
    ) -> Result<Option<PublisherRecord>, StoreError> {
        Ok(self.publisher_records(Some(name)).await?.into_iter().next())
    }

    /// Publishers with keys (those that can publish), by name.
    pub(crate) async fn publisher_list(&self) -> Result<Vec<PublisherRecord>, StoreError> {
        self.publisher_records(None).await
    }

    async fn publisher_records(
        &self,
        name: Option<&str>,
    ) -> Result<Vec<PublisherRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT p.name, p.public_keys, p.threshold, p.created_at, p.suspended_at, p.origin,
                    (SELECT COUNT(*) FROM publisher_tokens t WHERE t.publisher_id = p.id AND t.revoked_at IS NULL) AS active
             FROM publishers p WHERE p.public_keys <> '' AND ($1::text IS NULL OR p.name = $2) ORDER BY p.name",
        )
        .bind(name)
        .bind(name)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| PublisherRecord {
                name: r.get("name"),
                public_keys: r
                    .get::<String, _>("public_keys")
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect(),
                threshold: r.get::<i64, _>("threshold").try_into().unwrap_or(1),
                created_at: r.get("created_at"),
                active_tokens: r.get("active"),
                suspended_at: r.get("suspended_at"),
                origin: r.get("origin"),
            })
            .collect())
    }
}

impl PgStore {
    /// Suspends a publisher: stores the signed metadata that removes its delegation and
    /// keeps the removed delegation (`delegation`, JSON) for [`Store::resume_publisher`],
    /// in one transaction.
    pub(crate) async fn suspend_publisher(
        &self,
        name: &str,
        delegation: &str,
        files: &[StoredMetadata],
        now: i64,
    ) -> Result<(), StoreError> {
        let mut tx = super::begin_write(&self.pool).await?;
        let done = sqlx::query(
            "UPDATE publishers SET suspended_at = $1, suspended_delegation = $2
             WHERE name = $3 AND suspended_at IS NULL",
        )
        .bind(now)
        .bind(delegation)
        .bind(name)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NoSuchPublisher(name.to_owned()));
        }
        put_metadata_in(&mut tx, files).await?;
        // Its plugins leave (or return to) every listing.
        super::bump(&mut tx, Domain::Catalog).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The delegation kept when `name` was suspended; `None` when it is not suspended.
    pub(crate) async fn suspended_delegation(
        &self,
        name: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT suspended_delegation FROM publishers WHERE name = $1 AND suspended_at IS NOT NULL",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await?
        .flatten())
    }

    /// Resumes a suspended publisher with the metadata that restores its delegation.
    pub(crate) async fn resume_publisher(
        &self,
        name: &str,
        files: &[StoredMetadata],
    ) -> Result<(), StoreError> {
        let mut tx = super::begin_write(&self.pool).await?;
        let done = sqlx::query(
            "UPDATE publishers SET suspended_at = NULL, suspended_delegation = NULL
             WHERE name = $1 AND suspended_at IS NOT NULL",
        )
        .bind(name)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NoSuchPublisher(name.to_owned()));
        }
        put_metadata_in(&mut tx, files).await?;
        // Its plugins leave (or return to) every listing.
        super::bump(&mut tx, Domain::Catalog).await?;
        tx.commit().await?;
        Ok(())
    }
}

async fn insert_token(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    name: &str,
    token_sha256: &str,
    now: i64,
) -> Result<(), StoreError> {
    let inserted = sqlx::query(
        "INSERT INTO publisher_tokens (publisher_id, token_sha256, created_at)
         SELECT id, $1, $2 FROM publishers WHERE name = $3 AND public_keys <> ''",
    )
    .bind(token_sha256)
    .bind(now)
    .bind(name)
    .execute(&mut **tx)
    .await?;
    if inserted.rows_affected() == 0 {
        return Err(StoreError::NoSuchPublisher(name.to_owned()));
    }
    Ok(())
}
