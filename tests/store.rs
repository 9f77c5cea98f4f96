//! Store tests: immutability, idempotent built-ins, latest-version bookkeeping, the
//! change feed, concurrent writers, and summaries stored under an older approval rule
//! (catalog and sync databases).
//!
//! The server store's conformance suite: the bodies listed in `conformance!` run once on
//! SQLite (a file in a temporary directory) and once on PostgreSQL (a throwaway server,
//! `common::pg`, a fresh database each). The others are about SQLite files themselves.

mod common;

use common::{FUNDAMENT_STYLE, NOW, with_version};
use marketplace::catalog::builtin;
use marketplace::definition::Definition;
use marketplace::store::{Inserted, PluginQuery, Store, StoreError};
use marketplace::sync::sideload::OnConflict;

/// The suite's store on one backend.
type Backend = common::backends::Backend<Store>;

use common::backends::conformance;

conformance!(
    builtins_load_once_and_again_changes_nothing,
    a_published_version_is_immutable,
    latest_follows_semver_not_insertion_order,
    same_name_under_two_publishers_are_two_plugins,
    data_survives_reopening,
    facets_follow_writes_at_once,
    concurrent_writers_wait_their_turn,
    every_write_bumps_what_it_changes_in_the_change_feed,
    metadata_versions_are_kept_and_never_replaced,
    tokens_map_to_their_publisher_until_revoked,
    mirror_jobs_and_what_they_serve,
    a_lease_has_one_holder_until_it_runs_out_or_is_given_back,
    feeds_list_versions_newest_first_with_yanks_and_ids_find_plugins,
);

/// The feeds' versions: newest first per scope, a yank kept with its time (the first
/// yank's), suspended publishers left out; and listed plugins found by stable id.
async fn feeds_list_versions_newest_first_with_yanks_and_ids_find_plugins(b: Backend) {
    use marketplace::store::FeedScope;
    let store = &b.store;
    builtin::load(store, NOW).await.unwrap();
    for (i, (publisher, name, version)) in [
        ("acme", "gateway", "1.0.0"),
        ("acme", "gateway", "1.1.0"),
        ("acme", "storage", "2.0.0"),
        ("beta", "gateway", "0.1.0"),
    ]
    .into_iter()
    .enumerate()
    {
        store
            .insert_version(publisher, &with_version(name, version), NOW + 10 + i as i64)
            .await
            .unwrap();
    }
    let hash = with_version("gateway", "1.1.0").hash;
    store
        .yank("acme", std::slice::from_ref(&hash), &[], NOW + 20)
        .await
        .unwrap();
    // Yanking again keeps the first yank's time.
    store
        .yank("acme", std::slice::from_ref(&hash), &[], NOW + 30)
        .await
        .unwrap();
    let shown = |vs: Vec<marketplace::store::FeedVersion>| -> Vec<String> {
        vs.into_iter()
            .map(|v| {
                format!(
                    "{}/{}@{} {}{}",
                    v.publisher,
                    v.name,
                    v.version,
                    v.published_at - NOW,
                    v.yanked_at
                        .map(|t| format!(" yanked {}", t - NOW))
                        .unwrap_or_default()
                )
            })
            .collect()
    };
    let all = shown(store.feed(&FeedScope::Catalog, 4).await.unwrap());
    assert_eq!(
        all,
        [
            "beta/gateway@0.1.0 13",
            "acme/storage@2.0.0 12",
            "acme/gateway@1.1.0 11 yanked 20",
            "acme/gateway@1.0.0 10"
        ]
    );
    let builtins = builtin::definitions().unwrap().len();
    assert_eq!(
        store.feed(&FeedScope::Catalog, 1000).await.unwrap().len(),
        4 + builtins
    );
    assert_eq!(
        shown(
            store
                .feed(&FeedScope::Publisher("acme".into()), 50)
                .await
                .unwrap()
        ),
        all[1..]
    );
    let gateway = FeedScope::Plugin {
        publisher: "acme".into(),
        name: "gateway".into(),
    };
    assert_eq!(shown(store.feed(&gateway, 50).await.unwrap()), all[2..]);
    assert!(
        store
            .feed(&FeedScope::Publisher("nobody".into()), 50)
            .await
            .unwrap()
            .is_empty()
    );

    let id = marketplace::ids::plugin("acme", "storage");
    let named = Some(("acme".to_owned(), "storage".to_owned()));
    assert_eq!(store.listed_by_id(&id).await.unwrap(), named);
    store
        .suspend_publisher("acme", "{}", &[], NOW + 40)
        .await
        .unwrap();
    assert_eq!(
        shown(store.feed(&FeedScope::Catalog, 4).await.unwrap())[0],
        "beta/gateway@0.1.0 13"
    );
    assert!(
        store
            .feed(&FeedScope::Publisher("acme".into()), 50)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.listed_by_id(&id).await.unwrap(), None);
    store.resume_publisher("acme", &[]).await.unwrap();
    assert_eq!(store.listed_by_id(&id).await.unwrap(), named);
    assert_eq!(
        store
            .listed_by_id(&marketplace::ids::plugin("acme", "nothing"))
            .await
            .unwrap(),
        None
    );
}

/// Leases (who re-signs the index among replicas): one holder at a time; its holder
/// renews it; another takes it only once it ran out or was given back.
async fn a_lease_has_one_holder_until_it_runs_out_or_is_given_back(b: Backend) {
    let store = &b.store;
    assert!(store.take_lease("re-signing", "a", 60).await.unwrap());
    assert!(
        !store.take_lease("re-signing", "b", 60).await.unwrap(),
        "held by a"
    );
    assert!(
        store.take_lease("re-signing", "a", 60).await.unwrap(),
        "a renews"
    );
    assert!(
        store.take_lease("other", "b", 60).await.unwrap(),
        "leases are per name"
    );
    // Giving back is the holder's alone.
    store.release_lease("re-signing", "b").await.unwrap();
    assert!(!store.take_lease("re-signing", "b", 60).await.unwrap());
    store.release_lease("re-signing", "a").await.unwrap();
    assert!(store.take_lease("re-signing", "b", 1).await.unwrap());
    // Ran out (by the database's clock): a takes it over.
    assert!(!store.take_lease("re-signing", "a", 60).await.unwrap());
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    assert!(store.take_lease("re-signing", "a", 60).await.unwrap());
    assert!(!store.take_lease("re-signing", "b", 60).await.unwrap());
    // Many takers at once: exactly one wins.
    store.release_lease("re-signing", "a").await.unwrap();
    let takers = (0..8).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .take_lease("re-signing", &format!("t{i}"), 60)
                .await
                .unwrap()
        })
    });
    let mut won = 0;
    for t in takers {
        won += usize::from(t.await.unwrap());
    }
    assert_eq!(won, 1);
}

async fn builtins_load_once_and_again_changes_nothing(b: Backend) {
    let store = &b.store;
    let n = builtin::definitions().unwrap().len();
    assert!(n >= 6, "the catalog holds at least six definitions");
    let first = builtin::load(store, NOW).await.unwrap();
    assert_eq!((first.added, first.unchanged), (n, 0));
    let second = builtin::load(store, NOW + 60).await.unwrap();
    assert_eq!(
        (second.added, second.unchanged, second.conflicting),
        (0, n, 0)
    );
    let page = store.list_plugins(&PluginQuery::default()).await.unwrap();
    assert_eq!(page.total, n as i64);
    // The second load did not touch timestamps either.
    assert!(page.items.iter().all(|p| p.updated_at == NOW));
}

async fn a_published_version_is_immutable(b: Backend) {
    let store = &b.store;
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

async fn latest_follows_semver_not_insertion_order(b: Backend) {
    let store = &b.store;
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

async fn same_name_under_two_publishers_are_two_plugins(b: Backend) {
    let store = &b.store;
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

async fn data_survives_reopening(b: Backend) {
    let def: Definition = with_version("storage", "3.1.4");
    b.store.insert_version("acme", &def, NOW).await.unwrap();
    b.store.close().await;
    let store = b.another().await;
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

async fn facets_follow_writes_at_once(b: Backend) {
    let store = &b.store;
    builtin::load(store, NOW).await.unwrap();
    let q = PluginQuery::default();
    let before = store.facets().await.unwrap();
    assert!(!before.publishers.contains(&"acme".to_owned()));
    // The web page's combined read, twice: the second is answered from the cache.
    let (page, facets) = store.list_plugins_with_facets(&q).await.unwrap();
    let (again, facets_again) = store.list_plugins_with_facets(&q).await.unwrap();
    assert_eq!((again.total, &*facets_again), (page.total, &*facets));
    assert_eq!(*facets, *before);
    store
        .insert_version("acme", &with_version("gateway", "9.0.0"), NOW)
        .await
        .unwrap();
    let after = store.facets().await.unwrap();
    assert!(
        after.publishers.contains(&"acme".to_owned()),
        "cache cleared by the write"
    );
    let (page_after, facets_after) = store.list_plugins_with_facets(&q).await.unwrap();
    assert_eq!(
        page_after.total,
        page.total + 1,
        "the page follows the write"
    );
    assert_eq!(*facets_after, *after, "the facets follow the write");
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

/// Writers in two processes' worth of pools on one database never see "database is
/// locked" (nor a unique violation): a transaction that reads before it writes takes the write lock first, so it
/// waits its turn instead of failing when another writer committed after its read.
async fn concurrent_writers_wait_their_turn(backend: Backend) {
    let a = backend.store.clone();
    let b = backend.another().await;
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
}

/// The worker's store on one file: sideloads read what the organization holds, then
/// write (its other writers are in `tests/sync_store.rs`).
#[tokio::test]
async fn concurrent_sideloads_on_one_file_wait_their_turn() {
    let dir = tempfile::tempdir().unwrap();
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
async fn every_write_bumps_what_it_changes_in_the_change_feed(b: Backend) {
    use marketplace::store::{Domain, StoredMetadata};
    let store = &b.store;
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

/// Signed metadata: versions are kept, never replaced; a batch is all or nothing.
async fn metadata_versions_are_kept_and_never_replaced(b: Backend) {
    use marketplace::store::StoredMetadata;
    use sha2::Digest;
    let store = &b.store;
    let meta = |role: &str, version: u64| {
        let bytes = format!("{{\"{role}\":{version}}}").into_bytes();
        StoredMetadata {
            role: role.into(),
            version,
            sha256: hex::encode(sha2::Sha256::digest(&bytes)),
            bytes,
            expires_at: 1,
            created_at: 0,
        }
    };
    store
        .put_metadata(&[meta("snapshot", 1), meta("timestamp", 1)])
        .await
        .unwrap();
    store
        .put_metadata(&[meta("snapshot", 2), meta("timestamp", 2)])
        .await
        .unwrap();
    let latest = store.latest_metadata("timestamp").await.unwrap().unwrap();
    assert_eq!(latest.version, 2);
    assert_eq!(latest.bytes, meta("timestamp", 2).bytes);
    assert_eq!(
        store.metadata("snapshot", 1).await.unwrap().unwrap().bytes,
        meta("snapshot", 1).bytes
    );
    assert!(store.metadata("snapshot", 3).await.unwrap().is_none());
    let overview: Vec<(String, u64, usize)> = store
        .metadata_overview()
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.role, m.version, m.bytes.len()))
        .collect();
    assert_eq!(
        overview,
        [
            ("snapshot".to_owned(), 2, 0),
            ("timestamp".to_owned(), 2, 0)
        ],
        "the newest of each role, by role, without bytes"
    );
    // A batch whose second file clashes leaves nothing behind.
    let err = store
        .put_metadata(&[meta("snapshot", 3), meta("timestamp", 2)])
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::MetadataExists { ref role, version: 2 } if role == "timestamp"),
        "{err}"
    );
    assert!(
        store.metadata("snapshot", 3).await.unwrap().is_none(),
        "no partial write"
    );
}

/// Publisher tokens: stored hashed, mapped to their publisher until revoked.
async fn tokens_map_to_their_publisher_until_revoked(b: Backend) {
    let store = &b.store;
    let keys = vec!["ab".repeat(32)];
    store
        .add_publisher("acme", &keys, 1, "t1", 10)
        .await
        .unwrap();
    store.add_token("acme", "t2", 11).await.unwrap();
    assert_eq!(
        store.publisher_for_token("t1").await.unwrap().as_deref(),
        Some("acme")
    );
    let record = store.publisher("acme").await.unwrap().unwrap();
    assert_eq!((record.active_tokens, record.threshold), (2, 1));
    assert_eq!(record.public_keys, keys);
    assert!(matches!(
        store.add_publisher("acme", &keys, 1, "t3", 12).await,
        Err(StoreError::PublisherExists(_))
    ));
    assert_eq!(store.revoke_tokens("acme", 13).await.unwrap(), 2);
    assert_eq!(store.publisher_for_token("t1").await.unwrap(), None);
    assert!(matches!(
        store.add_token("nobody", "t4", 14).await,
        Err(StoreError::NoSuchPublisher(_))
    ));
    assert!(matches!(
        store.revoke_tokens("nobody", 14).await,
        Err(StoreError::NoSuchPublisher(_))
    ));
    let names: Vec<String> = store
        .publisher_list()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["acme"]);
}

/// Search gives the same results on both backends over one corpus: the built-ins, the
/// definitions from Fundament's repository, and variants with titles, descriptions and
/// tags chosen for prefixes, hyphens, case, diacritics and query-language operators.
/// Every query, filter and sort lists the same plugins; by name or by update time in the
/// same order; by relevance with the exact name first on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_finds_the_same_plugins_on_sqlite_and_postgresql() {
    use marketplace::store::Sort;
    let (sqlite, postgres) = (Backend::sqlite().await, Backend::postgres().await);
    let mut corpus: Vec<(String, Definition)> = builtin::definitions()
        .unwrap()
        .into_iter()
        .map(|d| ("fundament".to_owned(), d))
        .collect();
    for path in common::fundament_definitions() {
        let bytes = std::fs::read(&path).unwrap();
        if let Ok(def) = Definition::parse(&bytes) {
            corpus.push(("upstream".to_owned(), def));
        }
    }
    let variant = |from: &str, name: &str, title: &str, description: &str, tags: &str| {
        let yaml = common::builtin_yaml(from);
        let mut out = String::new();
        let mut skipping = false;
        for line in yaml.lines() {
            let t = line.trim_start();
            if skipping && line.starts_with("    ") {
                continue;
            }
            skipping = false;
            if t.starts_with("name:") && line.starts_with("  name:") {
                out.push_str(&format!("  name: {name}\n"));
            } else if t.starts_with("displayName:") {
                out.push_str(&format!("  displayName: \"{title}\"\n"));
            } else if t.starts_with("description:") {
                out.push_str(&format!("  description: \"{description}\"\n"));
                skipping = true;
            } else if t.starts_with("tags:") && line.starts_with("  tags:") {
                out.push_str(&format!("  tags: [{tags}]\n"));
            } else {
                out.push_str(line);
                out.push('\n');
            }
        }
        Definition::parse(out.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    for (name, title, description, tags) in [
        (
            "cert-rotator",
            "Cert Rotator",
            "Rotates certificates before they expire.",
            "tls, security",
        ),
        (
            "certs",
            "Certs",
            "Überwachung of certificate expiry, café-grade.",
            "tls",
        ),
        (
            "metrics-café",
            "Métriques",
            "Collects metrics; résumé of SLOs.",
            "observability",
        ),
        (
            "ingress-lite",
            "Ingress Lite",
            "A small ingress: NEAR OR AND NOT.",
            "networking, ingress",
        ),
        (
            "db-manager",
            "DB Manager",
            "Manages databases and certificates.",
            "databases",
        ),
        (
            "edge-cache",
            "Edge Cache",
            "Caches at the edge. \\\"quoted\\\" * words",
            "networking, cdn",
        ),
    ] {
        if name.is_ascii() {
            corpus.push((
                "acme".to_owned(),
                variant("gateway", name, title, description, tags),
            ));
        }
    }
    for (i, (publisher, def)) in corpus.iter().enumerate() {
        for b in [&sqlite, &postgres] {
            b.store
                .insert_version(publisher, def, NOW + i as i64)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", def.name()));
        }
    }
    assert!(corpus.len() >= 14, "{} definitions", corpus.len());

    let words = [
        "",
        "cert",
        "CERT",
        "cert-manager",
        "certificates",
        "manager cert",
        "tls",
        "uberwachung",
        "über",
        "cafe",
        "café",
        "resume",
        "ingress",
        "ingress lite",
        "NEAR",
        "or",
        "\"quoted\"",
        "quo*",
        "a'|!b",
        "(x:*",
        "gate",
        "gateway api",
        "%",
        "--",
        "kubernetes",
        "dns",
        "z",
        "edge",
        "backup storage",
    ];
    let mut compared = 0;
    let mut matched = 0;
    for text in words {
        for (sort, tag, publisher) in [
            (Sort::Name, None, None),
            (Sort::Updated, None, None),
            (Sort::Relevance, None, None),
            (Sort::Name, Some("tls"), None),
            (Sort::Relevance, Some("networking"), Some("acme")),
        ] {
            let q = PluginQuery {
                terms: text.split_whitespace().map(str::to_lowercase).collect(),
                tag: tag.map(str::to_owned),
                publisher: publisher.map(str::to_owned),
                sort,
                ..PluginQuery::default()
            };
            let names = |b: &Backend| {
                let q = q.clone();
                let store = b.store.clone();
                async move {
                    store
                        .listed_plugins(&q)
                        .await
                        .unwrap()
                        .into_iter()
                        .map(|p| format!("{}/{}", p.publisher, p.name))
                        .collect::<Vec<_>>()
                }
            };
            let (a, b) = (names(&sqlite).await, names(&postgres).await);
            let page = postgres.store.list_plugins(&q).await.unwrap();
            assert_eq!(page.total as usize, b.len(), "{text:?} {sort:?}: count");
            if sort == Sort::Relevance && !q.terms.is_empty() {
                let (mut sa, mut sb) = (a.clone(), b.clone());
                sa.sort();
                sb.sort();
                assert_eq!(sa, sb, "{text:?} {sort:?} {tag:?}: the same plugins");
                let exact = q.terms.join("-");
                if a.iter().any(|n| n.ends_with(&format!("/{exact}"))) {
                    assert!(a[0].ends_with(&format!("/{exact}")), "{text:?}: {a:?}");
                    assert!(b[0].ends_with(&format!("/{exact}")), "{text:?}: {b:?}");
                }
            } else {
                assert_eq!(a, b, "{text:?} {sort:?} {tag:?}: the same plugins in order");
            }
            compared += 1;
            matched += usize::from(!a.is_empty());
        }
    }
    assert!(
        matched > compared / 3,
        "too few queries match anything: {matched}/{compared}"
    );
}

/// The mirror's bookkeeping: a published version's image is a job; jobs are claimed
/// (each once), leased, released, failed and retried; a finished one records what the
/// image serves (manifests, blobs, tags, referrers), which is served until it is queued
/// again.
async fn mirror_jobs_and_what_they_serve(b: Backend) {
    use marketplace::store::{Content, ContentKind};
    let store = &b.store;
    let def = with_version("gateway", "1.0.0");
    store.insert_version("acme", &def, NOW).await.unwrap();
    assert_eq!(
        store.enqueue_unlinked_images(NOW).await.unwrap(),
        0,
        "enqueued on insert"
    );
    let counts = store.mirror_counts().await.unwrap();
    assert!(counts.contains(&("pending".to_owned(), 1, 0)), "{counts:?}");

    let jobs = store
        .claim_mirror_jobs(NOW, NOW + 300, 10, None)
        .await
        .unwrap();
    assert_eq!(jobs.len(), 1);
    let job = jobs[0].clone();
    assert!(
        store
            .claim_mirror_jobs(NOW, NOW + 300, 10, None)
            .await
            .unwrap()
            .is_empty(),
        "claimed once"
    );
    let other_host = vec!["elsewhere.example".to_owned()];
    store.release_mirror_jobs(&[job.id], NOW).await.unwrap();
    assert!(
        store
            .claim_mirror_jobs(NOW, NOW + 300, 10, Some(&other_host))
            .await
            .unwrap()
            .is_empty()
    );
    let job = store
        .claim_mirror_jobs(NOW, NOW + 300, 10, Some(std::slice::from_ref(&job.host)))
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert!(store.renew_mirror_lease(job.id, NOW + 600).await.unwrap());

    store
        .record_mirror_failure(
            job.id,
            "the upstream answered 503",
            "503 Service Unavailable",
            NOW + 60,
            NOW,
        )
        .await
        .unwrap();
    let status = store.mirror_statuses().await.unwrap().pop().unwrap();
    assert_eq!(
        (
            status.status.as_str(),
            status.attempts,
            status.next_attempt_at
        ),
        ("failed", 1, Some(NOW + 60))
    );
    assert_eq!(
        status.last_error_detail.as_deref(),
        Some("503 Service Unavailable")
    );
    assert!(
        store
            .claim_mirror_jobs(NOW, NOW + 300, 10, None)
            .await
            .unwrap()
            .is_empty(),
        "not due yet"
    );
    assert_eq!(
        store
            .retry_mirrors(Some(&job.repository[1..]), NOW)
            .await
            .unwrap(),
        1
    );
    let job = store
        .claim_mirror_jobs(NOW, NOW + 300, 10, None)
        .await
        .unwrap()
        .pop()
        .unwrap();

    let blob = |digest: &str, size: u64| Content {
        digest: digest.into(),
        kind: ContentKind::Blob,
        media_type: "application/octet-stream".into(),
        size,
        subject: None,
        artifact_type: None,
        annotations: None,
    };
    let referrer = Content {
        digest: "sha256:ref".into(),
        kind: ContentKind::Manifest,
        media_type: "application/vnd.oci.image.manifest.v1+json".into(),
        size: 300,
        subject: Some(job.digest.clone()),
        artifact_type: Some("application/vnd.dev.sigstore.bundle+json".into()),
        annotations: Some("{\"a\":\"b\"}".into()),
    };
    let index = Content {
        digest: job.digest.clone(),
        kind: ContentKind::Manifest,
        media_type: "application/vnd.oci.image.index.v1+json".into(),
        size: 500,
        subject: None,
        artifact_type: None,
        annotations: None,
    };
    let content = [
        index,
        blob("sha256:b1", 1000),
        blob("sha256:b2", 2000),
        referrer,
    ];
    let tags = [
        ("sha256-x.sig".to_owned(), "sha256:ref".to_owned()),
        ("v1".to_owned(), job.digest.clone()),
    ];
    store
        .record_mirrored(job.id, &content, &tags, Some("key1"), NOW + 10)
        .await
        .unwrap();

    let (host, repo) = (job.host.as_str(), job.repository.as_str());
    assert!(store.served_repository(host, repo).await.unwrap());
    assert!(!store.served_repository(host, "nope").await.unwrap());
    let manifest = store
        .served_manifest(host, repo, &job.digest)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (manifest.media_type.as_str(), manifest.size),
        ("application/vnd.oci.image.index.v1+json", 500)
    );
    assert_eq!(
        store.served_blob(host, repo, "sha256:b2").await.unwrap(),
        Some(2000)
    );
    assert_eq!(
        store.served_blob(host, repo, "sha256:none").await.unwrap(),
        None
    );
    assert_eq!(
        store.served_tag(host, repo, "v1").await.unwrap().as_deref(),
        Some(job.digest.as_str())
    );
    assert_eq!(
        store.served_tags(host, repo, None, 10).await.unwrap(),
        ["sha256-x.sig", "v1"]
    );
    assert_eq!(
        store
            .served_tags(host, repo, Some("sha256-x.sig"), 10)
            .await
            .unwrap(),
        ["v1"]
    );
    assert_eq!(
        store.served_tags(host, repo, None, 1).await.unwrap(),
        ["sha256-x.sig"]
    );
    let refs = store.referrers(host, repo, &job.digest).await.unwrap();
    assert_eq!(refs.len(), 1);
    assert_eq!(
        refs[0].artifact_type.as_deref(),
        Some("application/vnd.dev.sigstore.bundle+json")
    );
    let digests = store.referenced_digests().await.unwrap();
    assert!(
        digests.contains("sha256:b1") && digests.contains(&job.digest),
        "{digests:?}"
    );
    let status = store.mirror_statuses().await.unwrap().pop().unwrap();
    assert_eq!(
        (
            status.status.as_str(),
            status.size,
            status.verified_by.as_deref()
        ),
        ("mirrored", Some(3800), Some("key1"))
    );
    let counts = store.mirror_counts().await.unwrap();
    assert!(
        counts.contains(&("mirrored".to_owned(), 1, 3800)),
        "{counts:?}"
    );
    let plugin = store.plugin("acme", "gateway").await.unwrap().unwrap();
    let version = store.versions(plugin.id).await.unwrap().pop().unwrap();
    assert_eq!(version.mirror.unwrap().status, "mirrored");

    // Damaged content: the image is queued again and not served meanwhile.
    assert_eq!(
        store
            .remirror_images_with(&["sha256:b2".to_owned()], NOW + 20)
            .await
            .unwrap(),
        1
    );
    assert!(!store.served_repository(host, repo).await.unwrap());
    assert_eq!(
        store.served_blob(host, repo, "sha256:b2").await.unwrap(),
        None
    );

    // Cosign keys of the publisher whose version pins the image.
    store
        .add_publisher("acme", &["ab".repeat(32)], 1, "t1", NOW)
        .await
        .unwrap();
    let keys = [
        ("k1".to_owned(), "PEM1".to_owned()),
        ("k0".to_owned(), "PEM0".to_owned()),
    ];
    store.set_cosign_keys("acme", &keys, NOW).await.unwrap();
    let found = store.cosign_keys_for_image(job.id).await.unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.contains(&("k1".to_owned(), "PEM1".to_owned())));
}
