//! The worker store's conformance suite: every body below runs on SQLite (a file in a
//! temporary directory) and on PostgreSQL (a throwaway server from Debian's binaries,
//! `common::pg`), through the traits the worker uses. A backend that passes here keeps
//! the rules the worker relies on: ordering, the change feed, failures in a row,
//! immutable sideloads, organization isolation, tokens, and concurrent writers waiting
//! their turn instead of failing.

mod common;

use common::{NOW, with_version};
use marketplace::db::Database;
use marketplace::definition::Definition;
use marketplace::sync::SyncStore;
use marketplace::sync::sideload::{Added, OnConflict, Scope, SideloadError};
use marketplace::sync::store::{
    LastGood, PublisherFailure, Sideloads, SourceDefinition, Sources, Tokens, Trusted,
    TrustedMetadata, TrustedVersions, summary_json,
};

/// The suite's store on one backend.
type Backend = common::backends::Backend<SyncStore>;

use common::backends::conformance;

conformance!(
    sources_are_registered_updated_and_forgotten,
    a_round_replaces_a_sources_definitions,
    a_later_round_keeps_failing_publishers_and_counts_their_failures,
    failures_count_in_a_row_and_an_unchanged_round_resets_them,
    sideloads_are_immutable_limited_and_per_organization,
    tokens_are_stored_hashed_and_revoked_once,
    concurrent_writers_wait_their_turn,
);

const SIGNER: &str = "0123abcd";

fn row(publisher: &str, def: &Definition) -> SourceDefinition {
    SourceDefinition {
        target: format!("{publisher}/{}/{}.yaml", def.name(), def.version),
        publisher: publisher.to_owned(),
        name: def.name().to_owned(),
        version: def.version.to_string(),
        hash: def.hash.clone(),
        yanked: false,
        signer_key_ids: SIGNER.to_owned(),
        extras: String::new(),
        bytes: Some((def.bytes.clone(), summary_json(def))),
    }
}

/// The same target as a later round lists it when the store already has its bytes.
fn known(mut row: SourceDefinition) -> SourceDefinition {
    row.bytes = None;
    row
}

fn trusted(timestamp: u64) -> Trusted {
    Trusted {
        versions: TrustedVersions {
            root: 1,
            timestamp,
            snapshot: timestamp + 100,
            targets: 3,
            timestamp_expires_at: NOW + 86_400,
            expires_at: NOW + 3_600,
            expires_role: "targets".to_owned(),
        },
        definitions: 0,
        root: b"root-bytes".to_vec(),
        timestamp: format!("timestamp {timestamp}").into_bytes(),
        snapshot: b"snapshot-bytes".to_vec(),
    }
}

fn failure(publisher: &str, reason: &str) -> PublisherFailure {
    PublisherFailure {
        publisher: publisher.to_owned(),
        reason: reason.to_owned(),
        message: format!("{publisher}'s role: {reason}"),
        since: 0,
        consecutive_failures: 0,
    }
}

async fn sources_are_registered_updated_and_forgotten(b: Backend) {
    let s = &b.store;
    s.add_source("zeta", "https://zeta.example/").await.unwrap();
    s.add_source("alpha", "https://alpha.example/")
        .await
        .unwrap();
    s.add_source("alpha", "https://alpha.example/v2/")
        .await
        .unwrap();
    let status = s.status().await.unwrap();
    let names: Vec<(&str, &str)> = status
        .iter()
        .map(|st| (st.name.as_str(), st.url.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("alpha", "https://alpha.example/v2/"),
            ("zeta", "https://zeta.example/")
        ]
    );
    let first = &status[0];
    assert_eq!(first.last_attempt_at, None);
    assert_eq!(first.trusted, None);
    assert_eq!(first.definitions, 0);
    assert!(s.trusted("alpha").await.unwrap().is_none());

    // Forgetting nothing changes nothing, not even the generation.
    let g = s.generation().await.unwrap();
    assert_eq!(s.retain_sources(&["alpha", "zeta"]).await.unwrap(), 0);
    assert_eq!(s.generation().await.unwrap(), g);

    s.replace_source(
        "zeta",
        &[row("acme", &with_version("gateway", "1.0.0"))],
        &[],
        &trusted(1),
        NOW,
    )
    .await
    .unwrap();
    let g = s.generation().await.unwrap();
    assert_eq!(s.retain_sources(&["alpha"]).await.unwrap(), 1);
    assert!(
        s.generation().await.unwrap() > g,
        "forgetting a source is a change"
    );
    let names: Vec<String> = s
        .status()
        .await
        .unwrap()
        .into_iter()
        .map(|st| st.name)
        .collect();
    assert_eq!(names, ["alpha"]);
    // Its definitions went with it.
    assert!(s.rows().await.unwrap().is_empty());
    assert!(s.source_definitions("zeta").await.unwrap().is_empty());
}

async fn a_round_replaces_a_sources_definitions(b: Backend) {
    let s = &b.store;
    s.add_source("main", "https://main.example/").await.unwrap();
    let gateway = with_version("gateway", "1.2.0");
    let gateway_old = with_version("gateway", "1.0.0");
    let storage = with_version("storage", "2.0.0");
    let mut yanked = row("acme", &gateway_old);
    yanked.yanked = true;
    let g0 = s.generation().await.unwrap();
    let n = s
        .replace_source(
            "main",
            &[row("acme", &gateway), yanked, row("globex", &storage)],
            &[],
            &trusted(7),
            NOW,
        )
        .await
        .unwrap();
    assert_eq!(n, 3);
    assert!(s.generation().await.unwrap() > g0, "a round is a change");

    let hashes = s.known_hashes("main").await.unwrap();
    assert_eq!(hashes.len(), 3);
    assert_eq!(
        hashes["acme/gateway/1.2.0.yaml"],
        (gateway.hash.clone(), String::new())
    );
    let defs = s.source_definitions("main").await.unwrap();
    let listed: Vec<(&str, bool)> = defs.iter().map(|d| (d.0.as_str(), d.2)).collect();
    assert_eq!(
        listed,
        [
            ("acme/gateway/1.0.0.yaml", true),
            ("acme/gateway/1.2.0.yaml", false),
            ("globex/storage/2.0.0.yaml", false),
        ],
        "by target, with yank flags"
    );
    assert_eq!(
        s.source_definition("main", "globex/storage/2.0.0.yaml")
            .await
            .unwrap()
            .as_deref(),
        Some(storage.bytes.as_slice())
    );
    assert_eq!(
        s.source_definition("main", "nope.yaml").await.unwrap(),
        None
    );

    let rows = s.rows().await.unwrap();
    let order: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.publisher.as_str(), r.name.as_str()))
        .collect();
    assert_eq!(
        order,
        [
            ("acme", "gateway"),
            ("acme", "gateway"),
            ("globex", "storage")
        ]
    );
    assert!(
        rows.iter()
            .all(|r| r.summary.is_some() && r.definition.is_none())
    );
    assert!(
        rows.iter()
            .all(|r| r.signer_key_ids == SIGNER && r.source == "main")
    );

    let status = s.status().await.unwrap().pop().unwrap();
    assert_eq!(status.definitions, 3);
    assert_eq!(
        (status.last_attempt_at, status.last_success_at),
        (Some(NOW), Some(NOW))
    );
    assert_eq!(status.trusted.as_ref().unwrap().timestamp, 7);
    assert_eq!(status.trusted.as_ref().unwrap().snapshot, 107);
    let t = s.trusted("main").await.unwrap().unwrap();
    assert_eq!(t.versions, trusted(7).versions);
    assert_eq!(t.definitions, 3);
    assert_eq!(t.timestamp, b"timestamp 7");
    assert_eq!(t.root, b"root-bytes");
}

async fn a_later_round_keeps_failing_publishers_and_counts_their_failures(b: Backend) {
    let s = &b.store;
    s.add_source("main", "https://main.example/").await.unwrap();
    let a1 = with_version("gateway", "1.0.0");
    let a2 = with_version("gateway", "1.1.0");
    let g1 = with_version("storage", "1.0.0");
    s.replace_source(
        "main",
        &[row("acme", &a1), row("acme", &a2), row("globex", &g1)],
        &[],
        &trusted(1),
        NOW,
    )
    .await
    .unwrap();

    // Round 2: acme drops 1.0.0 and yanks 1.1.0 (already stored), a new version
    // arrives; globex's role fails, so its definitions stay although it lists none.
    let a3 = with_version("gateway", "1.2.0");
    let mut a2_yanked = known(row("acme", &a2));
    a2_yanked.yanked = true;
    a2_yanked.signer_key_ids = "feedbeef".to_owned();
    let n = s
        .replace_source(
            "main",
            &[a2_yanked, row("acme", &a3)],
            &[failure("globex", "expired")],
            &trusted(2),
            NOW + 60,
        )
        .await
        .unwrap();
    assert_eq!(n, 3);
    let defs = s.source_definitions("main").await.unwrap();
    let listed: Vec<(&str, bool)> = defs.iter().map(|d| (d.0.as_str(), d.2)).collect();
    assert_eq!(
        listed,
        [
            ("acme/gateway/1.1.0.yaml", true),
            ("acme/gateway/1.2.0.yaml", false),
            ("globex/storage/1.0.0.yaml", false),
        ]
    );
    let signers: Vec<String> = s
        .rows()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.version == "1.1.0")
        .map(|r| r.signer_key_ids)
        .collect();
    assert_eq!(signers, ["feedbeef"], "signers follow the index");
    let failing = s.publisher_failures("main").await.unwrap();
    assert_eq!(failing.len(), 1);
    assert_eq!(
        (
            failing[0].reason.as_str(),
            failing[0].since,
            failing[0].consecutive_failures
        ),
        ("expired", NOW + 60, 1)
    );

    // Round 3: still failing, for another reason; the run keeps its start.
    s.replace_source(
        "main",
        &[known(row("acme", &a3))],
        &[failure("globex", "bad_signature")],
        &trusted(3),
        NOW + 120,
    )
    .await
    .unwrap();
    let failing = s.publisher_failures("main").await.unwrap();
    assert_eq!(
        (
            failing[0].reason.as_str(),
            failing[0].since,
            failing[0].consecutive_failures
        ),
        ("bad_signature", NOW + 60, 2)
    );
    let status = s.status().await.unwrap().pop().unwrap();
    assert_eq!(status.failing_publishers, failing);
    assert_eq!(
        status.definitions, 2,
        "acme's yanked 1.1.0 is no longer listed"
    );

    // Round 4: globex recovers and lists nothing: its failure and definitions go.
    let n = s
        .replace_source(
            "main",
            &[known(row("acme", &a3))],
            &[],
            &trusted(4),
            NOW + 180,
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert!(s.publisher_failures("main").await.unwrap().is_empty());
}

async fn failures_count_in_a_row_and_an_unchanged_round_resets_them(b: Backend) {
    let s = &b.store;
    s.add_source("main", "https://main.example/").await.unwrap();
    s.replace_source(
        "main",
        &[row("acme", &with_version("gateway", "1.0.0"))],
        &[],
        &trusted(1),
        NOW,
    )
    .await
    .unwrap();
    let g = s.generation().await.unwrap();
    assert_eq!(
        s.record_failure("main", "unreachable", "refused", NOW + 10)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        s.record_failure("main", "expired", "timestamp expired", NOW + 20)
            .await
            .unwrap(),
        2
    );
    let st = s.status().await.unwrap().pop().unwrap();
    assert_eq!(st.consecutive_failures, 2);
    assert_eq!(st.last_reason.as_deref(), Some("expired"));
    assert_eq!(st.last_error.as_deref(), Some("timestamp expired"));
    assert_eq!(
        (st.last_attempt_at, st.last_success_at),
        (Some(NOW + 20), Some(NOW))
    );
    assert_eq!(st.definitions, 1, "a failed round leaves the definitions");
    assert_eq!(
        s.generation().await.unwrap(),
        g,
        "and changes nothing offered"
    );
    s.record_unchanged("main", NOW + 30).await.unwrap();
    let st = s.status().await.unwrap().pop().unwrap();
    assert_eq!(st.consecutive_failures, 0);
    assert_eq!((st.last_reason, st.last_error), (None, None));
    assert_eq!(
        (st.last_attempt_at, st.last_success_at),
        (Some(NOW + 30), Some(NOW + 30))
    );
    // A source that is not registered has no failures to count.
    assert!(
        s.record_failure("ghost", "unreachable", "x", NOW)
            .await
            .is_err()
    );
}

async fn sideloads_are_immutable_limited_and_per_organization(b: Backend) {
    let s = &b.store;
    let v1 = with_version("gateway", "1.0.0");
    // The same version with other bytes (a comment more).
    let other = Definition::parse(&[v1.bytes.as_slice(), b"\n# changed\n"].concat()).unwrap();
    assert_ne!(other.hash, v1.hash);
    let add = |org: &'static str, def: Definition, on: OnConflict| async move {
        s.add_sideload(org, &def, "tok1", NOW, on).await
    };
    assert_eq!(
        add("acme", v1.clone(), OnConflict::Refuse).await.unwrap(),
        Added::New
    );
    assert_eq!(
        add("acme", v1.clone(), OnConflict::Refuse).await.unwrap(),
        Added::Unchanged
    );
    let err = add("acme", other.clone(), OnConflict::Refuse)
        .await
        .unwrap_err();
    assert!(matches!(err, SideloadError::Conflict { .. }), "{err}");
    assert_eq!(
        s.sideload_bytes("acme", "gateway", "1.0.0")
            .await
            .unwrap()
            .as_deref(),
        Some(v1.bytes.as_slice()),
        "a refused upload left the stored bytes"
    );
    assert_eq!(
        add("acme", other.clone(), OnConflict::Replace)
            .await
            .unwrap(),
        Added::Replaced
    );
    assert_eq!(
        s.sideload_bytes("acme", "gateway", "1.0.0")
            .await
            .unwrap()
            .as_deref(),
        Some(other.bytes.as_slice())
    );
    // Another organization's same version is its own.
    assert_eq!(
        add("globex", v1.clone(), OnConflict::Refuse).await.unwrap(),
        Added::New
    );
    assert_eq!(
        add("acme", with_version("gateway", "1.1.0"), OnConflict::Refuse)
            .await
            .unwrap(),
        Added::New
    );
    assert_eq!(
        add("acme", with_version("storage", "3.0.0"), OnConflict::Refuse)
            .await
            .unwrap(),
        Added::New
    );

    let acme: Vec<(String, String)> = s
        .sideloads("acme")
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.name, r.version))
        .collect();
    assert_eq!(
        acme,
        [
            ("gateway".to_owned(), "1.0.0".to_owned()),
            ("gateway".to_owned(), "1.1.0".to_owned()),
            ("storage".to_owned(), "3.0.0".to_owned())
        ]
    );
    let globex = s.sideload_rows("globex").await.unwrap();
    assert_eq!(globex.len(), 1);
    assert_eq!(globex[0].2, v1.hash);
    assert_eq!(globex[0].3, summary_json(&v1));
    assert_eq!(
        s.sideload_bytes("initech", "gateway", "1.0.0")
            .await
            .unwrap(),
        None
    );

    // Removing one version, then every version of a name; never another org's.
    assert_eq!(
        s.delete_sideloads("acme", "gateway", Some("1.1.0"))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        s.delete_sideloads("acme", "gateway", Some("1.1.0"))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        s.delete_sideloads("acme", "gateway", None).await.unwrap(),
        1
    );
    assert_eq!(s.sideloads("acme").await.unwrap().len(), 1);
    assert_eq!(s.sideloads("globex").await.unwrap().len(), 1);
    let err = add("Not_An_Org", v1.clone(), OnConflict::Refuse)
        .await
        .unwrap_err();
    assert!(matches!(err, SideloadError::BadOrg(_)), "{err}");

    // The per-organization limit, checked in the same transaction as the write.
    let new = |version: String| marketplace::sync::sideload::NewSideload {
        org: "initech",
        name: "gateway",
        version,
        hash: "sha256:00",
        summary: summary_json(&v1),
        definition: b"bytes",
        extras: String::new(),
        created_at: NOW,
        token_id: "tok1",
    };
    use marketplace::sync::sideload::Stored;
    assert_eq!(
        s.put_sideload(&new("1.0.0".into()), false, 2)
            .await
            .unwrap(),
        Stored::Added(Added::New)
    );
    assert_eq!(
        s.put_sideload(&new("1.0.1".into()), false, 2)
            .await
            .unwrap(),
        Stored::Added(Added::New)
    );
    assert_eq!(
        s.put_sideload(&new("1.0.2".into()), false, 2)
            .await
            .unwrap(),
        Stored::Full
    );
    assert_eq!(
        s.put_sideload(&new("1.0.1".into()), false, 2)
            .await
            .unwrap(),
        Stored::Added(Added::Unchanged),
        "a full organization still answers for what it holds"
    );
}

async fn tokens_are_stored_hashed_and_revoked_once(b: Backend) {
    let s = &b.store;
    let (org_id, org_token) = s
        .create_token(&Scope::Org("acme".into()), NOW)
        .await
        .unwrap();
    let (reader_id, reader_token) = s.create_token(&Scope::Reader, NOW + 1).await.unwrap();
    assert_eq!(
        s.token_scope(&org_token).await.unwrap(),
        Some((org_id.clone(), Scope::Org("acme".into())))
    );
    assert_eq!(
        s.token_scope(&reader_token).await.unwrap(),
        Some((reader_id.clone(), Scope::Reader))
    );
    assert_eq!(s.token_scope("mst_not-a-token").await.unwrap(), None);
    // Only the hash is kept: the token itself is nowhere in what the store lists.
    let listed = s.tokens().await.unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|t| (t.id.as_str(), t.org.as_deref()))
            .collect::<Vec<_>>(),
        [(org_id.as_str(), Some("acme")), (reader_id.as_str(), None)]
    );
    assert!(
        s.live_token(&org_token).await.unwrap().is_none(),
        "looked up by hash only"
    );

    assert!(s.revoke_token(&org_id, NOW + 5).await.unwrap());
    assert!(
        !s.revoke_token(&org_id, NOW + 6).await.unwrap(),
        "revoked once"
    );
    assert!(!s.revoke_token("nope", NOW).await.unwrap());
    assert_eq!(s.token_scope(&org_token).await.unwrap(), None);
    let revoked = s.tokens().await.unwrap();
    assert_eq!(revoked[0].revoked_at, Some(NOW + 5));
    assert_eq!(revoked[1].revoked_at, None);
}

/// Two handles (as two processes) write at once: rounds of different sources and
/// sideloads of one organization, each a transaction that reads before it writes.
/// None fails; every write is counted by the change feed.
async fn concurrent_writers_wait_their_turn(b: Backend) {
    let other = b.another().await;
    let stores = [b.store.clone(), other];
    for i in 0..4 {
        stores[0]
            .add_source(&format!("s{i}"), "https://x.example/")
            .await
            .unwrap();
    }
    let g0 = stores[0].generation().await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for round in 0..5u64 {
        for i in 0..4 {
            let s = stores[i % 2].clone();
            tasks.spawn(async move {
                let defs: Vec<SourceDefinition> = (0..20)
                    .map(|v| row("acme", &with_version("gateway", &format!("1.{round}.{v}"))))
                    .collect();
                s.replace_source(&format!("s{i}"), &defs, &[], &trusted(round + 1), NOW)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            });
        }
        for (i, s) in stores.iter().enumerate() {
            let s = s.clone();
            tasks.spawn(async move {
                let def = with_version("storage", &format!("{round}.{i}.0"));
                s.add_sideload("acme", &def, "tok", NOW, OnConflict::Refuse)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            });
        }
    }
    let mut failures = Vec::new();
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done.unwrap() {
            failures.push(e);
        }
    }
    assert_eq!(failures, Vec::<String>::new());
    assert_eq!(
        stores[1].generation().await.unwrap(),
        g0 + 20,
        "one bump per round"
    );
    assert_eq!(stores[1].sideloads("acme").await.unwrap().len(), 10);
    for st in stores[0].status().await.unwrap() {
        assert_eq!(st.definitions, 20, "{}", st.name);
    }
}

/// Processes that start together on one new PostgreSQL database migrate it once: each
/// opens the store (`sync token create`), none fails, and every migration is recorded
/// once.
#[tokio::test]
async fn postgres_processes_starting_at_once_migrate_once() {
    let pg = common::pg::shared();
    let url = pg.fresh().await;
    let dir = tempfile::tempdir().unwrap();
    let config = common::worker::write_config_on(dir.path(), &[], Some(&url));
    let children: Vec<_> = (0..4)
        .map(|_| {
            common::worker::sync_command(&config)
                .args(["token", "create", "--reader"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", common::output_text(&o));
    }
    let store = SyncStore::connect(&Database::parse(&url).unwrap(), 1)
        .await
        .unwrap();
    assert_eq!(store.tokens().await.unwrap().len(), 4);
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let (rows, versions): (i64, i64) =
        sqlx::query_as("SELECT COUNT(*), COUNT(DISTINCT version) FROM _sqlx_migrations")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    let known = marketplace::sync::store::POSTGRES_MIGRATIONS.iter().count() as i64;
    assert_eq!((rows, versions), (known, known));
    assert!(!dir.path().join("worker/sync.db").exists());
}

/// A PostgreSQL database a newer binary migrated is refused with a message that says
/// so, as a SQLite file is (`tests/store.rs`).
#[tokio::test]
async fn postgres_database_migrated_by_a_newer_version_is_refused() {
    let pg = common::pg::shared();
    let url = pg.fresh().await;
    let db = Database::parse(&url).unwrap();
    SyncStore::connect(&db, 1).await.unwrap().close().await;
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (99999, 'from a newer version', TRUE, '\\x00', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let Err(err) = SyncStore::connect(&db, 1).await else {
        panic!("a database from a newer version was opened");
    };
    let err = err.to_string();
    assert!(
        err.contains("migrated by a newer version of marketplace (schema version 99999"),
        "{err}"
    );
}

/// `database:` in sync.yaml: a SQLite path is relative to the file, a bad URL is named
/// with its field and never quoted back with its password.
#[test]
fn the_database_field_of_sync_yaml() {
    use marketplace::sync::Config;
    let base = std::path::Path::new("/etc/marketplace");
    let c = Config::parse("dataDir: data\n", base).unwrap();
    assert_eq!(
        c.database.to_string(),
        "sqlite:/etc/marketplace/data/sync.db"
    );
    let c = Config::parse("database: sqlite:state/worker.db\n", base).unwrap();
    assert_eq!(
        c.database.to_string(),
        "sqlite:/etc/marketplace/state/worker.db"
    );
    let c = Config::parse(
        "database: postgres://fundament:hunter2@db.internal/fundament?sslmode=require\ndatabaseConnections: 3\n",
        base,
    )
    .unwrap();
    assert_eq!(c.database.backend(), "postgres");
    assert_eq!(c.database_connections, 3);
    assert!(!format!("{c:?}").contains("hunter2"), "{c:?}");
    for (yaml, expected) in [
        (
            "database: mysql://u:hunter2@h/db\n",
            "database: unsupported database URL scheme `mysql`",
        ),
        (
            "database: postgres://u:hunter2@h/db?ssl=1\n",
            "database: the PostgreSQL URL has an unknown parameter `ssl`",
        ),
        (
            "database: postgres://h/db\ndatabaseConnections: 0\n",
            "databaseConnections: between 1 and",
        ),
    ] {
        let err = Config::parse(yaml, base).unwrap_err();
        assert!(err.contains(expected), "{yaml}: {err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}

/// TLS to PostgreSQL, with a server that accepts TCP connections only over TLS: the
/// connection is refused in the clear, made with `verify-full` against the CA the URL
/// names, refused with `verify-full` against the built-in roots (the certificate is not
/// theirs), and made with `require` (encrypted, unverified), as libpq does.
#[tokio::test]
async fn postgres_over_tls_verifies_the_server_as_sslmode_says() {
    let pg = common::pg::Postgres::start_tls();
    let (port, ca) = pg.tls.clone().unwrap();
    let url = |query: &str| format!("postgres://postgres@127.0.0.1:{port}/postgres?{query}");
    let open = |query: String| async move {
        SyncStore::connect(&Database::parse(&query).unwrap(), 1).await
    };
    let clear = open(url("sslmode=disable")).await.unwrap_err().to_string();
    assert!(clear.contains("no encryption"), "{clear}");
    let verified = open(url(&format!(
        "sslmode=verify-full&sslrootcert={}",
        ca.display()
    )))
    .await
    .unwrap();
    verified
        .add_source("tls", "https://x.example/")
        .await
        .unwrap();
    assert_eq!(verified.status().await.unwrap().len(), 1);
    let unknown = open(url("sslmode=verify-full"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        unknown.to_lowercase().contains("certificate"),
        "an unknown CA must fail verification: {unknown}"
    );
    let encrypted = open(url("sslmode=require")).await.unwrap();
    assert_eq!(encrypted.status().await.unwrap().len(), 1);
}

/// A database the worker cannot open is named with the cause, once: not a pool that
/// timed out, not the same words repeated down the error chain.
#[tokio::test]
async fn postgres_that_cannot_be_opened_says_why_once() {
    let pg = common::pg::shared();
    let url = pg.fresh().await.replacen("/test", "/missing", 1);
    let Err(err) = SyncStore::connect(&Database::parse(&url).unwrap(), 1).await else {
        panic!("opened a database that does not exist");
    };
    let text = format!("{:#}", anyhow::Error::new(err));
    assert_eq!(text.matches("does not exist").count(), 1, "{text}");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let refused = format!("postgres://u:hunter2@127.0.0.1:{port}/db");
    let started = std::time::Instant::now();
    let Err(err) = SyncStore::connect(&Database::parse(&refused).unwrap(), 1).await else {
        panic!("connected to a closed port");
    };
    let text = format!("{:#}", anyhow::Error::new(err));
    assert!(text.contains("Connection refused"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "a refused connection fails at once, not after the pool's timeout"
    );
}
