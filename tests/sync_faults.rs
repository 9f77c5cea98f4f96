//! A sync worker facing a hostile or broken marketplace: rolled-back, expired, tampered
//! and foreign-signed metadata are refused, the last good state stays in use and
//! `/status` names the reason; a worker killed (SIGKILL) mid-round leaves a consistent
//! store. The faults come from `common::mirror`, a mirror the test controls in front of
//! a real marketplace (the fake these tests need: a real marketplace never serves such
//! metadata by itself).

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::mirror::Mirror;
use common::publishing::{Client, definition, setup_with};
use common::worker::{Api, Source, sync_command, sync_once, token, write_config};
use common::{Server, output_text as out, trusted_root};
use marketplace::definition::Definition;
use marketplace::sync::SyncStore;

fn config_via(dir: &Path, mirror: &Mirror, root: &[u8]) -> std::path::PathBuf {
    let root_file = dir.join("root.json");
    std::fs::write(&root_file, root).unwrap();
    write_config(
        dir,
        &[Source {
            name: "main",
            url: &mirror.url,
            root: &root_file,
            priority: 0,
        }],
    )
}

/// Runs a round that must fail with `reason`; the last good state must still be served.
async fn refused(config: &Path, api: &Api, reader: &str, reason: &str, definitions: u64) {
    let o = sync_once(config);
    assert!(!o.status.success(), "{}", out(&o));
    assert!(
        out(&o).contains(&format!("main: failed ({reason})")),
        "want {reason}: {}",
        out(&o)
    );
    let s = api.source_status("main").await;
    assert_eq!(s["lastReason"], reason, "{s}");
    assert!(s["lastError"].as_str().unwrap().len() > 10, "{s}");
    assert_eq!(s["definitions"], definitions, "{s}");
    assert!(s["lastSuccessAt"].is_i64());
    let (status, body) = api.get("/orgs/o/plugins/second", Some(reader)).await;
    assert_eq!(status, 200, "the last good state is served: {body}");
}

/// Where the worker fetches a target: the TUF specification's consistent-snapshot name.
fn target_path(def: &Definition, publisher: &str) -> String {
    format!(
        "/tuf/targets/{publisher}/{}/{}.{}.yaml",
        def.name(),
        def.hash.trim_start_matches("sha256:"),
        def.version
    )
}

#[tokio::test]
async fn rolled_back_tampered_and_foreign_signed_metadata_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let other = setup_with(&dir.path().join("other"), &[]);
    let server = Server::start(&m.data);
    let foreign = Server::start(&other.data);
    let mirror = Mirror::start(&server.url);
    let c = Client::new(&server.url);
    let publish = |def: Definition| {
        let (c, m) = (&c, &m);
        async move {
            let (status, body) = c.publish_signed(&m.acme_token, &def, &[&m.acme]).await;
            assert_eq!(status, 201, "{body}");
        }
    };
    publish(definition("gateway", "first", "1.0.0")).await;
    let config = config_via(dir.path(), &mirror, &trusted_root(&server.url).await);
    assert!(sync_once(&config).status.success());
    let before = mirror.recorded();
    publish(definition("gateway", "second", "1.0.0")).await;
    let o = sync_once(&config);
    assert!(
        out(&o).contains("main: 10 definitions (1 downloaded)"),
        "{}",
        out(&o)
    );
    let api = Api::start(&config, false);
    let reader = token(&config, None);

    // Rolled back: the mirror replays the index as it was before `second`. Each round is
    // a new process, so the rollback is caught from the trusted state on disk.
    mirror.freeze(before);
    refused(&config, &api, &reader, "rolled_back", 10).await;
    let s = api.source_status("main").await;
    assert_eq!(s["consecutiveFailures"], 1);

    // A tampered target: same length, other bytes than its role signed; then longer.
    mirror.thaw();
    let third = definition("gateway", "third", "1.0.0");
    publish(third.clone()).await;
    let text = String::from_utf8(third.bytes.clone()).unwrap();
    let evil = text.replacen("third", "thirc", 1).into_bytes();
    assert_eq!(evil.len(), third.bytes.len());
    mirror.set(&target_path(&third, "acme"), evil);
    refused(&config, &api, &reader, "tampered", 10).await;
    let mut longer = third.bytes.clone();
    longer.extend_from_slice(b"# injected\n");
    mirror.set(&target_path(&third, "acme"), longer);
    refused(&config, &api, &reader, "tampered", 10).await;

    // Tampered metadata: timestamp.json edited after signing.
    mirror.thaw();
    let fresh = reqwest::get(format!("{}/tuf/metadata/timestamp.json", mirror.url))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let mut edited: serde_json::Value = serde_json::from_slice(&fresh).unwrap();
    let v = edited["signed"]["version"].as_u64().unwrap();
    edited["signed"]["version"] = (v + 100).into();
    mirror.set(
        "/tuf/metadata/timestamp.json",
        serde_json::to_vec(&edited).unwrap(),
    );
    refused(&config, &api, &reader, "bad_signature", 10).await;

    // Wrongly signed: another marketplace's (validly signed) timestamp.
    let theirs = reqwest::get(format!("{}/tuf/metadata/timestamp.json", foreign.url))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    mirror.set("/tuf/metadata/timestamp.json", theirs.to_vec());
    refused(&config, &api, &reader, "bad_signature", 10).await;
    assert_eq!(api.source_status("main").await["consecutiveFailures"], 5);

    // The mirror heals: the next round catches up and clears the failure.
    mirror.thaw();
    let o = sync_once(&config);
    assert!(
        out(&o).contains("main: 11 definitions (1 downloaded)"),
        "{}",
        out(&o)
    );
    let s = api.source_status("main").await;
    assert!(s["lastReason"].is_null(), "{s}");
    assert_eq!(s["consecutiveFailures"], 0);
    let (status, _) = api.get("/orgs/o/plugins/third", Some(&reader)).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_frozen_mirror_expires_and_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // The shortest timestamp lifetime the server allows; the server re-signs it, the
    // frozen mirror does not.
    let m = setup_with(&dir.path().join("m"), &["--timestamp-expires", "1m"]);
    let server = Server::start(&m.data);
    let mirror = Mirror::start(&server.url);
    let c = Client::new(&server.url);
    let def = definition("gateway", "second", "1.0.0");
    assert_eq!(
        c.publish_signed(&m.acme_token, &def, &[&m.acme]).await.0,
        201
    );
    let config = config_via(dir.path(), &mirror, &trusted_root(&server.url).await);
    assert!(sync_once(&config).status.success());
    mirror.freeze(mirror.recorded());
    let api = Api::start(&config, false);
    let reader = token(&config, None);
    let s = api.source_status("main").await;
    let expires = s["trusted"]["timestampExpiresAt"].as_i64().unwrap();
    assert_eq!(s["trusted"]["expiresRole"], "timestamp", "{s}");
    let wait = expires + 1 - marketplace::clock::now();
    assert!((0..=61).contains(&wait), "{s}");
    tokio::time::sleep(Duration::from_secs(wait as u64)).await;
    refused(&config, &api, &reader, "expired", 9).await;
}

#[tokio::test]
async fn a_worker_killed_mid_round_leaves_a_consistent_store() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let server = Server::start(&m.data);
    // 300 definitions in one signed batch, through the real CLI.
    let files = dir.path().join("defs");
    std::fs::create_dir(&files).unwrap();
    let mut paths = Vec::new();
    for i in 0..300 {
        let p = files.join(format!("p{i}.yaml"));
        std::fs::write(&p, definition("storage", &format!("p{i}"), "1.0.0").bytes).unwrap();
        paths.push(p);
    }
    let key = dir.path().join("acme.pem");
    m.acme.save_new(&key).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(["publish", "--server", &server.url, "--key"])
        .arg(&key)
        .args(&paths)
        .env("MARKETPLACE_TOKEN", &m.acme_token)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", out(&o));
    let all = 300 + 8;
    let mirror = Mirror::start(&server.url);
    mirror.delay_targets(Duration::from_millis(10));
    let config = config_via(dir.path(), &mirror, &trusted_root(&server.url).await);
    let db = dir.path().join("worker/sync.db");

    let mut kills = 0;
    for after in [1, 100, 250, 300] {
        let seen = mirror.target_requests();
        let mut child = sync_command(&config)
            .arg("--once")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while mirror.target_requests() < seen + after
            && child.try_wait().unwrap().is_none()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        child.wait().unwrap();
        // Whatever the moment, the store is whole: the source has either no state or a
        // complete round, and the database passes SQLite's own check.
        let store = SyncStore::open(&db).await.unwrap();
        let status = store.status().await.unwrap();
        let n = status.first().map_or(0, |s| s.definitions);
        assert!(
            n == 0 || n == all as u64,
            "after {after} downloads: {n} definitions"
        );
        assert_eq!(
            status.first().and_then(|s| s.trusted.clone()).is_some(),
            n > 0
        );
        let check: String = sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_one(
                &sqlx::SqlitePool::connect(&format!("sqlite:{}", db.display()))
                    .await
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(check, "ok");
        store.close().await;
    }
    assert!(kills >= 3, "the worker was killed mid-round {kills} times");

    // Restarted, the worker completes the round from where the store stands.
    mirror.delay_targets(Duration::ZERO);
    let o = sync_once(&config);
    assert!(o.status.success(), "{}", out(&o));
    assert!(
        out(&o).contains(&format!("main: {all} definitions")),
        "{}",
        out(&o)
    );
    let o = sync_once(&config);
    assert!(
        out(&o).contains(&format!("main: {all} definitions, unchanged")),
        "{}",
        out(&o)
    );
}

/// Network hygiene: a mirror that trickles bytes hits the per-request deadline, a slow
/// one the per-round deadline, each reported as `timeout` within seconds (not minutes);
/// an oversized `timestamp.json` is cut off at python-tuf's cap and reported as
/// `invalid_metadata`. The last good state stays in use throughout.
#[tokio::test]
async fn slow_trickling_and_oversized_answers_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let server = Server::start(&m.data);
    let mirror = Mirror::start(&server.url);
    let c = Client::new(&server.url);
    let second = definition("gateway", "second", "1.0.0");
    assert_eq!(
        c.publish_signed(&m.acme_token, &second, &[&m.acme]).await.0,
        201
    );
    let config = config_via(dir.path(), &mirror, &trusted_root(&server.url).await);
    // The first round runs with the default deadlines: on a loaded machine a debug
    // build can take longer than 2 s over one file, and this round only sets the scene.
    let o = sync_once(&config);
    assert!(o.status.success(), "{}", out(&o));
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace(
            "    priority: 0\n",
            "    priority: 0\n    requestTimeout: 2s\n    roundTimeout: 30s\n",
        ),
    )
    .unwrap();
    let api = Api::start(&config, false);
    let reader = token(&config, None);
    // Something new, so each round below has to fetch more than the timestamp.
    let third = definition("gateway", "third", "1.0.0");
    assert_eq!(
        c.publish_signed(&m.acme_token, &third, &[&m.acme]).await.0,
        201
    );

    // 64 KiB, one byte every 50 ms: the old client waited on it for minutes.
    mirror.trickle("/tuf/metadata/timestamp.json", Duration::from_millis(50));
    let started = Instant::now();
    refused(&config, &api, &reader, "timeout", 9).await;
    let took = started.elapsed();
    eprintln!("a trickling timestamp.json: the round gave up after {took:.1?} (requestTimeout 2s)");
    assert!(took < Duration::from_secs(15), "{took:?}");
    let s = api.source_status("main").await;
    assert!(
        s["lastError"]
            .as_str()
            .unwrap()
            .contains("timestamp.json: no complete answer within 2 seconds"),
        "{s}"
    );

    // Every answer 1.2 s late: each request meets its 2 s deadline, the round (root,
    // timestamp, snapshot, ... one after another) does not meet a 3 s one.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("roundTimeout: 30s", "roundTimeout: 3s"),
    )
    .unwrap();
    mirror.thaw();
    mirror.set_trickle_off();
    mirror.delay_all(Duration::from_millis(1200));
    let started = Instant::now();
    refused(&config, &api, &reader, "timeout", 9).await;
    eprintln!(
        "every answer 1.2 s late: the round gave up after {:.1?} (roundTimeout 3s)",
        started.elapsed()
    );
    let s = api.source_status("main").await;
    assert!(
        s["lastError"]
            .as_str()
            .unwrap()
            .contains("longer than its 3 seconds deadline (roundTimeout)"),
        "{s}"
    );

    // 100 KB where a timestamp of a few hundred bytes belongs.
    mirror.delay_all(Duration::ZERO);
    let huge = format!("{{\"signed\": \"{}\"}}", "x".repeat(100_000));
    mirror.set("/tuf/metadata/timestamp.json", huge.into_bytes());
    refused(&config, &api, &reader, "invalid_metadata", 9).await;
    let s = api.source_status("main").await;
    assert!(
        s["lastError"]
            .as_str()
            .unwrap()
            .contains("larger than the 16384 bytes allowed"),
        "{s}"
    );

    // Healed: the next round catches up.
    mirror.thaw();
    let o = sync_once(&config);
    assert!(
        out(&o).contains("main: 10 definitions (1 downloaded)"),
        "{}",
        out(&o)
    );
}
