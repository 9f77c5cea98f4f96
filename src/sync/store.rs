//! The worker's own SQLite database (`DATA_DIR/sync.db`): sources, their last good
//! state (definitions, with their summaries in `summary`'s format) and status. Stores
//! bytes as verified by `round`; it never verifies.

use std::collections::HashMap;
use std::path::Path;

use sqlx::Row;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqlitePool, SqliteSynchronous};

use crate::db;
use crate::definition::Definition;

mod summary;

pub use summary::{read_summary, summary_json};

pub static MIGRATIONS: Migrator = sqlx::migrate!("./migrations/sync");

/// The same schema on PostgreSQL, version for version (a baseline at 0006, then one
/// migration per change with the SQLite side's number). The backend that runs on it is
/// being built (issue 21); `tests/schema_parity.rs` holds the two schemas equal.
pub static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/sync-postgres");

/// Rows per INSERT statement: 10 values each, well under SQLite's 32,766 parameters.
const INSERT_ROWS: usize = 500;

#[derive(Debug, thiserror::Error)]
pub enum SyncStoreError {
    #[error("sync database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("sync database migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("sync database: {0}")]
    TooNew(#[from] crate::db::SchemaTooNew),
}

#[derive(Debug, Clone)]
pub struct SyncStore {
    pub(super) pool: SqlitePool,
}

/// One verified definition of a source, as a round stores it.
#[derive(Debug, Clone)]
pub struct SourceDefinition {
    pub target: String,
    pub publisher: String,
    pub name: String,
    pub version: String,
    pub hash: String,
    pub yanked: bool,
    pub signer_key_ids: String,
    /// The extras its target signs (`custom.extras`) as JSON; empty when it has none.
    pub extras: String,
    /// The bytes and their summary (JSON); `None` when the store already holds this
    /// hash and these extras for this target.
    pub bytes: Option<(Vec<u8>, String)>,
}

/// A stored definition with the extras stored beside it (JSON, empty for none): read
/// with [`Definition::parse_published`], as bytes a round or an admin already accepted.
pub(crate) fn stored_definition(
    bytes: &[u8],
    extras: &str,
) -> Result<Definition, crate::definition::InvalidDefinition> {
    let def = Definition::parse_published(bytes)?;
    if extras.is_empty() {
        return Ok(def);
    }
    let extras = serde_json::from_str(extras).map_err(|e| {
        crate::definition::InvalidDefinition::one(crate::definition::Problem::at(
            "extras",
            None,
            e.to_string(),
        ))
    })?;
    def.with_extras(extras)
}

/// Trusted metadata versions after a good round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedVersions {
    pub root: u64,
    pub timestamp: u64,
    pub snapshot: u64,
    pub targets: u64,
    pub timestamp_expires_at: i64,
    /// The earliest expiry of any trusted role, and that role's name.
    pub expires_at: i64,
    pub expires_role: String,
}

/// The trusted metadata a good round leaves, kept for the next round: the root to start
/// from and the timestamp and snapshot that rollbacks are measured against.
#[derive(Debug, Clone)]
pub struct Trusted {
    pub versions: TrustedVersions,
    /// Definitions stored with it.
    pub definitions: u64,
    pub root: Vec<u8>,
    pub timestamp: Vec<u8>,
    pub snapshot: Vec<u8>,
}

/// One stored definition as the merge reads it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredRow {
    pub source: String,
    pub publisher: String,
    pub name: String,
    pub version: String,
    pub hash: String,
    pub yanked: bool,
    pub signer_key_ids: String,
    pub summary: Option<String>,
    /// Only for rows whose summary is not stored (yet).
    pub definition: Option<Vec<u8>>,
    pub extras: String,
}

/// A publisher of a source whose roles failed verification in the latest rounds; its
/// last good definitions are kept.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PublisherFailure {
    pub publisher: String,
    pub reason: String,
    pub message: String,
    /// The first round of this run of failures.
    pub since: i64,
    pub consecutive_failures: i64,
}

/// A source's state as stored: what its last rounds left.
#[derive(Debug, Clone)]
pub struct SourceStatus {
    pub name: String,
    pub url: String,
    pub last_attempt_at: Option<i64>,
    pub last_success_at: Option<i64>,
    pub last_reason: Option<String>,
    pub last_error: Option<String>,
    pub consecutive_failures: u64,
    pub trusted: Option<TrustedVersions>,
    pub definitions: u64,
    /// Publishers whose roles fail verification (their last good definitions stay).
    pub failing_publishers: Vec<PublisherFailure>,
}

impl SyncStore {
    /// Opens (creating if missing) the database file and applies migrations.
    pub async fn open(path: &Path) -> Result<SyncStore, SyncStoreError> {
        // FULL: a round acknowledged as stored survives power loss, not only a crash.
        let options = db::file_options(path).synchronous(SqliteSynchronous::Full);
        Self::with_pool(db::open_file::<SyncStoreError>(options, &MIGRATIONS).await?).await
    }

    pub async fn open_in_memory() -> Result<SyncStore, SyncStoreError> {
        Self::with_pool(db::open_memory::<SyncStoreError>(&MIGRATIONS).await?).await
    }

    async fn with_pool(pool: SqlitePool) -> Result<SyncStore, SyncStoreError> {
        let store = SyncStore { pool };
        let refreshed = store.refresh_stale_summaries().await?;
        if refreshed > 0 {
            tracing::info!(
                definitions = refreshed,
                "recomputed stored definition summaries"
            );
        }
        Ok(store)
    }

    /// Recomputes the summaries a migration marked stale (the summary rule changed) from
    /// the stored bytes; returns how many. Until then readers parse the bytes of a source
    /// row themselves. A definition that no longer parses keeps its mark and is logged;
    /// the view leaves it out, as it would any unreadable row.
    async fn refresh_stale_summaries(&self) -> Result<usize, SyncStoreError> {
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
        if sources.is_empty() && sideloads.is_empty() {
            return Ok(0);
        }
        let summary =
            |what: &str, bytes: &[u8], extras: &str| match stored_definition(bytes, extras) {
                Ok(def) => Some(summary_json(&def)),
                Err(e) => {
                    tracing::warn!(definition = what, error = %e,
                    "stored definition no longer validates; left out of views");
                    None
                }
            };
        let mut tx = crate::db::begin_write(&self.pool).await?;
        let mut done = 0;
        for (source, target, bytes, extras) in &sources {
            let Some(json) = summary(&format!("{source}:{target}"), bytes, extras) else {
                continue;
            };
            sqlx::query(
                "UPDATE source_definitions SET summary = ? WHERE source = ? AND target = ?",
            )
            .bind(json)
            .bind(source)
            .bind(target)
            .execute(&mut *tx)
            .await?;
            done += 1;
        }
        for (org, name, version, bytes, extras) in &sideloads {
            let Some(json) = summary(&format!("sideload {org}/{name}@{version}"), bytes, extras)
            else {
                continue;
            };
            sqlx::query(
                "UPDATE sideloads SET summary = ? WHERE org = ? AND name = ? AND version = ?",
            )
            .bind(json)
            .bind(org)
            .bind(name)
            .bind(version)
            .execute(&mut *tx)
            .await?;
            done += 1;
        }
        tx.commit().await?;
        Ok(done)
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Registers a configured source (or updates its URL).
    pub async fn add_source(&self, name: &str, url: &str) -> Result<(), SyncStoreError> {
        sqlx::query("INSERT INTO sources (name, url) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET url = excluded.url")
            .bind(name)
            .bind(url)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The hash and extras (JSON) stored for each target of a source.
    pub async fn known_hashes(
        &self,
        source: &str,
    ) -> Result<HashMap<String, (String, String)>, SyncStoreError> {
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

    /// Replaces a source's state with a verified round, in one transaction: targets no
    /// longer listed leave, new ones arrive, yank flags and signers follow the index;
    /// the definitions of `failing` publishers stay as they were, and the failures are
    /// recorded. Returns how many definitions the source now offers.
    pub async fn replace_source(
        &self,
        source: &str,
        defs: &[SourceDefinition],
        failing: &[PublisherFailure],
        trusted: &Trusted,
        now: i64,
    ) -> Result<u64, SyncStoreError> {
        // Few statements, whatever the size of the round: a cold round of 10,000
        // definitions is one JSON list, one update and ~200 multi-row inserts.
        let mut tx = crate::db::begin_write(&self.pool).await?;
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

    /// The publishers of `source` failing verification now, by name.
    pub async fn publisher_failures(
        &self,
        source: &str,
    ) -> Result<Vec<PublisherFailure>, SyncStoreError> {
        Ok(sqlx::query_as(
            "SELECT publisher, reason, message, since, consecutive_failures
             FROM publisher_failures WHERE source = ? ORDER BY publisher",
        )
        .bind(source)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Records a failed round; the source's definitions stay as they were.
    pub async fn record_failure(
        &self,
        source: &str,
        reason: &str,
        error: &str,
        now: i64,
    ) -> Result<u64, SyncStoreError> {
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

    /// What the last good round of `source` trusted; `None` before the first one.
    pub async fn trusted(&self, source: &str) -> Result<Option<Trusted>, SyncStoreError> {
        let row = sqlx::query(
            "SELECT trusted_root, trusted_timestamp, trusted_snapshot FROM sources
             WHERE name = ? AND trusted_root IS NOT NULL",
        )
        .bind(source)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let status = self.status_of(Some(source)).await?.pop();
        let definitions = status.as_ref().map_or(0, |s| s.definitions);
        let versions = status.and_then(|s| s.trusted).unwrap_or_default();
        Ok(Some(Trusted {
            versions,
            definitions,
            root: row.get("trusted_root"),
            timestamp: row.get("trusted_timestamp"),
            snapshot: row.get("trusted_snapshot"),
        }))
    }

    /// Records a round that found nothing new: the state stands as it is.
    pub async fn record_unchanged(&self, source: &str, now: i64) -> Result<(), SyncStoreError> {
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

    /// Forgets the sources no longer configured, with their definitions: an operator
    /// who removes a source from the file expects its plugins to go.
    pub async fn retain_sources(&self, names: &[&str]) -> Result<u64, SyncStoreError> {
        let mut tx = crate::db::begin_write(&self.pool).await?;
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

    /// Changes whenever what the sources offer changes (in any process).
    pub async fn generation(&self) -> Result<i64, SyncStoreError> {
        Ok(
            sqlx::query_scalar("SELECT value FROM generation WHERE id = 1")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Every stored definition of every source, as the merge reads them.
    pub async fn rows(&self) -> Result<Vec<StoredRow>, SyncStoreError> {
        Ok(sqlx::query_as(
            "SELECT source, publisher, name, version, hash, yanked, signer_key_ids, summary,
               CASE WHEN summary IS NULL THEN definition END AS definition, extras
             FROM source_definitions ORDER BY source, publisher, name",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Status of every source, by name.
    pub async fn status(&self) -> Result<Vec<SourceStatus>, SyncStoreError> {
        self.status_of(None).await
    }

    async fn status_of(&self, only: Option<&str>) -> Result<Vec<SourceStatus>, SyncStoreError> {
        let rows = sqlx::query(
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
            let name: String = r.get("name");
            let failing_publishers = self.publisher_failures(&name).await?;
            statuses.push({
                let v = |c: &str| r.get::<Option<i64>, _>(c).map(|n| n.max(0) as u64);
                SourceStatus {
                    failing_publishers,
                    name,
                    url: r.get("url"),
                    last_attempt_at: r.get("last_attempt_at"),
                    last_success_at: r.get("last_success_at"),
                    last_reason: r.get("last_reason"),
                    last_error: r.get("last_error"),
                    consecutive_failures: r.get::<i64, _>("consecutive_failures").max(0) as u64,
                    trusted: v("root_version").map(|root| TrustedVersions {
                        root,
                        timestamp: v("timestamp_version").unwrap_or(0),
                        snapshot: v("snapshot_version").unwrap_or(0),
                        targets: v("targets_version").unwrap_or(0),
                        timestamp_expires_at: r
                            .get::<Option<i64>, _>("timestamp_expires_at")
                            .unwrap_or(0),
                        expires_at: r.get::<Option<i64>, _>("expires_at").unwrap_or(0),
                        expires_role: r
                            .get::<Option<String>, _>("expires_role")
                            .unwrap_or_default(),
                    }),
                    definitions: r.get::<i64, _>("definitions").max(0) as u64,
                }
            });
        }
        Ok(statuses)
    }

    /// The bytes of one target of a source.
    pub async fn source_definition(
        &self,
        source: &str,
        target: &str,
    ) -> Result<Option<Vec<u8>>, SyncStoreError> {
        Ok(sqlx::query_scalar(
            "SELECT definition FROM source_definitions WHERE source = ? AND target = ?",
        )
        .bind(source)
        .bind(target)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// The stored definitions of a source: (target, hash, yanked, bytes).
    pub async fn source_definitions(
        &self,
        source: &str,
    ) -> Result<Vec<(String, String, bool, Vec<u8>)>, SyncStoreError> {
        Ok(sqlx::query_as("SELECT target, hash, yanked, definition FROM source_definitions WHERE source = ? ORDER BY target")
            .bind(source)
            .fetch_all(&self.pool)
            .await?)
    }
}

async fn bump(tx: &mut sqlx::SqliteConnection) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE generation SET value = value + 1 WHERE id = 1")
        .execute(tx)
        .await?;
    Ok(())
}
