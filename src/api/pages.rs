//! Server-rendered catalog pages. Search and filters are plain GET forms, so every page
//! works without JavaScript. Handlers call `catalog` services and hand the results to
//! `web`'s view models; errors are drawn as HTML pages.
//!
//! Layering: HTTP only; never builds SQL.

use std::time::Duration;

use askama::Template;
use axum::extract::{OriginalUri, Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;

use super::AppState;
use super::error::HttpError;
use super::layers::{Limits, MAX_BODY_BYTES};
use crate::catalog::{self, parse_params};
use crate::web::{CatalogPage, ErrorPage, PluginPage, SignedIndexPage, assets};

/// Pages are GETs answered from the database; a page that needs more than 30 s is a
/// fault worth reporting, not worth waiting for.
pub const LIMITS: Limits = Limits {
    body_bytes: MAX_BODY_BYTES,
    timeout: Duration::from_secs(30),
};

pub fn router() -> axum::Router<AppState> {
    let routes = axum::Router::new()
        .route("/", get(catalog_page))
        .route("/plugins/{publisher}/{name}", get(plugin_page))
        .route(
            "/plugins/{publisher}/{name}/versions/{version}/definition.yaml",
            get(super::catalog::raw_definition),
        )
        .route("/signed-index", get(signed_index_page))
        .route("/static/{*path}", get(static_file));
    LIMITS.apply(routes, |e| PageError(e).into_response())
}

/// Every path no surface claims: 404, under the pages' limits, so a body sent to a
/// wrong path is drained like any other before the answer.
pub fn fallback() -> axum::Router<AppState> {
    LIMITS.apply(axum::Router::new().fallback(not_found), |e| {
        PageError(e).into_response()
    })
}

/// An error shown as an HTML page rather than JSON.
pub struct PageError(HttpError);

impl<E: Into<HttpError>> From<E> for PageError {
    fn from(e: E) -> Self {
        PageError(e.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let title = match self.0.status {
            StatusCode::NOT_FOUND => "Page not found".to_owned(),
            StatusCode::BAD_REQUEST => "Bad request".to_owned(),
            s => s.canonical_reason().unwrap_or("Error").to_owned(),
        };
        let page = ErrorPage {
            title,
            message: self.0.message,
        };
        let mut response = match page.render() {
            Ok(html) => (self.0.status, Html(html)).into_response(),
            Err(e) => return HttpError::internal("rendering the error page", &e).into_response(),
        };
        if let Some(secs) = self.0.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        response
    }
}

/// A rendered page, or 500 when its template fails.
fn html(page: &impl Template) -> Result<Response, PageError> {
    match page.render() {
        Ok(html) => Ok(Html(html).into_response()),
        Err(e) => Err(PageError(HttpError::internal("rendering a page", &e))),
    }
}

async fn catalog_page(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Response, PageError> {
    let params = parse_params(raw.as_deref())?;
    let query = params.to_query()?;
    let (page, facets) = state.store.list_plugins_with_facets(&query).await?;
    let listings = state.listings.current(&state.store).await?;
    html(&crate::web::decorate(
        CatalogPage::new(&params, &query, page, &facets),
        &listings,
    ))
}

async fn plugin_page(
    State(state): State<AppState>,
    Path((publisher, name)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let detail = catalog::plugin_detail(&state.store, &publisher, &name).await?;
    html(&PluginPage::new(detail))
}

async fn signed_index_page(State(state): State<AppState>) -> Result<Response, PageError> {
    let roles = state.store.metadata_overview().await?;
    let bins = crate::trust::server::state::delegated_bins(&state.store).await?;
    let suspended = state
        .store
        .publisher_list()
        .await?
        .into_iter()
        .filter(|p| p.suspended_at.is_some())
        .map(|p| p.name)
        .collect();
    html(&SignedIndexPage::new(
        roles,
        &bins,
        &suspended,
        crate::clock::now(),
    ))
}

async fn static_file(Path(path): Path<String>) -> Response {
    let Some(asset) = assets::get(&path) else {
        return PageError(HttpError::not_found(format!("no static file {path}"))).into_response();
    };
    (
        [
            (header::CONTENT_TYPE, asset.mime.to_owned()),
            (header::ETAG, asset.etag),
            (header::CACHE_CONTROL, "public, max-age=3600".to_owned()),
        ],
        asset.data,
    )
        .into_response()
}

/// Fallback for unknown paths: JSON under `/api/`, an HTML page elsewhere.
pub async fn not_found(OriginalUri(uri): OriginalUri) -> Response {
    let err = HttpError::not_found(format!("no page at {}", uri.path()));
    if uri.path().starts_with("/api/") {
        err.into_response()
    } else {
        PageError(err).into_response()
    }
}
