//! The worker's store on PostgreSQL (`database: postgres://…` in `sync.yaml`): the same
//! tables as SQLite's (`migrations/sync-postgres`), so Fundament's worker keeps its state
//! in the database Fundament already runs. Transactions run at READ COMMITTED; where one
//! reads before it writes it first locks what it reads (a source's row, or the
//! sideloads table against other writers), so concurrent workers queue instead of
//! interleaving.

use std::collections::HashMap;

use sqlx::PgPool;
use sqlx::Row;
use sqlx::migrate::Migrator;
use sqlx::postgres::PgConnectOptions;

use super::{
    Fresh, LastGood, PublisherFailure, Result, Sideloads, SourceDefinition, SourceStatus, Sources,
    Stale, StaleKey, StatusRow, StoredRow, SyncStoreError, TargetBytes, Tokens, Trusted,
    TrustedMetadata,
};
use crate::db;
use crate::sync::sideload::{Added, NewSideload, SideloadRecord, Stored, TokenRecord, Verdict};

pub static MIGRATIONS: Migrator = sqlx::migrate!("./migrations/sync-postgres");

/// Rows per INSERT statement: 11 values each, well under PostgreSQL's 65,535 parameters.
const INSERT_ROWS: usize = 500;

#[derive(Debug, Clone)]
pub struct PgSyncStore {
    pool: PgPool,
}

impl PgSyncStore {
    /// Connects (a pool of `connections`) and applies migrations.
    pub async fn open(options: &PgConnectOptions, connections: u32) -> Result<PgSyncStore> {
        let pool = db::postgres::open::<SyncStoreError>(options, connections, &MIGRATIONS).await?;
        Ok(PgSyncStore { pool })
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
        let mut tx = self.pool.begin().await?;
        for f in fresh {
            match &f.key {
                StaleKey::Source { source, target } => {
                    sqlx::query(
                        "UPDATE source_definitions SET summary = $1 WHERE source = $2 AND target = $3",
                    )
                    .bind(&f.summary)
                    .bind(source)
                    .bind(target)
                    .execute(&mut *tx)
                    .await?;
                }
                StaleKey::Sideload { org, name, version } => {
                    sqlx::query(
                        "UPDATE sideloads SET summary = $1 WHERE org = $2 AND name = $3 AND version = $4",
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

impl Sources for PgSyncStore {
    async fn add_source(&self, name: &str, url: &str) -> Result<()> {
        sqlx::query("INSERT INTO sources (name, url) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET url = excluded.url")
            .bind(name)
            .bind(url)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn retain_sources(&self, names: &[&str]) -> Result<u64> {
        // One statement: nothing is read before the write.
        let mut tx = self.pool.begin().await?;
        let removed = sqlx::query("DELETE FROM sources WHERE name <> ALL($1)")
            .bind(names)
            .execute(&mut *tx)
            .await?
            .rows_affected();
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
            "UPDATE sources SET last_attempt_at = $1, last_reason = $2, last_error = $3,
               consecutive_failures = consecutive_failures + 1 WHERE name = $4 RETURNING consecutive_failures",
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
            "UPDATE sources SET last_attempt_at = $1, last_success_at = $2, last_reason = NULL,
               last_error = NULL, consecutive_failures = 0 WHERE name = $3",
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
             FROM publisher_failures WHERE source = $1 ORDER BY publisher",
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
             FROM sources s WHERE $1::text IS NULL OR s.name = $1 ORDER BY name",
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

impl TrustedMetadata for PgSyncStore {
    async fn trusted(&self, source: &str) -> Result<Option<Trusted>> {
        let row = sqlx::query(
            "SELECT trusted_root, trusted_timestamp, trusted_snapshot FROM sources
             WHERE name = $1 AND trusted_root IS NOT NULL",
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

impl LastGood for PgSyncStore {
    async fn known_hashes(&self, source: &str) -> Result<HashMap<String, (String, String)>> {
        let rows: Vec<(String, String, String)> =
            sqlx::query_as("SELECT target, hash, extras FROM source_definitions WHERE source = $1")
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
        // definitions is one array, one update and ~20 multi-row inserts.
        let mut tx = self.pool.begin().await?;
        // Rounds of one source queue here (another worker process may run the same
        // source): the count read below then sees only this round's writes.
        sqlx::query("SELECT name FROM sources WHERE name = $1 FOR UPDATE")
            .bind(source)
            .fetch_optional(&mut *tx)
            .await?;
        let listed: Vec<&str> = defs.iter().map(|d| d.target.as_str()).collect();
        let kept: Vec<&str> = failing.iter().map(|f| f.publisher.as_str()).collect();
        sqlx::query(
            "DELETE FROM source_definitions WHERE source = $1
               AND target <> ALL($2) AND publisher <> ALL($3)",
        )
        .bind(source)
        .bind(&listed)
        .bind(&kept)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM publisher_failures WHERE source = $1 AND publisher <> ALL($2)")
            .bind(source)
            .bind(&kept)
            .execute(&mut *tx)
            .await?;
        for f in failing {
            sqlx::query(
                "INSERT INTO publisher_failures (source, publisher, reason, message, since, consecutive_failures)
                 VALUES ($1, $2, $3, $4, $5, 1)
                 ON CONFLICT (source, publisher) DO UPDATE SET reason = excluded.reason,
                   message = excluded.message,
                   consecutive_failures = publisher_failures.consecutive_failures + 1",
            )
            .bind(source)
            .bind(&f.publisher)
            .bind(&f.reason)
            .bind(&f.message)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        let known: Vec<&SourceDefinition> = defs.iter().filter(|d| d.bytes.is_none()).collect();
        if !known.is_empty() {
            sqlx::query(
                "UPDATE source_definitions SET yanked = j.yanked, signer_key_ids = j.signers
                 FROM unnest($2::text[], $3::boolean[], $4::text[]) AS j(target, yanked, signers)
                 WHERE source = $1 AND source_definitions.target = j.target",
            )
            .bind(source)
            .bind(known.iter().map(|d| d.target.as_str()).collect::<Vec<_>>())
            .bind(known.iter().map(|d| d.yanked).collect::<Vec<_>>())
            .bind(
                known
                    .iter()
                    .map(|d| d.signer_key_ids.as_str())
                    .collect::<Vec<_>>(),
            )
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
            sqlx::query_scalar("SELECT COUNT(*) FROM source_definitions WHERE source = $1")
                .bind(source)
                .fetch_one(&mut *tx)
                .await?;
        sqlx::query(
            "UPDATE sources SET last_attempt_at = $1, last_success_at = $2, last_reason = NULL, last_error = NULL,
               consecutive_failures = 0, root_version = $3, timestamp_version = $4, snapshot_version = $5,
               targets_version = $6, timestamp_expires_at = $7, expires_at = $8, expires_role = $9,
               trusted_root = $10, trusted_timestamp = $11, trusted_snapshot = $12, definitions = $13
             WHERE name = $14",
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
            "SELECT definition FROM source_definitions WHERE source = $1 AND target = $2",
        )
        .bind(source)
        .bind(target)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn source_definitions(&self, source: &str) -> Result<Vec<TargetBytes>> {
        Ok(sqlx::query_as("SELECT target, hash, yanked, definition FROM source_definitions WHERE source = $1 ORDER BY target")
            .bind(source)
            .fetch_all(&self.pool)
            .await?)
    }
}

impl Sideloads for PgSyncStore {
    async fn put_sideload(
        &self,
        new: &NewSideload<'_>,
        replace: bool,
        limit: i64,
    ) -> Result<Stored> {
        let mut tx = self.pool.begin().await?;
        // Sideload writers queue (readers do not): the read, the count and the write
        // below then act on one state, as SQLite's BEGIN IMMEDIATE makes them.
        sqlx::query("LOCK TABLE sideloads IN SHARE ROW EXCLUSIVE MODE")
            .execute(&mut *tx)
            .await?;
        let existing: Option<(String, String)> = sqlx::query_as(
            "SELECT hash, extras FROM sideloads WHERE org = $1 AND name = $2 AND version = $3",
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
                    "UPDATE sideloads SET hash = $1, summary = $2, definition = $3, extras = $4, created_at = $5,
                     token_id = $6 WHERE org = $7 AND name = $8 AND version = $9",
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
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sideloads WHERE org = $1")
            .bind(new.org)
            .fetch_one(&mut *tx)
            .await?;
        if count >= limit {
            return Ok(Stored::Full);
        }
        sqlx::query(
            "INSERT INTO sideloads (org, name, version, hash, summary, definition, extras, created_at, token_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
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
            "SELECT name, version, hash, created_at, token_id FROM sideloads WHERE org = $1 ORDER BY name, version",
        )
        .bind(org)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn sideload_rows(&self, org: &str) -> Result<Vec<(String, String, String, String)>> {
        Ok(
            sqlx::query_as("SELECT name, version, hash, summary FROM sideloads WHERE org = $1")
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
            "SELECT definition FROM sideloads WHERE org = $1 AND name = $2 AND version = $3",
        )
        .bind(org)
        .bind(name)
        .bind(version)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn delete_sideloads(&self, org: &str, name: &str, version: Option<&str>) -> Result<u64> {
        Ok(sqlx::query(
            "DELETE FROM sideloads WHERE org = $1 AND name = $2 AND ($3::text IS NULL OR version = $3)",
        )
        .bind(org)
        .bind(name)
        .bind(version)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }
}

impl Tokens for PgSyncStore {
    async fn insert_token(
        &self,
        id: &str,
        sha256: &str,
        org: Option<&str>,
        now: i64,
    ) -> Result<()> {
        sqlx::query("INSERT INTO tokens (id, sha256, org, created_at) VALUES ($1, $2, $3, $4)")
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
            sqlx::query_as("SELECT id, org FROM tokens WHERE sha256 = $1 AND revoked_at IS NULL")
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
            sqlx::query("UPDATE tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
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
async fn bump(tx: &mut sqlx::PgConnection) -> std::result::Result<(), sqlx::Error> {
    sqlx::query("UPDATE generation SET value = value + 1 WHERE id = 1")
        .execute(tx)
        .await?;
    Ok(())
}
