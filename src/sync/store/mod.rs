//! The worker's own database: sources, their trusted metadata, their last good
//! definitions (with summaries in `summary`'s format), sideloads and the local API's
//! tokens. Stores bytes as verified by `round`; it never verifies.
//!
//! What the worker asks of storage is the traits below, named by what it does; each
//! backend implements all of them with its own SQL ([`sqlite`]: `DATA_DIR/sync.db` by
//! default; [`postgres`]: `database:` in `sync.yaml`). [`SyncStore`] is the one the
//! worker holds: it opens the backend a [`Database`] URL names and forwards each call,
//! so callers never see which one runs (static dispatch, no generic parameter spreading
//! through the worker and its API).
//!
//! Rules every backend keeps (the conformance suite, `tests/sync_store.rs`, runs the
//! same bodies on both):
//! - every write to what sources offer bumps [`LastGood::generation`] in the same
//!   transaction, so a process serving views knows when to rebuild;
//! - a transaction that reads before it writes takes its write lock first, so a second
//!   process writing never makes it fail halfway.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;

use crate::db::Database;
use crate::definition::Definition;
use crate::sync::sideload::{NewSideload, SideloadRecord, Stored, TokenRecord};

pub mod postgres;
pub mod sqlite;
mod summary;

pub use postgres::PgSyncStore;
pub use sqlite::SqliteSyncStore;
pub use summary::{read_summary, summary_json};

pub use sqlite::MIGRATIONS;

/// The same schema on PostgreSQL, version for version (a baseline at 0006, then one
/// migration per change with the SQLite side's number); `tests/schema_parity.rs` holds
/// the two schemas equal.
pub use postgres::MIGRATIONS as POSTGRES_MIGRATIONS;

#[derive(Debug, thiserror::Error)]
pub enum SyncStoreError {
    // The cause is part of each message and deliberately not also a `source()`, so an
    // error chain prints it once.
    #[error("sync database: {0}")]
    Db(sqlx::Error),
    #[error("sync database migration: {0}")]
    Migrate(sqlx::migrate::MigrateError),
    #[error("sync database: {0}")]
    TooNew(crate::db::SchemaTooNew),
}

impl From<sqlx::Error> for SyncStoreError {
    fn from(e: sqlx::Error) -> Self {
        SyncStoreError::Db(e)
    }
}

impl From<sqlx::migrate::MigrateError> for SyncStoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        SyncStoreError::Migrate(e)
    }
}

impl From<crate::db::SchemaTooNew> for SyncStoreError {
    fn from(e: crate::db::SchemaTooNew) -> Self {
        SyncStoreError::TooNew(e)
    }
}

/// The worker's store on whichever backend its configuration names.
#[derive(Debug, Clone)]
pub enum SyncStore {
    Sqlite(SqliteSyncStore),
    Postgres(PgSyncStore),
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
) -> std::result::Result<Definition, crate::definition::InvalidDefinition> {
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

/// One stored target of a source: (target, hash, yanked, bytes).
pub type TargetBytes = (String, String, bool, Vec<u8>);

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

type Result<T> = std::result::Result<T, SyncStoreError>;

/// The configured marketplaces and how their rounds went.
pub trait Sources {
    /// Registers a configured source (or updates its URL).
    fn add_source(&self, name: &str, url: &str) -> impl Future<Output = Result<()>> + Send;
    /// Forgets the sources no longer configured, with their definitions: an operator
    /// who removes a source from the file expects its plugins to go. Returns how many.
    fn retain_sources(&self, names: &[&str]) -> impl Future<Output = Result<u64>> + Send;
    /// Records a failed round (the source's definitions stay); returns the failures in
    /// a row.
    fn record_failure(
        &self,
        source: &str,
        reason: &str,
        error: &str,
        now: i64,
    ) -> impl Future<Output = Result<u64>> + Send;
    /// Records a round that found nothing new: the state stands as it is.
    fn record_unchanged(&self, source: &str, now: i64) -> impl Future<Output = Result<()>> + Send;
    /// The publishers of `source` failing verification now, by name.
    fn publisher_failures(
        &self,
        source: &str,
    ) -> impl Future<Output = Result<Vec<PublisherFailure>>> + Send;
    /// Status of every source (or only `only`), by name.
    fn status_of(
        &self,
        only: Option<&str>,
    ) -> impl Future<Output = Result<Vec<SourceStatus>>> + Send;
}

/// The TUF metadata a source's last good round trusted.
pub trait TrustedMetadata {
    /// What the last good round of `source` trusted; `None` before the first one.
    fn trusted(&self, source: &str) -> impl Future<Output = Result<Option<Trusted>>> + Send;
}

/// The last good definitions of each source, and the change feed over them.
pub trait LastGood {
    /// The hash and extras (JSON) stored for each target of a source.
    fn known_hashes(
        &self,
        source: &str,
    ) -> impl Future<Output = Result<HashMap<String, (String, String)>>> + Send;
    /// Replaces a source's state with a verified round, in one transaction: targets no
    /// longer listed leave, new ones arrive, yank flags and signers follow the index;
    /// the definitions of `failing` publishers stay as they were, and the failures are
    /// recorded. Returns how many definitions the source now offers.
    fn replace_source(
        &self,
        source: &str,
        defs: &[SourceDefinition],
        failing: &[PublisherFailure],
        trusted: &Trusted,
        now: i64,
    ) -> impl Future<Output = Result<u64>> + Send;
    /// Changes whenever what the sources offer changes (in any process).
    fn generation(&self) -> impl Future<Output = Result<i64>> + Send;
    /// Every stored definition of every source, as the merge reads them, by source,
    /// publisher and name.
    fn rows(&self) -> impl Future<Output = Result<Vec<StoredRow>>> + Send;
    /// The bytes of one target of a source.
    fn source_definition(
        &self,
        source: &str,
        target: &str,
    ) -> impl Future<Output = Result<Option<Vec<u8>>>> + Send;
    /// The stored definitions of a source: (target, hash, yanked, bytes), by target.
    fn source_definitions(
        &self,
        source: &str,
    ) -> impl Future<Output = Result<Vec<TargetBytes>>> + Send;
}

/// Definitions an organization added by hand.
pub trait Sideloads {
    /// Stores a version unless another with other content holds its place (see
    /// [`Stored`]); the read, the limit check and the write are one transaction.
    fn put_sideload(
        &self,
        new: &NewSideload<'_>,
        replace: bool,
        limit: i64,
    ) -> impl Future<Output = Result<Stored>> + Send;
    /// The organization's sideloads, by name and version.
    fn sideloads(&self, org: &str) -> impl Future<Output = Result<Vec<SideloadRecord>>> + Send;
    /// (name, version, hash, summary JSON) of every sideload of `org`, for its view.
    fn sideload_rows(
        &self,
        org: &str,
    ) -> impl Future<Output = Result<Vec<(String, String, String, String)>>> + Send;
    /// The bytes of one sideloaded version.
    fn sideload_bytes(
        &self,
        org: &str,
        name: &str,
        version: &str,
    ) -> impl Future<Output = Result<Option<Vec<u8>>>> + Send;
    /// Removes one version, or every version of `name` when `version` is `None`;
    /// returns how many were removed.
    fn delete_sideloads(
        &self,
        org: &str,
        name: &str,
        version: Option<&str>,
    ) -> impl Future<Output = Result<u64>> + Send;
}

/// The local API's tokens, kept as SHA-256 hashes.
pub trait Tokens {
    fn insert_token(
        &self,
        id: &str,
        sha256: &str,
        org: Option<&str>,
        now: i64,
    ) -> impl Future<Output = Result<()>> + Send;
    /// The id and organization (`None`: a reader token) of a live token.
    fn live_token(
        &self,
        sha256: &str,
    ) -> impl Future<Output = Result<Option<(String, Option<String>)>>> + Send;
    /// Every token, live or revoked, by creation.
    fn tokens(&self) -> impl Future<Output = Result<Vec<TokenRecord>>> + Send;
    /// Revokes a token by id; whether a live token was revoked.
    fn revoke_token(&self, id: &str, now: i64) -> impl Future<Output = Result<bool>> + Send;
}

/// Forwards a call to the backend that runs.
macro_rules! dispatch {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            SyncStore::Sqlite($s) => $call,
            SyncStore::Postgres($s) => $call,
        }
    };
}

impl SyncStore {
    /// Opens the database `db` names (creating a SQLite file if missing) and applies
    /// migrations; `connections` sizes a PostgreSQL pool.
    pub async fn connect(db: &Database, connections: u32) -> Result<SyncStore> {
        let store = match db {
            Database::Sqlite(path) => SyncStore::Sqlite(SqliteSyncStore::open(path).await?),
            Database::Postgres(options) => {
                SyncStore::Postgres(PgSyncStore::open(options, connections).await?)
            }
        };
        let refreshed = store.refresh_stale_summaries().await?;
        if refreshed > 0 {
            tracing::info!(
                definitions = refreshed,
                "recomputed stored definition summaries"
            );
        }
        Ok(store)
    }

    /// Opens (creating if missing) a SQLite database file.
    pub async fn open(path: &Path) -> Result<SyncStore> {
        SyncStore::connect(&Database::Sqlite(path.to_owned()), 1).await
    }

    /// A private in-memory SQLite database, for tests.
    pub async fn open_in_memory() -> Result<SyncStore> {
        Ok(SyncStore::Sqlite(SqliteSyncStore::open_in_memory().await?))
    }

    pub async fn close(&self) {
        dispatch!(self, s => s.close().await)
    }

    /// Status of every source, by name.
    pub async fn status(&self) -> Result<Vec<SourceStatus>> {
        self.status_of(None).await
    }

    /// Recomputes the summaries a migration marked stale (the summary rule changed) from
    /// the stored bytes; returns how many. Until then readers parse the bytes of a source
    /// row themselves. A definition that no longer parses keeps its mark and is logged;
    /// the view leaves it out, as it would any unreadable row.
    async fn refresh_stale_summaries(&self) -> Result<usize> {
        let stale = dispatch!(self, s => s.stale_summaries().await)?;
        if stale.is_empty() {
            return Ok(0);
        }
        let fresh: Vec<Fresh> = stale
            .into_iter()
            .filter_map(|row| match stored_definition(&row.bytes, &row.extras) {
                Ok(def) => Some(Fresh {
                    key: row.key,
                    summary: summary_json(&def),
                }),
                Err(e) => {
                    tracing::warn!(definition = %row.key, error = %e,
                    "stored definition no longer validates; left out of views");
                    None
                }
            })
            .collect();
        dispatch!(self, s => s.write_summaries(&fresh).await)?;
        Ok(fresh.len())
    }
}

/// A stored definition whose summary a migration marked stale.
#[derive(Debug)]
pub(crate) struct Stale {
    pub key: StaleKey,
    pub bytes: Vec<u8>,
    pub extras: String,
}

#[derive(Debug)]
pub(crate) enum StaleKey {
    Source {
        source: String,
        target: String,
    },
    Sideload {
        org: String,
        name: String,
        version: String,
    },
}

impl std::fmt::Display for StaleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StaleKey::Source { source, target } => write!(f, "{source}:{target}"),
            StaleKey::Sideload { org, name, version } => {
                write!(f, "sideload {org}/{name}@{version}")
            }
        }
    }
}

pub(crate) struct Fresh {
    pub key: StaleKey,
    pub summary: String,
}

impl Sources for SyncStore {
    async fn add_source(&self, name: &str, url: &str) -> Result<()> {
        dispatch!(self, s => s.add_source(name, url).await)
    }
    async fn retain_sources(&self, names: &[&str]) -> Result<u64> {
        dispatch!(self, s => s.retain_sources(names).await)
    }
    async fn record_failure(
        &self,
        source: &str,
        reason: &str,
        error: &str,
        now: i64,
    ) -> Result<u64> {
        dispatch!(self, s => s.record_failure(source, reason, error, now).await)
    }
    async fn record_unchanged(&self, source: &str, now: i64) -> Result<()> {
        dispatch!(self, s => s.record_unchanged(source, now).await)
    }
    async fn publisher_failures(&self, source: &str) -> Result<Vec<PublisherFailure>> {
        dispatch!(self, s => s.publisher_failures(source).await)
    }
    async fn status_of(&self, only: Option<&str>) -> Result<Vec<SourceStatus>> {
        dispatch!(self, s => s.status_of(only).await)
    }
}

impl TrustedMetadata for SyncStore {
    async fn trusted(&self, source: &str) -> Result<Option<Trusted>> {
        dispatch!(self, s => s.trusted(source).await)
    }
}

impl LastGood for SyncStore {
    async fn known_hashes(&self, source: &str) -> Result<HashMap<String, (String, String)>> {
        dispatch!(self, s => s.known_hashes(source).await)
    }
    async fn replace_source(
        &self,
        source: &str,
        defs: &[SourceDefinition],
        failing: &[PublisherFailure],
        trusted: &Trusted,
        now: i64,
    ) -> Result<u64> {
        dispatch!(self, s => s.replace_source(source, defs, failing, trusted, now).await)
    }
    async fn generation(&self) -> Result<i64> {
        dispatch!(self, s => s.generation().await)
    }
    async fn rows(&self) -> Result<Vec<StoredRow>> {
        dispatch!(self, s => s.rows().await)
    }
    async fn source_definition(&self, source: &str, target: &str) -> Result<Option<Vec<u8>>> {
        dispatch!(self, s => s.source_definition(source, target).await)
    }
    async fn source_definitions(&self, source: &str) -> Result<Vec<TargetBytes>> {
        dispatch!(self, s => s.source_definitions(source).await)
    }
}

impl Sideloads for SyncStore {
    async fn put_sideload(
        &self,
        new: &NewSideload<'_>,
        replace: bool,
        limit: i64,
    ) -> Result<Stored> {
        dispatch!(self, s => s.put_sideload(new, replace, limit).await)
    }
    async fn sideloads(&self, org: &str) -> Result<Vec<SideloadRecord>> {
        dispatch!(self, s => s.sideloads(org).await)
    }
    async fn sideload_rows(&self, org: &str) -> Result<Vec<(String, String, String, String)>> {
        dispatch!(self, s => s.sideload_rows(org).await)
    }
    async fn sideload_bytes(
        &self,
        org: &str,
        name: &str,
        version: &str,
    ) -> Result<Option<Vec<u8>>> {
        dispatch!(self, s => s.sideload_bytes(org, name, version).await)
    }
    async fn delete_sideloads(&self, org: &str, name: &str, version: Option<&str>) -> Result<u64> {
        dispatch!(self, s => s.delete_sideloads(org, name, version).await)
    }
}

impl Tokens for SyncStore {
    async fn insert_token(
        &self,
        id: &str,
        sha256: &str,
        org: Option<&str>,
        now: i64,
    ) -> Result<()> {
        dispatch!(self, s => s.insert_token(id, sha256, org, now).await)
    }
    async fn live_token(&self, sha256: &str) -> Result<Option<(String, Option<String>)>> {
        dispatch!(self, s => s.live_token(sha256).await)
    }
    async fn tokens(&self) -> Result<Vec<TokenRecord>> {
        dispatch!(self, s => s.tokens().await)
    }
    async fn revoke_token(&self, id: &str, now: i64) -> Result<bool> {
        dispatch!(self, s => s.revoke_token(id, now).await)
    }
}

/// A `sources` row as both backends read it for [`SourceStatus`].
#[derive(sqlx::FromRow)]
pub(crate) struct StatusRow {
    name: String,
    url: String,
    last_attempt_at: Option<i64>,
    last_success_at: Option<i64>,
    last_reason: Option<String>,
    last_error: Option<String>,
    consecutive_failures: i64,
    root_version: Option<i64>,
    timestamp_version: Option<i64>,
    snapshot_version: Option<i64>,
    targets_version: Option<i64>,
    timestamp_expires_at: Option<i64>,
    expires_at: Option<i64>,
    expires_role: Option<String>,
    definitions: i64,
}

impl StatusRow {
    pub(crate) fn into_status(self, failing_publishers: Vec<PublisherFailure>) -> SourceStatus {
        let v = |n: Option<i64>| n.map(|n| n.max(0) as u64);
        SourceStatus {
            trusted: v(self.root_version).map(|root| TrustedVersions {
                root,
                timestamp: v(self.timestamp_version).unwrap_or(0),
                snapshot: v(self.snapshot_version).unwrap_or(0),
                targets: v(self.targets_version).unwrap_or(0),
                timestamp_expires_at: self.timestamp_expires_at.unwrap_or(0),
                expires_at: self.expires_at.unwrap_or(0),
                expires_role: self.expires_role.unwrap_or_default(),
            }),
            failing_publishers,
            name: self.name,
            url: self.url,
            last_attempt_at: self.last_attempt_at,
            last_success_at: self.last_success_at,
            last_reason: self.last_reason,
            last_error: self.last_error,
            consecutive_failures: self.consecutive_failures.max(0) as u64,
            definitions: self.definitions.max(0) as u64,
        }
    }
}

/// [`Trusted`] from a source's status and its stored metadata.
pub(crate) fn trusted_from(
    status: Option<SourceStatus>,
    root: Vec<u8>,
    timestamp: Vec<u8>,
    snapshot: Vec<u8>,
) -> Trusted {
    let definitions = status.as_ref().map_or(0, |s| s.definitions);
    let versions = status.and_then(|s| s.trusted).unwrap_or_default();
    Trusted {
        versions,
        definitions,
        root,
        timestamp,
        snapshot,
    }
}
