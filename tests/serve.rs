//! `/tuf/` files from memory: gzip copies sent only to clients that accept them, with
//! the bytes clients verify; conditional requests with either encoding; a new timestamp
//! served as soon as it is committed, by this process or another one on the same
//! database; the memory budget kept.

mod common;

use std::io::Read;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use common::publishing::{Client, definition, marketplace, setup_with};
use common::{Server, output_text, python_tuf, send, trusted_root};
use marketplace::AppState;
use marketplace::store::{Store, StoredMetadata};
use marketplace::trust::files::{COMPRESS_OVER, Files};
use sha2::{Digest, Sha256};

fn meta(role: &str, version: u64, body: String) -> StoredMetadata {
    StoredMetadata {
        role: role.into(),
        version,
        sha256: hex::encode(Sha256::digest(body.as_bytes())),
        bytes: body.into_bytes(),
        expires_at: 0,
        created_at: 0,
    }
}

/// JSON of about `size` bytes that compresses well, as signed metadata does.
fn large(role: &str, version: u64, size: usize) -> String {
    let item = format!("\"{role}-{version}-target\"");
    let items = vec![item.as_str(); size / (item.len() + 1)];
    format!("{{\"v\":{version},\"t\":[{}]}}", items.join(","))
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .expect("valid gzip");
    out
}

async fn get_with(url: &str, accept_encoding: Option<&str>) -> reqwest::Response {
    let mut req = reqwest::Client::new().get(url);
    if let Some(ae) = accept_encoding {
        req = req.header("accept-encoding", ae);
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), 200, "{url}");
    r
}

#[tokio::test]
async fn gzip_goes_only_to_clients_that_accept_it_and_holds_the_verified_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let server = Server::start(&m.data);
    let c = Client::new(&server.url);
    let defs: Vec<_> = (0..3)
        .map(|i| definition("gateway", &format!("edge-{i}"), "1.0.0"))
        .collect();
    for def in &defs {
        let (status, body) = c.publish_signed(&m.acme_token, def, &[&m.acme]).await;
        assert_eq!(status, 201, "{body}");
    }

    // python-tuf verifies the index (it asks for no encoding) and keeps what it trusted.
    let root = dir.path().join("root.json");
    std::fs::write(&root, trusted_root(&server.url).await).unwrap();
    let cache = dir.path().join("ngclient");
    let target = format!("acme/edge-0/{}.yaml", defs[0].version);
    let report = python_tuf(&server.url, &root, &cache, &[&target]);
    assert!(report["targets"][&target].is_object(), "{report}");

    let mut compressed = 0;
    for role in ["root", "timestamp", "snapshot", "targets", "acme"] {
        let verified = std::fs::read(cache.join(format!("metadata/{role}.json"))).unwrap();
        let version =
            serde_json::from_slice::<serde_json::Value>(&verified).unwrap()["signed"]["version"]
                .clone();
        let url = match role {
            "timestamp" => format!("{}/tuf/metadata/timestamp.json", server.url),
            _ => format!("{}/tuf/metadata/{version}.{role}.json", server.url),
        };
        let large = verified.len() > COMPRESS_OVER;
        for ae in [
            None,
            Some("gzip;q=0"),
            Some("br"),
            Some("identity, gzip;q=0.5"),
        ] {
            let r = get_with(&url, ae).await;
            assert!(
                r.headers().get(header::CONTENT_ENCODING).is_none(),
                "{url} {ae:?}"
            );
            assert_eq!(r.headers().contains_key(header::VARY), large, "{url}");
            assert_eq!(r.bytes().await.unwrap(), verified, "{url} {ae:?}");
        }
        for ae in ["gzip", "br, gzip", "*"] {
            let r = get_with(&url, Some(ae)).await;
            let encoding = r.headers().get(header::CONTENT_ENCODING).cloned();
            let etag = r.headers()[header::ETAG].to_str().unwrap().to_owned();
            let body = r.bytes().await.unwrap();
            if large {
                assert_eq!(encoding.unwrap(), "gzip", "{url} {ae}");
                assert!(etag.ends_with("+gzip\""), "{etag}");
                assert!(body.len() < verified.len());
                assert_eq!(gunzip(&body), verified, "{url}: decompressed bytes");
            } else {
                assert!(encoding.is_none(), "{url}: small files go as they are");
                assert_eq!(body, verified);
            }
        }
        compressed += usize::from(large);
    }
    assert!(compressed >= 2, "root and acme's role exceed 1 KiB");

    // Targets (YAML) are never compressed.
    let hash = defs[0].hash.trim_start_matches("sha256:");
    let r = get_with(
        &format!("{}/tuf/targets/acme/edge-0/{hash}.1.0.0.yaml", server.url),
        Some("gzip"),
    )
    .await;
    assert!(r.headers().get(header::CONTENT_ENCODING).is_none());
    assert_eq!(r.bytes().await.unwrap(), defs[0].bytes);
}

#[tokio::test]
async fn not_modified_answers_for_either_encoding() {
    let store = Store::open_in_memory().await.unwrap();
    let body = large("snapshot", 1, 8 * COMPRESS_OVER);
    store
        .put_metadata(&[meta("snapshot", 1, body.clone())])
        .await
        .unwrap();
    let s = AppState::new(store, None);
    let get = |ae: Option<&str>, inm: Option<&str>| {
        let mut req = Request::get("/tuf/metadata/1.snapshot.json");
        if let Some(ae) = ae {
            req = req.header(header::ACCEPT_ENCODING, ae);
        }
        if let Some(inm) = inm {
            req = req.header(header::IF_NONE_MATCH, inm);
        }
        send(&s, req.body(Body::empty()).unwrap())
    };

    let plain = get(None, None).await;
    let plain_tag = plain.headers[header::ETAG].to_str().unwrap().to_owned();
    assert_eq!(plain.body, body);
    let zipped = get(Some("gzip"), None).await;
    let zipped_tag = zipped.headers[header::ETAG].to_str().unwrap().to_owned();
    assert_ne!(plain_tag, zipped_tag, "each encoding has its own tag");

    // The gzip copy, still accepted: 304 naming it.
    let r = get(Some("gzip"), Some(&zipped_tag)).await;
    assert_eq!(r.status, StatusCode::NOT_MODIFIED);
    assert_eq!(r.headers[header::ETAG], zipped_tag.as_str());
    assert_eq!(r.headers[header::VARY], "accept-encoding");
    assert!(r.body.is_empty());
    // The identity copy is usable whatever the client accepts: 304 naming it.
    for ae in [None, Some("gzip")] {
        let r = get(ae, Some(&plain_tag)).await;
        assert_eq!(r.status, StatusCode::NOT_MODIFIED, "{ae:?}");
        assert_eq!(r.headers[header::ETAG], plain_tag.as_str());
        assert!(
            r.headers[header::CACHE_CONTROL]
                .to_str()
                .unwrap()
                .contains("immutable")
        );
    }
    // A gzip copy the client can no longer decode: the whole identity bytes.
    let r = get(Some("identity"), Some(&zipped_tag)).await;
    assert_eq!((r.status, r.body.as_str()), (StatusCode::OK, body.as_str()));
    assert!(r.headers.get(header::CONTENT_ENCODING).is_none());
}

#[tokio::test]
async fn a_commit_through_any_clone_of_the_store_is_served_at_once() {
    // In memory: no log to look at, so this is the process's own count of commits.
    let store = Store::open_in_memory().await.unwrap();
    let s = AppState::new(store.clone(), None);
    for v in 1..=3 {
        store
            .put_metadata(&[meta("timestamp", v, format!("{{\"t\":{v}}}"))])
            .await
            .unwrap();
        for _ in 0..2 {
            let r = common::get(&s, "/tuf/metadata/timestamp.json").await;
            assert_eq!(r.body, format!("{{\"t\":{v}}}"));
        }
    }
}

#[tokio::test]
async fn a_new_timestamp_is_served_once_committed_here_or_by_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("marketplace.db");
    let here = Store::open(&db).await.unwrap();
    let other = Store::open(&db).await.unwrap();
    let s = AppState::new(here.clone(), None);
    let fetch = |file: &'static str| {
        let s = s.clone();
        async move {
            let uri = format!("/tuf/metadata/{file}");
            let r = send(&s, Request::get(uri).body(Body::empty()).unwrap()).await;
            assert_eq!(r.status, StatusCode::OK, "{file}: {}", r.body);
            r.body
        }
    };
    let root = |v: u64| meta("root", v, large("root", v, 2 * COMPRESS_OVER));
    let ts = |v: u64| meta("timestamp", v, format!("{{\"t\":{v}}}"));
    here.put_metadata(&[root(1), ts(1)]).await.unwrap();
    assert_eq!(fetch("timestamp.json").await, "{\"t\":1}");
    assert_eq!(fetch("timestamp.json").await, "{\"t\":1}", "held in memory");

    // This process (any clone of its store) commits: served at once.
    here.put_metadata(&[ts(2)]).await.unwrap();
    assert_eq!(fetch("timestamp.json").await, "{\"t\":2}");
    assert_eq!(fetch("timestamp.json").await, "{\"t\":2}");

    // Another process commits (its own pool, its own counters): served at once too.
    other.put_metadata(&[ts(3)]).await.unwrap();
    assert_eq!(fetch("timestamp.json").await, "{\"t\":3}");
    assert_eq!(fetch("timestamp.json").await, "{\"t\":3}");
    assert_eq!(
        fetch("root.json").await,
        String::from_utf8(root(1).bytes).unwrap()
    );
    other.put_metadata(&[root(2), ts(4)]).await.unwrap();
    assert_eq!(
        fetch("root.json").await,
        String::from_utf8(root(2).bytes).unwrap()
    );
    assert_eq!(fetch("timestamp.json").await, "{\"t\":4}");
}

#[tokio::test]
async fn the_running_server_serves_what_the_cli_writes_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let server = Server::start(&m.data);
    let c = Client::new(&server.url);
    let def = definition("gateway", "edge", "1.0.0");
    let (status, body) = c.publish_signed(&m.acme_token, &def, &[&m.acme]).await;
    assert_eq!(status, 201, "{body}");
    let timestamp = || async {
        let r = get_with(&format!("{}/tuf/metadata/timestamp.json", server.url), None).await;
        let v: serde_json::Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        v["signed"]["version"].as_u64().unwrap()
    };
    let before = timestamp().await;
    assert_eq!(timestamp().await, before);

    // `publisher suspend` writes new targets, snapshot and timestamp from its own process.
    let out = marketplace(&[
        "publisher",
        "suspend",
        "acme",
        "--data-dir",
        m.data.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", output_text(&out));
    let after = timestamp().await;
    assert!(after > before, "timestamp v{after} after v{before}");

    // A publish through this server, once it trusts its memory again.
    let out = marketplace(&[
        "publisher",
        "resume",
        "acme",
        "--data-dir",
        m.data.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", output_text(&out));
    let resumed = timestamp().await;
    assert!(resumed > after);
    let next = definition("gateway", "edge", "1.1.0");
    let (status, body) = c.publish_signed(&m.acme_token, &next, &[&m.acme]).await;
    assert_eq!(status, 201, "{body}");
    assert!(timestamp().await > resumed);
}

#[tokio::test]
async fn immutable_files_stay_within_the_memory_budget() {
    let store = Store::open_in_memory().await.unwrap();
    let files: Vec<StoredMetadata> = (1..=20)
        .map(|v| meta("snapshot", v, large("snapshot", v, 2 * COMPRESS_OVER)))
        .collect();
    store.put_metadata(&files).await.unwrap();
    let budget = 8 * COMPRESS_OVER;
    let mut s = AppState::new(store.clone(), None);
    s.files = std::sync::Arc::new(Files::new(store, budget));
    for round in 0..2 {
        for f in &files {
            let uri = format!("/tuf/metadata/{}.snapshot.json", f.version);
            let r = send(&s, Request::get(uri).body(Body::empty()).unwrap()).await;
            assert_eq!(
                (r.status, r.body.as_bytes()),
                (StatusCode::OK, &f.bytes[..])
            );
            let (bytes, count) = s.files.cache_usage();
            assert!(bytes <= budget, "round {round}: {bytes} bytes held");
            assert!(count >= 1, "the most recent file is kept");
        }
    }
    // Nothing is kept of names that do not exist.
    let before = s.files.cache_usage();
    for v in 100..150 {
        let uri = format!("/tuf/metadata/{v}.snapshot.json");
        let r = send(&s, Request::get(uri).body(Body::empty()).unwrap()).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
    }
    assert_eq!(s.files.cache_usage(), before);
}
