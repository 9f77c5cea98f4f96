//! `/v2/` in process, over a real store and a real blob store: what a mirrored image
//! serves (manifests by digest and tag, blobs whole and in ranges, tags, referrers), in
//! both naming forms, with the distribution spec's headers and error bodies; and what it
//! does not serve (an image not yet mirrored, a repository no definition pins, pushes).
//! Content enters the way the mirror records it: blobs put, then `record_mirrored`.

mod common;
#[path = "registry_api/spec.rs"]
mod spec;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::publishing::{definition, with_image};
use common::{NOW, Reply, send};
use marketplace::AppState;
use marketplace::blob::{BlobStore, Digest, FsBlobStore, once};
use marketplace::definition::Definition;
use marketplace::registry::Registry;
use marketplace::registry::manifest::{OCI_INDEX, OCI_MANIFEST};
use marketplace::store::{Content, ContentKind, Store};

struct Image {
    index: Vec<u8>,
    manifest: Vec<u8>,
    config: Vec<u8>,
    layer: Vec<u8>,
    signature: Vec<u8>,
    sig_layer: Vec<u8>,
    referrer: Vec<u8>,
}

fn d(bytes: &[u8]) -> String {
    Digest::of(bytes).to_string()
}

fn image() -> Image {
    let config =
        br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#
            .to_vec();
    let layer: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{}","size":{}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"{}","size":{}}}]}}"#,
        d(&config),
        config.len(),
        d(&layer),
        layer.len()
    )
    .into_bytes();
    let index = format!(
        r#"{{"schemaVersion":2,"mediaType":"{OCI_INDEX}","manifests":[{{"mediaType":"{OCI_MANIFEST}","digest":"{}","size":{},"platform":{{"architecture":"amd64","os":"linux"}}}}]}}"#,
        d(&manifest),
        manifest.len()
    )
    .into_bytes();
    let sig_layer = br#"{"critical":{"image":{"docker-manifest-digest":"x"}}}"#.to_vec();
    let signature = format!(
        r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{}","size":{}}},"layers":[{{"mediaType":"application/vnd.dev.cosign.simplesigning.v1+json","digest":"{}","size":{},"annotations":{{"dev.cosignproject.cosign/signature":"c2ln"}}}}]}}"#,
        d(&config),
        config.len(),
        d(&sig_layer),
        sig_layer.len()
    )
    .into_bytes();
    let referrer = format!(
        r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","artifactType":"application/vnd.example.sbom","config":{{"mediaType":"application/vnd.oci.empty.v1+json","digest":"{}","size":{}}},"layers":[],"subject":{{"mediaType":"{OCI_INDEX}","digest":"{}","size":{}}},"annotations":{{"org.example":"sbom"}}}}"#,
        d(&config),
        config.len(),
        d(&index),
        index.len()
    )
    .into_bytes();
    Image {
        index,
        manifest,
        config,
        layer,
        signature,
        sig_layer,
        referrer,
    }
}

fn pinning(image: &str) -> Definition {
    with_image(&definition("gateway", "edge", "1.0.0"), image)
}

fn content(bytes: &[u8], kind: ContentKind, media_type: &str) -> Content {
    Content {
        digest: d(bytes),
        kind,
        media_type: media_type.into(),
        size: bytes.len() as u64,
        subject: None,
        artifact_type: None,
        annotations: None,
    }
}

struct Scene {
    state: AppState,
    store: Store,
    img: Image,
    _dir: tempfile::TempDir,
}

/// `acme/edge` pins `127.0.0.1:5000/acme/tool@INDEX`; `mirrored` says whether the
/// mirror finished.
async fn scene(mirrored: bool) -> Scene {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in_memory().await.unwrap();
    let blobs: Arc<dyn BlobStore> = Arc::new(FsBlobStore::open(dir.path()).unwrap());
    let img = image();
    let def = pinning(&format!("127.0.0.1:5000/acme/tool@{}", d(&img.index)));
    store.insert_version("acme", &def, NOW).await.unwrap();
    let jobs = store
        .claim_mirror_jobs(NOW, NOW + 60, 10, None)
        .await
        .unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(
        (jobs[0].host.as_str(), jobs[0].repository.as_str()),
        ("127.0.0.1:5000", "acme/tool")
    );
    if mirrored {
        for bytes in [
            &img.index,
            &img.manifest,
            &img.config,
            &img.layer,
            &img.signature,
            &img.sig_layer,
            &img.referrer,
        ] {
            blobs
                .put(
                    &Digest::of(bytes),
                    Some(bytes.len() as u64),
                    once(bytes.clone()),
                )
                .await
                .unwrap();
        }
        let mut referrer = content(&img.referrer, ContentKind::Manifest, OCI_MANIFEST);
        referrer.subject = Some(d(&img.index));
        referrer.artifact_type = Some("application/vnd.example.sbom".into());
        referrer.annotations = Some(r#"{"org.example":"sbom"}"#.into());
        let rows = vec![
            content(&img.index, ContentKind::Manifest, OCI_INDEX),
            content(&img.manifest, ContentKind::Manifest, OCI_MANIFEST),
            content(
                &img.config,
                ContentKind::Blob,
                "application/vnd.oci.image.config.v1+json",
            ),
            content(
                &img.layer,
                ContentKind::Blob,
                "application/vnd.oci.image.layer.v1.tar+gzip",
            ),
            content(&img.signature, ContentKind::Manifest, OCI_MANIFEST),
            content(
                &img.sig_layer,
                ContentKind::Blob,
                "application/vnd.dev.cosign.simplesigning.v1+json",
            ),
            referrer,
        ];
        let tag = |suffix: &str| format!("sha256-{}.{suffix}", Digest::of(&img.index).hex());
        let tags = [
            (tag("att"), d(&img.signature)),
            (tag("sig"), d(&img.signature)),
        ];
        store
            .record_mirrored(jobs[0].id, &rows, &tags, None, NOW)
            .await
            .unwrap();
    }
    let mut state = AppState::new(store.clone(), None);
    state.registry = Some(Registry::new(store.clone(), blobs));
    Scene {
        state,
        store,
        img,
        _dir: dir,
    }
}

async fn req(s: &Scene, method: &str, uri: &str, headers: &[(&str, &str)]) -> Reply {
    let mut r = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    send(&s.state, r.body(Body::empty()).unwrap()).await
}

fn oci_error(r: &Reply) -> String {
    r.json()["errors"][0]["code"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test]
async fn manifests_are_served_as_mirrored_in_both_naming_forms() {
    let s = scene(true).await;
    let index = d(&s.img.index);
    for uri in [
        format!("/v2/127.0.0.1_5000/acme/tool/manifests/{index}"),
        format!("/v2/acme/tool/manifests/{index}?ns=127.0.0.1:5000"),
    ] {
        let r = req(&s, "GET", &uri, &[]).await;
        assert_eq!(r.status, StatusCode::OK, "{uri}: {}", r.body);
        assert_eq!(r.body.as_bytes(), s.img.index.as_slice());
        assert_eq!(r.headers["content-type"], OCI_INDEX);
        assert_eq!(r.headers["docker-content-digest"], index.as_str());
        assert_eq!(r.headers["etag"], format!("\"{index}\"").as_str());
        assert_eq!(r.headers["docker-distribution-api-version"], "registry/2.0");
    }
    // HEAD: the same headers and the real length, no body.
    let uri = format!(
        "/v2/127.0.0.1_5000/acme/tool/manifests/{}",
        d(&s.img.manifest)
    );
    let r = req(&s, "HEAD", &uri, &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.headers["content-length"],
        s.img.manifest.len().to_string().as_str()
    );
    assert_eq!(r.headers["content-type"], OCI_MANIFEST);
    assert!(r.body.is_empty());
    // Conditional.
    let etag = format!("\"{}\"", d(&s.img.manifest));
    let r = req(&s, "GET", &uri, &[("if-none-match", &etag)]).await;
    assert_eq!(r.status, StatusCode::NOT_MODIFIED);
    // The cosign signature by its tag.
    let tag = format!("sha256-{}.sig", Digest::of(&s.img.index).hex());
    let r = req(
        &s,
        "GET",
        &format!("/v2/127.0.0.1_5000/acme/tool/manifests/{tag}"),
        &[],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body.as_bytes(), s.img.signature.as_slice());
    assert_eq!(
        r.headers["docker-content-digest"],
        d(&s.img.signature).as_str()
    );
}

#[tokio::test]
async fn blobs_stream_whole_or_in_one_range() {
    let s = scene(true).await;
    let layer = d(&s.img.layer);
    let uri = format!("/v2/127.0.0.1_5000/acme/tool/blobs/{layer}");
    let r = req(&s, "GET", &uri, &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.headers["content-length"],
        s.img.layer.len().to_string().as_str()
    );
    assert_eq!(r.headers["accept-ranges"], "bytes");
    assert_eq!(r.headers["docker-content-digest"], layer.as_str());
    // `send` reads the body as text; compare its bytes through a lossless path.
    let full = axum_bytes(&s, &uri, &[]).await;
    assert_eq!(full, s.img.layer);

    let part = axum_bytes(&s, &uri, &[("range", "bytes=1000-1999")]).await;
    assert_eq!(part, s.img.layer[1000..2000]);
    let r = req(&s, "GET", &uri, &[("range", "bytes=1000-1999")]).await;
    assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(
        r.headers["content-range"],
        format!("bytes 1000-1999/{}", s.img.layer.len()).as_str()
    );
    let tail = axum_bytes(&s, &uri, &[("range", "bytes=-10")]).await;
    assert_eq!(tail, s.img.layer[s.img.layer.len() - 10..]);
    let r = req(&s, "GET", &uri, &[("range", "bytes=999999999-")]).await;
    assert_eq!(r.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(
        r.headers["content-range"],
        format!("bytes */{}", s.img.layer.len()).as_str()
    );
    let r = req(&s, "HEAD", &uri, &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.headers["content-length"],
        s.img.layer.len().to_string().as_str()
    );
    assert!(r.body.is_empty());
    // A manifest is a blob too, as in any registry.
    let r = req(
        &s,
        "GET",
        &format!("/v2/127.0.0.1_5000/acme/tool/blobs/{}", d(&s.img.index)),
        &[],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
}

async fn axum_bytes(s: &Scene, uri: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let mut r = Request::get(uri);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let res = marketplace::app(s.state.clone())
        .oneshot(r.body(Body::empty()).unwrap())
        .await
        .unwrap();
    res.into_body().collect().await.unwrap().to_bytes().to_vec()
}

#[tokio::test]
async fn tags_and_referrers_are_listed() {
    let s = scene(true).await;
    let tag = |suffix: &str| format!("sha256-{}.{suffix}", Digest::of(&s.img.index).hex());
    let r = req(&s, "GET", "/v2/127.0.0.1_5000/acme/tool/tags/list", &[]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.json()["name"], "127.0.0.1_5000/acme/tool");
    assert_eq!(
        r.json()["tags"],
        serde_json::json!([tag("att"), tag("sig")])
    );
    assert!(r.headers.get("link").is_none());
    // Paged: one at a time, the next page linked from the last tag.
    let r = req(
        &s,
        "GET",
        "/v2/acme/tool/tags/list?ns=127.0.0.1:5000&n=1",
        &[],
    )
    .await;
    assert_eq!(r.json()["name"], "acme/tool");
    assert_eq!(r.json()["tags"], serde_json::json!([tag("att")]));
    let link = r.headers["link"].to_str().unwrap().to_owned();
    assert_eq!(
        link,
        format!(
            "</v2/acme/tool/tags/list?n=1&last={}&ns=127.0.0.1:5000>; rel=\"next\"",
            tag("att")
        )
    );
    let next = link
        .trim_start_matches('<')
        .split('>')
        .next()
        .unwrap()
        .to_owned();
    let r = req(&s, "GET", &next, &[]).await;
    assert_eq!(r.json()["tags"], serde_json::json!([tag("sig")]));
    assert!(r.headers.get("link").is_none());
    for n in ["-1", "1001", "x"] {
        let r = req(
            &s,
            "GET",
            &format!("/v2/acme/tool/tags/list?ns=127.0.0.1:5000&n={n}"),
            &[],
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "n={n}");
    }

    let uri = format!("/v2/127.0.0.1_5000/acme/tool/referrers/{}", d(&s.img.index));
    let r = req(&s, "GET", &uri, &[]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.headers["content-type"], OCI_INDEX);
    let listed = &r.json()["manifests"];
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["digest"], d(&s.img.referrer).as_str());
    assert_eq!(listed[0]["artifactType"], "application/vnd.example.sbom");
    assert_eq!(listed[0]["annotations"]["org.example"], "sbom");
    let r = req(&s, "GET", &format!("{uri}?artifactType=other"), &[]).await;
    assert_eq!(r.json()["manifests"], serde_json::json!([]));
    assert_eq!(r.headers["oci-filters-applied"], "artifactType");
}

#[tokio::test]
async fn nothing_is_served_before_the_mirror_finishes_or_outside_a_pinned_repository() {
    // Before the mirror finished, the repository serves nothing at all.
    let s = scene(false).await;
    let index = d(&s.img.index);
    let r = req(
        &s,
        "GET",
        &format!("/v2/127.0.0.1_5000/acme/tool/manifests/{index}"),
        &[],
    )
    .await;
    assert_eq!(
        (r.status, oci_error(&r).as_str()),
        (StatusCode::NOT_FOUND, "NAME_UNKNOWN")
    );
    let r = req(&s, "GET", "/v2/127.0.0.1_5000/acme/tool/tags/list", &[]).await;
    assert_eq!(
        (r.status, oci_error(&r).as_str()),
        (StatusCode::NOT_FOUND, "NAME_UNKNOWN")
    );

    let s = scene(true).await;
    // The same digest under another repository or host is not served.
    for uri in [
        format!("/v2/127.0.0.1_5000/acme/other/manifests/{index}"),
        format!("/v2/acme/tool/manifests/{index}?ns=ghcr.io"),
    ] {
        let r = req(&s, "GET", &uri, &[]).await;
        assert_eq!(
            (r.status, oci_error(&r).as_str()),
            (StatusCode::NOT_FOUND, "NAME_UNKNOWN"),
            "{uri}"
        );
    }
    let r = req(
        &s,
        "GET",
        &format!("/v2/127.0.0.1_5000/acme/other/blobs/{}", d(&s.img.layer)),
        &[],
    )
    .await;
    assert_eq!(
        (r.status, oci_error(&r).as_str()),
        (StatusCode::NOT_FOUND, "NAME_UNKNOWN")
    );
    // A manifest of the served repository that this image does not hold.
    let r = req(
        &s,
        "GET",
        &format!("/v2/127.0.0.1_5000/acme/tool/manifests/{}", d(b"other")),
        &[],
    )
    .await;
    assert_eq!(
        (r.status, oci_error(&r).as_str()),
        (StatusCode::NOT_FOUND, "MANIFEST_UNKNOWN")
    );
    assert!(s.store.mirror_statuses().await.unwrap()[0].status == "mirrored");
}

#[tokio::test]
async fn bad_names_digests_and_pushes_get_the_spec_errors() {
    let s = scene(true).await;
    let index = d(&s.img.index);
    let cases: Vec<(&str, String, StatusCode, &str)> = vec![
        (
            "GET",
            format!("/v2/127.0.0.1_5000/acme/../tool/manifests/{index}"),
            StatusCode::BAD_REQUEST,
            "NAME_INVALID",
        ),
        (
            "GET",
            format!("/v2/127.0.0.1_5000/%2e%2e/tool/manifests/{index}"),
            StatusCode::BAD_REQUEST,
            "NAME_INVALID",
        ),
        (
            "GET",
            format!("/v2/tool/manifests/{index}"),
            StatusCode::BAD_REQUEST,
            "NAME_INVALID",
        ),
        (
            "GET",
            format!("/v2/x.io/{}/manifests/{index}", "a".repeat(300)),
            StatusCode::BAD_REQUEST,
            "NAME_INVALID",
        ),
        (
            "GET",
            "/v2/127.0.0.1_5000/acme/tool/nothing".into(),
            StatusCode::NOT_FOUND,
            "NAME_UNKNOWN",
        ),
        (
            "POST",
            "/v2/127.0.0.1_5000/acme/tool/blobs/uploads/".into(),
            StatusCode::METHOD_NOT_ALLOWED,
            "UNSUPPORTED",
        ),
        (
            "PUT",
            "/v2/127.0.0.1_5000/acme/tool/manifests/v1".into(),
            StatusCode::METHOD_NOT_ALLOWED,
            "UNSUPPORTED",
        ),
        (
            "DELETE",
            format!("/v2/127.0.0.1_5000/acme/tool/blobs/{index}"),
            StatusCode::METHOD_NOT_ALLOWED,
            "UNSUPPORTED",
        ),
    ];
    for (method, uri, status, code) in cases {
        let r = req(&s, method, &uri, &[]).await;
        assert_eq!(
            (r.status, oci_error(&r).as_str()),
            (status, code),
            "{method} {uri}: {}",
            r.body
        );
        assert!(r.json()["errors"][0]["message"].as_str().unwrap().len() < 600);
    }
    let r = req(&s, "GET", "/v2/", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers["docker-distribution-api-version"], "registry/2.0");
}

#[tokio::test]
async fn with_pull_tokens_every_route_needs_one() {
    let mut s = scene(true).await;
    let token = "a-pull-token-long-enough";
    s.state.pull_tokens = Some(Arc::new(
        [marketplace::token::hash(token)].into_iter().collect(),
    ));
    let index = d(&s.img.index);
    let manifest = format!("/v2/127.0.0.1_5000/acme/tool/manifests/{index}");
    for uri in [
        "/v2/",
        manifest.as_str(),
        "/v2/127.0.0.1_5000/acme/tool/tags/list",
    ] {
        let r = req(&s, "GET", uri, &[]).await;
        assert_eq!(
            (r.status, oci_error(&r).as_str()),
            (StatusCode::UNAUTHORIZED, "UNAUTHORIZED"),
            "{uri}"
        );
        assert_eq!(
            r.headers["www-authenticate"],
            "Basic realm=\"marketplace registry\""
        );
    }
    // Nothing is revealed without a token: not even whether a repository exists.
    let r = req(&s, "GET", "/v2/127.0.0.1_5000/acme/nothing/tags/list", &[]).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let bearer = format!("Bearer {token}");
    let basic = format!(
        "Basic {}",
        common::oci::base64_encode(format!("anyone:{token}").as_bytes())
    );
    for auth in [bearer.as_str(), basic.as_str()] {
        let r = req(&s, "GET", &manifest, &[("authorization", auth)]).await;
        assert_eq!(r.status, StatusCode::OK, "{auth}");
    }
    for wrong in ["Bearer nope-nope-nope-nope", "Basic bm9wZQ==", "Token x"] {
        let r = req(&s, "GET", &manifest, &[("authorization", wrong)]).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{wrong}");
    }
}
