//! `marketplace db copy`: every row of one database into another, empty one, on either
//! backend (SQLite to PostgreSQL to move an installation; back, or between two of a
//! kind). It works on rows, not through the stores' operations, so nothing is
//! re-derived: ids, hashes, signed metadata bytes, timestamps and generations arrive as
//! they were. What one backend keeps and the other has not (SQLite's FTS5 table,
//! PostgreSQL's `search_document`) is rebuilt from the copied rows.
//!
//! Both databases are migrated by their stores first (so the source is at this binary's
//! schema and the target has its tables); the columns copied are those the two share,
//! typed by the target. The source is read in one read transaction, so every table
//! comes from the same snapshot even while something writes to it; rows are streamed
//! in batches, so memory holds one batch, not a table. The target is written in one
//! transaction: a failure leaves it empty, as it was.

use std::fmt;

use futures_util::TryStreamExt;
use sqlx::{PgPool, QueryBuilder, Row, SqlitePool};

use super::Database;

/// Which database a URL holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The server's (`serve`).
    Server,
    /// The sync worker's.
    Worker,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Server => "server",
            Kind::Worker => "worker",
        })
    }
}

/// Tables in an order that satisfies every foreign key; the change feed (seeded rows)
/// is copied by updating its rows instead. `leases` is not copied: a claim by one of
/// the source's servers means nothing to the target's.
const SERVER_TABLES: &[&str] = &[
    "publishers",
    "publisher_tokens",
    "publisher_cosign_keys",
    "plugins",
    "mirror_images",
    "plugin_versions",
    "plugin_tags",
    "plugin_links",
    "tuf_metadata",
    "mirror_content",
    "mirror_tags",
    "listings",
    "review_versions",
    "review_events",
    "reviewers",
    "upstreams",
    "operators",
];
const WORKER_TABLES: &[&str] = &[
    "sources",
    "source_definitions",
    "publisher_failures",
    "sideloads",
    "tokens",
];
/// Tables whose id column is generated (a sequence to move past the copied ids on
/// PostgreSQL).
const IDENTITY_TABLES: &[&str] = &[
    "publishers",
    "plugins",
    "plugin_versions",
    "mirror_images",
    "publisher_tokens",
    "review_events",
    "reviewers",
    "operators",
];
/// Rows per INSERT: under both backends' parameter limits for the widest table (17
/// columns).
const BATCH: usize = 500;

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    // The database's message is in this one's text; no `#[source]`, so an error chain
    // prints it once.
    #[error("{0}")]
    Db(sqlx::Error),
    #[error("the source holds neither a marketplace server's nor a sync worker's tables")]
    Unknown,
    #[error("the target is not empty ({table} has {rows} rows): copy only into a new database")]
    NotEmpty { table: String, rows: i64 },
    #[error("the source and the target are the same database")]
    Same,
}

impl From<sqlx::Error> for CopyError {
    fn from(e: sqlx::Error) -> Self {
        CopyError::Db(e)
    }
}

/// What was copied: rows per table.
#[derive(Debug, Default)]
pub struct Copied {
    pub kind: Option<Kind>,
    pub tables: Vec<(String, u64)>,
}

enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// A column's kind, as the target declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Col {
    Int,
    Text,
    Bytes,
    Bool,
}

#[derive(Debug, Clone)]
enum Val {
    Int(Option<i64>),
    Text(Option<String>),
    Bytes(Option<Vec<u8>>),
    Bool(Option<bool>),
}

impl Pool {
    async fn connect(db: &Database) -> Result<Pool, sqlx::Error> {
        Ok(match db {
            Database::Sqlite(path) => Pool::Sqlite(
                sqlx::sqlite::SqlitePoolOptions::new()
                    .max_connections(1)
                    .connect_with(super::file_options(path).create_if_missing(false))
                    .await?,
            ),
            Database::Postgres(options) => Pool::Postgres(
                sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .connect_with((**options).clone())
                    .await?,
            ),
        })
    }

    async fn close(self) {
        match self {
            Pool::Sqlite(p) => p.close().await,
            Pool::Postgres(p) => p.close().await,
        }
    }

    async fn has_table(&self, table: &str) -> Result<bool, sqlx::Error> {
        let n: i64 = match self {
            Pool::Sqlite(p) => {
                sqlx::query_scalar(
                    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
                )
                .bind(table)
                .fetch_one(p)
                .await?
            }
            Pool::Postgres(p) => {
                sqlx::query_scalar(
                    "SELECT COUNT(*) FROM information_schema.tables
                      WHERE table_schema = current_schema() AND table_name = $1",
                )
                .bind(table)
                .fetch_one(p)
                .await?
            }
        };
        Ok(n > 0)
    }

    async fn count(&self, table: &str) -> Result<i64, sqlx::Error> {
        let sql = sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}"));
        match self {
            Pool::Sqlite(p) => sqlx::query_scalar(sql).fetch_one(p).await,
            Pool::Postgres(p) => sqlx::query_scalar(sql).fetch_one(p).await,
        }
    }

    /// Column names and kinds of `table`, in order.
    async fn columns(&self, table: &str) -> Result<Vec<(String, Col)>, sqlx::Error> {
        let rows: Vec<(String, String)> = match self {
            Pool::Sqlite(p) => {
                sqlx::query(sqlx::AssertSqlSafe(format!("PRAGMA table_info({table})")))
                    .fetch_all(p)
                    .await?
                    .iter()
                    .map(|r| (r.get("name"), r.get("type")))
                    .collect()
            }
            Pool::Postgres(p) => {
                sqlx::query_as(
                    "SELECT column_name::text, data_type::text FROM information_schema.columns
                      WHERE table_schema = current_schema() AND table_name = $1
                      ORDER BY ordinal_position",
                )
                .bind(table)
                .fetch_all(p)
                .await?
            }
        };
        Ok(rows
            .into_iter()
            .filter_map(|(name, declared)| {
                let col = match declared.to_ascii_lowercase().as_str() {
                    "integer" | "bigint" => Col::Int,
                    "text" => Col::Text,
                    "blob" | "bytea" => Col::Bytes,
                    "boolean" => Col::Bool,
                    // Not copied: rebuilt from the rows (search_document).
                    _ => return None,
                };
                Some((name, col))
            })
            .collect())
    }
}

/// One row's values in `cols`' order, decoded as the target declares each column.
fn vals<R: Row>(r: &R, cols: &[(String, Col)]) -> Result<Vec<Val>, sqlx::Error>
where
    usize: sqlx::ColumnIndex<R>,
    for<'a> Option<i64>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<Vec<u8>>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<bool>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    cols.iter()
        .enumerate()
        .map(|(i, (_, c))| {
            Ok(match c {
                Col::Int => Val::Int(r.try_get(i)?),
                Col::Text => Val::Text(r.try_get(i)?),
                Col::Bytes => Val::Bytes(r.try_get(i)?),
                Col::Bool => Val::Bool(r.try_get(i)?),
            })
        })
        .collect()
}

fn select(table: &str, cols: &[(String, Col)]) -> sqlx::AssertSqlSafe<String> {
    let names: Vec<&str> = cols.iter().map(|(n, _)| n.as_str()).collect();
    sqlx::AssertSqlSafe(format!("SELECT {} FROM {table}", names.join(", ")))
}

/// The source's side of a copy: one read transaction, so every table is read from the
/// same snapshot even if something writes to the source meanwhile.
enum Reading {
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
}

/// The target's side: one writing transaction, committed only when every row is in.
enum Writing {
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
}

impl Pool {
    async fn begin_read(&self) -> Result<Reading, sqlx::Error> {
        Ok(match self {
            // A deferred transaction's first read fixes its snapshot (WAL mode).
            Pool::Sqlite(p) => Reading::Sqlite(p.begin().await?),
            Pool::Postgres(p) => Reading::Postgres(
                p.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    .await?,
            ),
        })
    }

    async fn begin_write(&self) -> Result<Writing, sqlx::Error> {
        Ok(match self {
            Pool::Sqlite(p) => Writing::Sqlite(super::begin_write(p).await?),
            Pool::Postgres(p) => Writing::Postgres(p.begin().await?),
        })
    }
}

/// Streams every row of `table` from the source transaction `$src` into the target
/// transaction `$dst` (a `$db` one), [`BATCH`] rows per INSERT, so memory holds one batch
/// whatever the table's size; evaluates to how many rows. A macro rather than a function:
/// the same text for the four pairs of backends, without restating sqlx's bounds.
macro_rules! stream_table {
    ($src:expr, $dst:expr, $db:ty, $table:expr, $cols:expr) => {{
        let (table, cols): (&str, &[(String, Col)]) = ($table, $cols);
        let mut rows = sqlx::query(select(table, cols)).fetch(&mut **$src);
        let mut n = 0u64;
        let mut chunk: Vec<Vec<Val>> = Vec::with_capacity(BATCH);
        loop {
            let row = rows.try_next().await?;
            if let Some(row) = &row {
                chunk.push(vals(row, cols)?);
            }
            if chunk.len() == BATCH || (row.is_none() && !chunk.is_empty()) {
                n += chunk.len() as u64;
                let mut q = insert::<$db>(table, cols);
                q.push_values(chunk.drain(..), |mut b, row| {
                    for v in row {
                        match v {
                            Val::Int(x) => b.push_bind(x),
                            Val::Text(x) => b.push_bind(x),
                            Val::Bytes(x) => b.push_bind(x),
                            Val::Bool(x) => b.push_bind(x),
                        };
                    }
                });
                q.build().execute(&mut **$dst).await?;
            }
            if row.is_none() {
                break n;
            }
        }
    }};
}

/// Which database `db` holds, from its tables.
pub async fn kind_of(db: &Database) -> Result<Kind, CopyError> {
    let pool = Pool::connect(db).await?;
    let kind = if pool.has_table("plugin_versions").await? {
        Kind::Server
    } else if pool.has_table("source_definitions").await? {
        Kind::Worker
    } else {
        return Err(CopyError::Unknown);
    };
    pool.close().await;
    Ok(kind)
}

/// Copies every row of `from` (a database of `kind`) into `to`, which must be empty.
/// Both must have been migrated by their store's `connect` first (`cli::db` does).
pub async fn copy(from: &Database, to: &Database, kind: Kind) -> Result<Copied, CopyError> {
    if from.to_string() == to.to_string() {
        return Err(CopyError::Same);
    }
    let source = Pool::connect(from).await?;
    let target = Pool::connect(to).await?;
    let tables = match kind {
        Kind::Server => SERVER_TABLES,
        Kind::Worker => WORKER_TABLES,
    };
    for table in tables {
        let rows = target.count(table).await?;
        if rows > 0 {
            return Err(CopyError::NotEmpty {
                table: (*table).to_owned(),
                rows,
            });
        }
    }
    let mut copied = Copied {
        kind: Some(kind),
        tables: Vec::new(),
    };
    // Columns first: each pool has one connection, which a transaction then holds.
    let mut plan = Vec::new();
    for table in tables {
        let wanted = target.columns(table).await?;
        let present: Vec<String> = source
            .columns(table)
            .await?
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        let cols: Vec<(String, Col)> = wanted
            .into_iter()
            .filter(|(n, _)| present.contains(n))
            .collect();
        plan.push((*table, cols));
    }
    let mut reading = source.begin_read().await?;
    let mut writing = target.begin_write().await?;
    for (table, cols) in &plan {
        let n = match (&mut reading, &mut writing) {
            (Reading::Sqlite(src), Writing::Sqlite(dst)) => {
                stream_table!(src, dst, sqlx::Sqlite, table, cols)
            }
            (Reading::Postgres(src), Writing::Sqlite(dst)) => {
                stream_table!(src, dst, sqlx::Sqlite, table, cols)
            }
            (Reading::Sqlite(src), Writing::Postgres(dst)) => {
                stream_table!(src, dst, sqlx::Postgres, table, cols)
            }
            (Reading::Postgres(src), Writing::Postgres(dst)) => {
                stream_table!(src, dst, sqlx::Postgres, table, cols)
            }
        };
        copied.tables.push(((*table).to_owned(), n));
    }
    // The change feed's generations continue where the source's were.
    let sql = match kind {
        Kind::Server => "SELECT domain, generation FROM change_feed",
        Kind::Worker => "SELECT 'sources', value FROM generation",
    };
    let feed: Vec<(String, i64)> = match &mut reading {
        Reading::Sqlite(tx) => sqlx::query_as(sql).fetch_all(&mut **tx).await?,
        Reading::Postgres(tx) => sqlx::query_as(sql).fetch_all(&mut **tx).await?,
    };
    match writing {
        Writing::Sqlite(mut tx) => {
            for (domain, generation) in &feed {
                let sql = match kind {
                    Kind::Server => "UPDATE change_feed SET generation = ? WHERE domain = ?",
                    Kind::Worker => "UPDATE generation SET value = ? WHERE ? = 'sources'",
                };
                sqlx::query(sql)
                    .bind(generation)
                    .bind(domain)
                    .execute(&mut *tx)
                    .await?;
            }
            if kind == Kind::Server {
                // The FTS5 index, from the listed plugins' summaries (as the store
                // writes it with each summary).
                sqlx::query(
                    "INSERT INTO plugin_search (rowid, name, display_name, description, tags)
                     SELECT id, name, display_name, description, tags FROM plugins
                      WHERE latest_version IS NOT NULL",
                )
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        }
        Writing::Postgres(mut tx) => {
            for table in tables.iter().filter(|t| IDENTITY_TABLES.contains(t)) {
                // Ids generated from here on follow the copied ones.
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "SELECT setval(pg_get_serial_sequence('{table}', 'id'),
                                   GREATEST((SELECT MAX(id) FROM {table}), 1),
                                   (SELECT MAX(id) FROM {table}) IS NOT NULL)"
                )))
                .execute(&mut *tx)
                .await?;
            }
            for (domain, generation) in &feed {
                let sql = match kind {
                    Kind::Server => "UPDATE change_feed SET generation = $1 WHERE domain = $2",
                    Kind::Worker => "UPDATE generation SET value = $1 WHERE $2 = 'sources'",
                };
                sqlx::query(sql)
                    .bind(generation)
                    .bind(domain)
                    .execute(&mut *tx)
                    .await?;
            }
            if kind == Kind::Server {
                // One summary per plugin (not its history): small enough to hold.
                let listed: Vec<(i64, String, String, String, String)> = sqlx::query_as(
                    "SELECT id, name, display_name, description, tags FROM plugins
                      WHERE latest_version IS NOT NULL",
                )
                .fetch_all(&mut *tx)
                .await?;
                for (id, name, display_name, description, tags) in listed {
                    crate::store::write_search_document(
                        &mut tx,
                        id,
                        &name,
                        &display_name,
                        &tags,
                        &description,
                    )
                    .await?;
                }
            }
            tx.commit().await?;
        }
    }
    // The snapshot only read; ending it changes nothing.
    drop(reading);
    source.close().await;
    target.close().await;
    Ok(copied)
}

fn insert<DB: sqlx::Database>(table: &str, cols: &[(String, Col)]) -> QueryBuilder<DB> {
    let names: Vec<&str> = cols.iter().map(|(n, _)| n.as_str()).collect();
    QueryBuilder::new(format!("INSERT INTO {table} ({}) ", names.join(", ")))
}
