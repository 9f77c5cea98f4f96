//! SQLite pools (sqlx) as both databases open them: the catalog database (`store`) and
//! the sync worker's (`sync::store`). Each caller adds what its data needs on top
//! (synchronous level, cache size) and brings its own migrations.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::SqlitePool;
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

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

/// A pool on a database file opened with `options` (from [`file_options`]), with
/// `migrations` applied.
pub(crate) async fn open_file<E>(
    options: SqliteConnectOptions,
    migrations: &Migrator,
) -> Result<SqlitePool, E>
where
    E: From<sqlx::Error> + From<MigrateError>,
{
    pool(options, FILE_CONNECTIONS, migrations).await
}

/// A private in-memory database with `migrations` applied, for tests.
pub(crate) async fn open_memory<E>(migrations: &Migrator) -> Result<SqlitePool, E>
where
    E: From<sqlx::Error> + From<MigrateError>,
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
    E: From<sqlx::Error> + From<MigrateError>,
{
    let pool = SqlitePoolOptions::new()
        .max_connections(max)
        .connect_with(options)
        .await?;
    migrations.run(&pool).await?;
    Ok(pool)
}
