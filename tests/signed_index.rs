//! The signed index end to end: `marketplace repo init`, the real server, and
//! python-tuf's ngclient as an independent verifier.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Server, python, python_tuf, trusted_root};
use marketplace::catalog::builtin;
use marketplace::trust::SigningKey;

/// The TUF target name of a built-in definition.
fn builtin_target(name: &str) -> String {
    let def = builtin::definitions()
        .unwrap()
        .into_iter()
        .find(|d| d.name() == name)
        .unwrap();
    format!("fundament/{name}/{}.yaml", def.version)
}

fn marketplace(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(args)
        .output()
        .expect("binary runs")
}

fn init_repo(dir: &Path, root_keys: usize) -> PathBuf {
    init_repo_with(dir, root_keys, &[])
}

fn init_repo_with(dir: &Path, root_keys: usize, extra: &[&str]) -> PathBuf {
    let data = dir.join("data");
    let mut args = vec![
        "repo".to_owned(),
        "init".into(),
        "--data-dir".into(),
        data.display().to_string(),
    ];
    for i in 0..root_keys {
        let path = dir.join(format!("root-{i}.pem"));
        SigningKey::generate().unwrap().save_new(&path).unwrap();
        args.extend(["--root-key".into(), path.display().to_string()]);
    }
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend_from_slice(extra);
    let out = marketplace(&args);
    assert!(
        out.status.success(),
        "repo init failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    data
}

#[tokio::test]
async fn python_tuf_verifies_and_downloads_every_builtin() {
    let dir = tempfile::tempdir().unwrap();
    let data = init_repo(dir.path(), 2);
    let server = Server::start(&data);

    // The trust anchor, fetched once over a channel the client trusts.
    let root = reqwest::get(format!("{}/tuf/metadata/1.root.json", server.url))
        .await
        .unwrap();
    assert_eq!(root.status(), 200);
    let root_path = dir.path().join("trusted-root.json");
    std::fs::write(&root_path, root.bytes().await.unwrap()).unwrap();

    let defs = builtin::definitions().unwrap();
    let targets: Vec<String> = defs
        .iter()
        .map(|d| format!("fundament/{}/{}.yaml", d.name(), d.version))
        .collect();
    let cache = dir.path().join("client");
    let mut cmd = Command::new(python());
    cmd.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tuf_client.py"))
        .arg(&server.url)
        .arg(&root_path)
        .arg(&cache)
        .args(&targets);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "python-tuf refused the index: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            result["root"].as_u64(),
            result["timestamp"].as_u64(),
            result["snapshot"].as_u64()
        ),
        (Some(1), Some(1), Some(1))
    );
    for (def, name) in defs.iter().zip(&targets) {
        let t = &result["targets"][name];
        assert_eq!(
            t["sha256"].as_str(),
            def.hash.strip_prefix("sha256:"),
            "{name}"
        );
        assert_eq!(t["length"].as_u64(), Some(def.bytes.len() as u64));
        assert_eq!(t["custom"]["name"], def.name());
        assert_eq!(t["custom"]["yanked"], false);
        assert_eq!(t["custom"]["image"], def.image.to_string());
        let downloaded = std::fs::read(t["path"].as_str().unwrap()).unwrap();
        assert_eq!(downloaded, def.bytes, "{name}: exact bytes");
    }
}

#[tokio::test]
async fn metadata_is_re_signed_before_it_expires() {
    use marketplace::trust::server::state::{OnlineKeys, Refreshed, refresh};
    let dir = tempfile::tempdir().unwrap();
    let data = init_repo_with(
        dir.path(),
        1,
        &[
            "--timestamp-expires",
            "1h",
            "--snapshot-expires",
            "2h",
            "--targets-expires",
            "4h",
        ],
    );
    let store = marketplace::store::Store::open(&data.join("marketplace.db"))
        .await
        .unwrap();
    let keys = OnlineKeys::load(&marketplace::trust::server::repo::keys_dir(&data))
        .unwrap()
        .expect("repo init wrote the online keys");
    let now = marketplace::clock::now();

    assert_eq!(
        refresh(&store, &keys, now).await.unwrap(),
        Refreshed::default(),
        "fresh metadata is left alone"
    );
    // Past half of the timestamp's hour: only the timestamp is re-signed.
    let r = refresh(&store, &keys, now + 31 * 60).await.unwrap();
    assert_eq!(
        r,
        Refreshed {
            targets: None,
            snapshot: None,
            timestamp: Some(2)
        }
    );
    // Past half of the snapshot's two hours: snapshot and, with it, timestamp.
    let r = refresh(&store, &keys, now + 61 * 60).await.unwrap();
    assert_eq!(
        r,
        Refreshed {
            targets: None,
            snapshot: Some(2),
            timestamp: Some(3)
        }
    );
    // Past half of targets' four hours: targets, snapshot and timestamp.
    let r = refresh(&store, &keys, now + 121 * 60).await.unwrap();
    assert_eq!(
        r,
        Refreshed {
            targets: Some(2),
            snapshot: Some(3),
            timestamp: Some(4)
        }
    );
    let ts = store.latest_metadata("timestamp").await.unwrap().unwrap();
    assert_eq!(
        ts.expires_at - ts.created_at,
        3600,
        "the lifetime chosen at init is kept"
    );
    store.close().await;

    // Both independent clients accept the re-signed chain.
    let server = Server::start(&data);
    let root = trusted_root(&server.url).await;
    let root_path = dir.path().join("root.json");
    std::fs::write(&root_path, &root).unwrap();
    let storage = builtin_target("storage");
    let report = python_tuf(&server.url, &root_path, &dir.path().join("py"), &[&storage]);
    assert_eq!(
        (report["timestamp"].as_u64(), report["snapshot"].as_u64()),
        (Some(4), Some(3))
    );
    assert!(report["targets"][&storage].is_object());
    let base = url::Url::parse(&format!("{}/", server.url)).unwrap();
    let repo = common::tough::load(&root, &base, &dir.path().join("tough"))
        .await
        .unwrap();
    assert_eq!(repo.snapshot().signed.version.get(), 3);
    assert_eq!(repo.targets().signed.version.get(), 2);
}

#[tokio::test]
async fn python_tuf_refuses_a_root_it_does_not_trust() {
    let dir = tempfile::tempdir().unwrap();
    let data = init_repo(dir.path(), 1);
    let server = Server::start(&data);
    // A root from another repository: same shape, other keys.
    let other = tempfile::tempdir().unwrap();
    let other_data = init_repo(other.path(), 1);
    let other_server = Server::start(&other_data);
    let foreign = trusted_root(&other_server.url).await;
    let root_path = dir.path().join("foreign-root.json");
    std::fs::write(&root_path, foreign).unwrap();

    let out = Command::new(python())
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tuf_client.py"))
        .arg(&server.url)
        .arg(&root_path)
        .arg(dir.path().join("client"))
        .arg(builtin_target("storage"))
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "a client must refuse metadata not signed by its trusted root"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Unsigned") || err.contains("signature") || err.contains("threshold"),
        "{err}"
    );
}

#[test]
fn repo_init_refuses_an_impossible_threshold_and_a_second_run() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("root.pem");
    SigningKey::generate().unwrap().save_new(&key).unwrap();
    let data = dir.path().join("data");
    let d = data.to_str().unwrap();
    let k = key.to_str().unwrap();
    let out = marketplace(&[
        "repo",
        "init",
        "--data-dir",
        d,
        "--root-key",
        k,
        "--root-threshold",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("threshold 2 is impossible with 1 key"));
    assert!(
        marketplace(&["repo", "init", "--data-dir", d, "--root-key", k])
            .status
            .success()
    );
    let again = marketplace(&["repo", "init", "--data-dir", d, "--root-key", k]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already initialized"));
    // Root keys are never copied into the data directory.
    let root_pem = std::fs::read_to_string(&key).unwrap();
    for entry in std::fs::read_dir(data.join("keys")).unwrap() {
        assert_ne!(
            std::fs::read_to_string(entry.unwrap().path()).unwrap(),
            root_pem
        );
    }
}

#[tokio::test]
async fn our_client_verifies_and_reads_every_builtin() {
    use marketplace::trust::client::{Failure, Fetcher, Limits, TrustedState, refresh, target_url};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&init_repo(dir.path(), 1));
    let root = trusted_root(&server.url).await;
    let base = url::Url::parse(&format!("{}/", server.url)).unwrap();
    let fetch = Fetcher::new(std::time::Duration::from_secs(10)).unwrap();
    let trusted = TrustedState {
        root: &root,
        timestamp: None,
        snapshot: None,
    };
    let now = marketplace::clock::now();
    let index = refresh(&fetch, &base, trusted, &Limits::default(), now)
        .await
        .expect("index verifies");
    assert_eq!(index.publishers.len(), 1);
    let fundament = index.publishers[0]
        .outcome
        .as_ref()
        .expect("built-ins verify");
    let defs = builtin::definitions().unwrap();
    assert_eq!(fundament.listed.len(), defs.len());
    for def in &defs {
        let name = format!("fundament/{}/{}.yaml", def.name(), def.version);
        let listed = fundament
            .listed
            .iter()
            .find(|l| l.name == name)
            .expect("listed");
        assert_eq!(listed.target.custom["version"], def.version_text());
        let url = target_url(&base, true, &name, &listed.target).unwrap();
        assert_eq!(
            url.path(),
            format!(
                "/tuf/targets/fundament/{}/{}.{}.yaml",
                def.name(),
                def.hash.trim_start_matches("sha256:"),
                def.version
            )
        );
        let bytes = reqwest::get(url).await.unwrap().bytes().await.unwrap();
        assert_eq!(bytes, def.bytes, "{}", def.name());
    }

    // Another marketplace's root does not verify this one's timestamp.
    let other = tempfile::tempdir().unwrap();
    let other_server = Server::start(&init_repo(other.path(), 1));
    let foreign = trusted_root(&other_server.url).await;
    let trusted = TrustedState {
        root: &foreign,
        timestamp: None,
        snapshot: None,
    };
    let err = refresh(&fetch, &base, trusted, &Limits::default(), now)
        .await
        .unwrap_err();
    assert_eq!(err.kind, Failure::BadSignature, "{err}");
    assert_eq!(
        err.message,
        "timestamp: 0 valid signature(s) of the 1 required from its keys"
    );
}

#[tokio::test]
async fn tough_verifies_and_reads_every_builtin() {
    let dir = tempfile::tempdir().unwrap();
    let data = init_repo(dir.path(), 1);
    let server = Server::start(&data);
    let root = trusted_root(&server.url).await;
    let base = url::Url::parse(&format!("{}/", server.url)).unwrap();
    let datastore = dir.path().join("tough");
    let repo = common::tough::load(&root, &base, &datastore)
        .await
        .expect("index verifies");

    let defs = builtin::definitions().unwrap();
    assert_eq!(repo.all_targets().count(), defs.len());
    for def in &defs {
        let name = tough::TargetName::new(format!("fundament/{}/{}.yaml", def.name(), def.version))
            .unwrap();
        let target = repo
            .targets()
            .signed
            .find_target(&name, false)
            .expect("delegated target");
        assert_eq!(target.custom["version"], def.version_text());
        let stream = repo
            .read_target(&name)
            .await
            .unwrap()
            .expect("target present");
        use tough::IntoVec;
        assert_eq!(
            stream.into_vec().await.unwrap(),
            def.bytes,
            "{}",
            def.name()
        );
    }
    let role = repo
        .delegated_role("fundament")
        .expect("publisher role loaded");
    assert_eq!(role.targets.as_ref().unwrap().signed.version.get(), 1);
}

#[tokio::test]
async fn tough_refuses_a_foreign_root() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&init_repo(dir.path(), 1));
    let other = tempfile::tempdir().unwrap();
    let other_server = Server::start(&init_repo(other.path(), 1));
    let foreign = trusted_root(&other_server.url).await;
    let base = url::Url::parse(&format!("{}/", server.url)).unwrap();
    let err = common::tough::load(&foreign, &base, &dir.path().join("tough"))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("Signature threshold of 1 not met"),
        "{err}"
    );
}

#[tokio::test]
async fn clients_step_through_a_root_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let data = init_repo(dir.path(), 1);
    let server = Server::start(&data);
    let first_root = trusted_root(&server.url).await;
    let root_path = dir.path().join("1.root.json");
    std::fs::write(&root_path, &first_root).unwrap();
    let storage = builtin_target("storage");
    // A client that trusted root 1 before the rotation, with its cache.
    let before = python_tuf(&server.url, &root_path, &dir.path().join("py"), &[&storage]);
    assert_eq!(before["root"], 1);
    // And our own client, keeping what it trusts as the sync worker does.
    use marketplace::trust::client::{Fetcher, Limits, TrustedState, refresh};
    let base = url::Url::parse(&format!("{}/", server.url)).unwrap();
    let fetch = Fetcher::new(std::time::Duration::from_secs(10)).unwrap();
    let ours = refresh(
        &fetch,
        &base,
        TrustedState {
            root: &first_root,
            timestamp: None,
            snapshot: None,
        },
        &Limits::default(),
        marketplace::clock::now(),
    )
    .await
    .unwrap();
    assert_eq!(ours.root.typed.signed.version.get(), 1);

    // Rotate while the server runs: root-0 (current) and the new key both sign root 2.
    let new_key = dir.path().join("root-new.pem");
    SigningKey::generate().unwrap().save_new(&new_key).unwrap();
    let d = data.to_str().unwrap();
    let old = dir.path().join("root-0.pem");
    let rotate = |new: &Path| {
        marketplace(&[
            "repo",
            "rotate-root",
            "--data-dir",
            d,
            "--old-root-key",
            old.to_str().unwrap(),
            "--new-root-key",
            new.to_str().unwrap(),
        ])
    };
    let out = rotate(&new_key);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("root version 2"));

    // python-tuf (fresh and with its old cache) and our client step from root 1 to 2.
    for cache in ["py", "py-fresh"] {
        let after = python_tuf(
            &server.url,
            &root_path,
            &dir.path().join(cache),
            &[&storage],
        );
        assert_eq!(after["root"], 2, "{cache}");
        assert!(after["targets"][&storage].is_object());
    }
    let repo = common::tough::load(&first_root, &base, &dir.path().join("tough"))
        .await
        .unwrap();
    assert_eq!(repo.root().signed.version.get(), 2);
    let after = refresh(
        &fetch,
        &base,
        TrustedState {
            root: &ours.root.bytes,
            timestamp: Some(&ours.timestamp.bytes),
            snapshot: Some(&ours.snapshot.bytes),
        },
        &Limits::default(),
        marketplace::clock::now(),
    )
    .await
    .unwrap();
    assert_eq!(after.root.typed.signed.version.get(), 2);
    assert!(after.publishers[0].outcome.is_ok());

    // A rotation without the current root key (root-0 is no longer a root key) is
    // refused before anything is stored.
    let third = dir.path().join("root-third.pem");
    SigningKey::generate().unwrap().save_new(&third).unwrap();
    let out = rotate(&third);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("the current root's keys must sign"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        reqwest::get(format!("{}/tuf/metadata/3.root.json", server.url))
            .await
            .unwrap()
            .status(),
        404
    );
}

#[tokio::test]
async fn built_ins_added_by_a_new_binary_are_signed_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = init_repo(dir.path(), 1);
    // What a newer binary's catalog/ would add: a built-in the signed role lacks.
    let newer = common::with_version("gateway", "9.0.0");
    {
        let store = marketplace::store::Store::open(&data.join("marketplace.db"))
            .await
            .unwrap();
        store
            .insert_version("fundament", &newer, marketplace::clock::now())
            .await
            .unwrap();
        store.close().await;
    }
    let server = Server::start(&data);
    let root_path = dir.path().join("root.json");
    std::fs::write(&root_path, trusted_root(&server.url).await).unwrap();
    let name = "fundament/gateway/9.0.0.yaml";
    let report = python_tuf(
        &server.url,
        &root_path,
        &dir.path().join("py"),
        &[name, &builtin_target("storage")],
    );
    assert_eq!(
        report["targets"][name]["sha256"].as_str(),
        newer.hash.strip_prefix("sha256:")
    );
    let role: serde_json::Value =
        reqwest::get(format!("{}/api/v1/publishers/fundament/role", server.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(role["signed"]["version"], 2);
    drop(server);
    // A second start has nothing left to sign.
    let server = Server::start(&data);
    let role: serde_json::Value =
        reqwest::get(format!("{}/api/v1/publishers/fundament/role", server.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(role["signed"]["version"], 2);
}

/// The running server re-signs on its own: with a one-minute timestamp lifetime, a new
/// timestamp appears once half of it has passed, and python-tuf accepts it.
#[tokio::test]
async fn the_running_server_re_signs_the_timestamp_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let data = init_repo_with(dir.path(), 1, &["--timestamp-expires", "60s"]);
    let server = Server::start(&data);
    let version = || async {
        let ts: serde_json::Value =
            reqwest::get(format!("{}/tuf/metadata/timestamp.json", server.url))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
        (
            ts["signed"]["version"].as_u64().unwrap(),
            ts["signed"]["expires"].as_str().unwrap().to_owned(),
        )
    };
    let (first, first_expiry) = version().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(75);
    let (next, next_expiry) = loop {
        let now = version().await;
        if now.0 > first || std::time::Instant::now() > deadline {
            break now;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    };
    assert!(
        next > first,
        "no new timestamp within 75 s (still v{first})"
    );
    assert!(
        next_expiry > first_expiry,
        "{next_expiry} vs {first_expiry}"
    );
    let root = dir.path().join("root.json");
    std::fs::write(&root, trusted_root(&server.url).await).unwrap();
    let report = python_tuf(&server.url, &root, &dir.path().join("py"), &[]);
    assert_eq!(report["timestamp"].as_u64(), Some(next));
}
