//! The publishing API, bearer token of the publisher named in the path:
//!
//! - `POST /api/v1/publishers/P/definitions` — publish;
//! - `POST /api/v1/publishers/P/yank` — yank;
//! - `GET /api/v1/publishers/P/role[?bin=P.x]` — P's current role metadata (or one of
//!   its hashed bins), to sign the next one;
//! - `POST /api/v1/publishers/P/role` — the same targets re-signed (renewal, new keys);
//! - `GET /api/v1/publishers/me` — which publisher a bearer token belongs to, the role
//!   lifetimes the server accepts and when its roles expire;
//! - `GET /api/v1/publishers/P/approved` — P's versions a reviewer approved that are not
//!   in the signed index yet, with their bytes (`marketplace publish --approved`);
//! - `GET /api/v1/publishers` — every publisher (no token): suspended or not, its
//!   roles' expiry.
//!
//! Layering: HTTP only; checking and storing is `trust::server::accept`.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::AppState;
use super::auth::{Role, authenticate};
use super::error::{ErrorCode, HttpError};
use super::extract::ClientAddr;
use super::layers::Limits;
use super::tuf::{not_initialized, serve_metadata};
use crate::trust::expiry::RoleView;
use crate::trust::server::accept::{self, Published, RoleUpdate};

/// The largest upload: a publisher's whole signed role, which grows with its targets
/// (about 600 bytes each). The same cap as clients apply to metadata they download
/// (`trust::client::MAX_RESPONSE_BYTES`); handlers read the body only after checking
/// the token.
pub const MAX_PUBLISH_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Checking and re-signing a large binned role with the signing lock held takes
/// seconds, not minutes; the uploader retries on 409, not on a timeout.
pub const LIMITS: Limits = Limits {
    body_bytes: MAX_PUBLISH_BODY_BYTES,
    timeout: Duration::from_secs(60),
};

pub fn router() -> axum::Router<AppState> {
    let routes = axum::Router::new()
        .route("/api/v1/publishers", get(publishers))
        .route("/api/v1/publishers/me", get(whoami))
        .route(
            "/api/v1/publishers/{publisher}/role",
            get(current_role).post(resign),
        )
        .route("/api/v1/publishers/{publisher}/definitions", post(publish))
        .route("/api/v1/publishers/{publisher}/yank", post(yank))
        .route("/api/v1/publishers/{publisher}/approved", get(approved));
    LIMITS.apply(routes, HttpError::into_response)
}

#[derive(serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct RoleQuery {
    /// One of the publisher's hashed bins, `PUBLISHER.PREFIX`, instead of its top role.
    bin: Option<String>,
}

/// The publisher's current role metadata (or one of its bins) as the newest snapshot
/// lists it; 404 with code `no_role` when there is none yet (the next version is then 1).
#[utoipa::path(
    get,
    path = "/api/v1/publishers/{publisher}/role",
    tag = "publishing",
    params(("publisher" = String, Path, description = "The publisher's name"), RoleQuery),
    responses((
        status = 200,
        description = "The role's signed TUF metadata, byte for byte as stored",
        body = Object,
        content_type = "application/json",
        headers(("ETag" = String, description = "The metadata's hash")),
    ))
)]
async fn current_role(
    State(state): State<AppState>,
    Path(publisher): Path<String>,
    axum::extract::Query(query): axum::extract::Query<RoleQuery>,
) -> Result<Response, HttpError> {
    let role = match query.bin {
        None => publisher.clone(),
        Some(bin) => {
            if !crate::trust::bins::is_bin_of(&publisher, &bin) {
                return Err(HttpError::new(
                    StatusCode::BAD_REQUEST,
                    ErrorCode::BadRequest,
                    format!(
                        "bin must be {publisher}.<1 to {} lowercase hex digits>",
                        crate::trust::bins::MAX_PREFIX_LEN
                    ),
                ));
            }
            bin
        }
    };
    let snapshot = crate::trust::server::state::current(&state.store)
        .await
        .map_err(HttpError::from)?
        .ok_or_else(not_initialized)?
        .snapshot;
    match crate::trust::server::state::current_role(&state.store, &snapshot.signed.signed, &role)
        .await
        .map_err(HttpError::from)?
    {
        Some((stored, _)) => Ok(serve_metadata(stored, "no-cache", &HeaderMap::new())),
        None => Err(HttpError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NoRole,
            format!("role {role} has no version yet; the first version is 1"),
        )),
    }
}

/// The signed roles of an upload: `role` (the top role) and/or `bins` (by name).
#[derive(serde::Deserialize, utoipa::ToSchema)]
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
    fn upload(self) -> crate::trust::server::roleset::RoleUpload {
        crate::trust::server::roleset::RoleUpload {
            top: self.role.map(String::into_bytes),
            bins: self
                .bins
                .into_iter()
                .map(|(n, r)| (n, r.into_bytes()))
                .collect(),
        }
    }
}

/// Definitions to publish with the signed roles that list them.
#[derive(serde::Deserialize, utoipa::ToSchema)]
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

/// Publishes one definition, or several as one role version, with the publisher's
/// role (and changed bins) signed over them.
#[utoipa::path(
    post,
    path = "/api/v1/publishers/{publisher}/definitions",
    tag = "publishing",
    params(("publisher" = String, Path, description = "The token's publisher")),
    request_body = PublishRequest,
    security(("publisher_token" = [])),
    responses((status = 201, description = "Published", body = Published))
)]
async fn publish(
    State(state): State<AppState>,
    Path(publisher): Path<String>,
    client: ClientAddr,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<(StatusCode, axum::Json<accept::Published>), HttpError> {
    let outcome = publish_counted(&state, publisher, client, headers, body).await;
    state.metrics.publishing("publish", outcome)
}

async fn publish_counted(
    state: &AppState,
    publisher: String,
    client: ClientAddr,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<(StatusCode, axum::Json<accept::Published>), HttpError> {
    authorize(state, client, &headers, &publisher).await?;
    let body = read_body(body).await?;
    let request: PublishRequest = serde_json::from_slice(&body).map_err(|e| {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::BadRequest,
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
                ErrorCode::BadRequest,
                "give either `definition` (one YAML text) or `definitions` (a non-empty list)",
            ));
        }
    };
    if state.review == crate::review::ReviewMode::Required {
        crate::review::check_approved(&state.store, &publisher, &definitions).await?;
    }
    let signer = state.signer.as_ref().ok_or_else(not_initialized)?;
    let _guard = signer.lock.lock().await;
    let published = accept::accept(
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
/// make the server buffer a publish-sized body. `layers::Limits` caps its size.
async fn read_body(body: axum::body::Body) -> Result<axum::body::Bytes, HttpError> {
    read_body_within(body, MAX_PUBLISH_BODY_BYTES).await
}

/// A body its surface's `Limits` caps at `limit` bytes: one cut there is 413.
pub(super) async fn read_body_within(
    body: axum::body::Body,
    limit: usize,
) -> Result<axum::body::Bytes, HttpError> {
    axum::body::to_bytes(body, usize::MAX).await.map_err(|e| {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(err) = source {
            if err.is::<http_body_util::LengthLimitError>() {
                return super::layers::too_large(limit);
            }
            source = err.source();
        }
        HttpError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::BadRequest,
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
    let owner = authenticate(state, client.0, headers, Role::Publisher, Some(publisher)).await?;
    if owner != publisher {
        return Err(HttpError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::Forbidden,
            format!("this token belongs to another publisher, not {publisher}"),
        ));
    }
    Ok(())
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
) -> Result<axum::Json<accept::Published>, HttpError> {
    authorize(&state, client, &headers, &publisher).await?;
    let body = read_body(body).await?;
    let request: SignedRoles = serde_json::from_slice(&body).map_err(|e| {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::BadRequest,
            format!("body must be JSON {{\"role\": signed JSON text, \"bins\": {{name: signed JSON text}}}}: {e}"),
        )
    })?;
    let signer = state.signer.as_ref().ok_or_else(not_initialized)?;
    let _guard = signer.lock.lock().await;
    let done = accept::accept_update(
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

/// Yanks versions: the role signed without their targets. Yanked versions stay
/// downloadable by hash.
#[utoipa::path(
    post,
    path = "/api/v1/publishers/{publisher}/yank",
    tag = "publishing",
    params(("publisher" = String, Path, description = "The token's publisher")),
    request_body = SignedRoles,
    security(("publisher_token" = [])),
    responses((status = 200, description = "Yanked", body = Published))
)]
async fn yank(
    State(state): State<AppState>,
    Path(publisher): Path<String>,
    client: ClientAddr,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<axum::Json<accept::Published>, HttpError> {
    let metrics = state.metrics.clone();
    let outcome = role_update(state, publisher, client, headers, body, RoleUpdate::Yank).await;
    metrics.publishing("yank", outcome)
}

/// The same targets re-signed: next version, the registered keys' signatures.
#[utoipa::path(
    post,
    path = "/api/v1/publishers/{publisher}/role",
    tag = "publishing",
    params(("publisher" = String, Path, description = "The token's publisher")),
    request_body = SignedRoles,
    security(("publisher_token" = [])),
    responses((status = 200, description = "Re-signed", body = Published))
)]
async fn resign(
    State(state): State<AppState>,
    Path(publisher): Path<String>,
    client: ClientAddr,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<axum::Json<accept::Published>, HttpError> {
    let metrics = state.metrics.clone();
    let outcome = role_update(state, publisher, client, headers, body, RoleUpdate::Resign).await;
    metrics.publishing("resign", outcome)
}

/// A version a reviewer approved that is not in the signed index yet.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct ApprovedVersion {
    /// The version's stable id.
    id: String,
    name: String,
    version: String,
    definition_hash: String,
    /// The definition's text, byte for byte as approved: what the publisher signs.
    definition: String,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
struct ApprovedList {
    items: Vec<ApprovedVersion>,
}

/// The publisher's approved versions not in the signed index yet, with their exact
/// bytes, for the publisher to sign.
#[utoipa::path(
    get,
    path = "/api/v1/publishers/{publisher}/approved",
    tag = "publishing",
    params(("publisher" = String, Path, description = "The token's publisher")),
    security(("publisher_token" = [])),
    responses((status = 200, description = "Approved, not yet published", body = ApprovedList))
)]
async fn approved(
    State(state): State<AppState>,
    Path(publisher): Path<String>,
    client: ClientAddr,
    headers: HeaderMap,
) -> Result<axum::Json<ApprovedList>, HttpError> {
    authorize(&state, client, &headers, &publisher).await?;
    let items = crate::review::approved_unpublished(&state.store, &publisher)
        .await?
        .into_iter()
        .map(|(row, bytes)| ApprovedVersion {
            id: row.id,
            name: row.name,
            version: row.version,
            definition_hash: row.hash,
            // Definitions are UTF-8 (checked when uploaded).
            definition: String::from_utf8_lossy(&bytes).into_owned(),
        })
        .collect();
    Ok(axum::Json(ApprovedList { items }))
}

/// The role lifetimes the server accepts, so tools check `--expires` before signing.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct RoleLifetime {
    min_seconds: u64,
    max_seconds: u64,
}

/// The publisher a token belongs to.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct WhoAmI {
    publisher: String,
    suspended: bool,
    role_lifetime: RoleLifetime,
    /// The publisher's roles, earliest expiry first.
    roles: Vec<RoleView>,
}

/// The publisher a bearer token belongs to, so tools need only the token.
#[utoipa::path(
    get,
    path = "/api/v1/publishers/me",
    tag = "publishing",
    security(("publisher_token" = [])),
    responses((status = 200, description = "The token's publisher", body = WhoAmI))
)]
async fn whoami(
    State(state): State<AppState>,
    client: ClientAddr,
    headers: HeaderMap,
) -> Result<axum::Json<WhoAmI>, HttpError> {
    let publisher = authenticate(&state, client.0, &headers, Role::Publisher, None).await?;
    let lifetimes = state
        .signer
        .as_ref()
        .map_or_else(crate::trust::verify::RoleLifetimes::default, |s| {
            s.lifetimes
        });
    let suspended = state
        .store
        .publisher(&publisher)
        .await?
        .is_some_and(|p| p.suspended_at.is_some());
    let now = crate::clock::now();
    let roles: Vec<_> = crate::trust::server::state::publisher_roles(&state.store)
        .await?
        .into_iter()
        .filter(|r| r.publisher == publisher)
        .map(|r| r.view(now))
        .collect();
    Ok(axum::Json(WhoAmI {
        publisher,
        suspended,
        role_lifetime: RoleLifetime {
            min_seconds: lifetimes.min.as_secs(),
            max_seconds: lifetimes.max.as_secs(),
        },
        roles,
    }))
}

/// A registered publisher as the public list shows it.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct PublisherEntry {
    name: String,
    suspended: bool,
    /// The upstream marketplace it is followed from, when it is.
    origin: Option<String>,
    /// Whether any of its roles expires within the warning period.
    expiring_soon: bool,
    /// Its roles, earliest expiry first.
    roles: Vec<RoleView>,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
struct PublisherEntries {
    items: Vec<PublisherEntry>,
}

/// Every registered publisher: suspended or not, and its roles' expiry (earliest
/// first), so operators and monitoring see an expiry coming.
#[utoipa::path(
    get,
    path = "/api/v1/publishers",
    tag = "publishing",
    responses((status = 200, description = "Every registered publisher", body = PublisherEntries))
)]
async fn publishers(
    State(state): State<AppState>,
) -> Result<axum::Json<PublisherEntries>, HttpError> {
    let now = crate::clock::now();
    let roles = crate::trust::server::state::publisher_roles(&state.store).await?;
    let items = state
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
            PublisherEntry {
                expiring_soon: mine.iter().any(|r| r.expiring_soon),
                name: p.name,
                suspended: p.suspended_at.is_some(),
                origin: p.origin,
                roles: mine,
            }
        })
        .collect();
    Ok(axum::Json(PublisherEntries { items }))
}
