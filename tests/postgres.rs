//! Both roles on PostgreSQL, end to end, with the real binary: `repo init`, `publisher
//! add` and `serve` with `--database`; a publish, verified by python-tuf (an
//! independent client) target by target; the worker's cold and warm rounds with its
//! state in PostgreSQL too; the CLI beside the running server (a suspension it sees at
//! once, through the change feed). No SQLite file is written.

mod common;

use common::publishing::{Client, definition, marketplace, setup_on};
use common::worker::{Api, Source, sync_once, token, write_config_on};
use common::{Server, output_text, python_tuf, trusted_root};

#[tokio::test]
async fn a_marketplace_and_a_worker_on_postgresql() {
    let pg = common::pg::shared();
    let (server_db, worker_db) = (pg.fresh().await, pg.fresh().await);
    let dir = tempfile::tempdir().unwrap();
    let m = setup_on(&dir.path().join("m"), &[], Some(&server_db));
    let server = Server::start_with(&m.data, &["--database", &server_db]);
    let c = Client::new(&server.url);
    let defs: Vec<_> = (0..3)
        .map(|i| definition("gateway", &format!("edge-{i}"), "1.0.0"))
        .collect();
    for def in &defs {
        let (status, body) = c.publish_signed(&m.acme_token, def, &[&m.acme]).await;
        assert_eq!(status, 201, "{body}");
    }
    // The catalog answers from PostgreSQL: search included.
    let (status, body) = get(&server.url, "/api/v1/plugins?q=edge").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["total"], 3, "{body}");

    // python-tuf verifies the index and downloads every published target.
    let root = dir.path().join("root.json");
    std::fs::write(&root, trusted_root(&server.url).await).unwrap();
    let targets: Vec<String> = defs
        .iter()
        .map(|d| format!("acme/{}/{}.yaml", d.name(), d.version))
        .collect();
    let refs: Vec<&str> = targets.iter().map(String::as_str).collect();
    let report = python_tuf(&server.url, &root, &dir.path().join("ngclient"), &refs);
    for (target, def) in targets.iter().zip(&defs) {
        let got = &report["targets"][target.as_str()];
        assert_eq!(
            got["sha256"],
            def.hash.trim_start_matches("sha256:"),
            "{report}"
        );
    }

    // The worker, its state in PostgreSQL: a cold round, then a warm one.
    let config = write_config_on(
        dir.path(),
        &[Source {
            name: "main",
            url: &server.url,
            root: &root,
            priority: 0,
        }],
        Some(&worker_db),
    );
    let o = sync_once(&config);
    assert!(o.status.success(), "{}", output_text(&o));
    let all = marketplace::catalog::builtin::definitions().unwrap().len() + defs.len();
    assert!(
        output_text(&o).contains(&format!("main: {all} definitions ({all} downloaded)")),
        "{}",
        output_text(&o)
    );
    let o = sync_once(&config);
    assert!(output_text(&o).contains("unchanged"), "{}", output_text(&o));
    let api = Api::start(&config, false);
    let reader = token(&config, None);
    let (status, body) = api.get("/orgs/blue/plugins/edge-1", Some(&reader)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["versions"][0]["trust"]["source"], "main");

    // The CLI beside the running server, on the same database: a suspension leaves the
    // listing at once, and the new timestamp is served at once.
    let before =
        get(&server.url, "/tuf/metadata/timestamp.json").await.1["signed"]["version"].clone();
    let o = marketplace(&[
        "publisher",
        "suspend",
        "acme",
        "--database",
        &server_db,
        "--data-dir",
        m.data.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", output_text(&o));
    assert_eq!(
        get(&server.url, "/api/v1/plugins?q=edge").await.1["total"],
        0
    );
    let after =
        get(&server.url, "/tuf/metadata/timestamp.json").await.1["signed"]["version"].clone();
    assert!(after.as_u64() > before.as_u64(), "{before} then {after}");

    let files: Vec<_> = walk(dir.path())
        .into_iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.ends_with(".db") || name.ends_with(".db-wal")
        })
        .collect();
    assert!(files.is_empty(), "SQLite files written: {files:?}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

async fn get(base: &str, path: &str) -> (u16, serde_json::Value) {
    let r = reqwest::get(format!("{base}{path}")).await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}

/// While PostgreSQL is down, the server answers 503 `unavailable` with `Retry-After`
/// (a balancer tries another replica, a client retries), not 500. A PostgreSQL restart
/// closes every pooled connection; the server does not hand a dead one to a request: a
/// connection idle for more than a second is pinged first (pooled connections in busy
/// use skip the ping), so after the restart and a quiet second every read and a publish
/// succeed without restarting the server.
#[tokio::test]
async fn the_server_outlives_a_postgresql_restart() {
    let mut pg = common::pg::Postgres::start();
    let db = pg.fresh().await;
    let dir = tempfile::tempdir().unwrap();
    let m = setup_on(&dir.path().join("m"), &[], Some(&db));
    let server = Server::start_with(&m.data, &["--database", &db]);
    let c = Client::new(&server.url);
    let publish = |name: &'static str| {
        let def = definition("gateway", name, "1.0.0");
        let c = &c;
        let m = &m;
        async move { c.publish_signed(&m.acme_token, &def, &[&m.acme]).await }
    };
    let (status, body) = publish("before").await;
    assert_eq!(status, 201, "{body}");
    // Several requests at once, so the pool holds more than one connection.
    let requests: Vec<_> = (0..6)
        .map(|_| {
            let url = server.url.clone();
            tokio::spawn(async move { get(&url, "/api/v1/plugins?q=before").await })
        })
        .collect();
    for request in requests {
        let (status, body) = request.await.unwrap();
        assert_eq!(status, 200, "{body}");
    }

    pg.stop();
    for path in ["/api/v1/plugins?q=before", "/"] {
        let r = reqwest::get(format!("{}{path}", server.url)).await.unwrap();
        let retry_after = r.headers().get("retry-after").cloned();
        let status = r.status();
        let body = r.text().await.unwrap();
        assert_eq!(status, 503, "{path}: {body}");
        assert_eq!(
            retry_after.as_ref().map(|v| v.to_str().unwrap()),
            Some("1"),
            "{path}"
        );
        if path.starts_with("/api") {
            let body: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(body["error"]["code"], "unavailable", "{body}");
        }
    }
    pg.start_again();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;

    for path in ["/api/v1/plugins?q=before", "/api/v1/plugins", "/"] {
        let r = reqwest::get(format!("{}{path}", server.url)).await.unwrap();
        assert_eq!(r.status(), 200, "{path}: {}", r.text().await.unwrap());
    }
    let (status, body) = get(&server.url, "/tuf/metadata/timestamp.json").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = publish("after").await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = get(&server.url, "/api/v1/plugins?q=after").await;
    assert_eq!((status, body["total"].as_i64()), (200, Some(1)), "{body}");
}

/// Moving an installation: a SQLite marketplace with publishes, a yank, a suspension
/// and its lifting (signed metadata history), tokens and mirror jobs is copied into
/// PostgreSQL; the server started on the copy serves every `/tuf/` file byte for byte as
/// before, python-tuf downloads every target from it, tokens still publish, and search
/// works. A second copy into the now non-empty database is refused and changes nothing.
#[tokio::test]
async fn db_copy_moves_an_installation_from_sqlite_to_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_on(&dir.path().join("m"), &[], None);
    let defs: Vec<_> = (0..4)
        .map(|i| definition("gateway", &format!("edge-{i}"), "1.0.0"))
        .collect();
    let (files, targets, root) = {
        let server = Server::start(&m.data);
        let c = Client::new(&server.url);
        for def in &defs {
            let (status, body) = c.publish_signed(&m.acme_token, def, &[&m.acme]).await;
            assert_eq!(status, 201, "{body}");
        }
        let key = dir.path().join("acme.pem");
        m.acme.save_new(&key).unwrap();
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_marketplace"))
            .args([
                "yank",
                "acme/edge-3@1.0.0",
                "--server",
                &server.url,
                "--key",
            ])
            .arg(&key)
            .env("MARKETPLACE_TOKEN", &m.acme_token)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", output_text(&o));
        let theirs = definition("storage", "vault", "2.0.0");
        let (status, body) = c
            .publish_as("beta", &m.beta_token, &theirs, &[&m.beta])
            .await;
        assert_eq!(status, 201, "{body}");
        for verb in ["suspend", "resume"] {
            let o = marketplace(&[
                "publisher",
                verb,
                "beta",
                "--data-dir",
                m.data.to_str().unwrap(),
            ]);
            assert!(o.status.success(), "{}", output_text(&o));
        }
        let root = trusted_root(&server.url).await;
        let targets: Vec<String> = defs[..3]
            .iter()
            .map(|d| format!("acme/{}/{}.yaml", d.name(), d.version))
            .collect();
        (tuf_files(&server.url).await, targets, root)
    };
    assert!(files.len() > 10, "{} files", files.len());

    let pg = common::pg::shared();
    let url = pg.fresh().await;
    let from = format!("sqlite:{}", m.data.join("marketplace.db").display());
    let o = marketplace(&["db", "copy", "--from", &from, "--to", &url]);
    assert!(o.status.success(), "{}", output_text(&o));
    assert!(
        output_text(&o).contains("copied the server database"),
        "{}",
        output_text(&o)
    );
    assert!(
        output_text(&o).contains("tuf_metadata: "),
        "{}",
        output_text(&o)
    );

    // Only the copy from here on: the SQLite file moves away.
    std::fs::rename(m.data.join("marketplace.db"), dir.path().join("old.db")).unwrap();
    let server = Server::start_with(&m.data, &["--database", &url]);
    let after = tuf_files(&server.url).await;
    assert_eq!(after.len(), files.len());
    for ((path, bytes), (path_after, bytes_after)) in files.iter().zip(&after) {
        assert_eq!(path, path_after);
        assert!(bytes == bytes_after, "{path} differs after the copy");
    }
    let root_file = dir.path().join("root.json");
    std::fs::write(&root_file, &root).unwrap();
    let refs: Vec<&str> = targets.iter().map(String::as_str).collect();
    let report = python_tuf(&server.url, &root_file, &dir.path().join("ngclient"), &refs);
    for target in &targets {
        assert!(report["targets"][target.as_str()].is_object(), "{report}");
    }
    let (_, listing) = get(&server.url, "/api/v1/plugins?q=edge").await;
    assert_eq!(listing["total"], 3, "the yanked one stays out: {listing}");
    let c = Client::new(&server.url);
    let next = definition("gateway", "edge-9", "1.0.0");
    let (status, body) = c.publish_signed(&m.acme_token, &next, &[&m.acme]).await;
    assert_eq!(status, 201, "the copied token and ids publish on: {body}");
    assert!(!m.data.join("marketplace.db").exists());

    // The target is no longer empty: refused, untouched.
    let o = marketplace(&[
        "db",
        "copy",
        "--from",
        &format!("sqlite:{}", dir.path().join("old.db").display()),
        "--to",
        &url,
    ]);
    assert!(!o.status.success());
    assert!(output_text(&o).contains("not empty"), "{}", output_text(&o));
    let (_, listing) = get(&server.url, "/api/v1/plugins?q=edge").await;
    assert_eq!(listing["total"], 4, "{listing}");
}

/// Every `/tuf/` file a client can ask for: each role's versions from 1 to the newest
/// (by the timestamp, snapshot and targets chains) and every target by hash.
async fn tuf_files(base: &str) -> Vec<(String, Vec<u8>)> {
    let fetch = |path: String| async move {
        let r = reqwest::get(format!("{base}/tuf/{path}")).await.unwrap();
        (r.status().as_u16(), r.bytes().await.unwrap().to_vec())
    };
    let mut out = Vec::new();
    let (_, timestamp) = fetch("metadata/timestamp.json".into()).await;
    out.push(("metadata/timestamp.json".to_owned(), timestamp.clone()));
    let mut root_version = 1;
    loop {
        let path = format!("metadata/{root_version}.root.json");
        let (status, bytes) = fetch(path.clone()).await;
        if status != 200 {
            break;
        }
        out.push((path, bytes));
        root_version += 1;
    }
    let ts: serde_json::Value = serde_json::from_slice(&timestamp).unwrap();
    let newest_snapshot = ts["signed"]["meta"]["snapshot.json"]["version"]
        .as_u64()
        .unwrap();
    for v in 1..=newest_snapshot {
        let path = format!("metadata/{v}.snapshot.json");
        let (status, bytes) = fetch(path.clone()).await;
        assert_eq!(status, 200, "{path}");
        out.push((path, bytes));
    }
    let (_, snapshot) = fetch(format!("metadata/{newest_snapshot}.snapshot.json")).await;
    let snapshot: serde_json::Value = serde_json::from_slice(&snapshot).unwrap();
    for (file, meta) in snapshot["signed"]["meta"].as_object().unwrap() {
        let role = file.trim_end_matches(".json");
        let newest = meta["version"].as_u64().unwrap();
        for v in 1..=newest {
            let path = format!("metadata/{v}.{role}.json");
            let (status, bytes) = fetch(path.clone()).await;
            if status == 200 {
                if v == newest {
                    let signed: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
                    for (target, info) in signed["signed"]["targets"].as_object().unwrap() {
                        let sha = info["hashes"]["sha256"].as_str().unwrap();
                        let (dir, name) = target.rsplit_once('/').unwrap();
                        let path = format!("targets/{dir}/{sha}.{name}");
                        let (status, bytes) = fetch(path.clone()).await;
                        assert_eq!(status, 200, "{path}");
                        out.push((path, bytes));
                    }
                }
                out.push((path, bytes));
            }
        }
    }
    out.sort();
    out
}

/// A worker's state copied from its SQLite file into PostgreSQL: sources with their
/// trusted metadata and status, last good definitions, sideloads and tokens read back
/// the same; its change feed continues from where it was.
#[tokio::test]
async fn db_copy_moves_a_workers_state() {
    use marketplace::db::Database;
    use marketplace::sync::SyncStore;
    use marketplace::sync::sideload::{OnConflict, Scope};
    use marketplace::sync::store::{
        LastGood, Sideloads, SourceDefinition, Sources, Tokens, Trusted, TrustedMetadata,
        TrustedVersions, summary_json,
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sync.db");
    let source = SyncStore::open(&file).await.unwrap();
    source
        .add_source("main", "https://main.example/")
        .await
        .unwrap();
    let defs: Vec<_> = (0..3)
        .map(|i| definition("gateway", &format!("edge-{i}"), "1.0.0"))
        .collect();
    let rows: Vec<SourceDefinition> = defs
        .iter()
        .map(|d| SourceDefinition {
            target: format!("acme/{}/{}.yaml", d.name(), d.version),
            publisher: "acme".into(),
            name: d.name().into(),
            version: d.version.to_string(),
            hash: d.hash.clone(),
            yanked: false,
            signer_key_ids: "k1".into(),
            extras: String::new(),
            bytes: Some((d.bytes.clone(), summary_json(d))),
        })
        .collect();
    let trusted = Trusted {
        versions: TrustedVersions {
            root: 1,
            timestamp: 5,
            snapshot: 4,
            targets: 3,
            timestamp_expires_at: 2_000_000_000,
            expires_at: 2_000_000_000,
            expires_role: "timestamp".into(),
        },
        definitions: 0,
        root: b"root".to_vec(),
        timestamp: b"ts".to_vec(),
        snapshot: b"snap".to_vec(),
    };
    source
        .replace_source("main", &rows, &[], &trusted, 100)
        .await
        .unwrap();
    source
        .add_sideload("blue", &defs[0], "t1", 100, OnConflict::Refuse)
        .await
        .unwrap();
    let (_, token) = source
        .create_token(&Scope::Org("blue".into()), 100)
        .await
        .unwrap();
    let generation = source.generation().await.unwrap();
    source.close().await;

    let pg = common::pg::shared();
    let url = pg.fresh().await;
    let o = marketplace(&[
        "db",
        "copy",
        "--from",
        &format!("sqlite:{}", file.display()),
        "--to",
        &url,
    ]);
    assert!(o.status.success(), "{}", output_text(&o));
    assert!(
        output_text(&o).contains("copied the worker database"),
        "{}",
        output_text(&o)
    );

    let copy = SyncStore::connect(&Database::parse(&url).unwrap(), 2)
        .await
        .unwrap();
    let status = copy.status().await.unwrap();
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].definitions, 3);
    assert_eq!(
        copy.trusted("main").await.unwrap().unwrap().versions,
        trusted.versions
    );
    assert_eq!(copy.source_definitions("main").await.unwrap().len(), 3);
    assert_eq!(
        copy.sideload_bytes("blue", "edge-0", "1.0.0")
            .await
            .unwrap()
            .as_deref(),
        Some(defs[0].bytes.as_slice())
    );
    assert_eq!(
        copy.token_scope(&token).await.unwrap().unwrap().1,
        Scope::Org("blue".into())
    );
    assert_eq!(copy.tokens().await.unwrap().len(), 1);
    assert_eq!(copy.generation().await.unwrap(), generation);
}

/// `db copy` reads its source in one snapshot: a writer adding plugins to the SQLite
/// source while the copy runs cannot make it copy a version without its plugin (which
/// PostgreSQL's foreign keys refuse) or a plugin without its versions. The copy succeeds,
/// and every copied plugin arrives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn db_copy_reads_one_snapshot_while_the_source_is_written() {
    use marketplace::db::Database;
    use marketplace::store::Store;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("marketplace.db");
    let from = format!("sqlite:{}", file.display());
    let source = Store::connect(&Database::parse(&from).unwrap(), 4)
        .await
        .unwrap();
    for i in 0..600 {
        let def = common::publishing::definition("gateway", &format!("seed-{i}"), "1.0.0");
        source
            .insert_version("acme", &def, common::NOW)
            .await
            .unwrap();
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (source, stop) = (source.clone(), stop.clone());
        tokio::spawn(async move {
            let mut written = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let def =
                    common::publishing::definition("gateway", &format!("late-{written}"), "1.0.0");
                source
                    .insert_version("acme", &def, common::NOW)
                    .await
                    .unwrap();
                written += 1;
            }
            written
        })
    };

    let pg = common::pg::shared();
    let url = pg.fresh().await;
    let (f, u) = (from.clone(), url.clone());
    let o =
        tokio::task::spawn_blocking(move || marketplace(&["db", "copy", "--from", &f, "--to", &u]))
            .await
            .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.await.unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    assert!(written > 0, "the writer wrote during the copy");

    let target = Store::connect(&Database::parse(&url).unwrap(), 2)
        .await
        .unwrap();
    let listed = target
        .list_plugins(&marketplace::store::PluginQuery {
            per_page: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    let total = listed.total;
    assert!(total >= 600, "{total} plugins copied");
    // Whole plugins only: every copied plugin has its version and its summary.
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let (plugins, versions): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM plugins), (SELECT COUNT(*) FROM plugin_versions)",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!((plugins, versions), (total, total));
}
