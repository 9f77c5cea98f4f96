//! Atom feeds of new versions on the real binary, read by an independent client:
//! Python's `feedparser` (tests/feed_referee.py, in the virtualenv `.ci/run` creates)
//! parses the catalog's, a publisher's and a plugin's feed without a bozo flag, with
//! yanks marked; the pages link them; conditional requests and hidden publishers.

mod common;

use std::process::Command;

use common::publishing::{Client, definition, setup_with};
use common::{Server, output_text, python, text};
use serde_json::Value;

/// Every feed fetched from `urls`, as feedparser reads them, by URL.
async fn referee(dir: &std::path::Path, urls: &[String]) -> Value {
    let mut args = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        let r = reqwest::get(url).await.unwrap();
        assert_eq!(r.status(), 200, "{url}");
        assert_eq!(
            r.headers()["content-type"],
            "application/atom+xml; charset=utf-8"
        );
        let path = dir.join(format!("feed-{i}.xml"));
        std::fs::write(&path, r.bytes().await.unwrap()).unwrap();
        args.push(url.clone());
        args.push(path.to_str().unwrap().to_owned());
    }
    let out = Command::new(python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/feed_referee.py"
        ))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "feedparser failed (is it installed? run `bash .ci/run`): {}",
        output_text(&out)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn titles(feed: &Value) -> Vec<&str> {
    feed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["title"].as_str().unwrap())
        .collect()
}

fn link<'a>(links: &'a Value, rel: &str) -> &'a str {
    links
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["rel"] == rel)
        .unwrap_or_else(|| panic!("no {rel} link in {links}"))["href"]
        .as_str()
        .unwrap()
}

#[tokio::test]
async fn feeds_list_new_versions_and_yanks_as_feedparser_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let server = Server::start(&m.data);
    let client = Client::new(&server.url);
    let db = |v: &str| definition("postgres-operator", "db", v);
    for v in ["1.0.0", "1.1.0"] {
        let (status, body) = client
            .publish_as("acme", &m.acme_token, &db(v), &[&m.acme])
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let (status, body) = client
        .publish_as(
            "beta",
            &m.beta_token,
            &definition("cert-manager", "certs", "0.1.0"),
            &[&m.beta],
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let key = dir.path().join("acme.pem");
    m.acme.save_new(&key).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(["yank", "acme/db@1.1.0", "--server", &server.url, "--key"])
        .arg(&key)
        .env("MARKETPLACE_TOKEN", &m.acme_token)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));

    let base = &server.url;
    let catalog = format!("{base}/feed.atom");
    let acme = format!("{base}/publishers/acme/feed.atom");
    let plugin = format!("{base}/plugins/acme/db/feed.atom");
    let feeds = referee(dir.path(), &[catalog.clone(), acme.clone(), plugin.clone()]).await;
    for (url, feed) in feeds.as_object().unwrap() {
        assert_eq!(feed["bozo"], false, "{url}: {}", feed["bozo_exception"]);
        assert_eq!(feed["version"], "atom10", "{url}");
        assert!(feed["id"].as_str().unwrap().starts_with("urn:uuid:"));
        // Relative links resolve against the feed's own URL.
        assert_eq!(link(&feed["links"], "self"), url);
        for e in feed["entries"].as_array().unwrap() {
            assert!(e["id"].as_str().unwrap().starts_with("urn:uuid:"), "{e}");
            assert!(!e["published"].as_str().unwrap().is_empty(), "{e}");
            assert!(
                e["link"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("{base}/plugins/"))
            );
        }
    }

    // The whole catalog: the built-ins and every publisher's versions, newest first.
    let all = &feeds[&catalog];
    assert_eq!(link(&all["links"], "alternate"), format!("{base}/"));
    let all_titles = titles(all);
    let newest: Vec<&str> = all_titles.iter().take(3).copied().collect();
    assert_eq!(newest.len(), 3, "{all_titles:?}");
    assert!(newest[0].ends_with(" 0.1.0"), "{all_titles:?}");
    assert!(newest[1].ends_with(" 1.1.0 (yanked)"), "{all_titles:?}");
    assert!(newest[2].ends_with(" 1.0.0"), "{all_titles:?}");
    assert!(
        all_titles.len() > 3,
        "the built-ins are listed too: {all_titles:?}"
    );

    // One publisher's: acme's two versions, not beta's.
    let acme_feed = &feeds[&acme];
    assert_eq!(acme_feed["entries"].as_array().unwrap().len(), 2);
    assert!(
        acme_feed["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["author"] == "acme")
    );
    assert_eq!(
        link(&acme_feed["links"], "alternate"),
        format!("{base}/?publisher=acme")
    );

    // One plugin's: the yank is marked, with its own time, and the definition linked.
    let db_feed = &feeds[&plugin];
    assert_eq!(
        link(&db_feed["links"], "alternate"),
        format!("{base}/plugins/acme/db")
    );
    let entries = db_feed["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    let (yanked, kept) = (&entries[0], &entries[1]);
    assert!(
        yanked["title"]
            .as_str()
            .unwrap()
            .ends_with("1.1.0 (yanked)")
    );
    assert_eq!(yanked["tags"], serde_json::json!(["yanked"]));
    assert!(
        yanked["summary"]
            .as_str()
            .unwrap()
            .starts_with("Yanked by its publisher")
    );
    assert!(yanked["updated"].as_str().unwrap() >= yanked["published"].as_str().unwrap());
    assert_eq!(kept["tags"], serde_json::json!([]));
    assert_ne!(yanked["id"], kept["id"]);
    let definition = link(&kept["links"], "related");
    assert_eq!(
        definition,
        format!("{base}/plugins/acme/db/versions/1.0.0/definition.yaml")
    );
    assert_eq!(reqwest::get(definition).await.unwrap().status(), 200);

    // The pages link their feeds for browsers and readers to find.
    let page = text(format!("{base}/plugins/acme/db")).await;
    for href in [
        "/feed.atom",
        "/plugins/acme/db/feed.atom",
        "/publishers/acme/feed.atom",
    ] {
        let linked = page.lines().any(|l| {
            l.contains(r#"<link rel="alternate" type="application/atom+xml" title="#)
                && l.contains(&format!(r#"href="{href}">"#))
        });
        assert!(linked, "{href} not linked from the plugin page");
    }
    let filtered = text(format!("{base}/?publisher=beta")).await;
    assert!(filtered.contains(r#"href="/publishers/beta/feed.atom">"#));
    assert!(!text(format!("{base}/")).await.contains("/publishers/"));

    // A reader polling with the entity tag gets 304 until something changes.
    let http = reqwest::Client::new();
    let first = http.get(&plugin).send().await.unwrap();
    let etag = first.headers()["etag"].to_str().unwrap().to_owned();
    let again = http
        .get(&plugin)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    let (status, body) = client
        .publish_as("acme", &m.acme_token, &db("1.2.0"), &[&m.acme])
        .await;
    assert_eq!(status, 201, "{body}");
    let changed = http
        .get(&plugin)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(changed.status(), 200);
    assert!(changed.text().await.unwrap().contains("1.2.0</title>"));

    // Unknown names are 404; a suspended publisher's feeds are hidden as its pages are.
    for path in [
        "/publishers/nobody/feed.atom",
        "/plugins/acme/nothing/feed.atom",
    ] {
        assert_eq!(
            reqwest::get(format!("{base}{path}"))
                .await
                .unwrap()
                .status(),
            404
        );
    }
    let o = Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(["publisher", "suspend", "acme", "--data-dir"])
        .arg(&m.data)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    for url in [&acme, &plugin] {
        assert_eq!(reqwest::get(url).await.unwrap().status(), 404, "{url}");
    }
    let after = referee(dir.path(), std::slice::from_ref(&catalog)).await;
    assert!(!titles(&after[&catalog]).iter().any(|t| t.contains("1.1.0")));
}
