//! No publisher can stall another. Publisher acme signs a role that expires in seconds
//! (allowed by this test's operator setting); once it has expired, publisher beta still
//! publishes and every sync worker round delivers beta's new versions, keeps acme's last
//! good definitions and names acme with the reason. A tampered role of acme is isolated
//! the same way. Expiry is visible before it bites (publisher API, `publisher list`, the
//! signed index page, the CLI's warning), and the operator can act without the
//! publisher: `publisher suspend` removes acme's delegation, `publisher resume` restores
//! it, and acme's `resign` brings everything back. python-tuf's client agrees throughout.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::mirror::Mirror;
use common::publishing::{Client, definition, marketplace, setup_with};
use common::worker::{Api, Source, sync_once, token, write_config};
use common::{Server, output_text, python_tuf, trusted_root};
use marketplace::definition::Definition;

/// `marketplace ARGS --server URL --key KEY` as a publisher runs it.
fn cli(args: &[&str], url: &str, key: &Path, token: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(args)
        .args(["--server", url, "--key"])
        .arg(key)
        .env("MARKETPLACE_TOKEN", token)
        .output()
        .unwrap()
}

fn file(dir: &Path, def: &Definition) -> PathBuf {
    let path = dir.join(format!("{}-{}.yaml", def.name(), def.version));
    std::fs::write(&path, &def.bytes).unwrap();
    path
}

async fn json(url: &str) -> serde_json::Value {
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

/// A round that succeeds, naming the failing publishers (or none).
fn round(config: &Path, failing: Option<&str>) -> String {
    let o = sync_once(config);
    let text = output_text(&o);
    assert!(o.status.success(), "{text}");
    match failing {
        Some(reason) => assert!(
            text.contains(&format!("publisher acme failing ({reason})")),
            "{text}"
        ),
        None => assert!(!text.contains("failing"), "{text}"),
    }
    text
}

#[tokio::test]
async fn an_expired_or_tampered_publisher_stalls_no_one() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let data = m.data.to_str().unwrap().to_owned();
    let server = Server::start_with(&m.data, &["--min-role-lifetime", "5s"]);
    let mirror = Mirror::start(&server.url);
    let (acme_key, beta_key) = (dir.path().join("acme.pem"), dir.path().join("beta.pem"));
    m.acme.save_new(&acme_key).unwrap();
    m.beta.save_new(&beta_key).unwrap();
    let publish = |def: &Definition, key: &Path, token: &str, expires: &str| {
        cli(
            &[
                "publish",
                file(dir.path(), def).to_str().unwrap(),
                "--expires",
                expires,
            ],
            &server.url,
            key,
            token,
        )
    };

    // The CLI checks --expires against the operator's range before signing.
    let a1 = definition("gateway", "a1", "1.0.0");
    let o = publish(&a1, &acme_key, &m.acme_token, "3s");
    assert!(!o.status.success());
    assert!(
        output_text(&o).contains("--expires 3 seconds is outside what this marketplace accepts: roles valid for between 5 seconds and 730 days"),
        "{}",
        output_text(&o)
    );
    let o = publish(&a1, &acme_key, &m.acme_token, "25s");
    assert!(o.status.success(), "{}", output_text(&o));
    assert!(
        output_text(&o).contains("warning: role acme v1 expires in"),
        "the CLI warns about its short-lived role: {}",
        output_text(&o)
    );
    let acme_expires = marketplace::clock::now() + 25;
    let b1 = definition("storage", "b1", "1.0.0");
    assert!(
        publish(&b1, &beta_key, &m.beta_token, "365d")
            .status
            .success()
    );

    let root = dir.path().join("root.json");
    std::fs::write(&root, trusted_root(&server.url).await).unwrap();
    let config = write_config(
        dir.path(),
        &[Source {
            name: "main",
            url: &mirror.url,
            root: &root,
            priority: 0,
        }],
    );
    assert!(round(&config, None).contains("main: 10 definitions (10 downloaded)"));
    let api = Api::start(&config, false);
    let reader = token(&config, None);

    // Visible before it bites.
    let list = json(&format!("{}/api/v1/publishers", server.url)).await;
    let by_name = |n: &str| {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == n)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_name("acme")["expiring_soon"], true, "{list}");
    assert_eq!(by_name("beta")["expiring_soon"], false, "{list}");
    let listed = output_text(&marketplace(&["publisher", "list", "--data-dir", &data]));
    assert!(listed.contains("EXPIRES SOON: role acme"), "{listed}");
    let page = common::text(format!("{}/signed-index", server.url)).await;
    let row = &page[page.find("<tr data-role=\"acme\">").unwrap()..];
    assert!(
        row[..row.find("</tr>").unwrap()].contains("badge warn"),
        "{page}"
    );

    // acme's role tampered in transit: acme fails alone, beta's new version arrives,
    // acme's a1 stays offered from the last good round.
    let b2 = definition("storage", "b2", "1.0.0");
    assert!(
        publish(&b2, &beta_key, &m.beta_token, "365d")
            .status
            .success()
    );
    let acme_role = common::text(format!("{}/api/v1/publishers/acme/role", server.url)).await;
    mirror.set(
        "/tuf/metadata/1.acme.json",
        acme_role.replacen("gateway", "gatewaz", 1).into_bytes(),
    );
    let text = round(&config, Some("tampered"));
    assert!(
        text.contains("main: 11 definitions (1 downloaded)"),
        "{text}"
    );
    let s = api.source_status("main").await;
    assert_eq!(s["lastReason"], serde_json::Value::Null, "{s}");
    assert_eq!(s["failingPublishers"][0]["publisher"], "acme", "{s}");
    assert_eq!(s["failingPublishers"][0]["reason"], "tampered", "{s}");
    for plugin in ["a1", "b2"] {
        let (status, body) = api
            .get(&format!("/orgs/o/plugins/{plugin}"), Some(&reader))
            .await;
        assert_eq!(status, 200, "{plugin}: {body}");
    }
    mirror.thaw();
    round(&config, None);
    assert_eq!(
        api.source_status("main").await["failingPublishers"],
        serde_json::json!([])
    );

    // acme's role expires. beta publishes; the next round delivers it and names acme.
    let wait = acme_expires + 2 - marketplace::clock::now();
    tokio::time::sleep(Duration::from_secs(wait.max(0) as u64)).await;
    let b3 = definition("storage", "b3", "1.0.0");
    let o = publish(&b3, &beta_key, &m.beta_token, "365d");
    assert!(o.status.success(), "{}", output_text(&o));
    let text = round(&config, Some("expired"));
    assert!(
        text.contains("main: 12 definitions (1 downloaded)"),
        "{text}"
    );
    let s = api.source_status("main").await;
    let failure = &s["failingPublishers"][0];
    assert_eq!(
        (&failure["publisher"], &failure["reason"]),
        (&"acme".into(), &"expired".into()),
        "{s}"
    );
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("acme metadata expired at"),
        "{s}"
    );
    for plugin in ["a1", "b3"] {
        let (status, body) = api
            .get(&format!("/orgs/o/plugins/{plugin}"), Some(&reader))
            .await;
        assert_eq!(status, 200, "{plugin}: {body}");
    }
    // python-tuf isolates acme the same way: beta's targets verify and download.
    let report = python_tuf(
        &server.url,
        &root,
        &dir.path().join("ngclient"),
        &["beta/b3/1.0.0.yaml", "beta/b1/1.0.0.yaml"],
    );
    assert!(
        report["targets"]["beta/b3/1.0.0.yaml"].is_object(),
        "{report}"
    );
    let me = json(&format!("{}/api/v1/publishers", server.url)).await;
    assert!(me.to_string().contains("\"expired\":true"), "{me}");
    let listed = output_text(&marketplace(&["publisher", "list", "--data-dir", &data]));
    assert!(listed.contains("EXPIRED: role acme"), "{listed}");

    // The operator suspends acme: its delegation leaves targets.json, workers drop its
    // plugins (no failure left to report), the catalog stops listing them, uploads stop.
    let o = marketplace(&["publisher", "suspend", "acme", "--data-dir", &data]);
    assert!(o.status.success(), "{}", output_text(&o));
    let text = round(&config, None);
    assert!(
        text.contains("main: 11 definitions (0 downloaded)"),
        "{text}"
    );
    let (status, _) = api.get("/orgs/o/plugins/a1", Some(&reader)).await;
    assert_eq!(status, 404);
    let c = Client::new(&server.url);
    let targets = c.role("acme").await; // the role itself is still served
    assert!(targets.is_some());
    let listing = json(&format!("{}/api/v1/plugins?publisher=acme", server.url)).await;
    assert_eq!(listing["total"], 0, "{listing}");
    let page = common::text(format!("{}/plugins/acme/a1", server.url)).await;
    assert!(
        page.contains("Publisher acme is suspended by the operator"),
        "{page}"
    );
    let a2 = definition("gateway", "a2", "1.0.0");
    let o = publish(&a2, &acme_key, &m.acme_token, "365d");
    assert!(!o.status.success());
    assert!(
        output_text(&o).contains("publisher acme is suspended"),
        "{}",
        output_text(&o)
    );
    let report = python_tuf(
        &server.url,
        &root,
        &dir.path().join("ngclient-2"),
        &["beta/b3/1.0.0.yaml"],
    );
    assert!(
        report["targets"]["beta/b3/1.0.0.yaml"].is_object(),
        "{report}"
    );

    // Resumed, the delegation is back as it was (acme's role still expired, so acme
    // fails again); acme re-signs and everything is current.
    let o = marketplace(&["publisher", "resume", "acme", "--data-dir", &data]);
    assert!(o.status.success(), "{}", output_text(&o));
    round(&config, Some("expired"));
    let o = cli(
        &["resign", "--expires", "365d"],
        &server.url,
        &acme_key,
        &m.acme_token,
    );
    assert!(o.status.success(), "{}", output_text(&o));
    let text = round(&config, None);
    assert!(
        text.contains("main: 12 definitions (1 downloaded)"),
        "{text}"
    );
    let (status, _) = api.get("/orgs/o/plugins/a1", Some(&reader)).await;
    assert_eq!(status, 200);
    let report = python_tuf(
        &server.url,
        &root,
        &dir.path().join("ngclient-3"),
        &["acme/a1/1.0.0.yaml", "beta/b3/1.0.0.yaml"],
    );
    assert!(
        report["targets"]["acme/a1/1.0.0.yaml"].is_object(),
        "{report}"
    );
}
