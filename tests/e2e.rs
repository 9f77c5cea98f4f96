//! End to end: the real binary on a loopback port with a fresh data directory.

mod common;

use std::time::{Duration, Instant};

use common::Server;
use marketplace::catalog::builtin;

async fn fetch(url: &str) -> (u16, String) {
    let r = reqwest::get(url).await.expect("request");
    (r.status().as_u16(), r.text().await.expect("body"))
}

#[tokio::test]
async fn serves_the_builtin_catalog_from_a_fresh_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data);
    assert!(
        data.join("marketplace.db").exists(),
        "database created on first start"
    );

    let n = builtin::definitions().unwrap().len();
    let (status, body) = fetch(&format!("{}/api/v1/plugins?per_page=100", server.url)).await;
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["total"], n);

    let (status, page) = fetch(&format!("{}/", server.url)).await;
    assert_eq!(status, 200);
    assert!(page.contains(&format!("{n} plugins")));
    let (status, page) = fetch(&format!(
        "{}/plugins/fundament/postgres-operator",
        server.url
    ))
    .await;
    assert_eq!(status, 200);
    assert!(page.contains("<code>plugin-postgres-operator</code>"));
    assert_eq!(fetch(&format!("{}/healthz", server.url)).await.0, 200);
    assert_eq!(fetch(&format!("{}/readyz", server.url)).await.0, 200);
}

#[tokio::test]
async fn stops_cleanly_on_sigterm_and_restarts_on_the_same_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    assert_eq!(fetch(&format!("{}/readyz", server.url)).await.0, 200);

    let pid = server.child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "server did not stop within 10 s of SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "graceful exit code 0, got {status:?}");

    // Loading the built-ins again on restart is idempotent: still one entry each.
    let server = Server::start(dir.path());
    let (_, body) = fetch(&format!("{}/api/v1/plugins?per_page=100", server.url)).await;
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["total"], builtin::definitions().unwrap().len());
}

/// A client that writes its whole body before reading (reqwest, as curl does) gets the
/// server's answer even when the server answers without reading the body: a bad token
/// on a publish, a body over the limit, a path that does not exist. Without draining,
/// the server's close sends a reset and the client reports a broken pipe instead.
#[tokio::test]
async fn early_answers_reach_clients_still_sending_their_body() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let client = reqwest::Client::new();
    let cases = [
        ("/api/v1/publishers/acme/definitions", 2 * 1024 * 1024, 401),
        ("/api/v1/publishers/acme/definitions", 20 * 1024 * 1024, 413),
        ("/api/v1/nowhere", 1024 * 1024, 404),
        ("/nowhere", 1024 * 1024, 404),
    ];
    for attempt in 0..10 {
        for (path, size, status) in cases {
            let r = client
                .post(format!("{}{path}", server.url))
                .bearer_auth("mkt_not_a_token")
                .body(vec![b'#'; size])
                .send()
                .await
                .unwrap_or_else(|e| panic!("attempt {attempt}, {path}, {size} bytes: {e:?}"));
            assert_eq!(r.status().as_u16(), status, "{path}");
        }
    }
}
