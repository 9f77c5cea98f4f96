//! Every TUF client accepts what the server accepts. Roles signed with python-tuf's own
//! Metadata API (empty `custom`, unrecognized fields, strings not in Unicode NFC, several
//! signatures, a spec_version it refuses, a signature over other bytes than uploaded)
//! and roles signed by our own publisher CLI are uploaded to the real server; for each,
//! the server's verdict and python-tuf's verdict on the same bytes must agree, and what
//! the server accepted must be served byte for byte and verify in python-tuf's client.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::publishing::*;
use common::{Server, output_text, python, python_tuf, trusted_root};
use marketplace::definition::Definition;
use marketplace::trust::SigningKey;

/// python-tuf signing `spec` onto the current role, with `keys`.
fn python_sign(dir: &Path, current: &[u8], spec: &serde_json::Value, keys: &[&Path]) -> Vec<u8> {
    let (role, spec_file) = (dir.join("current.json"), dir.join("spec.json"));
    std::fs::write(&role, current).unwrap();
    std::fs::write(&spec_file, spec.to_string()).unwrap();
    let out = Command::new(python())
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tuf_role.py"))
        .arg("sign")
        .arg(&role)
        .arg(&spec_file)
        .args(keys)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    out.stdout
}

/// python-tuf's verdict on `role` as the delegated role `name` of `delegator`.
fn python_verdict(dir: &Path, delegator: &[u8], name: &str, role: &[u8]) -> (bool, String) {
    let (d, r) = (dir.join("delegator.json"), dir.join("role.json"));
    std::fs::write(&d, delegator).unwrap();
    std::fs::write(&r, role).unwrap();
    let out = Command::new(python())
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tuf_role.py"))
        .arg("verify")
        .arg(&d)
        .arg(name)
        .arg(&r)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        v["ok"].as_bool().unwrap(),
        v["error"].as_str().unwrap_or_default().to_owned(),
    )
}

async fn get(url: &str) -> Vec<u8> {
    let r = reqwest::get(url).await.unwrap();
    assert_eq!(r.status(), 200, "{url}");
    r.bytes().await.unwrap().to_vec()
}

/// The targets metadata the server serves now (the delegator of every publisher).
async fn served_targets(url: &str) -> Vec<u8> {
    let ts: serde_json::Value =
        serde_json::from_slice(&get(&format!("{url}/tuf/metadata/timestamp.json")).await).unwrap();
    let sv = &ts["signed"]["meta"]["snapshot.json"]["version"];
    let snapshot: serde_json::Value =
        serde_json::from_slice(&get(&format!("{url}/tuf/metadata/{sv}.snapshot.json")).await)
            .unwrap();
    let tv = &snapshot["signed"]["meta"]["targets.json"]["version"];
    get(&format!("{url}/tuf/metadata/{tv}.targets.json")).await
}

fn expires_in_days(days: i64) -> String {
    jiff::Timestamp::from_second(marketplace::clock::now() + days * 86_400)
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn pem(dir: &Path, name: &str, key: &SigningKey) -> PathBuf {
    let path = dir.join(format!("{name}.pem"));
    key.save_new(&path).unwrap();
    path
}

/// The first publish through the real `marketplace publish` CLI (our own signer).
fn cli_publish(dir: &Path, url: &str, token: &str, def: &Definition, keys: &[&Path]) {
    let file = dir.join(format!("{}.yaml", def.name()));
    std::fs::write(&file, &def.bytes).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_marketplace"));
    c.arg("publish").arg(&file).args(["--server", url]);
    for k in keys {
        c.arg("--key").arg(k);
    }
    let out = c.env("MARKETPLACE_TOKEN", token).output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
}

struct Case {
    variant: &'static str,
    /// Which keys python-tuf signs with (indexes into the publisher's keys).
    signers: &'static [usize],
    accepted: bool,
}

/// Runs each case on `publisher`, whose first role our CLI already published; returns
/// the targets the server accepted.
async fn run_cases(
    dir: &Path,
    c: &Client,
    publisher: &str,
    token: &str,
    keys: &[PathBuf],
    cases: &[Case],
) -> Vec<String> {
    let mut accepted = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let name = format!("py-{}-{i}", case.variant.replace('_', "-"));
        let def = definition("gateway", &name, "1.0.0");
        let target = format!("{publisher}/{name}/1.0.0.yaml");
        let current = get(&format!("{}/api/v1/publishers/{publisher}/role", c.url)).await;
        let spec = serde_json::json!({
            "expires": expires_in_days(60),
            "add": {&target: {"length": def.bytes.len(), "sha256": def.hash.trim_start_matches("sha256:")}},
            "variant": case.variant,
        });
        let signers: Vec<&Path> = case.signers.iter().map(|&k| keys[k].as_path()).collect();
        let role = python_sign(dir, &current, &spec, &signers);
        let delegator = served_targets(&c.url).await;
        let (python_ok, python_error) = python_verdict(dir, &delegator, publisher, &role);
        let (status, body) = c.publish(publisher, Some(token), &def.bytes, &role).await;
        let server_ok = status == 201;
        assert_eq!(
            (server_ok, python_ok),
            (case.accepted, case.accepted),
            "{}: server {status} {body}; python-tuf: {python_error}",
            case.variant
        );
        if server_ok {
            // Served exactly as uploaded, and python-tuf verifies the served bytes.
            let v = body["role_version"].as_u64().unwrap();
            let served = get(&format!("{}/tuf/metadata/{v}.{publisher}.json", c.url)).await;
            assert_eq!(served, role, "{}: served bytes differ", case.variant);
            let delegator = served_targets(&c.url).await;
            assert!(python_verdict(dir, &delegator, publisher, &served).0);
            accepted.push(target);
        } else {
            let code = body["error"]["code"].as_str().unwrap_or_default();
            assert!(
                ["bad_signature", "invalid_metadata"].contains(&code),
                "{}: {body}",
                case.variant
            );
        }
    }
    accepted
}

#[tokio::test]
async fn server_and_python_tuf_agree_on_every_signed_role() {
    let dir = tempfile::tempdir().unwrap();
    let s = setup_with(dir.path(), &[]);
    // A second publisher whose roles need 2 of its 2 keys.
    let (k1, k2) = (
        SigningKey::generate().unwrap(),
        SigningKey::generate().unwrap(),
    );
    let duo_token = add_publisher(&s.data, "duo", &[&k1, &k2], 2);
    let server = Server::start(&s.data);
    let c = Client::new(&server.url);
    let acme_keys = [pem(dir.path(), "acme", &s.acme)];
    let duo_keys = [pem(dir.path(), "duo1", &k1), pem(dir.path(), "duo2", &k2)];

    // Our own CLI signs the first role of each; the server accepts it and python-tuf
    // verifies the served bytes.
    let first = definition("storage", "cli-signed", "1.0.0");
    cli_publish(
        dir.path(),
        &server.url,
        &s.acme_token,
        &first,
        &[&acme_keys[0]],
    );
    let duo_first = definition("storage", "duo-first", "1.0.0");
    cli_publish(
        dir.path(),
        &server.url,
        &duo_token,
        &duo_first,
        &[&duo_keys[0], &duo_keys[1]],
    );
    for p in ["acme", "duo"] {
        let served = get(&format!("{}/tuf/metadata/1.{p}.json", server.url)).await;
        let (ok, why) = python_verdict(dir.path(), &served_targets(&server.url).await, p, &served);
        assert!(ok, "{p}: {why}");
    }

    let mut accepted = run_cases(
        dir.path(),
        &c,
        "acme",
        &s.acme_token,
        &acme_keys,
        &[
            Case {
                variant: "plain",
                signers: &[0],
                accepted: true,
            },
            Case {
                variant: "custom_empty",
                signers: &[0],
                accepted: true,
            },
            Case {
                variant: "unrecognized",
                signers: &[0],
                accepted: true,
            },
            Case {
                variant: "non_nfc",
                signers: &[0],
                accepted: true,
            },
            Case {
                variant: "spec_2",
                signers: &[0],
                accepted: false,
            },
            Case {
                variant: "signed_without_custom",
                signers: &[0],
                accepted: false,
            },
        ],
    )
    .await;
    accepted.extend(
        run_cases(
            dir.path(),
            &c,
            "duo",
            &duo_token,
            &duo_keys,
            &[
                Case {
                    variant: "custom_empty",
                    signers: &[0, 1],
                    accepted: true,
                },
                Case {
                    variant: "plain",
                    signers: &[1],
                    accepted: false,
                },
                Case {
                    variant: "non_nfc",
                    signers: &[1, 0],
                    accepted: true,
                },
            ],
        )
        .await,
    );
    assert_eq!(accepted.len(), 6, "{accepted:?}");

    // Our CLI builds on a python-tuf-signed role (verifying it first) and python-tuf's
    // client then verifies the whole index: every accepted target downloads.
    let last = definition("storage", "cli-after-python", "1.0.0");
    cli_publish(
        dir.path(),
        &server.url,
        &s.acme_token,
        &last,
        &[&acme_keys[0]],
    );
    accepted.push("acme/cli-after-python/1.0.0.yaml".into());
    accepted.push("acme/cli-signed/1.0.0.yaml".into());
    let root_file = dir.path().join("root.json");
    std::fs::write(&root_file, trusted_root(&server.url).await).unwrap();
    let wanted: Vec<&str> = accepted.iter().map(String::as_str).collect();
    let report = python_tuf(
        &server.url,
        &root_file,
        &dir.path().join("ngclient"),
        &wanted,
    );
    for t in &wanted {
        assert!(report["targets"][*t].is_object(), "{t}: {report}");
    }
    // duo's role was never re-signed by our CLI, so its empty `custom` is still served.
    let empty = &report["targets"]["duo/py-custom-empty-0/1.0.0.yaml"]["custom"];
    assert_eq!(empty, &serde_json::json!({}), "{report}");
    let note = &report["targets"]["acme/py-non-nfc-3/1.0.0.yaml"]["custom"]["note"];
    assert_eq!(
        note, "cafe\u{301} \u{fc}\u{df} \u{2603}",
        "not normalized: {report}"
    );
}
