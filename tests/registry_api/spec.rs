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
