//! What an upgrade asks for, on real-style definitions: a version that adds
//! `internet_access` and a cluster-wide RBAC rule, reviewed and published with the CLI,
//! then stated the same way by `review show`, the JSON API, the plugin page and a sync
//! worker's upgrade plan.

use std::path::Path;

use crate::common::publishing::{definition, marketplace, setup};
use crate::common::worker::{Api, Source, sync_once, token, write_config};
use crate::common::{Server, output_text, trusted_root};

use super::add_reviewer;

const ASKS: [&str; 2] = [
    "needs approval for internet access (new)",
    "may read all resources in all API groups (new)",
];

fn run(args: &[&str]) -> String {
    let out = marketplace(args);
    assert!(out.status.success(), "{args:?}: {}", output_text(&out));
    output_text(&out)
}

/// Submits `file`, approves it as `reviewer` and publishes it with `publish --approved`;
/// what `review show` printed before the approval.
fn review_and_publish(
    url: &str,
    acme: &str,
    reviewer: &str,
    key: &str,
    file: &Path,
    id: &str,
) -> String {
    let file = file.to_str().unwrap();
    run(&["submit", file, "--server", url, "--token", acme]);
    let shown = run(&["review", "show", id, "--server", url, "--token", reviewer]);
    run(&[
        "review", "approve", id, "--server", url, "--token", reviewer,
    ]);
    run(&[
        "publish",
        "--approved",
        "--key",
        key,
        "--server",
        url,
        "--token",
        acme,
    ]);
    shown
}

#[tokio::test]
async fn an_upgrade_states_what_it_asks_for_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let (data, key, acme, _) = setup(dir.path());
    let alice = add_reviewer(&data, "alice");
    let server = Server::start_with(&data, &["--review", "required"]);
    let url = server.url.as_str();
    let key_file = dir.path().join("acme.pem");
    key.save_new(&key_file).unwrap();
    let key_file = key_file.to_str().unwrap();

    let v1 = definition("gateway", "edge", "1.0.0");
    let v1_text = String::from_utf8(v1.bytes.clone()).unwrap();
    let file = dir.path().join("edge.yaml");
    std::fs::write(&file, &v1_text).unwrap();
    let id1 = marketplace::ids::version("acme", "edge", "1.0.0");
    review_and_publish(url, &acme, &alice, key_file, &file, &id1);

    let v2_text = v1_text
        .replacen("version: 1.0.0", "version: 1.1.0", 1)
        .replacen(
            "capabilities: [manage_load_balancers]",
            "capabilities: [manage_load_balancers, internet_access]",
            1,
        )
        .replacen(
            "    rbac:\n",
            "    rbac:\n      - apiGroups: [\"*\"]\n        resources: [\"*\"]\n        verbs: [get, list, watch]\n",
            1,
        );
    std::fs::write(&file, &v2_text).unwrap();
    let id2 = marketplace::ids::version("acme", "edge", "1.1.0");
    let shown = review_and_publish(url, &acme, &alice, key_file, &file, &id2);
    assert!(shown.contains("what changes from 1.0.0"), "{shown}");
    for line in ASKS {
        assert!(
            shown.contains(&format!("  - {line}")),
            "review show lacks {line}: {shown}"
        );
    }

    // The JSON API, for any two published versions.
    let changes: serde_json::Value = reqwest::get(format!(
        "{url}/api/v1/plugins/acme/edge/versions/1.1.0/changes?from=1.0.0"
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(
        changes["approvals_added"],
        serde_json::json!(["internet_access"])
    );
    assert_eq!(changes["asks_for_more"], true);
    assert_eq!(changes["lines"], serde_json::json!(ASKS));
    let missing = reqwest::get(format!(
        "{url}/api/v1/plugins/acme/edge/versions/1.1.0/changes?from=0.9.0"
    ))
    .await
    .unwrap();
    assert_eq!(missing.status(), 404);
    let no_from = reqwest::get(format!(
        "{url}/api/v1/plugins/acme/edge/versions/1.1.0/changes"
    ))
    .await
    .unwrap();
    assert_eq!(no_from.status(), 400);

    // The plugin page, against the release before the latest.
    let page = reqwest::get(format!("{url}/plugins/acme/edge"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("What changes from 1.0.0"), "{page}");
    for line in ASKS {
        assert!(
            page.contains(&format!("<li>{line}</li>")),
            "page lacks {line}"
        );
    }

    // A worker's upgrade plan for an installation at 1.0.0.
    let root = dir.path().join("root.json");
    std::fs::write(&root, trusted_root(url).await).unwrap();
    let config = write_config(
        dir.path(),
        &[Source {
            name: "public",
            url,
            root: &root,
            priority: 10,
        }],
    );
    let synced = sync_once(&config);
    assert!(synced.status.success(), "{}", output_text(&synced));
    let org_token = token(&config, Some("tenant"));
    let api = Api::start(&config, false);
    let (status, plan) = api
        .get(
            "/orgs/tenant/plugins/edge/upgrades?from=1.0.0",
            Some(&org_token),
        )
        .await;
    assert_eq!(status, 200, "{plan}");
    let upgrade = &plan["upgrades"][0];
    assert_eq!(upgrade["version"], "1.1.0", "{plan}");
    assert_eq!(
        upgrade["changes"]["lines"],
        serde_json::json!(ASKS),
        "{plan}"
    );
    assert_eq!(upgrade["changes"]["from_version"], "1.0.0");
}
