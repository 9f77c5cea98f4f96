//! `/tuf/`: the signed metadata and target files, as TUF clients (python-tuf, tough,
//! go-tuf, our sync worker) fetch them with consistent snapshots.
//!
//! - `/tuf/metadata/timestamp.json` — short cache lifetime, re-signed before expiry;
//! - `/tuf/metadata/N.ROLE.json` — immutable (root, targets, snapshot, publishers);
//! - `/tuf/metadata/root.json` — the newest root, for bootstrapping by hand;
//! - `POST /api/v1/publishers/P/definitions` — publish (bearer token of publisher P);
//! - `POST /api/v1/publishers/P/yank` — yank (bearer token of publisher P);
//! - `GET /api/v1/publishers/P/role[?bin=P.x]` — P's current role metadata (or one of
//!   its hashed bins), to sign the next one;
//! - `POST /api/v1/publishers/P/role` — the same targets re-signed (renewal, new keys);
//! - `GET /api/v1/publishers/me` — which publisher a bearer token belongs to, the role
//!   lifetimes the server accepts and when its roles expire;
//! - `GET /api/v1/publishers` — every publisher: suspended or not, its roles' expiry;
//! - `/tuf/targets/PUBLISHER/NAME/HASH.VERSION.yaml` — immutable definition bytes (also
//!   as `HASH.PUBLISHER/NAME/VERSION.yaml`, the layout tough's client requests).
//!
//! The `/tuf/` files come from memory (`trust::files`), metadata over 1 KiB gzip-encoded
//! for clients that accept it.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::accept::RoleUpdate;
use crate::AppState;
use crate::http::{ClientAddr, HttpError, client_has};
use crate::store::StoredMetadata;

const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// Clients must see a new timestamp soon after it is signed; it is the freshness signal.
const TIMESTAMP_CACHE: &str = "public, max-age=30";

pub fn router() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/tuf/metadata/{file}", get(metadata))
        .route("/tuf/targets/{publisher}/{name}/{file}", get(target))
        .route("/api/v1/publishers", get(publishers))
        .route("/api/v1/publishers/me", get(whoami))
        .route(
            "/api/v1/publishers/{publisher}/role",
            get(current_role).post(resign),
        )
        .route("/api/v1/publishers/{publisher}/definitions", post(publish))
        .route("/api/v1/publishers/{publisher}/yank", post(yank))
}

fn not_initialized() -> HttpError {
    HttpError::new(
        StatusCode::NOT_FOUND,
        "not_initialized",
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
    file: &super::files::File,
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

fn serve_metadata(m: StoredMetadata, cache: &'static str, headers: &HeaderMap) -> Response {
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

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RoleQuery {
    /// One of the publisher's hashed bins, `PUBLISHER.PREFIX`, instead of its top role.
    bin: Option<String>,
}

/// The publisher's current role metadata (or one of its bins) as the newest snapshot
/// lists it; 404 with code `no_role` when there is none yet (the next version is then 1).
async fn current_role(
    State(state): State<AppState>,
    Path(publisher): Path<String>,
    axum::extract::Query(query): axum::extract::Query<RoleQuery>,
) -> Result<Response, HttpError> {
    let role = match query.bin {
        None => publisher.clone(),
        Some(bin) => {
            let prefix = bin
                .strip_prefix(&format!("{publisher}."))
                .unwrap_or_default();
            if prefix.is_empty()
                || prefix.len() > super::bins::MAX_PREFIX_LEN
                || !prefix
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            {
                return Err(HttpError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    format!(
                        "bin must be {publisher}.<1 to {} lowercase hex digits>",
                        super::bins::MAX_PREFIX_LEN
                    ),
                ));
            }
            bin
        }
    };
    let snapshot = crate::trust::state::current(&state.store)
        .await
        .map_err(internal)?
        .ok_or_else(not_initialized)?
        .snapshot;
    match super::accept::current_role(&state.store, &snapshot.signed.signed, &role)
        .await
        .map_err(internal)?
    {
        Some((stored, _)) => Ok(serve_metadata(stored, "no-cache", &HeaderMap::new())),
        None => Err(HttpError::new(
            StatusCode::NOT_FOUND,
            "no_role",
            format!("role {role} has no version yet; the first version is 1"),
        )),
    }
}

/// The signed roles of an upload: `role` (the top role) and/or `bins` (by name).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SignedRoles {
    /// The publisher's signed top role (JSON text), exactly as signed.
    #[serde(default)]
    role: Option<String>,
    /// Hashed bins by role name (`PUBLISHER.PREFIX`), each JSON text exactly as signed.
    #[serde(default)]
    bins: std::collections::BTreeMap<String, String>,
}

impl SignedRoles {
    fn upload(self) -> super::roleset::RoleUpload {
        super::roleset::RoleUpload {
            top: self.role.map(String::into_bytes),
            bins: self
                .bins
                .into_iter()
                .map(|(n, r)| (n, r.into_bytes()))
                .collect(),
        }
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PublishRequest {
    /// The definition YAML, exactly as signed.
    #[serde(default)]
    definition: Option<String>,
    /// Several definitions published as one role version (a batch), instead of
    /// `definition`.
    #[serde(default)]
    definitions: Vec<String>,
    /// The publisher's signed top role (JSON text), exactly as signed.
    #[serde(default)]
    role: Option<String>,
    /// Changed hashed bins by role name, each exactly as signed.
    #[serde(default)]
    bins: std::collections::BTreeMap<String, String>,
}

async fn publish(
    State(state): State<AppState>,
    Path(publisher): Path<String>,
    client: ClientAddr,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<(StatusCode, axum::Json<super::accept::Published>), HttpError> {
    authorize(&state, client, &headers, &publisher).await?;
    let body = read_body(body).await?;
    let request: PublishRequest = serde_json::from_slice(&body).map_err(|e| {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!(
                "body must be JSON {{\"definition\": YAML text, \"role\": signed JSON text, \"bins\": {{name: signed JSON text}}}}: {e}"
            ),
        )
    })?;
    let upload = SignedRoles {
        role: request.role,
        bins: request.bins,
    }
    .upload();
    let definitions: Vec<&[u8]> = match (&request.definition, &request.definitions[..]) {
        (Some(one), []) => vec![one.as_bytes()],
        (None, many) if !many.is_empty() => many.iter().map(|d| d.as_bytes()).collect(),
        _ => {
            return Err(HttpError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "give either `definition` (one YAML text) or `definitions` (a non-empty list)",
            ));
        }
    };
    let signer = state.signer.as_ref().ok_or_else(not_initialized)?;
    let _guard = signer.lock.lock().await;
    let published = super::accept::accept(
        &state.store,
        signer,
        &publisher,
        &definitions,
        &upload,
        crate::clock::now(),
    )
    .await?;
    tracing::info!(publisher = %published.publisher, changed = ?published.changed, "published");
    Ok((StatusCode::CREATED, axum::Json(published)))
}

/// The request body, read only once the token checked out: an anonymous client cannot
/// make the server buffer a publish-sized body. `server::limit_body` caps its size.
async fn read_body(body: axum::body::Body) -> Result<axum::body::Bytes, HttpError> {
    axum::body::to_bytes(body, usize::MAX).await.map_err(|e| {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(err) = source {
            if err.is::<http_body_util::LengthLimitError>() {
                return crate::server::too_large(crate::server::MAX_PUBLISH_BODY_BYTES);
            }
            source = err.source();
        }
        HttpError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("reading the request body failed: {e}"),
        )
    })
}

/// The bearer token must be an active token of `publisher`.
async fn authorize(
    state: &AppState,
    client: ClientAddr,
    headers: &HeaderMap,
    publisher: &str,
) -> Result<(), HttpError> {
    let owner = authenticate(state, client, headers, Some(publisher)).await?;
    if owner != publisher {
        return Err(HttpError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("this token belongs to another publisher, not {publisher}"),
        ));
    }
    Ok(())
}

/// The publisher whose active token the request carries, under the limits on failed
/// authentication (`ratelimit`): a client over its budget is refused before its token
/// is looked at, and only failures (no token, a malformed header, an unknown or
/// revoked token) spend budget. `publisher` is the one the route names, if any.
async fn authenticate(
    state: &AppState,
    ClientAddr(client): ClientAddr,
    headers: &HeaderMap,
    publisher: Option<&str>,
) -> Result<String, HttpError> {
    let limits = &state.auth_limits;
    limits
        .check(client, publisher, std::time::Instant::now())
        .map_err(|limited| rate_limited(&limited))?;
    let owner = match crate::http::bearer(headers) {
        Ok(token) => {
            state
                .store
                .publisher_for_token(&super::publishers::token_hash(token))
                .await?
        }
        Err(e) => {
            failed(state, client, publisher);
            return Err(e);
        }
    };
    let Some(owner) = owner else {
        failed(state, client, publisher);
        return Err(unauthorized("the token is unknown or revoked"));
    };
    limits.succeeded(client, &owner, std::time::Instant::now());
    Ok(owner)
}

fn failed(state: &AppState, client: Option<std::net::IpAddr>, publisher: Option<&str>) {
    let spent = state
        .auth_limits
        .failed(client, publisher, std::time::Instant::now());
    // Once per budget running out, not per refused request: each request's status is
    // in its own log line already.
    if spent.address || spent.publisher {
        let client = client.map_or_else(|| "unknown".to_owned(), |ip| ip.to_string());
        tracing::info!(
            %client,
            publisher = publisher.unwrap_or_default(),
            address_limited = spent.address,
            publisher_limited = spent.publisher,
            "too many failed token authentications; limiting"
        );
    }
}

fn rate_limited(limited: &crate::ratelimit::Limited) -> HttpError {
    use crate::ratelimit::Limited;
    // Whole seconds, rounded up: a client retrying on time is never refused again.
    let wait = limited.retry_after();
    let secs = (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1);
    let message = match limited {
        Limited::Address { .. } => {
            format!("too many failed token authentications from this address; retry in {secs} s")
        }
        Limited::Publisher { publisher, .. } => format!(
            "too many failed token authentications for publisher {publisher} from new addresses; retry in {secs} s"
        ),
    };
    HttpError::rate_limited(message, secs)
}

/// A yank or re-sign: the publisher's signed role, checked and stored with new
/// snapshot and timestamp.
async fn role_update(
    state: AppState,
    publisher: String,
    client: ClientAddr,
    headers: HeaderMap,
    body: axum::body::Body,
    kind: RoleUpdate,
) -> Result<axum::Json<super::accept::Published>, HttpError> {
    authorize(&state, client, &headers, &publisher).await?;
    let body = read_body(body).await?;
    let request: SignedRoles = serde_json::from_slice(&body).map_err(|e| {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("body must be JSON {{\"role\": signed JSON text, \"bins\": {{name: signed JSON text}}}}: {e}"),
        )
    })?;
    let signer = state.signer.as_ref().ok_or_else(not_initialized)?;
    let _guard = signer.lock.lock().await;
    let done = super::accept::accept_update(
        &state.store,
        signer,
        &publisher,
        kind,
        &request.upload(),
        crate::clock::now(),
    )
    .await?;
    tracing::info!(
        publisher = %done.publisher,
        update = ?kind,
        yanked = ?done.changed,
        role_version = done.role_version,
        "role updated"
    );
    Ok(axum::Json(done))
}

async fn yank(
    State(state): State<AppState>,
    Path(publisher): Path<String>,
    client: ClientAddr,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<axum::Json<super::accept::Published>, HttpError> {
    role_update(state, publisher, client, headers, body, RoleUpdate::Yank).await
}

/// The same targets re-signed: next version, the registered keys' signatures.
async fn resign(
    State(state): State<AppState>,
    Path(publisher): Path<String>,
    client: ClientAddr,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<axum::Json<super::accept::Published>, HttpError> {
    role_update(state, publisher, client, headers, body, RoleUpdate::Resign).await
}

/// The publisher a bearer token belongs to, so tools need only the token.
async fn whoami(
    State(state): State<AppState>,
    client: ClientAddr,
    headers: HeaderMap,
) -> Result<axum::Json<serde_json::Value>, HttpError> {
    let publisher = authenticate(&state, client, &headers, None).await?;
    let lifetimes = state
        .signer
        .as_ref()
        .map_or_else(super::verify::RoleLifetimes::default, |s| s.lifetimes);
    let suspended = state
        .store
        .publisher(&publisher)
        .await?
        .is_some_and(|p| p.suspended_at.is_some());
    let now = crate::clock::now();
    let roles: Vec<_> = super::expiry::publisher_roles(&state.store)
        .await?
        .into_iter()
        .filter(|r| r.publisher == publisher)
        .map(|r| r.view(now))
        .collect();
    Ok(axum::Json(serde_json::json!({
        "publisher": publisher,
        "suspended": suspended,
        // What the server accepts, so tools check `--expires` before signing.
        "role_lifetime": {
            "min_seconds": lifetimes.min.as_secs(),
            "max_seconds": lifetimes.max.as_secs(),
        },
        "roles": roles,
    })))
}

/// Every registered publisher: suspended or not, and its roles' expiry (earliest
/// first), so operators and monitoring see an expiry coming.
async fn publishers(
    State(state): State<AppState>,
) -> Result<axum::Json<serde_json::Value>, HttpError> {
    let now = crate::clock::now();
    let roles = super::expiry::publisher_roles(&state.store).await?;
    let items: Vec<serde_json::Value> = state
        .store
        .publisher_list()
        .await?
        .into_iter()
        .map(|p| {
            let mine: Vec<_> = roles
                .iter()
                .filter(|r| r.publisher == p.name)
                .map(|r| r.view(now))
                .collect();
            serde_json::json!({
                "name": p.name,
                "suspended": p.suspended_at.is_some(),
                "expiring_soon": mine.iter().any(|r| r.expiring_soon),
                "roles": mine,
            })
        })
        .collect();
    Ok(axum::Json(serde_json::json!({ "items": items })))
}

fn unauthorized(message: &str) -> HttpError {
    HttpError::unauthorized(message)
}

fn internal(e: super::TrustError) -> HttpError {
    HttpError::from(e)
}
