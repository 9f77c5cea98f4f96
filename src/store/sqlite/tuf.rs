//! Storage of signed TUF metadata. The store keeps bytes exactly as signed; it neither
//! signs nor verifies.

use super::SqliteStore;
use crate::store::rows::metadata_row;
use crate::store::{Domain, StoreError, StoredMetadata};

impl SqliteStore {
    /// A given version of a role's metadata.
    pub(crate) async fn metadata(
        &self,
        role: &str,
        version: u64,
    ) -> Result<Option<StoredMetadata>, StoreError> {
        let row = sqlx::query("SELECT role, version, bytes, sha256, expires_at, created_at FROM tuf_metadata WHERE role = ? AND version = ?")
            .bind(role)
            .bind(i64::try_from(version).unwrap_or(i64::MAX))
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(metadata_row))
    }

    /// The newest version of a role's metadata.
    pub(crate) async fn latest_metadata(
        &self,
        role: &str,
    ) -> Result<Option<StoredMetadata>, StoreError> {
        let row = sqlx::query(
            "SELECT role, version, bytes, sha256, expires_at, created_at FROM tuf_metadata WHERE role = ? ORDER BY version DESC LIMIT 1",
        )
        .bind(role)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(metadata_row))
    }

    /// The newest version of every role (root, targets, snapshot, timestamp, each
    /// publisher), without the bytes: for the index status page.
    pub(crate) async fn metadata_overview(&self) -> Result<Vec<StoredMetadata>, StoreError> {
        let rows = sqlx::query(
            "SELECT role, version, X'' AS bytes, sha256, expires_at, created_at FROM tuf_metadata t
             WHERE version = (SELECT MAX(version) FROM tuf_metadata WHERE role = t.role) ORDER BY role",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(metadata_row).collect())
    }

    /// Stores new metadata versions all together or not at all. A version that already
    /// exists is refused (`MetadataExists`), which is how two concurrent writers of the
    /// same role are told apart: one wins, the other must start again from fresh metadata.
    pub(crate) async fn put_metadata(&self, files: &[StoredMetadata]) -> Result<(), StoreError> {
        let mut tx = crate::db::begin_write(&self.pool).await?;
        put_metadata_in(&mut tx, files).await?;
        tx.commit().await?;
        Ok(())
    }
}

pub(crate) async fn put_metadata_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    files: &[StoredMetadata],
) -> Result<(), StoreError> {
    for f in files {
        let inserted = sqlx::query(
            "INSERT INTO tuf_metadata (role, version, bytes, sha256, expires_at, created_at) VALUES (?, ?, ?, ?, ?, ?)
             ON CONFLICT (role, version) DO NOTHING",
        )
        .bind(&f.role)
        .bind(i64::try_from(f.version).unwrap_or(i64::MAX))
        .bind(&f.bytes)
        .bind(&f.sha256)
        .bind(f.expires_at)
        .bind(f.created_at)
        .execute(&mut **tx)
        .await?;
        if inserted.rows_affected() == 0 {
            return Err(StoreError::MetadataExists {
                role: f.role.clone(),
                version: f.version,
            });
        }
    }
    if !files.is_empty() {
        super::bump(tx, Domain::Metadata).await?;
    }
    Ok(())
}
