//! PostgreSQL pools as both databases open them: the same checks as SQLite's (a schema
//! from a newer binary is refused), then migrations. sqlx's migrator holds a session
//! advisory lock while it runs, so processes starting together on one database apply
//! each migration once; the others wait and find it done.

use std::time::Duration;

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};

use super::SchemaTooNew;

/// Connections of a pool when the operator names no other number.
pub const DEFAULT_CONNECTIONS: u32 = 10;
/// The most an operator may ask for: PostgreSQL's own default `max_connections` is 100,
/// shared with every other client of the server.
pub const MAX_CONNECTIONS: u32 = 1_000;

/// How long a request waits for a free connection before it fails: long enough for a
/// burst, short enough that an exhausted pool shows up as errors, not as hung clients.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// A pooled connection idle longer than this is pinged before it is handed out. sqlx's
/// default pings every time, which doubles the round trips of a one-statement request
/// (a cached catalog answer is one primary-key read); a connection used this recently
/// has just shown it is alive, while one left idle (a quiet night, a PostgreSQL restart,
/// a firewall that forgets idle flows) is still checked and replaced when dead.
const PING_WHEN_IDLE_FOR: Duration = Duration::from_secs(1);

pub(crate) async fn open<E>(
    options: &PgConnectOptions,
    connections: u32,
    migrations: &Migrator,
) -> Result<PgPool, E>
where
    E: From<sqlx::Error> + From<MigrateError> + From<SchemaTooNew>,
{
    // One connection first: a pool that cannot connect reports only that it timed out,
    // where this names the cause (refused, authentication, no such database, TLS).
    options.connect().await?.close().await?;
    let pool = PgPoolOptions::new()
        .max_connections(connections.max(1))
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for > PING_WHEN_IDLE_FOR {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
        .connect_with(options.clone())
        .await?;
    let found = sqlx::query_scalar(super::APPLIED_VERSION)
        .fetch_one(&pool)
        .await
        .ok()
        .flatten();
    super::known(found, migrations)?;
    migrations.run(&pool).await?;
    Ok(pool)
}
