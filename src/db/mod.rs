//! Pools (sqlx) as both databases open them: the catalog database (`store`) and the
//! sync worker's (`sync::store`), on SQLite (here) or PostgreSQL ([`postgres`]), named
//! by a [`Database`] URL. Each caller adds what its data needs on top (synchronous
//! level, cache size) and brings its own migrations.

pub mod copy;
pub mod postgres;
mod url;

pub use url::{Database, DatabaseUrlError};

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::SqlitePool;
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

/// Whether `e` says the database did not answer, rather than that a statement failed:
/// the connection broke or could not be made, the pool had none free in time, or
/// PostgreSQL refused work while shutting down or starting (SQLSTATE class 08,
/// 57P01–57P03). Such a request may succeed when retried.
pub fn unreachable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03")
        }),
        _ => false,
    }
}

/// Connections of a file database's pool.
const FILE_CONNECTIONS: u32 = 4;

/// Options for a database file, which other processes may share: created if missing,
/// WAL (readers never wait for the writer), foreign keys enforced, and a 5 s wait on a
/// lock another connection holds rather than an immediate error.
pub(crate) fn file_options(path: &Path) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(5))
}

/// A transaction that writes: it takes the write lock at its start (`BEGIN IMMEDIATE`),
/// waiting up to the busy timeout for another writer. A deferred transaction that reads
/// first would hold a snapshot and fail at its first write, at once and without waiting
/// (`SQLITE_BUSY_SNAPSHOT`), whenever another connection or process committed since.
pub(crate) async fn begin_write(
    pool: &SqlitePool,
) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, sqlx::Error> {
    pool.begin_with("BEGIN IMMEDIATE").await
}

/// The database was migrated by a newer binary: its schema has migrations this one
/// does not know, and running on it could write rows the newer code cannot read.
#[derive(Debug, thiserror::Error)]
#[error(
    "the database was migrated by a newer version of marketplace (schema version {found}; this binary knows up to {known}): run that version or newer, or restore a backup taken before the upgrade"
)]
pub struct SchemaTooNew {
    pub found: i64,
    pub known: i64,
}

/// Refuses a database whose applied migrations go past the last of `migrations`,
/// before sqlx would report it as an unexplained missing migration.
async fn ensure_known(pool: &SqlitePool, migrations: &Migrator) -> Result<(), SchemaTooNew> {
    // A new database has no table yet; any error reading it leaves the verdict to sqlx.
    let found = sqlx::query_scalar(APPLIED_VERSION)
        .fetch_one(pool)
        .await
        .ok()
        .flatten();
    known(found, migrations)
}

/// The newest migration a database has applied (both backends, same table).
const APPLIED_VERSION: &str = "SELECT MAX(version) FROM _sqlx_migrations WHERE success";

fn known(found: Option<i64>, migrations: &Migrator) -> Result<(), SchemaTooNew> {
    let known = migrations.iter().map(|m| m.version).max().unwrap_or(0);
    match found {
        Some(found) if found > known => Err(SchemaTooNew { found, known }),
        _ => Ok(()),
    }
}

/// A pool on a database file opened with `options` (from [`file_options`]), with
/// `migrations` applied.
pub(crate) async fn open_file<E>(
    options: SqliteConnectOptions,
    migrations: &Migrator,
) -> Result<SqlitePool, E>
where
    E: From<sqlx::Error> + From<MigrateError> + From<SchemaTooNew>,
{
    pool(options, FILE_CONNECTIONS, migrations).await
}

/// A private in-memory database with `migrations` applied, for tests.
pub(crate) async fn open_memory<E>(migrations: &Migrator) -> Result<SqlitePool, E>
where
    E: From<sqlx::Error> + From<MigrateError> + From<SchemaTooNew>,
{
    let options = SqliteConnectOptions::from_str("sqlite::memory:")?.foreign_keys(true);
    // One connection: every connection to :memory: would be its own database.
    pool(options, 1, migrations).await
}

async fn pool<E>(
    options: SqliteConnectOptions,
    max: u32,
    migrations: &Migrator,
) -> Result<SqlitePool, E>
where
    E: From<sqlx::Error> + From<MigrateError> + From<SchemaTooNew>,
{
    let pool = SqlitePoolOptions::new()
        .max_connections(max)
        .connect_with(options)
        .await?;
    ensure_known(&pool, migrations).await?;
    migrations.run(&pool).await?;
    Ok(pool)
}
