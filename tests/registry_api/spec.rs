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
