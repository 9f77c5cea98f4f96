//! The sync worker against a real marketplace on loopback: first and later rounds,
//! yanks, and a marketplace that goes down (last good state kept, reason recorded).

mod common;

use std::process::Command;

use common::publishing::{Client, definition, setup};
use common::worker::sync_once;
use common::{Server, output_text as out, trusted_root};
use marketplace::sync::SyncStore;
use marketplace::sync::store::LastGood as _;

#[tokio::test]
async fn rounds_follow_the_marketplace_and_keep_the_last_good_state() {
    let dir = tempfile::tempdir().unwrap();
    let (data, key, token, _) = setup(dir.path());
    let server = Server::start(&data);
    let c = Client::new(&server.url);
    let first = definition("gateway", "edge-gateway", "1.0.0");
    let second = definition("storage", "fast-disk", "2.1.0");
    for def in [&first, &second] {
        let (status, body) = c.publish_signed(&token, def, &[&key]).await;
        assert_eq!(status, 201, "{body}");
    }
    std::fs::write(
        dir.path().join("root.json"),
        trusted_root(&server.url).await,
    )
    .unwrap();
    let config = dir.path().join("sync.yaml");
    std::fs::write(
        &config,
        format!(
            "dataDir: worker\nsources:\n  - name: main\n    url: {}\n    root: root.json\n    interval: 1m\n",
            server.url
        ),
    )
    .unwrap();
    let builtins = marketplace::catalog::builtin::definitions().unwrap().len();

    // First round downloads everything; a second sees the trusted timestamp and stops.
    let o = sync_once(&config);
    assert!(o.status.success(), "{}", out(&o));
    let all = builtins + 2;
    assert!(
        out(&o).contains(&format!("main: {all} definitions ({all} downloaded)")),
        "{}",
        out(&o)
    );
    let o = sync_once(&config);
    assert!(
        out(&o).contains(&format!("main: {all} definitions, unchanged")),
        "{}",
        out(&o)
    );

    // A new version arrives alone; a yank flips the flag without a download.
    let third = definition("gateway", "edge-gateway", "1.1.0");
    let (status, body) = c.publish_signed(&token, &third, &[&key]).await;
    assert_eq!(status, 201, "{body}");
    let o = Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args([
            "yank",
            "acme/edge-gateway@1.0.0",
            "--server",
            &server.url,
            "--key",
        ])
        .arg({
            let p = dir.path().join("acme.pem");
            key.save_new(&p).unwrap();
            p
        })
        .env("MARKETPLACE_TOKEN", &token)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", out(&o));
    let o = sync_once(&config);
    assert!(
        out(&o).contains(&format!("main: {} definitions (1 downloaded)", all + 1)),
        "{}",
        out(&o)
    );
    let db = dir.path().join("worker/sync.db");
    {
        let store = SyncStore::open(&db).await.unwrap();
        let defs = store.source_definitions("main").await.unwrap();
        let yanked: Vec<&str> = defs.iter().filter(|d| d.2).map(|d| d.0.as_str()).collect();
        assert_eq!(yanked, ["acme/edge-gateway/1.0.0.yaml"]);
        let stored = defs
            .iter()
            .find(|d| d.0 == "acme/fast-disk/2.1.0.yaml")
            .unwrap();
        assert_eq!(stored.3, second.bytes, "bytes as published");
        store.close().await;
    }

    // The marketplace goes down: the round fails, the state stays, /status says why.
    drop(server);
    let o = sync_once(&config);
    assert!(!o.status.success());
    assert!(
        out(&o).contains("main: failed (unreachable)"),
        "{}",
        out(&o)
    );
    let store = SyncStore::open(&db).await.unwrap();
    let status = store.status().await.unwrap();
    assert_eq!(status[0].definitions as usize, all + 1);
    assert_eq!(status[0].last_reason.as_deref(), Some("unreachable"));
    assert_eq!(status[0].consecutive_failures, 1);
    assert!(status[0].last_success_at.is_some());
    assert!(status[0].trusted.as_ref().unwrap().snapshot >= 4);
}

#[test]
fn no_sources_is_fine_and_a_bad_config_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sync.yaml");
    std::fs::write(&config, "dataDir: w\n").unwrap();
    let o = sync_once(&config);
    assert!(o.status.success(), "{}", out(&o));
    assert!(out(&o).contains("built-in definitions alone"));
    std::fs::write(
        &config,
        "sources:\n  - {name: x, url: 'gopher://h/', root: r.json}\n",
    )
    .unwrap();
    let o = sync_once(&config);
    assert!(!o.status.success());
    assert!(out(&o).contains("sources[0].url"), "{}", out(&o));
}
