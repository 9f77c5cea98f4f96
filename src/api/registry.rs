//! `/v2/`: the OCI Distribution pull API over mirrored images, read-only.
//!
//! - `GET|HEAD /v2/` — API version check;
//! - `GET|HEAD /v2/NAME/manifests/REFERENCE` — by digest, or by a tag the image has
//!   (cosign's `sha256-<hex>.sig`), with the bytes and media type as mirrored;
//! - `GET|HEAD /v2/NAME/blobs/DIGEST` — streamed from the blob store, one `Range`;
//! - `GET /v2/NAME/tags/list?n=&last=` and `GET /v2/NAME/referrers/DIGEST`.
//!
//! NAME is an upstream repository, in containerd's mirror form (`?ns=HOST`) or directly
//! (`HOST/PATH`, a port as `_PORT`; see `registry::names`). Anything that writes is
//! refused with the spec's `UNSUPPORTED`. Errors are the spec's
//! `{"errors": [{"code", "message", "detail"}]}`.
//!
//! Layering: HTTP only; the registry domain decides what is served.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde::Deserialize;

mod range;

use range::{Ranged, parse_range};

use super::AppState;
use super::error::{ErrorCode, HttpError};
use super::extract::{ClientAddr, client_has};
use super::layers::{Limits, MAX_BODY_BYTES};
use crate::registry::{Registry, RegistryError, Repo};

/// Blob downloads stream after the handler returns, so the timeout bounds finding the
/// content, not sending a multi-gigabyte layer to a slow client.
pub const LIMITS: Limits = Limits {
    body_bytes: MAX_BODY_BYTES,
    timeout: Duration::from_secs(60),
};

const API_VERSION: (&str, &str) = ("docker-distribution-api-version", "registry/2.0");
/// The most tags one listing returns.
const MAX_TAGS: i64 = 1000;

pub fn router() -> axum::Router<AppState> {
    let routes = axum::Router::new()
        .route("/v2", any(base))
        .route("/v2/", any(base))
        .route("/v2/{*rest}", any(dispatch));
    LIMITS.apply(routes, render)
}

/// Draws an error as the distribution spec's body, or as plain text for a failure of
/// ours (see [`oci_code`]).
pub fn render(e: HttpError) -> Response {
    let mut response = match oci_code(e.code) {
        Some(code) => {
            let body = serde_json::json!({
                "errors": [{
                    "code": code,
                    "message": e.message,
                    "detail": e.details.unwrap_or_else(|| serde_json::json!({})),
                }]
            });
            (e.status, axum::Json(body)).into_response()
        }
        None => (
            e.status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{}\n", e.message),
        )
            .into_response(),
    };
    response
        .headers_mut()
        .insert(API_VERSION.0, HeaderValue::from_static(API_VERSION.1));
    if let Some(secs) = e.retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, secs.into());
    }
    if e.code == ErrorCode::Unauthorized {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"marketplace registry\""),
        );
    }
    response
}

/// The spec's code for each of ours. Its table is closed ("the code field MUST be one
/// of" fourteen codes) and has none for a failure of the registry itself, so those
/// (`None`: 5xx) are answered in plain text, which the spec leaves free, rather than
/// under a code that would blame the request. No catch-all arm: a new code does not
/// compile until it is placed here.
fn oci_code(code: ErrorCode) -> Option<&'static str> {
    use ErrorCode as C;
    Some(match code {
        C::Unauthorized => "UNAUTHORIZED",
        C::Forbidden | C::Suspended => "DENIED",
        C::RateLimited => "TOOMANYREQUESTS",
        // A body or headers over our limits, a range outside the blob: lengths that do
        // not fit the content.
        C::PayloadTooLarge | C::HeadersTooLarge | C::SizeInvalid => "SIZE_INVALID",
        C::NameUnknown | C::NotFound | C::NoRole => "NAME_UNKNOWN",
        C::NameInvalid => "NAME_INVALID",
        C::ManifestUnknown => "MANIFEST_UNKNOWN",
        C::BlobUnknown => "BLOB_UNKNOWN",
        C::DigestInvalid => "DIGEST_INVALID",
        // A request or parameter this read-only registry does not take. The publishing
        // codes never arise on `/v2/`; were one to, it would mean the same.
        C::Unsupported
        | C::BadRequest
        | C::BadParameter
        | C::InvalidDefinition
        | C::InvalidMetadata
        | C::BadSignature
        | C::Stale
        | C::Lifetime
        | C::Rejected
        | C::Conflict
        | C::VersionExists
        | C::TooMany
        | C::NotInstallable
        | C::Ambiguous
        | C::InvalidArgument
        | C::AlreadyExists
        | C::WrongStatus
        | C::NotApproved
        | C::Unimplemented => "UNSUPPORTED",
        C::NotInitialized | C::Timeout | C::Unavailable | C::Internal => return None,
    })
}

/// 400 for a query parameter this registry cannot take. The spec's table has no code
/// for a bad parameter (the distribution project's `PAGINATION_NUMBER_INVALID` is not
/// in it); `UNSUPPORTED`, "the operation is unsupported", is the one that fits a
/// request we will not carry out as asked.
fn bad_parameter(message: String) -> HttpError {
    HttpError::new(StatusCode::BAD_REQUEST, ErrorCode::Unsupported, message)
}

impl From<RegistryError> for HttpError {
    fn from(e: RegistryError) -> Self {
        let message = e.to_string();
        let status = |s, c| HttpError::new(s, c, message.clone());
        match e {
            RegistryError::NameInvalid { .. } => {
                status(StatusCode::BAD_REQUEST, ErrorCode::NameInvalid)
            }
            RegistryError::NameUnknown(_) => status(StatusCode::NOT_FOUND, ErrorCode::NameUnknown),
            RegistryError::ManifestUnknown { .. } => {
                status(StatusCode::NOT_FOUND, ErrorCode::ManifestUnknown)
            }
            RegistryError::BlobUnknown { .. } => {
                status(StatusCode::NOT_FOUND, ErrorCode::BlobUnknown)
            }
            RegistryError::DigestInvalid(_) => {
                status(StatusCode::BAD_REQUEST, ErrorCode::DigestInvalid)
            }
            RegistryError::Blob(e) => HttpError::internal("registry blob store failure", &e),
            RegistryError::Store(e) => e.into(),
        }
    }
}

#[derive(Deserialize)]
struct Query {
    /// containerd's upstream host.
    ns: Option<String>,
    n: Option<String>,
    last: Option<String>,
    #[serde(rename = "artifactType")]
    artifact_type: Option<String>,
}

async fn base(
    State(state): State<AppState>,
    client: ClientAddr,
    method: Method,
    headers: HeaderMap,
) -> Response {
    let checked = match method {
        Method::GET | Method::HEAD => authorized(&state, client, &headers),
        _ => Err(unsupported(&format!("{method} requests"))),
    };
    let response = match checked {
        Ok(()) => ([API_VERSION], axum::Json(serde_json::json!({}))).into_response(),
        Err(e) => render(e),
    };
    if method == Method::HEAD {
        return without_content(response);
    }
    response
}

/// A HEAD answer from the GET answer to the same request: the same status and headers,
/// `Content-Length` included, and no content (RFC 9110 9.3.2; the distribution spec
/// also wants a HEAD's `Content-Length` to be the manifest's or blob's size). Errors
/// too: a HEAD that says `Content-Length: 0` where GET sends a JSON body misleads
/// clients and proxies that cache HEAD answers.
fn without_content(mut response: Response) -> Response {
    use http_body::Body as _;
    if response.status() == StatusCode::NOT_MODIFIED {
        // A 304 may only carry the 200's length (RFC 9110 15.4.5), and GET's carries
        // none; an empty body of unknown length keeps axum from writing
        // `Content-Length: 0` on the HEAD one.
        *response.body_mut() = Body::from_stream(futures_util::stream::empty::<
            Result<bytes::Bytes, std::io::Error>,
        >());
        return response;
    }
    if !response.headers().contains_key(header::CONTENT_LENGTH)
        && let Some(n) = response.body().size_hint().exact()
    {
        response
            .headers_mut()
            .insert(header::CONTENT_LENGTH, n.into());
    }
    *response.body_mut() = Body::empty();
    response
}

/// With pull tokens configured, a request must carry one: `Authorization: Bearer TOKEN`
/// (containerd with a `hosts.toml` header, `skopeo --registry-token`) or Basic with the
/// token as the password (`docker login`, `skopeo --creds`; the user name is ignored).
/// The challenge asks for Basic: there is no token server to send clients to.
///
/// Failed checks spend the client address's budget in `AppState::auth_limits`, the one
/// failed publisher tokens spend, with the same settings: once it is spent, every check
/// from the address is refused with 429 before its credentials are looked at. Unlike a
/// publish without a token, a request without credentials is no failure: docker,
/// containerd and skopeo ask anonymously first and answer the challenge, so counting it
/// would spend a legitimate client's budget on every pull.
fn authorized(
    state: &AppState,
    ClientAddr(client): ClientAddr,
    headers: &HeaderMap,
) -> Result<(), HttpError> {
    let Some(tokens) = &state.pull_tokens else {
        return Ok(());
    };
    state
        .auth_limits
        .check(client, None, std::time::Instant::now())
        .map_err(HttpError::from)?;
    let challenge = || {
        HttpError::unauthorized(
            "this registry needs a pull token (Bearer, or Basic with the token as password)",
        )
    };
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(challenge());
    };
    let presented = value.to_str().ok().and_then(|v| {
        let (scheme, rest) = v.split_once(' ')?;
        match scheme.to_ascii_lowercase().as_str() {
            "bearer" => Some(rest.trim().to_owned()),
            "basic" => {
                use base64::Engine as _;
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(rest.trim())
                    .ok()?;
                let text = String::from_utf8(decoded).ok()?;
                Some(text.split_once(':')?.1.to_owned())
            }
            _ => None,
        }
    });
    if presented.is_some_and(|t| tokens.contains(&crate::token::hash(&t))) {
        return Ok(());
    }
    super::auth_failed(state, client, None);
    Err(challenge())
}

/// What a `/v2/NAME/...` path asks for.
enum Route<'a> {
    Manifest(&'a str),
    Blob(&'a str),
    Tags,
    Referrers(&'a str),
}

fn route(rest: &str) -> Option<(&str, Route<'_>)> {
    if let Some(name) = rest.strip_suffix("/tags/list") {
        return Some((name, Route::Tags));
    }
    let (head, reference) = rest.rsplit_once('/')?;
    let (name, kind) = head.rsplit_once('/')?;
    let route = match kind {
        "manifests" => Route::Manifest(reference),
        "blobs" => Route::Blob(reference),
        "referrers" => Route::Referrers(reference),
        _ => return None,
    };
    Some((name, route))
}

fn unsupported(what: &str) -> HttpError {
    HttpError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::Unsupported,
        format!("{what}: this registry is a read-only mirror of published plugin images"),
    )
}

async fn dispatch(
    State(state): State<AppState>,
    client: ClientAddr,
    method: Method,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
) -> Response {
    let response = match answer(&state, client, &method, &uri, &headers).await {
        Ok(response) => response,
        Err(e) => render(e),
    };
    if method == Method::HEAD {
        return without_content(response);
    }
    response
}

async fn answer(
    state: &AppState,
    client: ClientAddr,
    method: &Method,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
) -> Result<Response, HttpError> {
    authorized(state, client, headers)?;
    let rest = uri.path().strip_prefix("/v2/").unwrap_or_default();
    if rest.contains("/blobs/uploads") {
        return Err(unsupported("pushing blobs"));
    }
    let (name, route) = route(rest).ok_or_else(|| {
        HttpError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NameUnknown,
            "no such registry route; see the OCI distribution spec's pull endpoints",
        )
    })?;
    let head = match *method {
        Method::GET => false,
        Method::HEAD => true,
        _ if matches!(route, Route::Manifest(_)) => {
            return Err(unsupported("pushing or deleting manifests"));
        }
        _ => return Err(unsupported(&format!("{method} requests"))),
    };
    let query: Query = serde_urlencoded::from_str(uri.query().unwrap_or(""))
        .map_err(|e| bad_parameter(format!("query string: {e}")))?;
    let registry = state.registry.as_ref().ok_or_else(|| {
        HttpError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NameUnknown,
            "this server mirrors no images",
        )
    })?;
    let repo = Repo::resolve(name, query.ns.as_deref())?;
    match route {
        Route::Manifest(reference) => manifest(registry, &repo, reference, head, headers).await,
        Route::Blob(digest) => blob(registry, &repo, digest, head, headers).await,
        Route::Tags => tags(registry, &repo, &query).await,
        Route::Referrers(digest) => referrers(registry, &repo, digest, &query).await,
    }
}

/// A digest's entity tag: content-addressed, so the digest says it all.
fn etag_of(digest: &str) -> String {
    format!("\"{digest}\"")
}

fn content_headers(digest: &str, media_type: &str) -> [(header::HeaderName, HeaderValue); 5] {
    [
        (
            header::HeaderName::from_static("docker-content-digest"),
            HeaderValue::from_str(digest).expect("a digest is a valid header value"),
        ),
        (
            header::CONTENT_TYPE,
            HeaderValue::from_str(media_type)
                .unwrap_or(HeaderValue::from_static("application/octet-stream")),
        ),
        (
            header::ETAG,
            HeaderValue::from_str(&etag_of(digest)).expect("a digest is a valid header value"),
        ),
        (
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=31536000, immutable"),
        ),
        (
            header::HeaderName::from_static(API_VERSION.0),
            HeaderValue::from_static(API_VERSION.1),
        ),
    ]
}

async fn manifest(
    registry: &Registry,
    repo: &Repo,
    reference: &str,
    head: bool,
    headers: &HeaderMap,
) -> Result<Response, HttpError> {
    let found = registry.manifest(repo, reference, head).await?;
    let digest = found.digest.as_str();
    if client_has(headers, &etag_of(digest)) {
        return Ok((
            StatusCode::NOT_MODIFIED,
            content_headers(digest, &found.media_type),
        )
            .into_response());
    }
    let mut response = (
        content_headers(digest, &found.media_type),
        match found.bytes {
            Some(bytes) => Body::from(bytes),
            None => Body::empty(),
        },
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_LENGTH, found.size.into());
    Ok(response)
}

async fn blob(
    registry: &Registry,
    repo: &Repo,
    digest: &str,
    head: bool,
    headers: &HeaderMap,
) -> Result<Response, HttpError> {
    let (digest, size) = registry.blob_size(repo, digest).await?;
    let mut common = content_headers(digest.as_str(), "application/octet-stream").to_vec();
    common.push((header::ACCEPT_RANGES, HeaderValue::from_static("bytes")));
    if client_has(headers, &etag_of(digest.as_str())) {
        return Ok((
            StatusCode::NOT_MODIFIED,
            axum::response::AppendHeaders(common),
        )
            .into_response());
    }
    // Range is defined for GET only (RFC 9110 14.2): a HEAD describes the whole blob.
    let asked = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .filter(|_| !head);
    let range = match asked {
        None => None,
        Some(spec) => match parse_range(spec, size) {
            Ranged::Whole => None,
            Ranged::Part(r) => Some(r),
            Ranged::Unsatisfiable => {
                // 416 with `Content-Range: bytes */SIZE`, as RFC 9110 wants. The spec's
                // table has no range code (the distribution project answers Go's
                // plain-text "invalid range"); `SIZE_INVALID`, "provided length did not
                // match content length", says what is wrong, and unlike `UNSUPPORTED` it
                // does not tell a client resuming a download that ranges are not served.
                let mut response = render(HttpError::new(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    ErrorCode::SizeInvalid,
                    format!(
                        "range `{}` is outside the blob's {size} bytes",
                        spec.chars().take(80).collect::<String>()
                    ),
                ));
                response.headers_mut().insert(
                    header::CONTENT_RANGE,
                    HeaderValue::from_str(&format!("bytes */{size}")).expect("a valid header"),
                );
                return Ok(response);
            }
        },
    };
    let (status, length) = match &range {
        Some(r) => (StatusCode::PARTIAL_CONTENT, r.end - r.start),
        None => (StatusCode::OK, size),
    };
    // Redirected downloads send their `Range` to the store, which answers it itself;
    // a HEAD, a 304 and a 416 are answered here (they carry no bytes).
    if !head && let Some(url) = registry.blob_url(&digest).await? {
        let mut response = (
            StatusCode::TEMPORARY_REDIRECT,
            axum::response::AppendHeaders(common),
        )
            .into_response();
        let h = response.headers_mut();
        h.insert(
            header::LOCATION,
            HeaderValue::from_str(url.as_str())
                .map_err(|e| HttpError::internal("a presigned URL is not a header value", &e))?,
        );
        // The URL is a short-lived credential: no cache may keep it.
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return Ok(response);
    }
    let body = if head {
        Body::empty()
    } else {
        Body::from_stream(registry.open_blob(&digest, range.clone()).await?.body)
    };
    let mut response = (status, axum::response::AppendHeaders(common), body).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_LENGTH, length.into());
    if let Some(r) = range {
        h.insert(
            header::CONTENT_RANGE,
            HeaderValue::from_str(&format!("bytes {}-{}/{size}", r.start, r.end - 1))
                .expect("a valid header"),
        );
    }
    Ok(response)
}

async fn tags(registry: &Registry, repo: &Repo, query: &Query) -> Result<Response, HttpError> {
    let n = match &query.n {
        None => MAX_TAGS,
        Some(n) => n
            .parse::<i64>()
            .ok()
            .filter(|n| (0..=MAX_TAGS).contains(n))
            .ok_or_else(|| {
                bad_parameter(format!("n must be a whole number from 0 to {MAX_TAGS}"))
            })?,
    };
    // One more than asked tells whether a next page exists.
    let mut tags = registry.tags(repo, query.last.as_deref(), n + 1).await?;
    let more = tags.len() as i64 > n;
    tags.truncate(n as usize);
    let mut response = (
        [API_VERSION],
        axum::Json(serde_json::json!({ "name": repo.name, "tags": tags })),
    )
        .into_response();
    if let (true, Some(last)) = (more, tags.last()) {
        let mut next = format!("/v2/{}/tags/list?n={n}&last={last}", repo.name);
        if let Some(ns) = &query.ns {
            next.push_str(&format!("&ns={ns}"));
        }
        if let Ok(v) = HeaderValue::from_str(&format!("<{next}>; rel=\"next\"")) {
            response.headers_mut().insert(header::LINK, v);
        }
    }
    Ok(response)
}

async fn referrers(
    registry: &Registry,
    repo: &Repo,
    digest: &str,
    query: &Query,
) -> Result<Response, HttpError> {
    let found = registry
        .referrers(repo, digest, query.artifact_type.as_deref())
        .await?;
    let manifests: Vec<serde_json::Value> = found
        .iter()
        .map(|r| {
            let mut d = serde_json::json!({
                "mediaType": r.media_type,
                "digest": r.digest,
                "size": r.size,
            });
            if let Some(t) = &r.artifact_type {
                d["artifactType"] = t.clone().into();
            }
            if let Some(a) = r
                .annotations
                .as_deref()
                .and_then(|a| serde_json::from_str::<serde_json::Value>(a).ok())
            {
                d["annotations"] = a;
            }
            d
        })
        .collect();
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": crate::registry::manifest::OCI_INDEX,
        "manifests": manifests,
    });
    let mut response = (
        [
            (
                header::CONTENT_TYPE.as_str(),
                crate::registry::manifest::OCI_INDEX,
            ),
            API_VERSION,
        ],
        serde_json::to_vec(&index).expect("JSON serializes"),
    )
        .into_response();
    if query.artifact_type.is_some() {
        response.headers_mut().insert(
            "oci-filters-applied",
            HeaderValue::from_static("artifactType"),
        );
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_a_repository_and_what_is_asked() {
        let name = |rest: &str| route(rest).map(|(n, _)| n.to_owned());
        assert_eq!(
            name("ghcr.io/a/b/manifests/v1").as_deref(),
            Some("ghcr.io/a/b")
        );
        assert_eq!(name("a/b/blobs/sha256:x").as_deref(), Some("a/b"));
        assert_eq!(
            name("a/manifests/b/tags/list").as_deref(),
            Some("a/manifests/b")
        );
        assert_eq!(name("a/b/referrers/sha256:x").as_deref(), Some("a/b"));
        assert_eq!(name("a/b/other/x"), None);
        assert_eq!(name("manifests"), None);
    }
}
