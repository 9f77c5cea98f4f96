//! Rotating a publisher's key: `publisher rotate-key` on the server, `resign` by the
//! publisher, and TUF clients (python-tuf, ours) verifying before, during and after.

mod common;

use std::path::Path;
use std::process::Command;

use common::publishing::{Client, YEAR, assert_refused, definition, marketplace, setup};
use common::{Server, output_text as text, python_tuf, trusted_root};
use marketplace::trust::SigningKey;
use marketplace::trust::publisher::plan::build_resign;
use tough::schema::{Signed, Targets};

fn resign(server: &str, token: &str, key: &Path, old: Option<&str>) -> std::process::Output {
    let mut args = vec!["resign", "--server", server, "--key", key.to_str().unwrap()];
    if let Some(old) = old {
        args.extend(["--old-key", old]);
    }
    Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(args)
        .env("MARKETPLACE_TOKEN", token)
        .output()
        .unwrap()
}

/// The newest targets metadata: acme's delegated key ids and every delegation key id.
async fn delegation(url: &str) -> (Vec<String>, Vec<String>) {
    let ts: serde_json::Value = reqwest::get(format!("{url}/tuf/metadata/timestamp.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let snap_v = &ts["signed"]["meta"]["snapshot.json"]["version"];
    let snap: serde_json::Value =
        reqwest::get(format!("{url}/tuf/metadata/{snap_v}.snapshot.json"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    let targets_v = &snap["signed"]["meta"]["targets.json"]["version"];
    let targets: serde_json::Value =
        reqwest::get(format!("{url}/tuf/metadata/{targets_v}.targets.json"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    let d = &targets["signed"]["delegations"];
    let acme = d["roles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "acme")
        .expect("acme is delegated");
    let ids = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    };
    let mut all: Vec<String> = d["keys"].as_object().unwrap().keys().cloned().collect();
    all.sort();
    (ids(&acme["keyids"]), all)
}

#[tokio::test]
async fn a_rotated_key_takes_over_once_the_publisher_re_signs() {
    let dir = tempfile::tempdir().unwrap();
    let (data, old_key, token, _) = setup(dir.path());
    let d = data.to_str().unwrap();
    let server = Server::start(&data);
    let c = Client::new(&server.url);
    let first = definition("gateway", "edge-gateway", "1.0.0");
    let (status, body) = c.publish_signed(&token, &first, &[&old_key]).await;
    assert_eq!(status, 201, "{body}");
    let root_path = dir.path().join("root.json");
    std::fs::write(&root_path, trusted_root(&server.url).await).unwrap();
    let first_name = "acme/edge-gateway/1.0.0.yaml";
    let py_cache = dir.path().join("py");
    python_tuf(&server.url, &root_path, &py_cache, &[first_name]);

    // The operator replaces acme's key while the server runs.
    let new_key = SigningKey::generate().unwrap();
    let new_file = dir.path().join("new.pem");
    new_key.save_new(&new_file).unwrap();
    let out = marketplace(&[
        "publisher",
        "rotate-key",
        "acme",
        "--key",
        &new_key.public().hex(),
        "--data-dir",
        d,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("marketplace resign"), "{}", text(&out));
    let list = text(&marketplace(&["publisher", "list", "--data-dir", d]));
    assert!(list.contains("index names old keys"), "{list}");

    // Until the publisher re-signs, the index is unchanged and still verifies, and the
    // old key can no longer publish.
    let old_id = old_key.public().key_id();
    assert_eq!(
        delegation(&server.url).await.0,
        std::slice::from_ref(&old_id)
    );
    let report = python_tuf(&server.url, &root_path, &py_cache, &[first_name]);
    assert_eq!(
        report["targets"][first_name]["sha256"].as_str(),
        first.hash.strip_prefix("sha256:")
    );
    let second = definition("storage", "fast-disk", "1.0.0");
    let (status, body) = c.publish_signed(&token, &second, &[&old_key]).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("bad_signature")),
        "{body}"
    );

    // Re-signing with only the new key: the CLI will not vouch for a role it cannot
    // trace to a key it knows.
    let out = resign(&server.url, &token, &new_file, None);
    assert!(!out.status.success());
    assert!(text(&out).contains("--old-key"), "{}", text(&out));

    let out = resign(
        &server.url,
        &token,
        &new_file,
        Some(&old_key.public().hex()),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("re-signed acme's 1 target(s)")
            && text(&out).contains("role version 2"),
        "{}",
        text(&out)
    );
    let new_id = new_key.public().key_id();
    let (acme_ids, all_ids) = delegation(&server.url).await;
    assert_eq!(acme_ids, std::slice::from_ref(&new_id));
    assert!(!all_ids.contains(&old_id), "the old key left the metadata");
    let list = text(&marketplace(&["publisher", "list", "--data-dir", d]));
    assert!(list.contains("index up to date"), "{list}");

    // The new key publishes; python-tuf (with its earlier cache, and fresh) and our
    // client verify every target under the new delegation.
    let (status, body) = c.publish_signed(&token, &second, &[&new_key]).await;
    assert_eq!(
        (status, body["role_version"].as_u64()),
        (201, Some(3)),
        "{body}"
    );
    let second_name = "acme/fast-disk/1.0.0.yaml";
    for cache in [py_cache, dir.path().join("py-fresh")] {
        let report = python_tuf(&server.url, &root_path, &cache, &[first_name, second_name]);
        for (name, def) in [(first_name, &first), (second_name, &second)] {
            assert_eq!(
                report["targets"][name]["sha256"].as_str(),
                def.hash.strip_prefix("sha256:"),
                "{name}"
            );
        }
    }
    let base = url::Url::parse(&format!("{}/", server.url)).unwrap();
    let root = std::fs::read(&root_path).unwrap();
    let repo = common::tough::load(&root, &base, &dir.path().join("tough"))
        .await
        .expect("index verifies");
    let role = repo.delegated_role("acme").expect("acme loaded");
    assert_eq!(role.targets.as_ref().unwrap().signed.version.get(), 3);
    assert_eq!(role.targets.as_ref().unwrap().signed.targets.len(), 2);
}

#[tokio::test]
async fn re_signing_renews_the_role_and_refuses_anything_else() {
    let dir = tempfile::tempdir().unwrap();
    let (data, key, token, beta_token) = setup(dir.path());
    let server = Server::start(&data);
    let c = Client::new(&server.url);
    let post = async |token: &str, role: Vec<u8>| {
        let body = serde_json::json!({ "role": String::from_utf8(role).unwrap() });
        c.post("acme/role", Some(token), &body).await
    };
    let now = marketplace::clock::now();
    let first = definition("gateway", "edge-gateway", "1.0.0");

    // Nothing to re-sign before the first publish.
    let key_file = dir.path().join("acme.pem");
    key.save_new(&key_file).unwrap();
    let out = resign(&server.url, &token, &key_file, None);
    assert!(!out.status.success());
    assert!(text(&out).contains("published nothing"), "{}", text(&out));

    let (status, body) = c.publish_signed(&token, &first, &[&key]).await;
    assert_eq!(status, 201, "{body}");
    let v1: Signed<Targets> = c.role("acme").await.unwrap();

    // Adding a target is a publish, not a re-sign.
    let second = definition("storage", "fast-disk", "1.0.0");
    let grown = marketplace::trust::publisher::plan::build_role(
        "acme",
        Some(&v1),
        &second,
        &[&key],
        1,
        YEAR,
        now,
    )
    .await
    .unwrap();
    let (status, body) = post(&token, grown).await;
    assert_refused(status, &body, 422, "rejected", "publish them instead");

    // Another key, another publisher's token.
    let rogue = SigningKey::generate().unwrap();
    let forged = build_resign("acme", &v1, &[&rogue], 1, YEAR, now)
        .await
        .unwrap();
    let (status, body) = post(&token, forged).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("bad_signature")),
        "{body}"
    );
    let good = build_resign("acme", &v1, &[&key], 1, 2 * YEAR, now)
        .await
        .unwrap();
    let (status, _) = post(&beta_token, good.clone()).await;
    assert_eq!(status, 403);

    // A renewal: same targets, next version, a later expiry; replaying it is stale.
    let (status, body) = post(&token, good.clone()).await;
    assert_eq!(
        (status, body["role_version"].as_u64()),
        (200, Some(2)),
        "{body}"
    );
    let v2 = c.role("acme").await.unwrap();
    assert_eq!(v2.signed.targets, v1.signed.targets);
    assert!(v2.signed.expires.as_second() > v1.signed.expires.as_second() + 300 * 86_400);
    let (status, body) = post(&token, good).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("stale")),
        "{body}"
    );
}
