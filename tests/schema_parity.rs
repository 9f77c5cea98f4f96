//! The worker's schema is the same on SQLite and on PostgreSQL: every table, column,
//! column kind and nullability, the seeded rows, and the last migration's version.
//! PostgreSQL is real: a throwaway server from Debian's binaries (`common::pg`).

mod common;

use std::collections::BTreeMap;

use marketplace::sync::store::{MIGRATIONS, POSTGRES_MIGRATIONS};
use sqlx::{Connection, Row};

/// Per table, its columns (sorted): name, kind, and whether NULL is refused.
type Schema = BTreeMap<String, Vec<(String, &'static str, bool)>>;

/// One name per kind of value, whatever each backend calls it.
fn kind(declared: &str) -> &'static str {
    match declared.to_ascii_lowercase().as_str() {
        "text" => "text",
        "bigint" | "integer" => "integer",
        "blob" | "bytea" => "bytes",
        "boolean" => "boolean",
        other => panic!("a column type neither side should use: {other}"),
    }
}

async fn sqlite_schema(db: &std::path::Path) -> (Schema, Vec<(i64, i64)>) {
    drop(marketplace::sync::SyncStore::open(db).await.unwrap());
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table'
           AND name NOT LIKE 'sqlite_%' AND name <> '_sqlx_migrations'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let mut schema = Schema::new();
    for table in tables {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!("PRAGMA table_info({table})")))
            .fetch_all(&mut conn)
            .await
            .unwrap();
        let mut columns: Vec<_> = rows
            .iter()
            .map(|r| {
                let declared: String = r.get("type");
                let not_null: i64 = r.get("notnull");
                // PostgreSQL refuses NULL in a primary key; so does our SQLite use of it.
                let pk: i64 = r.get("pk");
                (r.get("name"), kind(&declared), not_null == 1 || pk > 0)
            })
            .collect();
        columns.sort();
        schema.insert(table, columns);
    }
    let generation = sqlx::query_as("SELECT id, value FROM generation")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    (schema, generation)
}

async fn postgres_schema(url: &str) -> (Schema, Vec<(i64, i64)>) {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    POSTGRES_MIGRATIONS.run(&pool).await.unwrap();
    let rows = sqlx::query(
        "SELECT table_name::text AS t, column_name::text AS c, data_type::text AS d,
                is_nullable::text AS n
           FROM information_schema.columns
          WHERE table_schema = 'public' AND table_name <> '_sqlx_migrations'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let mut schema = Schema::new();
    for r in rows {
        let nullable: String = r.get("n");
        let declared: String = r.get("d");
        schema
            .entry(r.get("t"))
            .or_default()
            .push((r.get("c"), kind(&declared), nullable == "NO"));
    }
    for columns in schema.values_mut() {
        columns.sort();
    }
    let generation = sqlx::query_as("SELECT id, value FROM generation")
        .fetch_all(&pool)
        .await
        .unwrap();
    pool.close().await;
    (schema, generation)
}

#[tokio::test]
async fn the_workers_schema_is_the_same_on_sqlite_and_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = sqlite_schema(&dir.path().join("sync.db")).await;
    let pg = common::pg::Postgres::start();
    let postgres = postgres_schema(&pg.database("sync").await).await;
    assert_eq!(sqlite.0.len(), 6, "{:?}", sqlite.0.keys());
    assert_eq!(sqlite, postgres);
    let last = |m: &sqlx::migrate::Migrator| m.iter().map(|m| m.version).max();
    assert_eq!(last(&MIGRATIONS), last(&POSTGRES_MIGRATIONS));
}
