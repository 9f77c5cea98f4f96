//! The catalog's JSON read API under `/api/v1/plugins`.
//!
//! Layering: HTTP only; calls `catalog` services and store queries. Its answers are its
//! own types (or the `catalog` service's), never the store's rows, so a column change
//! cannot change them.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;

use super::AppState;
use super::error::HttpError;
use super::extract::client_has;
use super::layers::{Limits, MAX_BODY_BYTES};
use crate::catalog::{CatalogError, PluginDetail, VersionInfo, parse_params, plugin_detail};
use crate::store::PluginSummary;

/// Read-only queries answered from the database, as the pages.
pub const LIMITS: Limits = Limits {
    body_bytes: MAX_BODY_BYTES,
    timeout: Duration::from_secs(30),
};

pub fn router() -> axum::Router<AppState> {
    let routes = axum::Router::new()
        .route("/api/v1/plugins", get(list))
        .route("/api/v1/plugins/{publisher}/{name}", get(detail))
        .route("/api/v1/plugins/{publisher}/{name}/versions", get(versions))
        .route(
            "/api/v1/plugins/{publisher}/{name}/versions/{version}/definition",
            get(raw_definition),
        )
        .route(
            "/api/v1/plugins/{publisher}/{name}/versions/{version}/changes",
            get(changes),
        );
    LIMITS.apply(routes, HttpError::into_response)
}

#[derive(Serialize, utoipa::ToSchema)]
struct ListResponse {
    items: Vec<ListItem>,
    total: i64,
    page: u32,
    per_page: u32,
}

/// One plugin of a listing.
#[derive(Serialize, utoipa::ToSchema)]
struct ListItem {
    publisher: String,
    name: String,
    display_name: String,
    description: String,
    latest_version: String,
    tags: Vec<String>,
    internet_access: bool,
    privileged: bool,
    kube_system_deployment: bool,
    updated_at: i64,
}

impl From<PluginSummary> for ListItem {
    fn from(p: PluginSummary) -> Self {
        ListItem {
            publisher: p.publisher,
            name: p.name,
            display_name: p.display_name,
            description: p.description,
            latest_version: p.latest_version,
            tags: p.tags,
            internet_access: p.internet_access,
            privileged: p.privileged,
            kube_system_deployment: p.kube_system_deployment,
            updated_at: p.updated_at,
        }
    }
}

/// Listed plugins matching the query, a page at a time.
#[utoipa::path(
    get,
    path = "/api/v1/plugins",
    tag = "catalog",
    params(
        ("q" = Option<String>, Query, description = "Search words (at most 200 characters)"),
        ("tag" = Option<String>, Query, description = "Only plugins with this tag"),
        ("publisher" = Option<String>, Query, description = "Only this publisher's plugins"),
        ("no_internet" = Option<String>, Query, description = "`on`/`true`/`1`: leave out plugins that need internet access approved"),
        ("not_privileged" = Option<String>, Query, description = "`on`/`true`/`1`: leave out privileged plugins"),
        ("no_kube_system" = Option<String>, Query, description = "`on`/`true`/`1`: leave out plugins deploying into kube-system"),
        ("sort" = Option<String>, Query, description = "`relevance` (default), `name` or `updated`"),
        ("page" = Option<u32>, Query, description = "Page number, from 1"),
        ("per_page" = Option<u32>, Query, description = "Plugins per page, 1 to 100 (default 24)"),
    ),
    responses((status = 200, description = "One page of the listing", body = ListResponse))
)]
async fn list(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<ListResponse>, HttpError> {
    let query = parse_params(raw.as_deref())?.to_query()?;
    let page = state.store.list_plugins(&query).await?;
    Ok(Json(ListResponse {
        items: page.items.into_iter().map(ListItem::from).collect(),
        total: page.total,
        page: query.page,
        per_page: query.per_page,
    }))
}

/// One plugin: its latest version, what it needs approved, its versions and links.
#[utoipa::path(
    get,
    path = "/api/v1/plugins/{publisher}/{name}",
    tag = "catalog",
    params(
        ("publisher" = String, Path, description = "The publisher's name"),
        ("name" = String, Path, description = "The plugin's name"),
    ),
    responses((status = 200, description = "The plugin", body = PluginDetail))
)]
async fn detail(
    State(state): State<AppState>,
    Path((publisher, name)): Path<(String, String)>,
) -> Result<Json<PluginDetail>, HttpError> {
    Ok(Json(plugin_detail(&state.store, &publisher, &name).await?))
}

/// What `changes` answers: the comparison's fields, with whether it asks for more than
/// the version installed and a sentence per change.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct ChangesAnswer {
    #[serde(flatten)]
    changes: crate::catalog::changes::Changes,
    asks_for_more: bool,
    lines: Vec<String>,
}

impl ChangesAnswer {
    pub(super) fn new(changes: crate::catalog::changes::Changes) -> ChangesAnswer {
        ChangesAnswer {
            asks_for_more: changes.asks_for_more(),
            lines: changes.lines(),
            changes,
        }
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangesQuery {
    from: String,
}

/// What upgrading to `version` from `from` (both published versions of the plugin,
/// yanked or not) asks for that `from` did not.
#[utoipa::path(
    get,
    path = "/api/v1/plugins/{publisher}/{name}/versions/{version}/changes",
    tag = "catalog",
    params(
        ("publisher" = String, Path, description = "The publisher's name"),
        ("name" = String, Path, description = "The plugin's name"),
        ("version" = String, Path, description = "The version upgraded to"),
        ("from" = String, Query, description = "The version installed"),
    ),
    responses((status = 200, description = "What the upgrade asks for", body = ChangesAnswer))
)]
async fn changes(
    State(state): State<AppState>,
    Path((publisher, name, version)): Path<(String, String, String)>,
    query: Result<axum::extract::Query<ChangesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ChangesAnswer>, HttpError> {
    let axum::extract::Query(q) = query.map_err(|e| {
        HttpError::bad_parameter(format!(
            "query parameter `from` (the version installed) is required: {}",
            e.body_text()
        ))
    })?;
    let plugin = state
        .store
        .plugin(&publisher, &name)
        .await?
        .ok_or_else(|| CatalogError::NotFound(format!("plugin {publisher}/{name}")))?;
    let mut found = Vec::with_capacity(2);
    for v in [q.from, version] {
        let (_, d) = state
            .store
            .definition(plugin.id, &v)
            .await?
            .ok_or_else(|| {
                CatalogError::NotFound(format!("version {v} of plugin {publisher}/{name}"))
            })?;
        found.push(d);
    }
    let (old, new) = (&found[0], &found[1]);
    Ok(Json(ChangesAnswer::new(crate::catalog::changes::between(
        old, new,
    ))))
}

#[derive(Serialize, utoipa::ToSchema)]
struct VersionsResponse {
    items: Vec<VersionInfo>,
}

/// Every version of a plugin, newest first, yanked ones marked.
#[utoipa::path(
    get,
    path = "/api/v1/plugins/{publisher}/{name}/versions",
    tag = "catalog",
    params(
        ("publisher" = String, Path, description = "The publisher's name"),
        ("name" = String, Path, description = "The plugin's name"),
    ),
    responses((status = 200, description = "The plugin's versions", body = VersionsResponse))
)]
async fn versions(
    State(state): State<AppState>,
    Path((publisher, name)): Path<(String, String)>,
) -> Result<Json<VersionsResponse>, HttpError> {
    let plugin = state
        .store
        .plugin(&publisher, &name)
        .await?
        .ok_or_else(|| CatalogError::NotFound(format!("plugin {publisher}/{name}")))?;
    let items = state
        .store
        .versions(plugin.id)
        .await?
        .iter()
        .map(VersionInfo::from)
        .collect();
    Ok(Json(VersionsResponse { items }))
}

/// The exact published bytes; the definition hash doubles as a strong ETag.
#[utoipa::path(
    get,
    path = "/api/v1/plugins/{publisher}/{name}/versions/{version}/definition",
    tag = "catalog",
    params(
        ("publisher" = String, Path, description = "The publisher's name"),
        ("name" = String, Path, description = "The plugin's name"),
        ("version" = String, Path, description = "The version, with or without `v`"),
    ),
    responses(
        (status = 200, description = "The definition as published (YAML)", body = Object, content_type = "application/yaml"),
        (status = 304, description = "Not modified: the client's copy (If-None-Match) is current"),
    )
)]
pub(super) async fn raw_definition(
    State(state): State<AppState>,
    Path((publisher, name, version)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    let missing =
        || CatalogError::NotFound(format!("version {version} of plugin {publisher}/{name}"));
    let plugin = state
        .store
        .plugin(&publisher, &name)
        .await?
        .ok_or_else(missing)?;
    let (record, def) = state
        .store
        .definition(plugin.id, &version)
        .await?
        .ok_or_else(missing)?;
    let etag = format!("\"{}\"", record.hash);
    if client_has(&headers, &etag) {
        return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response());
    }
    let filename = format!("{}-{}.yaml", def.name(), record.version);
    Ok((
        [
            (
                header::CONTENT_TYPE,
                "application/yaml; charset=utf-8".to_owned(),
            ),
            (header::ETAG, etag),
            (
                header::CONTENT_DISPOSITION,
                format!("inline; filename=\"{filename}\""),
            ),
            (
                header::CACHE_CONTROL,
                "public, max-age=31536000, immutable".to_owned(),
            ),
        ],
        def.bytes,
    )
        .into_response())
}
