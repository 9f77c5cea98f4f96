//! Store tests: immutability, idempotent built-ins, latest-version bookkeeping, and
//! summaries stored under an older approval rule (catalog and sync databases).

mod common;

use common::{FUNDAMENT_STYLE, NOW, with_version};
use marketplace::catalog::builtin;
use marketplace::definition::Definition;
use marketplace::store::{Inserted, PluginQuery, Store, StoreError};
use marketplace::sync::sideload::OnConflict;

#[tokio::test]
async fn builtins_load_once_and_again_changes_nothing() {
    let store = Store::open_in_memory().await.unwrap();
    let n = builtin::definitions().unwrap().len();
    assert!(n >= 6, "the catalog holds at least six definitions");
    let first = builtin::load(&store, NOW).await.unwrap();
    assert_eq!((first.added, first.unchanged), (n, 0));
    let second = builtin::load(&store, NOW + 60).await.unwrap();
    assert_eq!(
        (second.added, second.unchanged, second.conflicting),
        (0, n, 0)
    );
    let page = store.list_plugins(&PluginQuery::default()).await.unwrap();
    assert_eq!(page.total, n as i64);
    // The second load did not touch timestamps either.
    assert!(page.items.iter().all(|p| p.updated_at == NOW));
}

#[tokio::test]
async fn a_published_version_is_immutable() {
    let store = Store::open_in_memory().await.unwrap();
    let original = with_version("gateway", "1.0.0");
    assert_eq!(
        store.insert_version("acme", &original, NOW).await.unwrap(),
        Inserted::New
    );
    assert_eq!(
        store.insert_version("acme", &original, NOW).await.unwrap(),
        Inserted::Unchanged
    );

    // Same version written differently ("v1.0.0") with otherwise other bytes: refused.
    let changed = with_version("gateway", "v1.0.0");
    assert_ne!(changed.hash, original.hash);
    match store.insert_version("acme", &changed, NOW).await {
        Err(StoreError::VersionExists { existing, .. }) => assert_eq!(existing, original.hash),
        other => panic!("expected VersionExists, got {other:?}"),
    }
    let plugin = store.plugin("acme", "gateway").await.unwrap().unwrap();
    let (_, stored) = store.definition(plugin.id, "1.0.0").await.unwrap().unwrap();
    assert_eq!(stored.bytes, original.bytes, "the first bytes are kept");
}

#[tokio::test]
async fn latest_follows_semver_not_insertion_order() {
    let store = Store::open_in_memory().await.unwrap();
    for v in ["1.2.0", "1.10.0", "2.0.0-rc.1", "1.9.3"] {
        store
            .insert_version("acme", &with_version("gateway", v), NOW)
            .await
            .unwrap();
    }
    let plugin = store.plugin("acme", "gateway").await.unwrap().unwrap();
    assert_eq!(
        plugin.latest_version.as_deref(),
        Some("1.10.0"),
        "stable preferred over a newer pre-release"
    );
    let order: Vec<String> = store
        .versions(plugin.id)
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.version)
        .collect();
    assert_eq!(order, ["2.0.0-rc.1", "1.10.0", "1.9.3", "1.2.0"]);
}

#[tokio::test]
async fn same_name_under_two_publishers_are_two_plugins() {
    let store = Store::open_in_memory().await.unwrap();
    let def = with_version("gateway", "1.0.0");
    store.insert_version("acme", &def, NOW).await.unwrap();
    store.insert_version("globex", &def, NOW).await.unwrap();
    let page = store.list_plugins(&PluginQuery::default()).await.unwrap();
    let who: Vec<(&str, &str)> = page
        .items
        .iter()
        .map(|p| (p.publisher.as_str(), p.name.as_str()))
        .collect();
    assert_eq!(who, [("acme", "gateway"), ("globex", "gateway")]);
}

#[tokio::test]
async fn data_survives_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let def: Definition = with_version("storage", "3.1.4");
    {
        let store = Store::open(&db).await.unwrap();
        store.insert_version("acme", &def, NOW).await.unwrap();
        store.close().await;
    }
    let store = Store::open(&db).await.unwrap();
    let plugin = store
        .plugin("acme", "storage")
        .await
        .unwrap()
        .expect("still there");
    let (record, stored) = store
        .definition(plugin.id, "v3.1.4")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.hash, def.hash);
    assert_eq!(stored.bytes, def.bytes);
}

#[tokio::test]
async fn facets_follow_writes_at_once() {
    let store = Store::open_in_memory().await.unwrap();
    builtin::load(&store, NOW).await.unwrap();
    let before = store.facets().await.unwrap();
    assert!(!before.publishers.contains(&"acme".to_owned()));
    store
        .insert_version("acme", &with_version("gateway", "9.0.0"), NOW)
        .await
        .unwrap();
    let after = store.facets().await.unwrap();
    assert!(
        after.publishers.contains(&"acme".to_owned()),
        "cache cleared by the write"
    );
    let count = |f: &marketplace::store::Facets, tag: &str| {
        f.tags.iter().find(|(t, _)| t == tag).map(|(_, n)| *n)
    };
    assert_eq!(
        count(&after, "ingress"),
        count(&before, "ingress").map(|n| n + 1)
    );
}

/// Runs SQL on a database file behind the store's back, as an older binary plus a
/// migration would have left it.
async fn raw_sql(path: &std::path::Path, statements: &[&'static str]) {
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
    let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
    for sql in statements.iter().copied() {
        sqlx::query(sql).execute(&pool).await.unwrap();
    }
    pool.close().await;
}

#[tokio::test]
async fn opening_recomputes_requirement_flags_stored_under_the_old_rule() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("catalog.db");
    let store = Store::open(&path).await.unwrap();
    let def = Definition::parse(FUNDAMENT_STYLE.as_bytes()).unwrap();
    store.insert_version("example", &def, NOW).await.unwrap();
    store.close().await;
    // Before issue 10 only `spec.requirements` counted; migration 0003 marks such rows.
    raw_sql(
        &path,
        &["UPDATE plugins SET internet_access = FALSE, approval_stale = TRUE"],
    )
    .await;

    let store = Store::open(&path).await.unwrap();
    let no_internet = PluginQuery {
        no_internet: true,
        ..Default::default()
    };
    assert_eq!(store.list_plugins(&no_internet).await.unwrap().total, 0);
    let all = store.list_plugins(&PluginQuery::default()).await.unwrap();
    assert!(all.items[0].internet_access);
    assert_eq!(
        all.items[0].updated_at, NOW,
        "the plugin itself did not change"
    );
}

#[tokio::test]
async fn opening_the_sync_database_recomputes_stale_summaries() {
    use marketplace::sync::SyncStore;
    use marketplace::sync::store::{LastGood as _, Sideloads as _};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sync.db");
    let store = SyncStore::open(&path).await.unwrap();
    let def = Definition::parse(FUNDAMENT_STYLE.as_bytes()).unwrap();
    store
        .add_sideload("acme", &def, "t1", NOW, OnConflict::Refuse)
        .await
        .unwrap();
    store.close().await;
    // A source row and a sideload as migration sync/0003 leaves them: summaries marked
    // stale (NULL for sources, the empty text for sideloads).
    raw_sql(
        &path,
        &[
            "INSERT INTO sources (name, url) VALUES ('public', 'http://127.0.0.1:9/')",
            "INSERT INTO source_definitions (source, target, publisher, name, version, hash,
               yanked, signer_key_ids, definition, summary)
             SELECT 'public', 'example/webhook-relay/0.4.1.yaml', 'example', name, version,
               hash, FALSE, '', definition, NULL FROM sideloads",
            "UPDATE sideloads SET summary = ''",
        ],
    )
    .await;

    let store = SyncStore::open(&path).await.unwrap();
    let rows = store.rows().await.unwrap();
    assert_eq!(rows.len(), 1);
    let summary: serde_json::Value =
        serde_json::from_str(rows[0].summary.as_deref().expect("summary written again")).unwrap();
    assert_eq!(summary["requirements"]["internetAccess"], true);
    let sideloads = store.sideload_rows("acme").await.unwrap();
    let summary: serde_json::Value = serde_json::from_str(&sideloads[0].3).unwrap();
    assert_eq!(summary["requirements"]["internetAccess"], true);
}

/// Marks `db` as migrated by a future version: one more applied migration than this
/// binary knows, as a newer binary leaves it.
async fn migrate_to_the_future(db: &std::path::Path) {
    use sqlx::ConnectOptions;
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(db)
        .connect()
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (99999, 'from a newer version', TRUE, x'00', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
}

/// A database a newer binary migrated is refused, with a message that says so, by both
/// stores and by `serve`; it is left as it was.
#[tokio::test]
async fn a_database_migrated_by_a_newer_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("marketplace.db");
    Store::open(&db).await.unwrap().close().await;
    migrate_to_the_future(&db).await;
    let Err(err) = Store::open(&db).await else {
        panic!("a database from a newer version was opened");
    };
    let err = err.to_string();
    assert!(
        err.contains("migrated by a newer version of marketplace (schema version 99999"),
        "{err}"
    );

    let sync_db = dir.path().join("sync.db");
    drop(marketplace::sync::SyncStore::open(&sync_db).await.unwrap());
    migrate_to_the_future(&sync_db).await;
    let Err(err) = marketplace::sync::SyncStore::open(&sync_db).await else {
        panic!("a sync database from a newer version was opened");
    };
    let err = err.to_string();
    assert!(err.contains("migrated by a newer version"), "{err}");

    // `serve` on a data directory holding that database stops with the same words.
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::copy(&db, data.join("marketplace.db")).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--mirror",
            "off",
            "--data-dir",
        ])
        .arg(&data)
        .output()
        .unwrap();
    let text = common::output_text(&o);
    assert!(!o.status.success(), "{text}");
    assert!(text.contains("migrated by a newer version"), "{text}");
}

/// The errors of every task, as text.
async fn failures<T: 'static, E: std::fmt::Display + 'static>(
    mut tasks: tokio::task::JoinSet<Result<T, E>>,
) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done.unwrap() {
            out.push(e.to_string());
        }
    }
    out
}

/// Writers in two processes' worth of pools on one database file never see "database is
/// locked": a transaction that reads before it writes takes the write lock first, so it
/// waits its turn instead of failing when another writer committed after its read.
#[tokio::test]
async fn concurrent_writers_on_one_file_wait_their_turn() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("marketplace.db");
    let a = Store::open(&db).await.unwrap();
    let b = Store::open(&db).await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..40 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        // Registering a publisher reads whether the name is taken, then writes; so does
        // inserting a version (the plugin, then its summary).
        let def = with_version("cert-manager", &format!("1.{i}.0"));
        tasks.spawn(async move {
            store
                .add_publisher(
                    &format!("pub{i}"),
                    &[format!("key{i}")],
                    1,
                    &format!("{i:064}"),
                    NOW,
                )
                .await?;
            store
                .insert_version("acme", &def, NOW + i)
                .await
                .map(|_| ())
        });
    }
    let failed = failures(tasks).await;
    assert!(failed.is_empty(), "{} failed: {failed:?}", failed.len());
    let plugin = a.plugin("acme", "cert-manager").await.unwrap().unwrap();
    assert_eq!(a.versions(plugin.id).await.unwrap().len(), 40);

    // The worker's store: sideloads read what the organization holds, then write.
    let sync_db = dir.path().join("sync.db");
    let a = marketplace::sync::SyncStore::open(&sync_db).await.unwrap();
    let b = marketplace::sync::SyncStore::open(&sync_db).await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..40 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        let def = with_version("cert-manager", &format!("2.{i}.0"));
        tasks.spawn(async move {
            store
                .add_sideload("acme", &def, "t1", NOW + i, OnConflict::Refuse)
                .await
        });
    }
    let failed = failures(tasks).await;
    assert!(failed.is_empty(), "{} failed: {failed:?}", failed.len());
}

/// The change feed: each write bumps the generation of what it changes (catalog: what
/// listings read; metadata: signed metadata), in its own transaction, and leaves the
/// other alone; a write that fails bumps nothing.
#[tokio::test]
async fn every_write_bumps_what_it_changes_in_the_change_feed() {
    use marketplace::store::{Domain, StoredMetadata};
    let store = Store::open_in_memory().await.unwrap();
    let feed = || async {
        (
            store.generation(Domain::Catalog).await.unwrap(),
            store.generation(Domain::Metadata).await.unwrap(),
        )
    };
    let meta = |role: &str, version: u64| StoredMetadata {
        role: role.into(),
        version,
        bytes: format!("{role} {version}").into_bytes(),
        sha256: format!("{version:064}"),
        expires_at: NOW + 60,
        created_at: NOW,
    };
    let mut last = feed().await;
    let mut expect = async |what: &str, catalog: bool, metadata: bool| {
        let now = feed().await;
        assert_eq!(
            (now.0 > last.0, now.1 > last.1),
            (catalog, metadata),
            "{what}: {last:?} -> {now:?}"
        );
        last = now;
    };
    let keys = vec!["ab".repeat(32)];
    store
        .add_publisher("acme", &keys, 1, "t1", NOW)
        .await
        .unwrap();
    expect("add_publisher", true, false).await;
    store.add_token("acme", "t2", NOW).await.unwrap();
    expect("add_token", false, false).await;
    store
        .replace_publisher_keys("acme", &keys, 1)
        .await
        .unwrap();
    expect("replace_publisher_keys", false, false).await;
    let v1 = with_version("gateway", "1.0.0");
    store.insert_version("acme", &v1, NOW).await.unwrap();
    expect("insert_version", true, false).await;
    store.insert_version("acme", &v1, NOW).await.unwrap();
    expect("insert_version, the same bytes again", false, false).await;
    store.put_metadata(&[meta("timestamp", 1)]).await.unwrap();
    expect("put_metadata", false, true).await;
    assert!(
        store
            .put_metadata(&[meta("snapshot", 1), meta("timestamp", 1)])
            .await
            .is_err()
    );
    expect("put_metadata refused", false, false).await;
    let v2 = with_version("gateway", "2.0.0");
    store
        .publish(
            "acme",
            std::slice::from_ref(&v2),
            &["k1".into()],
            &[meta("timestamp", 2)],
            NOW,
        )
        .await
        .unwrap();
    expect("publish", true, true).await;
    store
        .yank(
            "acme",
            std::slice::from_ref(&v2.hash),
            &[meta("timestamp", 3)],
            NOW,
        )
        .await
        .unwrap();
    expect("yank", true, true).await;
    store
        .suspend_publisher("acme", "{}", &[meta("timestamp", 4)], NOW)
        .await
        .unwrap();
    expect("suspend_publisher", true, true).await;
    store
        .resume_publisher("acme", &[meta("timestamp", 5)])
        .await
        .unwrap();
    expect("resume_publisher", true, true).await;
    store.enqueue_unlinked_images(NOW).await.unwrap();
    store.retry_mirrors(None, NOW).await.unwrap();
    expect("mirror bookkeeping", false, false).await;
}
