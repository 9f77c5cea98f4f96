//! The `/tuf/` surface: metadata by version, timestamp freshness headers, hash-named
//! target files, conditional requests.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use common::{builtin_yaml, get, send, state};
use marketplace::definition::Definition;
use marketplace::store::StoredMetadata;
use sha2::{Digest, Sha256};

fn meta(role: &str, version: u64, body: &str) -> StoredMetadata {
    StoredMetadata {
        role: role.into(),
        version,
        bytes: body.as_bytes().to_vec(),
        sha256: hex::encode(Sha256::digest(body.as_bytes())),
        expires_at: 0,
        created_at: 0,
    }
}

#[tokio::test]
async fn an_uninitialized_index_says_so() {
    let s = state().await;
    for uri in ["/tuf/metadata/timestamp.json", "/tuf/metadata/root.json"] {
        let r = get(&s, uri).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        assert_eq!(r.json()["error"]["code"], "not_initialized", "{uri}");
    }
}

#[tokio::test]
async fn metadata_is_served_by_version_with_cache_rules() {
    let s = state().await;
    s.store
        .put_metadata(&[
            meta("root", 1, "{\"r\":1}"),
            meta("timestamp", 1, "{\"t\":1}"),
            meta("snapshot", 1, "{\"s\":1}"),
        ])
        .await
        .unwrap();
    s.store
        .put_metadata(&[
            meta("root", 2, "{\"r\":2}"),
            meta("timestamp", 2, "{\"t\":2}"),
        ])
        .await
        .unwrap();

    let r = get(&s, "/tuf/metadata/1.root.json").await;
    assert_eq!((r.status, r.body.as_str()), (StatusCode::OK, "{\"r\":1}"));
    assert!(
        r.headers[header::CACHE_CONTROL]
            .to_str()
            .unwrap()
            .contains("immutable")
    );
    assert_eq!(get(&s, "/tuf/metadata/root.json").await.body, "{\"r\":2}");
    assert_eq!(
        get(&s, "/tuf/metadata/1.snapshot.json").await.body,
        "{\"s\":1}"
    );

    let ts = get(&s, "/tuf/metadata/timestamp.json").await;
    assert_eq!(ts.body, "{\"t\":2}", "the newest timestamp");
    let cache = ts.headers[header::CACHE_CONTROL].to_str().unwrap();
    assert!(
        cache.contains("max-age=30") && !cache.contains("immutable"),
        "{cache}"
    );
    let etag = ts.headers[header::ETAG].clone();
    let req = Request::get("/tuf/metadata/timestamp.json")
        .header(header::IF_NONE_MATCH, etag)
        .body(Body::empty())
        .unwrap();
    let again = send(&s, req).await;
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);
    assert!(again.body.is_empty());

    for missing in [
        "/tuf/metadata/3.root.json",
        "/tuf/metadata/x.root.json",
        "/tuf/metadata/root",
        "/tuf/metadata/1.nobody.json",
    ] {
        assert_eq!(
            get(&s, missing).await.status,
            StatusCode::NOT_FOUND,
            "{missing}"
        );
    }
}

#[tokio::test]
async fn target_files_are_named_by_their_hash() {
    let s = state().await;
    let yaml = builtin_yaml("gateway");
    let def = Definition::parse(yaml.as_bytes()).unwrap();
    let hex = def.hash.trim_start_matches("sha256:");
    let uri = format!("/tuf/targets/fundament/gateway/{hex}.{}.yaml", def.version);
    let r = get(&s, &uri).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, yaml);
    assert!(
        r.headers[header::CACHE_CONTROL]
            .to_str()
            .unwrap()
            .contains("immutable")
    );
    // tough's client asks for HASH.PUBLISHER/NAME/VERSION.yaml: the same bytes.
    let tough_layout = format!("/tuf/targets/{hex}.fundament/gateway/{}.yaml", def.version);
    assert_eq!(get(&s, &tough_layout).await.body, yaml);
    // Right hash under another plugin's name, or a malformed name: not found.
    for wrong in [
        format!("/tuf/targets/fundament/storage/{hex}.{}.yaml", def.version),
        format!("/tuf/targets/other/gateway/{hex}.{}.yaml", def.version),
        format!("/tuf/targets/fundament/gateway/{}.yaml", &hex[..10]),
        "/tuf/targets/fundament/gateway/nothing".to_owned(),
        format!("/tuf/targets/{hex}.other/gateway/{}.yaml", def.version),
    ] {
        assert_eq!(
            get(&s, &wrong).await.status,
            StatusCode::NOT_FOUND,
            "{wrong}"
        );
    }
}
