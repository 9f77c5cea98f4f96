//! The upstream store's conformance suite (`store/upstream.rs`: one SQL text for both
//! backends), every body once on SQLite and once on PostgreSQL: a round of following an
//! upstream is stored whole or not at all; yanks and publishers the upstream dropped;
//! a publisher registered here is never taken over; a failed round keeps what is
//! trusted.

mod common;

use common::backends::conformance;
use common::publishing::definition;
use marketplace::store::{
    FollowedPublisher, PluginQuery, Store, StoreError, StoredMetadata, UpstreamRound,
};

type Backend = common::backends::Backend<Store>;

conformance!(
    a_round_is_stored_whole_or_not_at_all,
    many_new_plugins_are_stored_as_one_by_one,
    yanks_and_dropped_publishers_follow_the_upstream,
    a_publisher_registered_here_is_never_taken_over,
    a_failed_round_keeps_what_is_trusted,
);

const URL: &str = "http://upstream.example/";

fn file(role: &str, version: u64, bytes: &str) -> StoredMetadata {
    StoredMetadata {
        role: role.into(),
        version,
        bytes: bytes.as_bytes().to_vec(),
        sha256: "00".repeat(32),
        expires_at: 2_000_000_000,
        created_at: 100,
    }
}

fn beta() -> FollowedPublisher {
    FollowedPublisher {
        name: "beta".into(),
        public_keys: vec!["cd".repeat(32)],
        threshold: 1,
    }
}

fn round(files: Vec<StoredMetadata>) -> UpstreamRound {
    UpstreamRound {
        url: URL.into(),
        root: b"root-2".to_vec(),
        timestamp: b"timestamp-7".to_vec(),
        snapshot: b"snapshot-7".to_vec(),
        publishers: vec![beta()],
        versions: vec![(
            "beta".into(),
            definition("storage", "store", "1.0.0"),
            "k1".into(),
        )],
        files,
        report: r#"{"upstream":"x"}"#.into(),
        now: 200,
        ..Default::default()
    }
}

async fn a_round_is_stored_whole_or_not_at_all(b: Backend) {
    let s = &b.store;
    // A metadata version another writer stored first fails the whole round.
    s.put_metadata(&[file("snapshot", 5, "theirs")])
        .await
        .unwrap();
    let err = s
        .follow_upstream(&round(vec![
            file("beta", 1, "role"),
            file("snapshot", 5, "ours"),
        ]))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::MetadataExists { .. }), "{err:?}");
    assert!(s.publisher("beta").await.unwrap().is_none());
    assert!(s.upstream_versions(URL).await.unwrap().is_empty());
    assert!(s.metadata("beta", 1).await.unwrap().is_none());
    assert!(s.upstream(URL).await.unwrap().is_none());

    s.follow_upstream(&round(vec![
        file("beta", 1, "role"),
        file("snapshot", 6, "ours"),
    ]))
    .await
    .unwrap();
    let p = s.publisher("beta").await.unwrap().unwrap();
    assert_eq!(p.origin.as_deref(), Some(URL));
    assert_eq!((p.public_keys, p.threshold), (beta().public_keys, 1));
    assert_eq!(p.active_tokens, 0, "a followed publisher has no token here");
    let def = definition("storage", "store", "1.0.0");
    assert_eq!(
        s.upstream_versions(URL).await.unwrap(),
        [("beta".to_owned(), def.hash.clone(), false)]
    );
    assert_eq!(s.metadata("beta", 1).await.unwrap().unwrap().bytes, b"role");
    let row = s.upstream(URL).await.unwrap().unwrap();
    assert_eq!(
        (row.root, row.timestamp, row.snapshot),
        (
            b"root-2".to_vec(),
            Some(b"timestamp-7".to_vec()),
            Some(b"snapshot-7".to_vec())
        )
    );
    assert_eq!(
        (row.last_attempt_at, row.last_success_at),
        (Some(200), Some(200))
    );
    assert_eq!(row.report, r#"{"upstream":"x"}"#);
    // The catalog lists it.
    assert!(s.plugin("beta", "store").await.unwrap().is_some());
}

async fn yanks_and_dropped_publishers_follow_the_upstream(b: Backend) {
    let s = &b.store;
    s.follow_upstream(&round(vec![file("beta", 1, "role")]))
        .await
        .unwrap();
    let hash = definition("storage", "store", "1.0.0").hash;
    s.follow_upstream(&UpstreamRound {
        yanked: vec![("beta".into(), hash.clone())],
        files: vec![file("beta", 2, "role 2")],
        versions: Vec::new(),
        ..round(Vec::new())
    })
    .await
    .unwrap();
    assert_eq!(
        s.upstream_versions(URL).await.unwrap(),
        [("beta".to_owned(), hash, true)]
    );
    // Every version yanked: the plugin leaves the listing.
    let plugin = s.plugin("beta", "store").await.unwrap().unwrap();
    assert_eq!(plugin.latest_version, None);

    // Dropped upstream: suspended here; delegated again: resumed.
    s.follow_upstream(&UpstreamRound {
        publishers: Vec::new(),
        gone: vec!["beta".into()],
        versions: Vec::new(),
        now: 300,
        ..round(Vec::new())
    })
    .await
    .unwrap();
    let p = s.publisher("beta").await.unwrap().unwrap();
    assert_eq!(p.suspended_at, Some(300));
    assert!(s.suspended_delegation("beta").await.unwrap().is_none());
    s.follow_upstream(&UpstreamRound {
        versions: Vec::new(),
        ..round(Vec::new())
    })
    .await
    .unwrap();
    assert_eq!(
        s.publisher("beta").await.unwrap().unwrap().suspended_at,
        None
    );
}

async fn a_publisher_registered_here_is_never_taken_over(b: Backend) {
    let s = &b.store;
    s.add_publisher("beta", &["ab".repeat(32)], 1, "tok", 1)
        .await
        .unwrap();
    s.follow_upstream(&UpstreamRound {
        versions: Vec::new(),
        gone: vec!["beta".into()],
        ..round(Vec::new())
    })
    .await
    .unwrap();
    let p = s.publisher("beta").await.unwrap().unwrap();
    assert_eq!(p.origin, None);
    assert_eq!(p.public_keys, ["ab".repeat(32)]);
    assert_eq!(p.suspended_at, None);
    assert!(s.upstream_versions(URL).await.unwrap().is_empty());
}

async fn a_failed_round_keeps_what_is_trusted(b: Backend) {
    let s = &b.store;
    // Before any round: the configured root starts the row.
    s.record_upstream_failure(URL, b"root-1", "first", 100)
        .await
        .unwrap();
    let row = s.upstream(URL).await.unwrap().unwrap();
    assert_eq!((row.root.as_slice(), row.timestamp), (&b"root-1"[..], None));
    assert_eq!(
        (row.last_attempt_at, row.last_success_at),
        (Some(100), None)
    );

    s.follow_upstream(&round(vec![file("beta", 1, "role")]))
        .await
        .unwrap();
    s.record_upstream_failure(URL, b"root-1", "unreachable", 400)
        .await
        .unwrap();
    let row = s.upstream(URL).await.unwrap().unwrap();
    assert_eq!(row.root, b"root-2", "the verified root stays");
    assert_eq!(row.snapshot.as_deref(), Some(&b"snapshot-7"[..]));
    assert_eq!(
        (row.last_attempt_at, row.last_success_at),
        (Some(400), Some(200))
    );
    assert_eq!(row.report, "unreachable");
}

/// A cold round writes plugins new to the store with multi-row statements; what the
/// catalog then reads (listing, search, tags, versions, dependency links, mirror jobs)
/// is what publishing the same definitions one by one gives, on the same backend.
async fn many_new_plugins_are_stored_as_one_by_one(b: Backend) {
    let defs: Vec<_> = (0..450)
        .map(|i| {
            definition(
                ["gateway", "storage", "cert-manager"][i % 3],
                &format!("p-{i:03}"),
                "1.0.0",
            )
        })
        .chain([
            definition("gateway", "p-000", "1.1.0"),
            definition("gateway", "p-000", "2.0.0-rc.1"),
        ])
        .collect();
    b.store
        .follow_upstream(&UpstreamRound {
            versions: defs
                .iter()
                .map(|d| ("beta".into(), d.clone(), "k1".into()))
                .collect(),
            ..round(vec![file("beta", 1, "role")])
        })
        .await
        .unwrap();
    // Another database on the same backend.
    let other = match b.db {
        marketplace::db::Database::Sqlite(_) => Backend::sqlite().await,
        _ => Backend::postgres().await,
    };
    let one_by_one = &other.store;
    for d in &defs {
        one_by_one.insert_version("beta", d, 200).await.unwrap();
    }
    let everything = |terms: &[&str], tag: Option<&str>| PluginQuery {
        terms: terms.iter().map(|t| t.to_string()).collect(),
        tag: tag.map(str::to_owned),
        per_page: 1000,
        ..Default::default()
    };
    for q in [
        everything(&[], None),
        everything(&["p-01"], None),
        everything(&["gateway"], None),
        everything(&[], Some("networking")),
    ] {
        let bulk = b.store.list_plugins(&q).await.unwrap();
        let single = one_by_one.list_plugins(&q).await.unwrap();
        let names = |p: &marketplace::store::Page<marketplace::store::PluginSummary>| {
            p.items
                .iter()
                .map(|s| {
                    (
                        s.name.clone(),
                        s.latest_version.clone(),
                        s.display_name.clone(),
                        s.tags.clone(),
                        s.internet_access,
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(bulk.total, single.total, "{:?}", q.terms);
        assert_eq!(names(&bulk), names(&single), "{:?}", q.terms);
    }
    let p = b.store.plugin("beta", "p-000").await.unwrap().unwrap();
    assert_eq!(p.latest_version.as_deref(), Some("1.1.0"));
    let versions = b.store.versions(p.id).await.unwrap();
    assert_eq!(versions.len(), 3);
    assert!(
        versions.iter().all(|v| v.signer_key_ids == ["k1"]),
        "{versions:?}"
    );
    // Dependency links as one by one: the built-ins' extras name other plugins.
    for name in ["cert-manager", "external-dns"] {
        assert_eq!(
            b.store
                .linking_to(name, marketplace::store::LinkKind::Suggestion)
                .await
                .unwrap()
                .len(),
            one_by_one
                .linking_to(name, marketplace::store::LinkKind::Suggestion)
                .await
                .unwrap()
                .len(),
            "{name}"
        );
    }
    // Every image enqueued for mirroring, once.
    assert_eq!(mirror_jobs(&b.store).await, mirror_jobs(one_by_one).await);
    // A later round's new version of a known plugin goes one by one.
    b.store
        .follow_upstream(&UpstreamRound {
            versions: vec![(
                "beta".into(),
                definition("gateway", "p-001", "1.2.0"),
                "k2".into(),
            )],
            ..round(vec![file("beta", 2, "role 2")])
        })
        .await
        .unwrap();
    let p = b.store.plugin("beta", "p-001").await.unwrap().unwrap();
    assert_eq!(p.latest_version.as_deref(), Some("1.2.0"));
}

/// Every mirror job as `HOST/PATH@DIGEST STATUS`, sorted.
async fn mirror_jobs(s: &Store) -> Vec<String> {
    let mut all: Vec<String> = s
        .mirror_statuses()
        .await
        .unwrap()
        .into_iter()
        .map(|m| format!("{}/{}@{} {}", m.host, m.repository, m.digest, m.status))
        .collect();
    all.sort();
    all
}
