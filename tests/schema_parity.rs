//! Each database's schema is the same on SQLite and on PostgreSQL: every table, column,
//! column kind, nullability and default, primary key, index (unique or not, by its
//! columns), foreign key (columns, referenced table and columns, ON DELETE and ON
//! UPDATE), the seeded rows, and the last migration's version. The worker's database
//! (`migrations/sync`, `migrations/sync-postgres`) and the server's (`migrations`,
//! `migrations/postgres`), each with the differences its PostgreSQL baseline documents
//! left out and checked on their own. CHECK constraints are not compared (SQLite keeps
//! them only in the table's SQL text). PostgreSQL is real: a throwaway server from
//! Debian's binaries (`common::pg`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use sqlx::migrate::Migrator;
use sqlx::{Connection, PgPool, Row, SqliteConnection};

/// A column: name, kind, whether NULL is refused, and its default as written (spelled
/// the same on both sides by [`default`]).
type Column = (String, &'static str, bool, Option<String>);

/// A foreign key: its columns, the table and columns it refers to, ON DELETE, ON UPDATE.
type ForeignKey = (Vec<String>, String, Vec<String>, String, String);

/// What the comparison reads of one database, every map by table name.
#[derive(Debug, Default, PartialEq)]
struct Schema {
    /// Columns, sorted by name.
    columns: BTreeMap<String, Vec<Column>>,
    /// Primary key columns in key order (SQLite's rowid alias `INTEGER PRIMARY KEY`
    /// included, though it has no index of its own there).
    primary_keys: BTreeMap<String, Vec<String>>,
    /// (table, column) of keys generated when an insert leaves them out: SQLite's rowid
    /// alias, PostgreSQL's identity (BY DEFAULT, so explicit ids are taken too).
    generated: BTreeSet<(String, String)>,
    /// Every other index, including those of UNIQUE constraints: unique?, its columns
    /// in index order.
    indexes: BTreeMap<String, BTreeSet<(bool, Vec<String>)>>,
    foreign_keys: BTreeMap<String, BTreeSet<ForeignKey>>,
    /// How many rows each table holds once migrated.
    rows: BTreeMap<String, i64>,
    /// The rows of the seeded table, by the query the test gives.
    seeded: Vec<(i64, i64)>,
    /// The version of the last migration applied.
    version: i64,
}

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

/// A default as both sides spell it: lower case, without PostgreSQL's cast (`''::text`).
fn default(written: Option<String>) -> Option<String> {
    let written = written?.to_ascii_lowercase();
    let bare = match written.rsplit_once("::") {
        Some((value, cast)) if cast.chars().all(|c| c.is_ascii_lowercase() || c == ' ') => value,
        _ => &written,
    };
    Some(bare.to_owned())
}

/// ON DELETE / ON UPDATE as SQLite names it, from `pg_constraint`'s one-letter code.
fn action(code: &str) -> String {
    match code {
        "a" => "NO ACTION",
        "r" => "RESTRICT",
        "c" => "CASCADE",
        "n" => "SET NULL",
        "d" => "SET DEFAULT",
        other => panic!("unknown referential action {other}"),
    }
    .to_owned()
}

/// A migrated SQLite database. `virtual_tables` are left out with their shadow tables
/// (`NAME_*`), and are all the virtual tables there are; `seed` selects the seeded rows.
async fn sqlite_schema(
    conn: &mut SqliteConnection,
    virtual_tables: &[&str],
    seed: &'static str,
) -> Schema {
    let found: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%'")
            .fetch_all(&mut *conn)
            .await
            .unwrap();
    assert_eq!(found, virtual_tables, "the virtual tables");
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table'
           AND name NOT LIKE 'sqlite_%' AND name <> '_sqlx_migrations' ORDER BY name",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let tables = tables.into_iter().filter(|t| {
        !virtual_tables
            .iter()
            .any(|v| t == v || t.starts_with(&format!("{v}_")))
    });
    let mut schema = Schema::default();
    // Foreign keys whose referenced columns may be implicit, by table.
    let mut unresolved = Vec::new();
    for table in tables {
        schema.foreign_keys.insert(table.clone(), BTreeSet::new());
        let pragma = |p: &str| sqlx::AssertSqlSafe(format!("PRAGMA {p}({table})"));
        let rows = sqlx::query(pragma("table_info"))
            .fetch_all(&mut *conn)
            .await
            .unwrap();
        let mut columns = Vec::new();
        let mut key = Vec::new();
        for r in &rows {
            let name: String = r.get("name");
            let declared: String = r.get("type");
            let not_null: i64 = r.get("notnull");
            // PostgreSQL refuses NULL in a primary key; so does our SQLite use of it.
            let pk: i64 = r.get("pk");
            if pk > 0 {
                key.push((pk, name.clone()));
            }
            let written = default(r.get("dflt_value"));
            columns.push((name, kind(&declared), not_null == 1 || pk > 0, written));
        }
        columns.sort();
        key.sort();
        // A single-column key declared exactly INTEGER is the rowid (BIGINT is not).
        if let [(_, column)] = key.as_slice() {
            let declared = rows.iter().find_map(|r| {
                (r.get::<String, _>("name") == *column).then(|| r.get::<String, _>("type"))
            });
            if declared.is_some_and(|d| d.eq_ignore_ascii_case("integer")) {
                schema.generated.insert((table.clone(), column.clone()));
            }
        }
        schema.columns.insert(table.clone(), columns);
        schema
            .primary_keys
            .insert(table.clone(), key.into_iter().map(|(_, c)| c).collect());

        let mut indexes = BTreeSet::new();
        for index in sqlx::query(pragma("index_list"))
            .fetch_all(&mut *conn)
            .await
            .unwrap()
        {
            let origin: String = index.get("origin");
            let partial: i64 = index.get("partial");
            assert_eq!(
                partial, 0,
                "{table}: a partial index; compare its condition too"
            );
            if origin == "pk" {
                continue;
            }
            let name: String = index.get("name");
            let unique: i64 = index.get("unique");
            let mut columns: Vec<(i64, String)> = sqlx::query(sqlx::AssertSqlSafe(format!(
                "PRAGMA index_info(\"{name}\")"
            )))
            .fetch_all(&mut *conn)
            .await
            .unwrap()
            .iter()
            .map(|c| {
                let column: Option<String> = c.get("name");
                (c.get("seqno"), column.expect("an index on an expression"))
            })
            .collect();
            columns.sort();
            indexes.insert((unique == 1, columns.into_iter().map(|(_, c)| c).collect()));
        }
        schema.indexes.insert(table.clone(), indexes);

        // One row per column of each key: `id` numbers the keys, `seq` their columns.
        let rows = sqlx::query(pragma("foreign_key_list"))
            .fetch_all(&mut *conn)
            .await
            .unwrap();
        let ids: BTreeSet<i64> = rows.iter().map(|r| r.get("id")).collect();
        for id in ids {
            let mut key: Vec<_> = rows
                .iter()
                .filter(|r| r.get::<i64, _>("id") == id)
                .collect();
            key.sort_by_key(|r| r.get::<i64, _>("seq"));
            let from = key.iter().map(|r| r.get("from")).collect();
            let to: Option<Vec<String>> = key.iter().map(|r| r.get("to")).collect();
            let (on_delete, on_update) = (key[0].get("on_delete"), key[0].get("on_update"));
            unresolved.push((
                table.clone(),
                (from, key[0].get("table"), to, on_delete, on_update),
            ));
        }

        let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM \"{table}\""
        )))
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        schema.rows.insert(table, count);
    }
    for (table, (from, referenced, to, on_delete, on_update)) in unresolved {
        // `REFERENCES t` without columns names t's primary key.
        let to = to.unwrap_or_else(|| schema.primary_keys[&referenced].clone());
        let keys = schema.foreign_keys.get_mut(&table).unwrap();
        keys.insert((from, referenced, to, on_delete, on_update));
    }
    schema.seeded = sqlx::query_as(seed).fetch_all(&mut *conn).await.unwrap();
    schema.version = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    schema
}

/// A migrated PostgreSQL database. `only_here` are (table, column) pairs left out, with
/// every index on them; `seed` selects the seeded rows.
async fn postgres_schema(pool: &PgPool, only_here: &[(&str, &str)], seed: &'static str) -> Schema {
    let left_out = |t: &str, c: &str| only_here.contains(&(t, c));
    let mut schema = Schema::default();
    let rows = sqlx::query(
        "SELECT table_name::text AS t, column_name::text AS c, data_type::text AS d,
                is_nullable::text AS n, column_default::text AS dflt,
                identity_generation::text AS identity
           FROM information_schema.columns
          WHERE table_schema = 'public' AND table_name <> '_sqlx_migrations'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for r in rows {
        let (table, column): (String, String) = (r.get("t"), r.get("c"));
        if left_out(&table, &column) {
            continue;
        }
        let nullable: String = r.get("n");
        let declared: String = r.get("d");
        let identity: Option<String> = r.get("identity");
        if let Some(identity) = identity {
            assert_eq!(identity, "BY DEFAULT", "{table}.{column}: a copy gives ids");
            schema.generated.insert((table.clone(), column.clone()));
        }
        schema.columns.entry(table).or_default().push((
            column,
            kind(&declared),
            nullable == "NO",
            default(r.get("dflt")),
        ));
    }
    for columns in schema.columns.values_mut() {
        columns.sort();
    }
    for table in schema.columns.keys() {
        schema.primary_keys.insert(table.clone(), Vec::new());
        schema.indexes.insert(table.clone(), BTreeSet::new());
        schema.foreign_keys.insert(table.clone(), BTreeSet::new());
    }

    let indexes = sqlx::query(
        "SELECT t.relname::text AS t, am.amname::text AS method, x.indisunique AS u,
                x.indisprimary AS p, x.indpred IS NOT NULL AS partial,
                ARRAY(SELECT a.attname::text
                        FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, o)
                        LEFT JOIN pg_attribute a
                               ON a.attrelid = x.indrelid AND a.attnum = k.attnum
                       ORDER BY k.o) AS columns
           FROM pg_index x
           JOIN pg_class i ON i.oid = x.indexrelid
           JOIN pg_am am ON am.oid = i.relam
           JOIN pg_class t ON t.oid = x.indrelid
           JOIN pg_namespace ns ON ns.oid = t.relnamespace
          WHERE ns.nspname = 'public' AND t.relname <> '_sqlx_migrations'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for r in indexes {
        let table: String = r.get("t");
        let columns: Vec<Option<String>> = r.get("columns");
        let columns: Vec<String> = columns
            .into_iter()
            .map(|c| c.expect("an index on an expression"))
            .collect();
        if columns.iter().any(|c| left_out(&table, c)) {
            continue;
        }
        let partial: bool = r.get("partial");
        assert!(
            !partial,
            "{table} {columns:?}: a partial index; compare its condition too"
        );
        let method: String = r.get("method");
        assert_eq!(
            method, "btree",
            "{table} {columns:?}: SQLite has only b-trees"
        );
        if r.get("p") {
            schema.primary_keys.insert(table, columns);
        } else {
            schema
                .indexes
                .entry(table)
                .or_default()
                .insert((r.get("u"), columns));
        }
    }

    let keys = sqlx::query(
        "SELECT c.conrelid::regclass::text AS t, c.confrelid::regclass::text AS r,
                c.confdeltype::text AS d, c.confupdtype::text AS u,
                ARRAY(SELECT a.attname::text
                        FROM unnest(c.conkey) WITH ORDINALITY AS k(attnum, o)
                        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
                       ORDER BY k.o) AS from_columns,
                ARRAY(SELECT a.attname::text
                        FROM unnest(c.confkey) WITH ORDINALITY AS k(attnum, o)
                        JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.attnum
                       ORDER BY k.o) AS to_columns
           FROM pg_constraint c
           JOIN pg_namespace ns ON ns.oid = c.connamespace
          WHERE c.contype = 'f' AND ns.nspname = 'public'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for r in keys {
        let (on_delete, on_update): (String, String) = (r.get("d"), r.get("u"));
        schema.foreign_keys.entry(r.get("t")).or_default().insert((
            r.get("from_columns"),
            r.get("r"),
            r.get("to_columns"),
            action(&on_delete),
            action(&on_update),
        ));
    }

    for table in schema.columns.keys() {
        let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM \"{table}\""
        )))
        .fetch_one(pool)
        .await
        .unwrap();
        schema.rows.insert(table.clone(), count);
    }
    schema.seeded = sqlx::query_as(seed).fetch_all(pool).await.unwrap();
    schema.version = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
        .fetch_one(pool)
        .await
        .unwrap();
    schema
}

/// The two schemas are equal, part by part so that a failure names what differs.
fn assert_same(sqlite: &Schema, postgres: &Schema) {
    assert_eq!(
        sqlite.columns.keys().collect::<Vec<_>>(),
        postgres.columns.keys().collect::<Vec<_>>(),
        "tables"
    );
    for (table, columns) in &sqlite.columns {
        assert_eq!(columns, &postgres.columns[table], "columns of {table}");
    }
    assert_eq!(sqlite.primary_keys, postgres.primary_keys, "primary keys");
    assert_eq!(sqlite.generated, postgres.generated, "generated keys");
    assert_eq!(sqlite.indexes, postgres.indexes, "indexes");
    assert_eq!(sqlite.foreign_keys, postgres.foreign_keys, "foreign keys");
    assert_eq!(sqlite.rows, postgres.rows, "rows per table");
    assert_eq!(sqlite.seeded, postgres.seeded, "seeded rows");
    assert_eq!(sqlite.version, postgres.version, "last migration");
    assert_eq!(sqlite, postgres);
}

fn last(migrator: &Migrator) -> Option<i64> {
    migrator.iter().map(|m| m.version).max()
}

/// Only `table` holds rows once migrated (the seeded ones).
fn only_seeded(schema: &Schema, table: &str) {
    for (t, rows) in &schema.rows {
        if t != table {
            assert_eq!(*rows, 0, "{t} has rows once migrated: compare them too");
        }
    }
}

async fn sqlite(path: &std::path::Path) -> SqliteConnection {
    SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap()
}

/// A new database on `pg` migrated by `migrator`.
async fn postgres(pg: &common::pg::Postgres, migrator: &Migrator) -> PgPool {
    let pool = PgPool::connect(&pg.fresh().await).await.unwrap();
    migrator.run(&pool).await.unwrap();
    // Text compares and sorts byte by byte, as on SQLite, whatever the server's locale.
    let other: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text FROM information_schema.columns
          WHERE table_schema = 'public' AND data_type = 'text'
            AND table_name <> '_sqlx_migrations' AND collation_name IS DISTINCT FROM 'C'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        other,
        Vec::<(String, String)>::new(),
        "text columns without the C collation"
    );
    pool
}

#[tokio::test]
async fn the_workers_schema_is_the_same_on_sqlite_and_postgresql() {
    use marketplace::sync::store::{MIGRATIONS, POSTGRES_MIGRATIONS};
    const SEED: &str = "SELECT id, value FROM generation ORDER BY id";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sync.db");
    drop(marketplace::sync::SyncStore::open(&path).await.unwrap());
    let mut sqlite = sqlite_schema(&mut sqlite(&path).await, &[], SEED).await;
    // Always 1 (a CHECK): a rowid alias on SQLite, a plain key on PostgreSQL.
    assert!(sqlite.generated.remove(&("generation".into(), "id".into())));
    // The server the tests of this binary share; held until the test ends.
    let pg = common::pg::shared();
    let pool = postgres(&pg, &POSTGRES_MIGRATIONS).await;
    let postgres = postgres_schema(&pool, &[], SEED).await;
    pool.close().await;

    assert_eq!(sqlite.columns.len(), 6, "{:?}", sqlite.columns.keys());
    assert_eq!(sqlite.seeded, [(1, 0)]);
    only_seeded(&sqlite, "generation");
    assert_same(&sqlite, &postgres);
    assert_eq!(last(&MIGRATIONS), Some(sqlite.version));
    assert_eq!(last(&MIGRATIONS), last(&POSTGRES_MIGRATIONS));
}

#[tokio::test]
async fn the_servers_schema_is_the_same_on_sqlite_and_postgresql() {
    use marketplace::store::{MIGRATIONS, POSTGRES_MIGRATIONS, Store};
    // The change feed's rows, as numbers: 1 catalog, 2 metadata.
    const SEED: &str =
        "SELECT CAST(CASE domain WHEN 'catalog' THEN 1 WHEN 'metadata' THEN 2 END AS BIGINT),
        generation FROM change_feed ORDER BY 1";
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("marketplace.db");
    drop(Store::open(&path).await.unwrap());
    let mut conn = sqlite(&path).await;
    // SQLite's full-text index is a tsvector column of plugins on PostgreSQL.
    let sqlite = sqlite_schema(&mut conn, &["plugin_search"], SEED).await;
    // The change feed is written by the transactions themselves, on both (migration
    // 0010 dropped SQLite's triggers).
    let triggers: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    assert_eq!(triggers, Vec::<String>::new());
    // The server the tests of this binary share; held until the test ends.
    let pg = common::pg::shared();
    let pool = postgres(&pg, &POSTGRES_MIGRATIONS).await;
    let postgres = postgres_schema(&pool, &[("plugins", "search_document")], SEED).await;

    assert_eq!(sqlite.columns.len(), 19, "{:?}", sqlite.columns.keys());
    assert_eq!(sqlite.generated.len(), 8, "{:?}", sqlite.generated);
    assert_eq!(sqlite.seeded, [(1, 0), (2, 0)]);
    only_seeded(&sqlite, "change_feed");
    assert_eq!(sqlite.version, 16);
    assert_same(&sqlite, &postgres);
    assert_eq!(last(&MIGRATIONS), Some(16));
    assert_eq!(last(&POSTGRES_MIGRATIONS), Some(16));
    // `migrate!("./migrations")` takes none of the files in the folders beside them.
    assert_eq!(MIGRATIONS.iter().count(), 16);
    assert_eq!(POSTGRES_MIGRATIONS.iter().count(), 8);

    // What PostgreSQL has instead of the FTS5 table: a document column under GIN.
    let (kind, nullable): (String, String) = sqlx::query_as(
        "SELECT data_type::text, is_nullable::text FROM information_schema.columns
          WHERE table_schema = 'public' AND table_name = 'plugins'
            AND column_name = 'search_document'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((kind.as_str(), nullable.as_str()), ("tsvector", "YES"));
    let definitions: Vec<String> = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'plugins'
            AND indexdef LIKE '%search_document%'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(definitions.len(), 1, "{definitions:?}");
    assert!(
        definitions[0].ends_with("USING gin (search_document)"),
        "{definitions:?}"
    );
    // And no triggers: writers bump the change feed themselves.
    let triggers: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
           JOIN pg_namespace ns ON ns.oid = c.relnamespace
          WHERE ns.nspname = 'public' AND NOT t.tgisinternal",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(triggers, 0);
    pool.close().await;
    eprintln!("the server's schemas compared in {:?}", started.elapsed());
}
