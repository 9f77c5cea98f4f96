//! The worker's store on SQLite (`DATA_DIR/sync.db` unless `database:` names another
//! file): one file, WAL, `synchronous=FULL`. Every transaction that writes starts with
//! `BEGIN IMMEDIATE` ([`db::begin_write`]).

use std::collections::HashMap;
use std::path::Path;

use sqlx::Row;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqlitePool, SqliteSynchronous};

use super::{
    Fresh, LastGood, PublisherFailure, Result, Sideloads, SourceDefinition, SourceStatus, Sources,
    Stale, StaleKey, StatusRow, StoredRow, SyncStoreError, TargetBytes, Tokens, Trusted,
    TrustedMetadata,
};
use crate::db;
use crate::sync::sideload::{Added, NewSideload, SideloadRecord, Stored, TokenRecord, Verdict};

pub static MIGRATIONS: Migrator = sqlx::migrate!("./migrations/sync");

/// Rows per INSERT statement: 11 values each, well under SQLite's 32,766 parameters.
const INSERT_ROWS: usize = 500;

#[derive(Debug, Clone)]
pub struct SqliteSyncStore {
    pool: SqlitePool,
}

impl SqliteSyncStore {
    /// Opens (creating if missing) the database file and applies migrations.
    pub async fn open(path: &Path) -> Result<SqliteSyncStore> {
        // FULL: a round acknowledged as stored survives power loss, not only a crash.
        let options = db::file_options(path).synchronous(SqliteSynchronous::Full);
        let pool = db::open_file::<SyncStoreError>(options, &MIGRATIONS).await?;
        Ok(SqliteSyncStore { pool })
    }

    pub async fn open_in_memory() -> Result<SqliteSyncStore> {
        let pool = db::open_memory::<SyncStoreError>(&MIGRATIONS).await?;
        Ok(SqliteSyncStore { pool })
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    pub(super) async fn stale_summaries(&self) -> Result<Vec<Stale>> {
        let sources: Vec<(String, String, Vec<u8>, String)> = sqlx::query_as(
            "SELECT source, target, definition, extras FROM source_definitions WHERE summary IS NULL",
        )
        .fetch_all(&self.pool)
        .await?;
        let sideloads: Vec<(String, String, String, Vec<u8>, String)> = sqlx::query_as(
            "SELECT org, name, version, definition, extras FROM sideloads WHERE summary = ''",
        )
        .fetch_all(&self.pool)
        .await?;
        let sources = sources
            .into_iter()
            .map(|(source, target, bytes, extras)| Stale {
                key: StaleKey::Source { source, target },
                bytes,
                extras,
            });
        let sideloads = sideloads
            .into_iter()
            .map(|(org, name, version, bytes, extras)| Stale {
                key: StaleKey::Sideload { org, name, version },
                bytes,
                extras,
            });
        Ok(sources.chain(sideloads).collect())
    }

    pub(super) async fn write_summaries(&self, fresh: &[Fresh]) -> Result<()> {
        let mut tx = db::begin_write(&self.pool).await?;
        for f in fresh {
            match &f.key {
                StaleKey::Source { source, target } => {
                    sqlx::query(
                        "UPDATE source_definitions SET summary = ? WHERE source = ? AND target = ?",
                    )
                    .bind(&f.summary)
                    .bind(source)
                    .bind(target)
                    .execute(&mut *tx)
                    .await?;
                }
                StaleKey::Sideload { org, name, version } => {
                    sqlx::query(
                        "UPDATE sideloads SET summary = ? WHERE org = ? AND name = ? AND version = ?",
                    )
                    .bind(&f.summary)
                    .bind(org)
                    .bind(name)
                    .bind(version)
                    .execute(&mut *tx)
                    .await?;
                }
            }
        }
        tx.commit().await?;
        Ok(())
    }
}

impl Sources for SqliteSyncStore {
    async fn add_source(&self, name: &str, url: &str) -> Result<()> {
        sqlx::query("INSERT INTO sources (name, url) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET url = excluded.url")
            .bind(name)
            .bind(url)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn retain_sources(&self, names: &[&str]) -> Result<u64> {
        let mut tx = db::begin_write(&self.pool).await?;
        let existing: Vec<String> = sqlx::query_scalar("SELECT name FROM sources")
            .fetch_all(&mut *tx)
            .await?;
        let mut removed = 0;
        for name in existing.iter().filter(|n| !names.contains(&n.as_str())) {
            removed += sqlx::query("DELETE FROM sources WHERE name = ?")
                .bind(name)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        if removed > 0 {
            bump(&mut tx).await?;
        }
        tx.commit().await?;
        Ok(removed)
    }

    async fn record_failure(
        &self,
        source: &str,
        reason: &str,
        error: &str,
        now: i64,
    ) -> Result<u64> {
        let failures: i64 = sqlx::query_scalar(
            "UPDATE sources SET last_attempt_at = ?, last_reason = ?, last_error = ?,
               consecutive_failures = consecutive_failures + 1 WHERE name = ? RETURNING consecutive_failures",
        )
        .bind(now)
        .bind(reason)
        .bind(error)
        .bind(source)
        .fetch_one(&self.pool)
        .await?;
        Ok(failures.max(0) as u64)
    }

    async fn record_unchanged(&self, source: &str, now: i64) -> Result<()> {
        sqlx::query(
            "UPDATE sources SET last_attempt_at = ?, last_success_at = ?, last_reason = NULL,
               last_error = NULL, consecutive_failures = 0 WHERE name = ?",
        )
        .bind(now)
        .bind(now)
        .bind(source)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn publisher_failures(&self, source: &str) -> Result<Vec<PublisherFailure>> {
        Ok(sqlx::query_as(
            "SELECT publisher, reason, message, since, consecutive_failures
             FROM publisher_failures WHERE source = ? ORDER BY publisher",
        )
        .bind(source)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn status_of(&self, only: Option<&str>) -> Result<Vec<SourceStatus>> {
        let rows: Vec<StatusRow> = sqlx::query_as(
            "SELECT s.name, s.url, s.last_attempt_at, s.last_success_at, s.last_reason, s.last_error,
               s.consecutive_failures, s.root_version, s.timestamp_version, s.snapshot_version,
               s.targets_version, s.timestamp_expires_at, s.expires_at, s.expires_role,
               s.definitions
             FROM sources s WHERE ?1 IS NULL OR s.name = ?1 ORDER BY name",
        )
        .bind(only)
        .fetch_all(&self.pool)
        .await?;
        let mut statuses = Vec::with_capacity(rows.len());
        for r in rows {
            let failing = self.publisher_failures(&r.name).await?;
            statuses.push(r.into_status(failing));
        }
        Ok(statuses)
    }
}

impl TrustedMetadata for SqliteSyncStore {
    async fn trusted(&self, source: &str) -> Result<Option<Trusted>> {
        let row = sqlx::query(
            "SELECT trusted_root, trusted_timestamp, trusted_snapshot FROM sources
             WHERE name = ? AND trusted_root IS NOT NULL",
        )
        .bind(source)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let status = self.status_of(Some(source)).await?.pop();
        Ok(Some(super::trusted_from(
            status,
            row.get("trusted_root"),
            row.get("trusted_timestamp"),
            row.get("trusted_snapshot"),
        )))
    }
}

impl LastGood for SqliteSyncStore {
    async fn known_hashes(&self, source: &str) -> Result<HashMap<String, (String, String)>> {
        let rows: Vec<(String, String, String)> =
            sqlx::query_as("SELECT target, hash, extras FROM source_definitions WHERE source = ?")
                .bind(source)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows
            .into_iter()
            .map(|(target, hash, extras)| (target, (hash, extras)))
            .collect())
    }

    async fn replace_source(
        &self,
        source: &str,
        defs: &[SourceDefinition],
        failing: &[PublisherFailure],
        trusted: &Trusted,
        now: i64,
    ) -> Result<u64> {
        // Few statements, whatever the size of the round: a cold round of 10,000
        // definitions is one JSON list, one update and ~20 multi-row inserts.
        let mut tx = db::begin_write(&self.pool).await?;
        let listed: Vec<&str> = defs.iter().map(|d| d.target.as_str()).collect();
        let kept: Vec<&str> = failing.iter().map(|f| f.publisher.as_str()).collect();
        sqlx::query(
            "DELETE FROM source_definitions WHERE source = ?1
               AND target NOT IN (SELECT value FROM json_each(?2))
               AND publisher NOT IN (SELECT value FROM json_each(?3))",
        )
        .bind(source)
        .bind(serde_json::to_string(&listed).expect("strings serialize"))
        .bind(serde_json::to_string(&kept).expect("strings serialize"))
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "DELETE FROM publisher_failures WHERE source = ?1
               AND publisher NOT IN (SELECT value FROM json_each(?2))",
        )
        .bind(source)
        .bind(serde_json::to_string(&kept).expect("strings serialize"))
        .execute(&mut *tx)
        .await?;
        for f in failing {
            sqlx::query(
                "INSERT INTO publisher_failures (source, publisher, reason, message, since, consecutive_failures)
                 VALUES (?, ?, ?, ?, ?, 1)
                 ON CONFLICT (source, publisher) DO UPDATE SET reason = excluded.reason,
                   message = excluded.message, consecutive_failures = consecutive_failures + 1",
            )
            .bind(source)
            .bind(&f.publisher)
            .bind(&f.reason)
            .bind(&f.message)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        let known: Vec<(&str, bool, &str)> = defs
            .iter()
            .filter(|d| d.bytes.is_none())
            .map(|d| (d.target.as_str(), d.yanked, d.signer_key_ids.as_str()))
            .collect();
        if !known.is_empty() {
            sqlx::query(
                "UPDATE source_definitions SET yanked = j.yanked, signer_key_ids = j.signers
                 FROM (SELECT value ->> 0 AS target, value ->> 1 AS yanked, value ->> 2 AS signers
                       FROM json_each(?2)) AS j
                 WHERE source = ?1 AND source_definitions.target = j.target",
            )
            .bind(source)
            .bind(serde_json::to_string(&known).expect("tuples serialize"))
            .execute(&mut *tx)
            .await?;
        }
        let new: Vec<&SourceDefinition> = defs.iter().filter(|d| d.bytes.is_some()).collect();
        for chunk in new.chunks(INSERT_ROWS) {
            let mut q = sqlx::QueryBuilder::new(
                "INSERT INTO source_definitions (source, target, publisher, name, version, hash, yanked, signer_key_ids, definition, summary, extras) ",
            );
            q.push_values(chunk, |mut row, d| {
                let (bytes, summary) = d.bytes.as_ref().expect("filtered on bytes");
                row.push_bind(source)
                    .push_bind(&d.target)
                    .push_bind(&d.publisher)
                    .push_bind(&d.name)
                    .push_bind(&d.version)
                    .push_bind(&d.hash)
                    .push_bind(d.yanked)
                    .push_bind(&d.signer_key_ids)
                    .push_bind(bytes)
                    .push_bind(summary)
                    .push_bind(&d.extras);
            });
            q.push(
                " ON CONFLICT (source, target) DO UPDATE SET hash = excluded.hash, yanked = excluded.yanked,
                   signer_key_ids = excluded.signer_key_ids, definition = excluded.definition,
                   publisher = excluded.publisher, name = excluded.name, version = excluded.version,
                   summary = excluded.summary, extras = excluded.extras",
            );
            q.build().execute(&mut *tx).await?;
        }
        let definitions: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM source_definitions WHERE source = ?")
                .bind(source)
                .fetch_one(&mut *tx)
                .await?;
        sqlx::query(
            "UPDATE sources SET last_attempt_at = ?, last_success_at = ?, last_reason = NULL, last_error = NULL,
               consecutive_failures = 0, root_version = ?, timestamp_version = ?, snapshot_version = ?,
               targets_version = ?, timestamp_expires_at = ?, expires_at = ?, expires_role = ?,
               trusted_root = ?, trusted_timestamp = ?, trusted_snapshot = ?, definitions = ?
             WHERE name = ?",
        )
        .bind(now)
        .bind(now)
        .bind(trusted.versions.root as i64)
        .bind(trusted.versions.timestamp as i64)
        .bind(trusted.versions.snapshot as i64)
        .bind(trusted.versions.targets as i64)
        .bind(trusted.versions.timestamp_expires_at)
        .bind(trusted.versions.expires_at)
        .bind(&trusted.versions.expires_role)
        .bind(&trusted.root)
        .bind(&trusted.timestamp)
        .bind(&trusted.snapshot)
        .bind(definitions)
        .bind(source)
        .execute(&mut *tx)
        .await?;
        bump(&mut tx).await?;
        tx.commit().await?;
        Ok(definitions.max(0) as u64)
    }

    async fn generation(&self) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT value FROM generation WHERE id = 1")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    async fn rows(&self) -> Result<Vec<StoredRow>> {
        Ok(sqlx::query_as(
            "SELECT source, publisher, name, version, hash, yanked, signer_key_ids, summary,
               CASE WHEN summary IS NULL THEN definition END AS definition, extras
             FROM source_definitions ORDER BY source, publisher, name",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    async fn source_definition(&self, source: &str, target: &str) -> Result<Option<Vec<u8>>> {
        Ok(sqlx::query_scalar(
            "SELECT definition FROM source_definitions WHERE source = ? AND target = ?",
        )
        .bind(source)
        .bind(target)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn source_definitions(&self, source: &str) -> Result<Vec<TargetBytes>> {
        Ok(sqlx::query_as("SELECT target, hash, yanked, definition FROM source_definitions WHERE source = ? ORDER BY target")
            .bind(source)
            .fetch_all(&self.pool)
            .await?)
    }
}

impl Sideloads for SqliteSyncStore {
    async fn put_sideload(
        &self,
        new: &NewSideload<'_>,
        replace: bool,
        limit: i64,
    ) -> Result<Stored> {
        let mut tx = db::begin_write(&self.pool).await?;
        let existing: Option<(String, String)> = sqlx::query_as(
            "SELECT hash, extras FROM sideloads WHERE org = ? AND name = ? AND version = ?",
        )
        .bind(new.org)
        .bind(new.name)
        .bind(&new.version)
        .fetch_optional(&mut *tx)
        .await?;
        match crate::sync::sideload::verdict(existing, new, replace) {
            Verdict::Unchanged => return Ok(Stored::Added(Added::Unchanged)),
            Verdict::Conflict => return Ok(Stored::Conflict),
            Verdict::Replace => {
                sqlx::query(
                    "UPDATE sideloads SET hash = ?, summary = ?, definition = ?, extras = ?, created_at = ?,
                     token_id = ? WHERE org = ? AND name = ? AND version = ?",
                )
                .bind(new.hash)
                .bind(&new.summary)
                .bind(new.definition)
                .bind(&new.extras)
                .bind(new.created_at)
                .bind(new.token_id)
                .bind(new.org)
                .bind(new.name)
                .bind(&new.version)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                return Ok(Stored::Added(Added::Replaced));
            }
            Verdict::Insert => {}
        }
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sideloads WHERE org = ?")
            .bind(new.org)
            .fetch_one(&mut *tx)
            .await?;
        if count >= limit {
            return Ok(Stored::Full);
        }
        sqlx::query(
            "INSERT INTO sideloads (org, name, version, hash, summary, definition, extras, created_at, token_id)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(new.org)
        .bind(new.name)
        .bind(&new.version)
        .bind(new.hash)
        .bind(&new.summary)
        .bind(new.definition)
        .bind(&new.extras)
        .bind(new.created_at)
        .bind(new.token_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Stored::Added(Added::New))
    }

    async fn sideloads(&self, org: &str) -> Result<Vec<SideloadRecord>> {
        Ok(sqlx::query_as(
            "SELECT name, version, hash, created_at, token_id FROM sideloads WHERE org = ? ORDER BY name, version",
        )
        .bind(org)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn sideload_rows(&self, org: &str) -> Result<Vec<(String, String, String, String)>> {
        Ok(
            sqlx::query_as("SELECT name, version, hash, summary FROM sideloads WHERE org = ?")
                .bind(org)
                .fetch_all(&self.pool)
                .await?,
        )
    }

    async fn sideload_bytes(
        &self,
        org: &str,
        name: &str,
        version: &str,
    ) -> Result<Option<Vec<u8>>> {
        Ok(sqlx::query_scalar(
            "SELECT definition FROM sideloads WHERE org = ? AND name = ? AND version = ?",
        )
        .bind(org)
        .bind(name)
        .bind(version)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn delete_sideloads(&self, org: &str, name: &str, version: Option<&str>) -> Result<u64> {
        Ok(sqlx::query(
            "DELETE FROM sideloads WHERE org = ?1 AND name = ?2 AND (?3 IS NULL OR version = ?3)",
        )
        .bind(org)
        .bind(name)
        .bind(version)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }
}

impl Tokens for SqliteSyncStore {
    async fn insert_token(
        &self,
        id: &str,
        sha256: &str,
        org: Option<&str>,
        now: i64,
    ) -> Result<()> {
        sqlx::query("INSERT INTO tokens (id, sha256, org, created_at) VALUES (?, ?, ?, ?)")
            .bind(id)
            .bind(sha256)
            .bind(org)
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn live_token(&self, sha256: &str) -> Result<Option<(String, Option<String>)>> {
        Ok(
            sqlx::query_as("SELECT id, org FROM tokens WHERE sha256 = ? AND revoked_at IS NULL")
                .bind(sha256)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    async fn tokens(&self) -> Result<Vec<TokenRecord>> {
        Ok(sqlx::query_as(
            "SELECT id, org, created_at, revoked_at FROM tokens ORDER BY created_at, id",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    async fn revoke_token(&self, id: &str, now: i64) -> Result<bool> {
        Ok(
            sqlx::query("UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL")
                .bind(now)
                .bind(id)
                .execute(&self.pool)
                .await?
                .rows_affected()
                == 1,
        )
    }
}

/// The change feed: one generation for everything sources offer, bumped inside each
/// writing transaction.
async fn bump(tx: &mut sqlx::SqliteConnection) -> std::result::Result<(), sqlx::Error> {
    sqlx::query("UPDATE generation SET value = value + 1 WHERE id = 1")
        .execute(tx)
        .await?;
    Ok(())
}
