//! The review flow as a publisher and a reviewer run it, with our CLI against the real
//! binary (`serve --review required`): an unapproved publish refused, submit, request
//! changes, upload again, approve, `publish --approved`, python-tuf downloading the
//! approved bytes; and that tokens of one kind never act as the other.

use std::path::Path;

use marketplace::ids;
use serde_json::json;

use super::{Codec, PUBLICATION, add_reviewer, rpc};
use crate::common::publishing::{definition, marketplace, setup};
use crate::common::{Server, output_text, python_tuf, trusted_root};

fn run(args: &[&str]) -> (bool, String) {
    let out = marketplace(args);
    (out.status.success(), output_text(&out))
}

#[tokio::test]
async fn submit_review_publish_approved_and_download() {
    let dir = tempfile::tempdir().unwrap();
    let (data, key, acme, _beta) = setup(dir.path());
    let alice = add_reviewer(&data, "alice");
    let server = Server::start_with(&data, &["--review", "required"]);
    let url = server.url.as_str();
    let key_file = dir.path().join("acme.pem");
    key.save_new(&key_file).unwrap();
    let key_file = key_file.to_str().unwrap();
    let file = dir.path().join("edge.yaml");
    let def = definition("gateway", "edge", "1.0.0");
    std::fs::write(&file, &def.bytes).unwrap();
    let file = file.to_str().unwrap();
    let publisher = |extra: &[&str]| {
        let mut args = extra.to_vec();
        args.extend(["--server", url, "--token", &acme]);
        run(&args)
    };
    let reviewer = |extra: &[&str]| {
        let mut args = vec!["review"];
        args.extend(extra);
        args.extend(["--server", url, "--token", &alice]);
        run(&args)
    };

    // Unreviewed bytes do not enter the index.
    let (ok, out) = publisher(&["publish", file, "--key", key_file]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("acme/edge 1.0.0") && out.contains("is not approved"),
        "{out}"
    );

    // Submit: listing created, version uploaded and submitted.
    let (ok, out) = publisher(&["submit", file, "--release-notes", "First release."]);
    assert!(ok, "{out}");
    let id = ids::version("acme", "edge", "1.0.0");
    assert!(out.contains("created the listing of edge"), "{out}");
    assert!(out.contains(&id) && out.contains("PENDING"), "{out}");
    // The same submit again changes nothing.
    let (ok, out) = publisher(&["submit", file]);
    assert!(ok && out.contains("nothing to do"), "{out}");

    // Tokens of one kind never act as the other.
    let (ok, out) = run(&["review", "list", "--server", url, "--token", &acme]);
    assert!(!ok && out.contains("publisher's token"), "{out}");
    let (ok, out) = run(&[
        "publish", file, "--key", key_file, "--server", url, "--token", &alice,
    ]);
    assert!(!ok && out.contains("reviewer's token"), "{out}");

    let (ok, out) = reviewer(&["list"]);
    assert!(
        ok && out.contains(&id) && out.contains("acme/edge"),
        "{out}"
    );
    let (ok, out) = reviewer(&["request-changes", &id, "--feedback", "Say what it routes."]);
    assert!(ok && out.contains("CHANGES_REQUESTED"), "{out}");
    // Approving needs a pending submission.
    let (ok, out) = reviewer(&["approve", &id]);
    assert!(!ok && out.contains("failed_precondition"), "{out}");

    // Upload again with other bytes: the same version, a new hash, pending again.
    let changed =
        String::from_utf8(def.bytes.clone()).unwrap() + "# reviewed: says what it routes\n";
    std::fs::write(file, &changed).unwrap();
    let changed_hash = marketplace::definition::definition_hash(changed.as_bytes());
    let (ok, out) = publisher(&["submit", file]);
    assert!(
        ok && out.contains(&changed_hash) && out.contains("PENDING"),
        "{out}"
    );
    let (ok, out) = reviewer(&["show", &id]);
    assert!(ok, "{out}");
    assert!(out.contains(&changed_hash), "{out}");
    assert!(out.contains("first version of this plugin"), "{out}");
    let actions: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("history:"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(
        actions,
        [
            "uploaded",
            "submitted",
            "changes_requested",
            "uploaded",
            "submitted"
        ],
        "{out}"
    );
    assert!(out.contains("reviewer:alice: Say what it routes."), "{out}");
    let (ok, out) = reviewer(&["approve", &id, "--feedback", "Good."]);
    assert!(ok && out.contains("APPROVED"), "{out}");

    // The first bytes were never approved: still refused, naming the approved hash.
    std::fs::write(dir.path().join("old.yaml"), &def.bytes).unwrap();
    let old = dir.path().join("old.yaml");
    let (ok, out) = publisher(&["publish", old.to_str().unwrap(), "--key", key_file]);
    assert!(!ok && out.contains(&changed_hash), "{out}");

    // publish --approved signs what the server holds, once.
    let (ok, out) = publisher(&["publish", "--approved", "--key", key_file]);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("published acme/edge 1.0.0 ({changed_hash})")),
        "{out}"
    );
    let (ok, out) = publisher(&["publish", "--approved", "--key", key_file]);
    assert!(ok && out.contains("nothing to do"), "{out}");

    // The version now carries its publication time; python-tuf downloads its bytes.
    let v = rpc(
        &server,
        Codec::Json,
        PUBLICATION,
        "GetPluginVersion",
        &acme,
        json!({"pluginVersionId": id}),
    )
    .await
    .ok();
    assert_eq!(v["version"]["status"], "SUBMISSION_STATUS_APPROVED");
    assert!(v["version"]["published"].is_string(), "{v}");
    let root = dir.path().join("root.json");
    std::fs::write(&root, trusted_root(url).await).unwrap();
    let report = python_tuf(
        url,
        &root,
        &dir.path().join("tuf-cache"),
        &["acme/edge/1.0.0.yaml"],
    );
    let target = &report["targets"]["acme/edge/1.0.0.yaml"];
    assert_eq!(
        target["sha256"].as_str(),
        changed_hash.strip_prefix("sha256:"),
        "{report}"
    );
    assert_eq!(
        std::fs::read(Path::new(target["path"].as_str().unwrap())).unwrap(),
        changed.as_bytes()
    );

    // The listing (drawn from the definition by `submit`) is what the catalog shows
    // where it sets a field: pages, the JSON API and catalog.v1.
    let plugin_id = ids::plugin("acme", "edge");
    rpc(
        &server,
        Codec::Binary,
        PUBLICATION,
        "UpdatePlugin",
        &acme,
        json!({
            "pluginId": plugin_id, "displayName": "Edge Router",
            "descriptionShort": "Routes traffic at the edge.",
            "description": "Routes traffic at the edge.\n\nWith TLS.",
            "image": "https://artwork.example/edge.svg",
            "documentationLinks": [{"title": "Operator guide", "urlName": "guide", "url": "https://docs.example/edge"}],
            "features": [{"title": "Zero downtime", "body": "Reloads without dropping connections."}],
            "authorName": "Acme Networks", "visibility": "PLUGIN_VISIBILITY_PUBLIC",
        }),
    )
    .await
    .ok();
    let page = reqwest::get(format!("{url}/plugins/acme/edge"))
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    for shown in [
        "<h1>Edge Router</h1>",
        "Zero downtime",
        "Reloads without dropping connections.",
        r#"<img src="https://artwork.example/edge.svg""#,
        r#"<span>ER</span>"#,
        r#"href="https://docs.example/edge""#,
        "Operator guide",
        "by Acme Networks",
    ] {
        assert!(page.contains(shown), "page lacks {shown}");
    }
    let catalog = reqwest::get(format!("{url}/?q=edge"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(catalog.contains("Edge Router") && catalog.contains("Routes traffic at the edge."));
    let detail: serde_json::Value = reqwest::get(format!("{url}/api/v1/plugins/acme/edge"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(detail["listing"]["display_name"], "Edge Router");
    assert_eq!(detail["listing"]["features"][0]["title"], "Zero downtime");
    let public = rpc(
        &server,
        Codec::Json,
        "catalog.v1.CatalogService",
        "GetPlugin",
        "",
        json!({"pluginId": plugin_id}),
    )
    .await
    .ok();
    let p = &public["plugin"];
    assert_eq!(p["displayName"], "Edge Router");
    assert_eq!(p["descriptionShort"], "Routes traffic at the edge.");
    assert_eq!(p["image"], "https://artwork.example/edge.svg");
    assert_eq!(
        p["features"][0]["body"],
        "Reloads without dropping connections."
    );
    assert_eq!(
        p["documentationLinks"][0]["url"],
        "https://docs.example/edge"
    );
    assert_eq!(p["authorName"], "Acme Networks");
}
