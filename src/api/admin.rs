//! The admin API under `/api/v1/admin/`, for operators of replicas who never touch a
//! data directory: publishers (add, list, suspend, resume, keys, cosign keys, tokens),
//! reviewers (add, list, revoke), the mirror (status, retry), the curation (reload) and the signed index (expiries).
//! Every route needs an operator's token (`marketplace operator token create`); every
//! change is logged with the operator's name (`admin`).
//!
//! Layering: HTTP only; the operations and their answers are `admin`'s.

use std::time::Duration;

use axum::Json;
use axum::extract::FromRequestParts;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use serde::de::DeserializeOwned;

use super::AppState;
use super::auth::{Role, authenticate};
use super::error::HttpError;
use super::extract::ClientAddr;
use super::layers::Limits;
use crate::admin::{self, publishers};

/// Requests are small JSON documents (keys, cosign PEMs); suspending signs the index.
pub const LIMITS: Limits = Limits {
    body_bytes: 256 * 1024,
    timeout: Duration::from_secs(60),
};

pub fn router() -> axum::Router<AppState> {
    let routes = axum::Router::new()
        .route("/api/v1/admin/me", get(me))
        .route(
            "/api/v1/admin/publishers",
            get(list_publishers).post(add_publisher),
        )
        .route("/api/v1/admin/publishers/{name}/suspend", post(suspend))
        .route("/api/v1/admin/publishers/{name}/resume", post(resume))
        .route("/api/v1/admin/publishers/{name}/keys", put(rotate_key))
        .route(
            "/api/v1/admin/publishers/{name}/cosign-keys",
            put(cosign_keys),
        )
        .route(
            "/api/v1/admin/publishers/{name}/tokens",
            post(new_token).delete(revoke_tokens),
        )
        .route(
            "/api/v1/admin/reviewers",
            get(list_reviewers).post(add_reviewer),
        )
        .route(
            "/api/v1/admin/reviewers/{name}",
            axum::routing::delete(revoke_reviewer),
        )
        .route("/api/v1/admin/mirror", get(mirror_status))
        .route("/api/v1/admin/mirror/retry", post(mirror_retry))
        .route("/api/v1/admin/curation/reload", post(reload_curation))
        .route("/api/v1/admin/signed-index", get(signed_index));
    LIMITS.apply(routes, HttpError::into_response)
}

/// The operator whose token the request carries. An extractor of the request's parts,
/// so it runs before a handler reads the body: an anonymous client cannot make the
/// server buffer one.
struct Authenticated(admin::Operator);

impl FromRequestParts<AppState> for Authenticated {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, HttpError> {
        let Ok(client) = ClientAddr::from_request_parts(parts, state).await;
        let name = authenticate(state, client.0, &parts.headers, Role::Operator, None).await?;
        Ok(Authenticated(admin::Operator(name)))
    }
}

/// The request body, read only once the token checked out: an anonymous client cannot
/// make the server buffer one. `LIMITS` caps its size.
async fn read(body: axum::body::Body) -> Result<axum::body::Bytes, HttpError> {
    super::publishing::read_body_within(body, LIMITS.body_bytes).await
}

/// A JSON body, read after the token checked out.
async fn json<T: DeserializeOwned>(body: axum::body::Body) -> Result<T, HttpError> {
    parse(&read(body).await?)
}

/// A JSON document, refused with the field and the reason.
fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, HttpError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let at = e.path().to_string();
        let why = e.into_inner();
        HttpError::bad_parameter(if at == "." {
            format!("body: {why}")
        } else {
            format!("{at}: {why}")
        })
    })
}

/// Who the operator token belongs to.
#[utoipa::path(
    get,
    path = "/api/v1/admin/me",
    tag = "admin",
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "The operator", body = Operator),
    )
)]
async fn me(Authenticated(who): Authenticated) -> Result<Json<Operator>, HttpError> {
    Ok(Json(Operator { operator: who.0 }))
}

/// Every publisher.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct PublisherList {
    items: Vec<publishers::PublisherStatus>,
}

/// Every reviewer.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct ReviewerList {
    items: Vec<admin::reviewers::ReviewerStatus>,
}

/// `{"operator": NAME}`.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct Operator {
    operator: String,
}

/// A reviewer revoked.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct ReviewerRevoked {
    name: String,
    revoked: bool,
}

/// Every publisher, with its keys, tokens and how the index stands with it.
#[utoipa::path(
    get,
    path = "/api/v1/admin/publishers",
    tag = "admin",
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "The publishers", body = PublisherList),
    )
)]
async fn list_publishers(
    State(state): State<AppState>,
    _: Authenticated,
) -> Result<Json<PublisherList>, HttpError> {
    let items = publishers::list(&state.store, crate::clock::now()).await?;
    Ok(Json(PublisherList { items }))
}

/// Registers a publisher with its keys; its first token is in the answer.
#[utoipa::path(
    post,
    path = "/api/v1/admin/publishers",
    tag = "admin",
    security(("operator_token" = [])),
    request_body = publishers::NewPublisher,
    responses(
        (status = 201, description = "Registered", body = publishers::Added),
    )
)]
async fn add_publisher(
    State(state): State<AppState>,
    Authenticated(who): Authenticated,
    body: axum::body::Body,
) -> Result<(StatusCode, Json<publishers::Added>), HttpError> {
    let new: publishers::NewPublisher = json(body).await?;
    let added = publishers::add(&state.store, &who, &new, crate::clock::now()).await?;
    Ok((StatusCode::CREATED, Json(added)))
}

async fn set_suspended(
    state: AppState,
    who: admin::Operator,
    name: String,
    suspend: bool,
) -> Result<Json<publishers::Suspension>, HttpError> {
    let signer = state
        .signer
        .as_ref()
        .ok_or(admin::AdminError::NotInitialized)?;
    // Serialized with this replica's publishes; across replicas the store refuses the
    // second of two concurrent index writes.
    let _guard = signer.lock.lock().await;
    let done = publishers::set_suspended(
        &state.store,
        &signer.keys,
        &who,
        &name,
        suspend,
        crate::clock::now(),
    )
    .await?;
    // The /tuf/ files in memory follow the store's stamp; nothing else to refresh.
    Ok(Json(done))
}

/// Removes a publisher's delegation from the signed index.
#[utoipa::path(
    post,
    path = "/api/v1/admin/publishers/{name}/suspend",
    tag = "admin",
    security(("operator_token" = [])),
    params(
        ("name" = String, Path, description = "The publisher's name"),
    ),
    responses(
        (status = 200, description = "Suspended", body = publishers::Suspension),
    )
)]
async fn suspend(
    State(state): State<AppState>,
    Authenticated(who): Authenticated,
    Path(name): Path<String>,
) -> Result<Json<publishers::Suspension>, HttpError> {
    set_suspended(state, who, name, true).await
}

/// Restores a suspended publisher's delegation as it was.
#[utoipa::path(
    post,
    path = "/api/v1/admin/publishers/{name}/resume",
    tag = "admin",
    security(("operator_token" = [])),
    params(
        ("name" = String, Path, description = "The publisher's name"),
    ),
    responses(
        (status = 200, description = "Resumed", body = publishers::Suspension),
    )
)]
async fn resume(
    State(state): State<AppState>,
    Authenticated(who): Authenticated,
    Path(name): Path<String>,
) -> Result<Json<publishers::Suspension>, HttpError> {
    set_suspended(state, who, name, false).await
}

/// Replaces a publisher's keys (and cosign keys when given).
#[utoipa::path(
    put,
    path = "/api/v1/admin/publishers/{name}/keys",
    tag = "admin",
    security(("operator_token" = [])),
    params(
        ("name" = String, Path, description = "The publisher's name"),
    ),
    request_body = publishers::Keys,
    responses(
        (status = 200, description = "Replaced", body = publishers::Rotated),
    )
)]
async fn rotate_key(
    State(state): State<AppState>,
    Authenticated(who): Authenticated,
    Path(name): Path<String>,
    body: axum::body::Body,
) -> Result<Json<publishers::Rotated>, HttpError> {
    let keys: publishers::Keys = json(body).await?;
    let done =
        publishers::rotate_key(&state.store, &who, &name, &keys, crate::clock::now()).await?;
    Ok(Json(done))
}

/// Cosign public keys (PEM); none: no signature required.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CosignRequest {
    cosign_keys: Vec<String>,
}

/// Sets the cosign keys a publisher's images must be signed by.
#[utoipa::path(
    put,
    path = "/api/v1/admin/publishers/{name}/cosign-keys",
    tag = "admin",
    security(("operator_token" = [])),
    params(
        ("name" = String, Path, description = "The publisher's name"),
    ),
    request_body = CosignRequest,
    responses(
        (status = 200, description = "Set", body = publishers::CosignKeys),
    )
)]
async fn cosign_keys(
    State(state): State<AppState>,
    Authenticated(who): Authenticated,
    Path(name): Path<String>,
    body: axum::body::Body,
) -> Result<Json<publishers::CosignKeys>, HttpError> {
    let request: CosignRequest = json(body).await?;
    let done = publishers::set_cosign_keys(
        &state.store,
        &who,
        &name,
        &request.cosign_keys,
        crate::clock::now(),
    )
    .await?;
    Ok(Json(done))
}

/// Issues another token for a publisher (shown once).
#[utoipa::path(
    post,
    path = "/api/v1/admin/publishers/{name}/tokens",
    tag = "admin",
    security(("operator_token" = [])),
    params(
        ("name" = String, Path, description = "The publisher's name"),
    ),
    responses(
        (status = 201, description = "Issued", body = publishers::NewToken),
    )
)]
async fn new_token(
    State(state): State<AppState>,
    Authenticated(who): Authenticated,
    Path(name): Path<String>,
) -> Result<(StatusCode, Json<publishers::NewToken>), HttpError> {
    let done = publishers::new_token_for(&state.store, &who, &name, crate::clock::now()).await?;
    Ok((StatusCode::CREATED, Json(done)))
}

/// Revokes every token of a publisher.
#[utoipa::path(
    delete,
    path = "/api/v1/admin/publishers/{name}/tokens",
    tag = "admin",
    security(("operator_token" = [])),
    params(
        ("name" = String, Path, description = "The publisher's name"),
    ),
    responses(
        (status = 200, description = "Revoked", body = publishers::Revoked),
    )
)]
async fn revoke_tokens(
    State(state): State<AppState>,
    Authenticated(who): Authenticated,
    Path(name): Path<String>,
) -> Result<Json<publishers::Revoked>, HttpError> {
    let done = publishers::revoke_tokens(&state.store, &who, &name, crate::clock::now()).await?;
    Ok(Json(done))
}

/// Every reviewer, active or revoked.
#[utoipa::path(
    get,
    path = "/api/v1/admin/reviewers",
    tag = "admin",
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "The reviewers", body = ReviewerList),
    )
)]
async fn list_reviewers(
    State(state): State<AppState>,
    _: Authenticated,
) -> Result<Json<ReviewerList>, HttpError> {
    let items = admin::reviewers::list(&state.store).await?;
    Ok(Json(ReviewerList { items }))
}

/// Adds a reviewer, or gives a revoked one a new token (shown once).
#[utoipa::path(
    post,
    path = "/api/v1/admin/reviewers",
    tag = "admin",
    security(("operator_token" = [])),
    request_body = admin::reviewers::NewReviewer,
    responses(
        (status = 201, description = "Added", body = admin::reviewers::AddedReviewer),
    )
)]
async fn add_reviewer(
    State(state): State<AppState>,
    Authenticated(who): Authenticated,
    body: axum::body::Body,
) -> Result<(StatusCode, Json<admin::reviewers::AddedReviewer>), HttpError> {
    let new: admin::reviewers::NewReviewer = json(body).await?;
    let done = admin::reviewers::add(&state.store, &who, &new.name, crate::clock::now()).await?;
    Ok((StatusCode::CREATED, Json(done)))
}

/// Revokes a reviewer's token.
#[utoipa::path(
    delete,
    path = "/api/v1/admin/reviewers/{name}",
    tag = "admin",
    security(("operator_token" = [])),
    params(
        ("name" = String, Path, description = "The reviewer's name"),
    ),
    responses(
        (status = 200, description = "Revoked", body = ReviewerRevoked),
    )
)]
async fn revoke_reviewer(
    State(state): State<AppState>,
    Authenticated(who): Authenticated,
    Path(name): Path<String>,
) -> Result<Json<ReviewerRevoked>, HttpError> {
    admin::reviewers::revoke(&state.store, &who, &name, crate::clock::now()).await?;
    Ok(Json(ReviewerRevoked {
        name,
        revoked: true,
    }))
}

/// Every image published definitions pin, with its mirror status.
#[utoipa::path(
    get,
    path = "/api/v1/admin/mirror",
    tag = "admin",
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "The images", body = admin::mirror::Images),
    )
)]
async fn mirror_status(
    State(state): State<AppState>,
    _: Authenticated,
) -> Result<Json<admin::mirror::Images>, HttpError> {
    Ok(Json(admin::mirror::status(&state.store).await?))
}

/// Makes failed images due now (all, or those whose `HOST/PATH@DIGEST` contains `filter`).
#[utoipa::path(
    post,
    path = "/api/v1/admin/mirror/retry",
    tag = "admin",
    security(("operator_token" = [])),
    request_body = Option<admin::mirror::RetryRequest>,
    responses(
        (status = 200, description = "How many", body = admin::mirror::Retried),
    )
)]
async fn mirror_retry(
    State(state): State<AppState>,
    Authenticated(who): Authenticated,
    body: axum::body::Body,
) -> Result<Json<admin::mirror::Retried>, HttpError> {
    // An empty body retries every failed image.
    let bytes = read(body).await?;
    let request: admin::mirror::RetryRequest = if bytes.is_empty() {
        Default::default()
    } else {
        parse(&bytes)?
    };
    let done = admin::mirror::retry(&state.store, &who, &request, crate::clock::now()).await?;
    Ok(Json(done))
}

/// Reads `serve --curation FILE` again on the replica that answers (each replica
/// reads its own copy of the file).
#[utoipa::path(
    post,
    path = "/api/v1/admin/curation/reload",
    tag = "admin",
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "Reloaded", body = crate::catalog::curation::Reloaded),
    )
)]
async fn reload_curation(
    State(state): State<AppState>,
    Authenticated(who): Authenticated,
) -> Result<Json<crate::catalog::curation::Reloaded>, HttpError> {
    let done = state.curation.reload()?;
    tracing::info!(operator = %who, file = %done.file, categories = done.categories, featured = done.featured, "curation reloaded");
    Ok(Json(done))
}

/// Every role of the signed index with its version and expiry, earliest first.
#[utoipa::path(
    get,
    path = "/api/v1/admin/signed-index",
    tag = "admin",
    security(("operator_token" = [])),
    responses(
        (status = 200, description = "The roles", body = admin::index::IndexStatus),
    )
)]
async fn signed_index(
    State(state): State<AppState>,
    _: Authenticated,
) -> Result<Json<admin::index::IndexStatus>, HttpError> {
    Ok(Json(
        admin::index::status(&state.store, crate::clock::now()).await?,
    ))
}
