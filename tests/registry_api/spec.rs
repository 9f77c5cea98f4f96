//! `/v2/` against the distribution spec's letter, as the OCI conformance suite (pull)
//! reads it: a reference that cannot name anything here is as unknown as one that
//! could, HEAD answers carry GET's headers, every error body uses only the spec's codes,
//! and failed pull tokens are limited like failed publisher tokens.

use axum::http::StatusCode;

use super::{d, oci_error, req, scene};

/// Pulls of references that are neither a tag nor a digest we could hold answer 404
/// with the spec's code, never 400: the spec lists only 404 for a manifest or blob pull
/// (end-2, end-3), and conformance pulls `.INVALID_MANIFEST_NAME` expecting 404. A
/// repository that serves nothing is `NAME_UNKNOWN`, whatever the reference.
#[tokio::test]
async fn references_that_cannot_exist_are_unknown_not_bad_requests() {
    let s = scene(true).await;
    let repo = "/v2/127.0.0.1_5000/acme/tool";
    let other = "/v2/127.0.0.1_5000/acme/other";
    let index = d(&s.img.index);
    let cases: Vec<(String, &str)> = vec![
        (
            format!("{repo}/manifests/.INVALID_MANIFEST_NAME"),
            "MANIFEST_UNKNOWN",
        ),
        (format!("{repo}/manifests/bad~tag"), "MANIFEST_UNKNOWN"),
        (format!("{repo}/manifests/sha256:zzzz"), "MANIFEST_UNKNOWN"),
        (
            format!("{repo}/manifests/sha256:totallywrong"),
            "MANIFEST_UNKNOWN",
        ),
        (format!("{repo}/manifests/md5:abc"), "MANIFEST_UNKNOWN"),
        (format!("{repo}/manifests/no-such-tag"), "MANIFEST_UNKNOWN"),
        (format!("{repo}/blobs/sha256:zzzz"), "BLOB_UNKNOWN"),
        (format!("{repo}/blobs/md5:abc"), "BLOB_UNKNOWN"),
        (format!("{repo}/blobs/not-a-digest"), "BLOB_UNKNOWN"),
        (
            format!("{repo}/blobs/{}", d(b"never stored")),
            "BLOB_UNKNOWN",
        ),
        (format!("{other}/manifests/{index}"), "NAME_UNKNOWN"),
        (
            format!("{other}/manifests/.INVALID_MANIFEST_NAME"),
            "NAME_UNKNOWN",
        ),
        (format!("{other}/manifests/sha256:zzzz"), "NAME_UNKNOWN"),
        (format!("{other}/blobs/{}", d(&s.img.layer)), "NAME_UNKNOWN"),
        (format!("{other}/blobs/md5:abc"), "NAME_UNKNOWN"),
        (
            format!("/v2/acme/tool/manifests/{index}?ns=ghcr.io"),
            "NAME_UNKNOWN",
        ),
    ];
    for (uri, code) in &cases {
        let r = req(&s, "GET", uri, &[]).await;
        assert_eq!(
            (r.status, oci_error(&r).as_str()),
            (StatusCode::NOT_FOUND, *code),
            "GET {uri}: {}",
            r.body
        );
        let r = req(&s, "HEAD", uri, &[]).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "HEAD {uri}");
    }
    // The referrers API is the exception the spec names: an invalid digest there MUST
    // be 400.
    let r = req(&s, "GET", &format!("{repo}/referrers/sha256:zzzz"), &[]).await;
    assert_eq!(
        (r.status, oci_error(&r).as_str()),
        (StatusCode::BAD_REQUEST, "DIGEST_INVALID")
    );
}

/// The application on a real loopback socket (hyper's own HEAD handling included), with
/// client addresses; served until the test ends.
async fn serve(state: &marketplace::AppState) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = marketplace::app(state.clone())
        .into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// Status, headers but `Date`, and body of one request.
async fn fetch(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut r = client.request(method, url);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let res = r.send().await.unwrap();
    let status = res.status().as_u16();
    let mut seen: Vec<(String, String)> = res
        .headers()
        .iter()
        .filter(|(k, _)| *k != "date")
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
        .collect();
    seen.sort();
    (status, seen, res.bytes().await.unwrap().to_vec())
}

/// RFC 9110 (9.3.2): HEAD is GET without the content, so every HEAD answer here, served
/// or refused, carries the headers GET's does (`Content-Type`, `Docker-Content-Digest`,
/// and a `Content-Length` that is GET's body length), over a real socket.
#[tokio::test]
async fn head_answers_carry_the_headers_get_would() {
    let s = scene(true).await;
    let url = serve(&s.state).await;
    let client = reqwest::Client::new();
    let repo = "/v2/127.0.0.1_5000/acme/tool";
    let index = d(&s.img.index);
    let etag = format!("\"{index}\"");
    let sig_tag = format!(
        "sha256-{}.sig",
        marketplace::blob::Digest::of(&s.img.index).hex()
    );
    let cases: Vec<(String, Vec<(&str, &str)>)> = vec![
        ("/v2/".into(), vec![]),
        (format!("{repo}/manifests/{index}"), vec![]),
        (format!("{repo}/manifests/{sig_tag}"), vec![]),
        (
            format!("{repo}/manifests/{index}"),
            vec![("if-none-match", &etag)],
        ),
        (format!("{repo}/blobs/{}", d(&s.img.layer)), vec![]),
        (format!("{repo}/manifests/{}", d(b"unknown")), vec![]),
        (format!("{repo}/blobs/{}", d(b"unknown")), vec![]),
        (format!("{repo}/manifests/.INVALID_MANIFEST_NAME"), vec![]),
        (format!("{repo}/blobs/sha256:zzzz"), vec![]),
        (
            format!("/v2/127.0.0.1_5000/acme/other/manifests/{index}"),
            vec![],
        ),
        (
            format!("/v2/127.0.0.1_5000/acme/other/blobs/{index}"),
            vec![],
        ),
        (format!("/v2/tool/manifests/{index}"), vec![]),
        (format!("{repo}/tags/list"), vec![]),
        (format!("{repo}/referrers/{index}"), vec![]),
        (format!("{repo}/referrers/sha256:zzzz"), vec![]),
    ];
    for (path, headers) in &cases {
        let at = format!("{url}{path}");
        let (get_status, get_headers, body) =
            fetch(&client, reqwest::Method::GET, &at, headers).await;
        let (head_status, head_headers, empty) =
            fetch(&client, reqwest::Method::HEAD, &at, headers).await;
        assert_eq!(head_status, get_status, "{path} {headers:?}");
        assert_eq!(head_headers, get_headers, "{path} {headers:?}");
        assert!(empty.is_empty(), "{path}");
        if get_status != 304 {
            let length = get_headers.iter().find(|(k, _)| k == "content-length");
            assert_eq!(
                length.map(|(_, v)| v.as_str()),
                Some(body.len().to_string().as_str()),
                "{path}: GET's Content-Length is its body's length"
            );
        }
    }
    // Range is defined for GET only (RFC 9110 14.2): HEAD ignores it and describes
    // the whole blob, as GET without one does.
    let blob = format!("{url}{repo}/blobs/{}", d(&s.img.layer));
    let (_, whole, _) = fetch(&client, reqwest::Method::GET, &blob, &[]).await;
    for range in ["bytes=0-9", "bytes=999999999-"] {
        let (status, head, _) =
            fetch(&client, reqwest::Method::HEAD, &blob, &[("range", range)]).await;
        assert_eq!((status, &head), (200, &whole), "HEAD with {range}");
    }

    // Refused for want of a pull token: the same challenge, the same length.
    let mut s = s;
    s.state.pull_tokens = Some(std::sync::Arc::new(
        [marketplace::token::hash("a-pull-token-long-enough")]
            .into_iter()
            .collect(),
    ));
    let url = serve(&s.state).await;
    for path in ["/v2/".to_owned(), format!("{repo}/manifests/{index}")] {
        let at = format!("{url}{path}");
        let (get_status, get_headers, body) = fetch(&client, reqwest::Method::GET, &at, &[]).await;
        let (head_status, head_headers, _) = fetch(&client, reqwest::Method::HEAD, &at, &[]).await;
        assert_eq!(
            (head_status, &head_headers),
            (get_status, &get_headers),
            "{path}"
        );
        assert_eq!(get_status, 401);
        assert!(
            get_headers.contains(&("content-length".into(), body.len().to_string())),
            "{path}: {get_headers:?}"
        );
    }
}

/// The codes the distribution spec allows in an error body; "the code field MUST be one
/// of" these.
pub const SPEC_CODES: [&str; 14] = [
    "BLOB_UNKNOWN",
    "BLOB_UPLOAD_INVALID",
    "BLOB_UPLOAD_UNKNOWN",
    "DIGEST_INVALID",
    "MANIFEST_BLOB_UNKNOWN",
    "MANIFEST_INVALID",
    "MANIFEST_UNKNOWN",
    "NAME_INVALID",
    "NAME_UNKNOWN",
    "SIZE_INVALID",
    "UNAUTHORIZED",
    "DENIED",
    "UNSUPPORTED",
    "TOOMANYREQUESTS",
];

/// A refusal's body in the spec's shape with only the spec's codes: every 4xx carries
/// one; a 5xx (our failure, for which the table has no code) may instead be plain text,
/// but never JSON of another shape.
#[track_caller]
pub fn assert_spec_error(status: u16, content_type: &str, body: &[u8], what: &str) {
    assert!(status >= 400, "{what}: {status}");
    let text = String::from_utf8_lossy(body);
    if status >= 500 && !content_type.starts_with("application/json") {
        assert!(!text.contains("\"code\""), "{what}: {text}");
        return;
    }
    assert_eq!(content_type, "application/json", "{what}: {status} {text}");
    let json: serde_json::Value =
        serde_json::from_slice(body).unwrap_or_else(|e| panic!("{what}: {e}: {text}"));
    let errors = json["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no `errors`: {text}"));
    assert!(!errors.is_empty(), "{what}: {text}");
    for e in errors {
        let code = e["code"].as_str().unwrap_or_default();
        assert!(
            SPEC_CODES.contains(&code),
            "{what}: {code:?} is not a spec code: {text}"
        );
        assert!(e["message"].is_string(), "{what}: {text}");
    }
}

/// A request and the status it must get: method, path, headers, body, status.
type Case<'a> = (&'a str, String, Vec<(&'a str, &'a str)>, Vec<u8>, u16);

/// Every refusal `/v2/` can be driven to, over a real socket: only the spec's codes.
#[tokio::test]
async fn every_error_body_uses_only_the_spec_codes() {
    let s = scene(true).await;
    let url = serve(&s.state).await;
    let client = reqwest::Client::new();
    let repo = "/v2/127.0.0.1_5000/acme/tool";
    let index = d(&s.img.index);
    let layer = d(&s.img.layer);
    let big_header = "x".repeat(20 * 1024);
    let big_body = vec![b'x'; 3 * 1024 * 1024];
    let cases: Vec<Case> = vec![
        (
            "GET",
            format!("{repo}/manifests/{}", d(b"x")),
            vec![],
            vec![],
            404,
        ),
        (
            "GET",
            format!("{repo}/manifests/.INVALID_MANIFEST_NAME"),
            vec![],
            vec![],
            404,
        ),
        (
            "GET",
            format!("{repo}/blobs/{}", d(b"x")),
            vec![],
            vec![],
            404,
        ),
        ("GET", format!("{repo}/blobs/md5:abc"), vec![], vec![], 404),
        (
            "GET",
            format!("/v2/127.0.0.1_5000/acme/nothing/manifests/{index}"),
            vec![],
            vec![],
            404,
        ),
        (
            "GET",
            "/v2/127.0.0.1_5000/acme/nothing/tags/list".into(),
            vec![],
            vec![],
            404,
        ),
        (
            "GET",
            format!("/v2/127.0.0.1_5000/acme/nothing/referrers/{index}"),
            vec![],
            vec![],
            404,
        ),
        (
            "GET",
            format!("/v2/tool/manifests/{index}"),
            vec![],
            vec![],
            400,
        ),
        (
            "GET",
            format!("/v2/acme/tool/manifests/{index}?ns=bad%20host"),
            vec![],
            vec![],
            400,
        ),
        ("GET", format!("{repo}/nothing"), vec![], vec![], 404),
        (
            "GET",
            format!("{repo}/referrers/sha256:zzzz"),
            vec![],
            vec![],
            400,
        ),
        (
            "GET",
            format!("{repo}/blobs/{layer}"),
            vec![("range", "bytes=999999999-")],
            vec![],
            416,
        ),
        ("GET", format!("{repo}/tags/list?n=x"), vec![], vec![], 400),
        ("GET", format!("{repo}/tags/list?n=-1"), vec![], vec![], 400),
        (
            "GET",
            format!("{repo}/tags/list?n=1&n=2"),
            vec![],
            vec![],
            400,
        ),
        (
            "GET",
            format!("{repo}/referrers/{index}?artifactType=a&artifactType=b"),
            vec![],
            vec![],
            400,
        ),
        (
            "POST",
            format!("{repo}/blobs/uploads/"),
            vec![],
            vec![],
            405,
        ),
        (
            "PUT",
            format!("{repo}/manifests/v1"),
            vec![],
            b"{}".to_vec(),
            405,
        ),
        (
            "PATCH",
            format!("{repo}/blobs/uploads/x"),
            vec![],
            vec![],
            405,
        ),
        (
            "DELETE",
            format!("{repo}/blobs/{layer}"),
            vec![],
            vec![],
            405,
        ),
        (
            "DELETE",
            format!("{repo}/manifests/{index}"),
            vec![],
            vec![],
            405,
        ),
        ("POST", "/v2/".into(), vec![], vec![], 405),
        (
            "GET",
            format!("{repo}/manifests/{index}"),
            vec![],
            big_body,
            413,
        ),
        (
            "GET",
            format!("{repo}/manifests/{index}"),
            vec![("x-padding", &big_header)],
            vec![],
            431,
        ),
    ];
    for (method, path, headers, body, want) in cases {
        let mut r = client.request(method.parse().unwrap(), format!("{url}{path}"));
        for (k, v) in &headers {
            r = r.header(*k, *v);
        }
        let res = r.body(body).send().await.unwrap();
        let status = res.status().as_u16();
        let content_type = res
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let body = res.bytes().await.unwrap();
        let what = format!("{method} {}", path.chars().take(120).collect::<String>());
        assert_eq!(status, want, "{what}: {}", String::from_utf8_lossy(&body));
        assert_spec_error(status, &content_type, &body, &what);
    }

    // Our own failure: a blob the database lists but the store lost.
    let dir = s._dir.path().join("sha256");
    let hex = marketplace::blob::Digest::of(&s.img.layer).hex().to_owned();
    std::fs::remove_file(dir.join(&hex[..2]).join(&hex)).unwrap();
    let manifest_hex = marketplace::blob::Digest::of(&s.img.manifest)
        .hex()
        .to_owned();
    std::fs::remove_file(dir.join(&manifest_hex[..2]).join(&manifest_hex)).unwrap();
    for path in [
        format!("{repo}/blobs/{layer}"),
        format!("{repo}/manifests/{}", d(&s.img.manifest)),
    ] {
        let res = client.get(format!("{url}{path}")).send().await.unwrap();
        let status = res.status().as_u16();
        let content_type = res.headers()["content-type"].to_str().unwrap().to_owned();
        let body = res.bytes().await.unwrap();
        assert_eq!(status, 500, "{path}");
        assert_spec_error(status, &content_type, &body, &path);
    }
}

/// The burst of failed token checks an address gets (`ratelimit::Limits::default`).
const ADDRESS_BURST: usize = 10;

/// Failed pull tokens spend the client address's budget of failed token checks, as
/// failed publisher tokens do: once spent, every check from that address is refused
/// with 429 `TOOMANYREQUESTS` and `Retry-After`, a valid token included, while other
/// addresses keep pulling. Requests without credentials are the protocol's challenge
/// step (clients ask anonymously first) and spend nothing.
#[tokio::test]
async fn failed_pull_tokens_are_limited_like_failed_publisher_tokens() {
    use axum::body::Body;
    use axum::extract::ConnectInfo;
    use axum::http::Request;

    let mut s = scene(true).await;
    let token = "a-pull-token-long-enough";
    s.state.pull_tokens = Some(std::sync::Arc::new(
        [marketplace::token::hash(token)].into_iter().collect(),
    ));
    let manifest = format!("/v2/127.0.0.1_5000/acme/tool/manifests/{}", d(&s.img.index));
    let good = format!("Bearer {token}");
    let bad = format!(
        "Basic {}",
        crate::common::oci::base64_encode(b"anyone:not-the-token")
    );
    let from = |ip: &str, method: &str, uri: &str, auth: Option<&str>| {
        let mut r = Request::builder().method(method).uri(uri);
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        let mut r = r.body(Body::empty()).unwrap();
        let addr = std::net::SocketAddr::new(ip.parse().unwrap(), 40_000);
        r.extensions_mut().insert(ConnectInfo(addr));
        crate::common::send(&s.state, r)
    };

    for _ in 0..3 * ADDRESS_BURST {
        let r = from("127.0.0.2", "GET", &manifest, None).await;
        assert_eq!(
            r.status,
            StatusCode::UNAUTHORIZED,
            "anonymous asks are not failures"
        );
    }
    for i in 0..ADDRESS_BURST {
        let r = from("127.0.0.2", "GET", &manifest, Some(&bad)).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "failure {i}");
    }
    for (method, uri, auth) in [
        ("GET", manifest.as_str(), Some(bad.as_str())),
        ("GET", manifest.as_str(), Some(good.as_str())),
        ("GET", "/v2/", Some(good.as_str())),
        ("GET", "/v2/127.0.0.1_5000/acme/tool/tags/list", None),
    ] {
        let r = from("127.0.0.2", method, uri, auth).await;
        assert_eq!(
            (r.status, oci_error(&r).as_str()),
            (StatusCode::TOO_MANY_REQUESTS, "TOOMANYREQUESTS"),
            "{uri} {auth:?}: {}",
            r.body
        );
        let wait: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=6).contains(&wait), "Retry-After: {wait}");
        assert_spec_error(429, "application/json", r.body.as_bytes(), uri);
    }
    let r = from("127.0.0.2", "HEAD", &manifest, Some(&good)).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers.contains_key("retry-after"));

    // Another address is not held back, and its own failures start from a full budget.
    let r = from("127.0.0.3", "GET", &manifest, Some(&good)).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = from("127.0.0.3", "GET", &manifest, Some(&bad)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}
