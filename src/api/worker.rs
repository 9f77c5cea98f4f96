//! The worker's local HTTP API, a thin layer over [`Worker`]:
//!
//! - `GET /status` — per source: last success, last error and reason, trusted
//!   metadata versions and expiry (no token: it holds no organization's data);
//! - `GET /orgs/{org}/plugins`, `/plugins/{name}`, `/plugins/{name}/upgrades?from=V`,
//!   `/plugins/{name}/versions/{version}/definition` (the YAML to install),
//!   `/install-plan?plugins=a,b` — the organization's merged view (its token or a
//!   reader token);
//! - `GET|POST /orgs/{org}/sideloads`, `GET|DELETE /orgs/{org}/sideloads/{name}/{version}`,
//!   `DELETE /orgs/{org}/sideloads/{name}` — the organization's sideloads (its token);
//!   a POST sends the YAML, or JSON `{"definition", "extras"}` with a companion document.
//!
//! Layering: HTTP only; everything else is `sync::Worker`. Answers drawn from the
//! worker's database rows have their own types (`answers`).

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::json;

mod answers;
mod openapi;
mod sideloads;

use answers::{OrgPlugin, OrgPlugins, PluginSummary, StatusBody, Upgrade, Upgrades, sorted};

use super::catalog::ChangesAnswer;
use super::error::{ErrorCode, HttpError};
use super::extract::bearer;
use super::layers::{Limits, with_layers};
use crate::definition::{MAX_DEFINITION_BYTES, MAX_EXTRAS_BYTES, parse_version};
use crate::sync::plan::PlanError;
use crate::sync::sideload::{Scope, SideloadError};
use crate::sync::store::SyncStoreError;
use crate::sync::view::{OrgView, Plugin};
use crate::sync::worker::{PlanRequestError, Worker};

/// A sideload is one definition (1 MiB at most), with its companion document when sent
/// as JSON (text escaped in JSON can take twice its size); views are built in memory, so
/// 30 s is generous.
pub const LIMITS: Limits = Limits {
    body_bytes: 2 * (MAX_DEFINITION_BYTES + MAX_EXTRAS_BYTES) + 4096,
    timeout: Duration::from_secs(30),
};

pub fn router(worker: Arc<Worker>) -> axum::Router {
    let routes = axum::Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/status", get(status))
        .route("/openapi.json", get(openapi::serve))
        .route("/orgs/{org}/plugins", get(plugins))
        .route("/orgs/{org}/plugins/{name}", get(plugin))
        .route("/orgs/{org}/plugins/{name}/upgrades", get(upgrades))
        .route(
            "/orgs/{org}/plugins/{name}/versions/{version}/definition",
            get(definition),
        )
        .route("/orgs/{org}/install-plan", get(install_plan))
        .route(
            "/orgs/{org}/sideloads",
            get(sideloads::list_sideloads).post(sideloads::add_sideload),
        )
        .route(
            "/orgs/{org}/sideloads/{name}",
            axum::routing::delete(sideloads::delete_name),
        )
        .route(
            "/orgs/{org}/sideloads/{name}/{version}",
            get(sideloads::get_sideload).delete(sideloads::delete_version),
        )
        // Unknown paths answer in the API's error shape, inside its limits.
        .fallback(|uri: axum::http::Uri| async move {
            HttpError::not_found(format!("no route {}", uri.path()))
        })
        .with_state(worker.clone());
    let connect = super::connect::LIMITS.apply(
        super::connect::organization::router(worker.clone()),
        super::connect::render,
    );
    let http: Arc<crate::metrics::HistogramVec> = Default::default();
    let metrics = {
        let http = http.clone();
        axum::Router::new().route(
            "/metrics",
            get(move || async move { super::metrics::worker_metrics(&worker, &http).await }),
        )
    };
    with_layers(
        LIMITS
            .apply(routes, HttpError::into_response)
            .merge(super::ops::LIMITS.apply(metrics, HttpError::into_response))
            .merge(connect),
        http,
        super::metrics::worker_surface,
    )
}

type Shared = State<Arc<Worker>>;

impl From<SyncStoreError> for HttpError {
    fn from(e: SyncStoreError) -> Self {
        match &e {
            SyncStoreError::Db(db) if crate::db::unreachable(db) => {
                HttpError::unavailable("sync store unreachable", &e)
            }
            SyncStoreError::Db(_) | SyncStoreError::Migrate(_) | SyncStoreError::TooNew(_) => {
                HttpError::internal("sync store failure", &e)
            }
        }
    }
}

impl From<SideloadError> for HttpError {
    fn from(e: SideloadError) -> Self {
        let message = e.to_string();
        match e {
            SideloadError::BadOrg(_) => {
                HttpError::new(StatusCode::BAD_REQUEST, ErrorCode::BadParameter, message)
            }
            SideloadError::Invalid(invalid) => HttpError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::InvalidDefinition,
                message,
            )
            .with_details(json!({ "problems": invalid.problems })),
            SideloadError::Conflict { .. } => {
                HttpError::new(StatusCode::CONFLICT, ErrorCode::VersionExists, message)
            }
            SideloadError::TooMany => HttpError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::TooMany,
                message,
            ),
            SideloadError::Store(e) => e.into(),
        }
    }
}

impl From<PlanRequestError> for HttpError {
    fn from(e: PlanRequestError) -> Self {
        match e {
            PlanRequestError::Org(e) => e.into(),
            PlanRequestError::Plan(e) => {
                let message = e.to_string();
                match e {
                    PlanError::Unknown(_) | PlanError::NoSuchVersion { .. } => {
                        HttpError::not_found(message)
                    }
                    PlanError::Ambiguous(_)
                    | PlanError::Yanked { .. }
                    | PlanError::NothingInstallable(_) => {
                        HttpError::new(StatusCode::CONFLICT, ErrorCode::NotInstallable, message)
                    }
                    PlanError::Empty
                    | PlanError::TooMany
                    | PlanError::BadName(_)
                    | PlanError::BadVersion(_)
                    | PlanError::Duplicate(_) => HttpError::bad_parameter(message),
                }
            }
        }
    }
}

/// The caller's token must allow reading (`write == false`) or changing `org`.
pub(crate) async fn authorize(
    worker: &Worker,
    headers: &HeaderMap,
    org: &str,
    write: bool,
) -> Result<String, HttpError> {
    crate::sync::sideload::check_org(org)?;
    let token = bearer(headers)?;
    let Some((id, scope)) = worker.store().token_scope(token).await? else {
        return Err(HttpError::unauthorized("the token is unknown or revoked"));
    };
    let allowed = if write {
        scope.may_write(org)
    } else {
        scope.may_read(org)
    };
    if allowed {
        return Ok(id);
    }
    let message = match scope {
        Scope::Org(own) => format!("this token belongs to organization {own}, not {org}"),
        Scope::Reader => "a reader token cannot change sideloads".to_owned(),
    };
    Err(HttpError::new(
        StatusCode::FORBIDDEN,
        ErrorCode::Forbidden,
        message,
    ))
}

/// Per source: last success, last error and reason, trusted metadata versions and
/// expiry; no token, as it holds no organization's data.
#[utoipa::path(
    get,
    path = "/status",
    tag = "status",
    responses((status = 200, description = "The worker's sources", body = StatusBody))
)]
async fn status(State(worker): Shared) -> Result<Response, HttpError> {
    Ok(Json(StatusBody::from(worker.status().await?)).into_response())
}

fn summary<'a>(view: &'a OrgView, p: &'a Plugin) -> PluginSummary<'a> {
    PluginSummary {
        name: &p.name,
        publisher: p.publisher.as_deref(),
        origin: p.origin,
        latest: p.latest_per_major(),
        clashes: view.clashes.iter().filter(|c| c.name == p.name).collect(),
    }
}

/// Every plugin offered to the organization, by name, and the names offered more than
/// once.
#[utoipa::path(
    get,
    path = "/orgs/{org}/plugins",
    tag = "plugins",
    params(("org" = String, Path, description = "The organization")),
    security(("org_token" = [])),
    responses((status = 200, description = "The organization's plugins", body = OrgPlugins))
)]
async fn plugins(
    State(worker): Shared,
    Path(org): Path<String>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    authorize(&worker, &headers, &org, false).await?;
    let view = worker.view(&org).await?;
    let answer = OrgPlugins {
        org: &org,
        plugins: view.plugins().map(|p| summary(&view, p)).collect(),
        clashes: &view.clashes,
    };
    Ok(sorted(&answer).into_response())
}

/// The plugin, or why it is not offered (404, or 409 when publishers clash over it).
fn find<'a>(view: &'a OrgView, name: &str) -> Result<&'a Plugin, HttpError> {
    if let Some(clash) = view.ambiguity(name) {
        return Err(HttpError::new(
            StatusCode::CONFLICT,
            ErrorCode::Ambiguous,
            format!("plugin {name} is offered by several publishers of equal precedence"),
        )
        .with_details(json!({ "clash": clash })));
    }
    view.plugin(name).ok_or_else(|| {
        HttpError::not_found(format!(
            "plugin {name} is not offered to organization {}",
            view.org
        ))
    })
}

/// One plugin offered to the organization with every version, newest first; 409
/// `ambiguous` when publishers of equal precedence offer the name.
#[utoipa::path(
    get,
    path = "/orgs/{org}/plugins/{name}",
    tag = "plugins",
    params(
        ("org" = String, Path, description = "The organization"),
        ("name" = String, Path, description = "The plugin's name"),
    ),
    security(("org_token" = [])),
    responses((status = 200, description = "The plugin and its versions", body = OrgPlugin))
)]
async fn plugin(
    State(worker): Shared,
    Path((org, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    authorize(&worker, &headers, &org, false).await?;
    let view = worker.view(&org).await?;
    let p = find(&view, &name)?;
    let answer = OrgPlugin {
        plugin: summary(&view, p),
        versions: p.versions.values().rev().collect(),
    };
    Ok(sorted(&answer).into_response())
}

/// The definition to install, byte for byte as its publisher signed it.
#[utoipa::path(
    get,
    path = "/orgs/{org}/plugins/{name}/versions/{version}/definition",
    tag = "plugins",
    params(
        ("org" = String, Path, description = "The organization"),
        ("name" = String, Path, description = "The plugin's name"),
        ("version" = String, Path, description = "A semantic version, with or without `v`"),
    ),
    security(("org_token" = [])),
    responses((
        status = 200,
        description = "The definition",
        body = Object,
        content_type = "application/yaml",
        headers(("ETag" = String, description = "The definition's hash")),
    ))
)]
async fn definition(
    State(worker): Shared,
    Path((org, name, version)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    authorize(&worker, &headers, &org, false).await?;
    let parsed = version_param("version", &version)?;
    let (bytes, _) = worker
        .definition(&org, &name, &parsed)
        .await?
        .ok_or_else(|| {
            HttpError::not_found(format!("plugin {name} {version} is not offered to {org}"))
        })?;
    let etag = format!("\"{}\"", crate::definition::definition_hash(&bytes));
    Ok((
        [
            (header::CONTENT_TYPE, "application/yaml".to_owned()),
            (header::ETAG, etag),
        ],
        bytes,
    )
        .into_response())
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct UpgradesQuery {
    /// The version installed.
    from: String,
}

/// The versions an installed version may upgrade to, each with what it asks for that
/// the installed version did not.
#[utoipa::path(
    get,
    path = "/orgs/{org}/plugins/{name}/upgrades",
    tag = "plugins",
    params(
        ("org" = String, Path, description = "The organization"),
        ("name" = String, Path, description = "The plugin's name"),
        UpgradesQuery,
    ),
    security(("org_token" = [])),
    responses((status = 200, description = "The upgrades", body = Upgrades))
)]
async fn upgrades(
    State(worker): Shared,
    Path((org, name)): Path<(String, String)>,
    headers: HeaderMap,
    query: Result<Query<UpgradesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, HttpError> {
    authorize(&worker, &headers, &org, false).await?;
    let bad = |m: String| HttpError::new(StatusCode::BAD_REQUEST, ErrorCode::BadParameter, m);
    let Query(q) = query.map_err(|e| bad(format!("from: {}", e.body_text())))?;
    let from = version_param("from", &q.from)?;
    let view = worker.view(&org).await?;
    let p = find(&view, &name)?;
    let upgrades = p.upgrades(&from);
    // Each upgrade with what it asks for that the installed version did not, so an
    // administrator consents to exactly the difference.
    let changes = worker
        .upgrade_changes(&view.org, p, &from, &upgrades)
        .await?;
    let answer = Upgrades {
        name: &p.name,
        from: from.to_string(),
        upgrades: upgrades
            .iter()
            .zip(changes)
            .map(|(offer, changes)| Upgrade {
                offer,
                changes: changes.map(ChangesAnswer::new),
            })
            .collect(),
    };
    Ok(sorted(&answer).into_response())
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct PlanQuery {
    /// The plugins to install, separated by commas, each `name` or `name@version`.
    plugins: String,
}

/// The order to install plugins in with their dependencies, what is missing, and the
/// requirements an admin approves.
#[utoipa::path(
    get,
    path = "/orgs/{org}/install-plan",
    tag = "plugins",
    params(("org" = String, Path, description = "The organization"), PlanQuery),
    security(("org_token" = [])),
    responses((status = 200, description = "The plan", body = crate::sync::plan::Plan))
)]
async fn install_plan(
    State(worker): Shared,
    Path(org): Path<String>,
    headers: HeaderMap,
    query: Result<Query<PlanQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, HttpError> {
    authorize(&worker, &headers, &org, false).await?;
    let Query(q) = query.map_err(|e| {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::BadParameter,
            format!("plugins: {}", e.body_text()),
        )
    })?;
    Ok(Json(worker.install_plan(&org, &q.plugins).await?).into_response())
}

/// A version parameter, or a 400 naming it (and at most 80 characters of what was sent).
pub(crate) fn version_param(field: &str, text: &str) -> Result<semver::Version, HttpError> {
    parse_version(text).map_err(|e| {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::BadParameter,
            format!(
                "{field}: `{}` is not a semantic version: {e}",
                text.chars().take(80).collect::<String>()
            ),
        )
    })
}
