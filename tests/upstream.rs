//! Following an upstream marketplace online (`serve --upstream`), with two real
//! marketplaces on loopback: the upstream with publishers acme, beta and gamma; the
//! downstream with its own root and its own publisher gamma, following the upstream
//! every second. python-tuf, trusting only the downstream's root, refreshes it and
//! downloads every target; the upstream publishers' role files are the same bytes on
//! both; yanks, suspensions, new versions and a root rotation upstream reach the
//! downstream; a sync worker of the downstream sees the upstream publishers by name.
//! Bundles carry it all into a site without network (`bundle`). Images come along from the upstream's own `/v2/` (`images`). A role tampered on its
//! way (the test's mirror in between, the named fake of these
//! tests) holds back that publisher alone.

#[path = "upstream/bundle.rs"]
mod bundle;
mod common;
#[path = "upstream/images.rs"]
mod images;
#[path = "upstream/online.rs"]
mod online;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::publishing::{add_publisher, marketplace};
use marketplace::trust::SigningKey;
use serde_json::Value;

/// A marketplace with its own root key and publishers `names`, not yet serving: its
/// data directory and each publisher's key and token.
fn repo(dir: &Path, names: &[&str]) -> (PathBuf, Vec<(SigningKey, String)>) {
    std::fs::create_dir_all(dir).unwrap();
    let data = dir.join("data");
    let root = dir.join("root.pem");
    SigningKey::generate().unwrap().save_new(&root).unwrap();
    let o = marketplace(&[
        "repo",
        "init",
        "--data-dir",
        data.to_str().unwrap(),
        "--root-key",
        root.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", common::output_text(&o));
    let publishers = names
        .iter()
        .map(|n| {
            let key = SigningKey::generate().unwrap();
            let token = add_publisher(&data, n, &[&key], 1);
            (key, token)
        })
        .collect();
    (data, publishers)
}

/// Polls the downstream's `/api/v1/upstream` until `done` holds for its last round.
async fn until_round(url: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let status: Value = reqwest::get(format!("{url}/api/v1/upstream"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if done(&status["last_round"]) {
            return status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no round {what} within a minute; last: {status:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A publisher's entry in a round's report.
fn publisher<'a>(round: &'a Value, name: &str) -> &'a Value {
    round["publishers"]
        .as_array()
        .and_then(|all| all.iter().find(|p| p["name"] == name))
        .unwrap_or(&Value::Null)
}

async fn bytes(url: &str) -> (u16, Vec<u8>) {
    let r = reqwest::get(url).await.unwrap();
    (r.status().as_u16(), r.bytes().await.unwrap().to_vec())
}
