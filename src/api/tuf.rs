//! `/tuf/`: the signed metadata and target files, as TUF clients (python-tuf, tough,
//! go-tuf, our sync worker) fetch them with consistent snapshots.
//!
//! - `/tuf/metadata/timestamp.json` — short cache lifetime, re-signed before expiry;
//! - `/tuf/metadata/N.ROLE.json` — immutable (root, targets, snapshot, publishers);
//! - `/tuf/metadata/root.json` — the newest root, for bootstrapping by hand;
//! - `/tuf/targets/PUBLISHER/NAME/HASH.VERSION.yaml` — immutable definition bytes (also
//!   as `HASH.PUBLISHER/NAME/VERSION.yaml`, the layout tough's client requests).
//!
//! The files come from memory (`trust::files`), metadata over 1 KiB gzip-encoded for
//! clients that accept it.
//!
//! Layering: HTTP only; reads through the store.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::AppState;
use super::error::{ErrorCode, HttpError};
use super::extract::client_has;
use super::layers::{Limits, MAX_BODY_BYTES};
use crate::store::StoredMetadata;

const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// Clients must see a new timestamp soon after it is signed; it is the freshness signal.
const TIMESTAMP_CACHE: &str = "public, max-age=30";

/// Downloads are GETs without a body; the timeout covers a slow client reading the
/// largest role (16 MiB) without letting one hold a connection forever.
pub const LIMITS: Limits = Limits {
    body_bytes: MAX_BODY_BYTES,
    timeout: Duration::from_secs(60),
};

pub fn router() -> axum::Router<AppState> {
    let routes = axum::Router::new()
        .route("/tuf/metadata/{file}", get(metadata))
        .route("/tuf/targets/{publisher}/{name}/{file}", get(target));
    LIMITS.apply(routes, HttpError::into_response)
}

pub(super) fn not_initialized() -> HttpError {
    HttpError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::NotInitialized,
        "the signed index is not initialized; the operator runs `marketplace repo init`",
    )
}

async fn metadata(
    State(state): State<AppState>,
    Path(file): Path<String>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    let missing = || HttpError::not_found(format!("no metadata file {file}"));
    let (found, cache) = match file.as_str() {
        "timestamp.json" => (
            state.files.timestamp().await?.ok_or_else(not_initialized)?,
            TIMESTAMP_CACHE,
        ),
        "root.json" => (
            state.files.root().await?.ok_or_else(not_initialized)?,
            "no-cache",
        ),
        _ => {
            let (version, role) = file
                .strip_suffix(".json")
                .and_then(|stem| stem.split_once('.'))
                .and_then(|(v, role)| Some((v.parse::<u64>().ok()?, role)))
                .ok_or_else(missing)?;
            (
                state
                    .files
                    .metadata(role, version)
                    .await?
                    .ok_or_else(missing)?,
                IMMUTABLE,
            )
        }
    };
    Ok(serve_file(&found, "application/json", cache, &headers))
}

/// A `/tuf/` file from memory, gzip-encoded when the client accepts it
/// (`trust::files::File::reply` chooses the representation and answers `If-None-Match`).
fn serve_file(
    file: &crate::trust::files::File,
    content_type: &'static str,
    cache: &'static str,
    headers: &HeaderMap,
) -> Response {
    let values = |name| {
        headers
            .get_all(name)
            .into_iter()
            .filter_map(|v| v.to_str().ok())
    };
    let reply = file.reply(
        values(header::ACCEPT_ENCODING),
        values(header::IF_NONE_MATCH),
    );
    let mut response = if reply.not_modified {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut r = (
            [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
            reply.body,
        )
            .into_response();
        if reply.gzip {
            r.headers_mut()
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        r
    };
    let h = response.headers_mut();
    if let Ok(etag) = HeaderValue::from_str(reply.etag) {
        h.insert(header::ETAG, etag);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    if reply.varies {
        h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    }
    response
}

pub(super) fn serve_metadata(
    m: StoredMetadata,
    cache: &'static str,
    headers: &HeaderMap,
) -> Response {
    let etag = format!("\"{}\"", m.sha256);
    if client_has(headers, &etag) {
        return (
            StatusCode::NOT_MODIFIED,
            [
                (header::ETAG, etag),
                (header::CACHE_CONTROL, cache.to_owned()),
            ],
        )
            .into_response();
    }
    (
        [
            (header::CONTENT_TYPE, "application/json".to_owned()),
            (header::ETAG, etag),
            (header::CACHE_CONTROL, cache.to_owned()),
        ],
        m.bytes,
    )
        .into_response()
}

/// Target files are named by the sha256 of their bytes, so the name alone proves
/// which bytes are meant; publisher and name must still match the stored version.
async fn target(
    State(state): State<AppState>,
    Path((publisher, name, file)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    let missing = || HttpError::not_found(format!("no target {publisher}/{name}/{file}"));
    let is_hash = |h: &str| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit());
    // The spec (and python-tuf) prefix the file name with the hash: P/N/HASH.V.yaml;
    // tough prefixes the whole target path: HASH.P/N/V.yaml. Both name the same bytes.
    let (hash, publisher) = match file.split_once('.') {
        Some((h, rest)) if is_hash(h) && rest.ends_with(".yaml") => (h, publisher.as_str()),
        _ => match publisher.split_once('.') {
            Some((h, p)) if is_hash(h) && file.ends_with(".yaml") => (h, p),
            _ => return Err(missing()),
        },
    };
    let found = state
        .files
        .target(publisher, &name, hash)
        .await?
        .ok_or_else(missing)?;
    Ok(serve_file(
        &found,
        "application/yaml; charset=utf-8",
        IMMUTABLE,
        &headers,
    ))
}
