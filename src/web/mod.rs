//! Server-rendered catalog pages. Search and filters are plain GET forms, so every page
//! works without JavaScript. Handlers call `catalog` services, never the store's SQL.

mod assets;
mod views;

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{OriginalUri, Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::AppState;
use crate::catalog::{self, parse_params};
use crate::http::HttpError;

pub use views::{CatalogPage, PluginPage, SignedIndexPage};

pub fn router() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/", get(catalog_page))
        .route("/plugins/{publisher}/{name}", get(plugin_page))
        .route(
            "/plugins/{publisher}/{name}/versions/{version}/definition.yaml",
            get(catalog::api::raw_definition),
        )
        .route("/signed-index", get(signed_index_page))
        .route("/static/{*path}", get(assets::serve))
}

/// An error shown as an HTML page rather than JSON.
pub struct PageError(HttpError);

impl<E: Into<HttpError>> From<E> for PageError {
    fn from(e: E) -> Self {
        PageError(e.into())
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "error.html")]
struct ErrorPage {
    title: String,
    message: String,
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let title = match self.0.status {
            StatusCode::NOT_FOUND => "Page not found".to_owned(),
            StatusCode::BAD_REQUEST => "Bad request".to_owned(),
            s => s.canonical_reason().unwrap_or("Error").to_owned(),
        };
        (
            self.0.status,
            ErrorPage {
                title,
                message: self.0.message,
            },
        )
            .into_response()
    }
}

async fn catalog_page(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<CatalogPage, PageError> {
    let params = parse_params(raw.as_deref())?;
    let query = params.to_query()?;
    let page = state.store.list_plugins(&query).await?;
    let facets = state.store.facets().await?;
    Ok(CatalogPage::new(&params, &query, page, &facets))
}

async fn plugin_page(
    State(state): State<AppState>,
    Path((publisher, name)): Path<(String, String)>,
) -> Result<PluginPage, PageError> {
    let detail = catalog::plugin_detail(&state.store, &publisher, &name).await?;
    Ok(PluginPage::new(detail))
}

async fn signed_index_page(State(state): State<AppState>) -> Result<SignedIndexPage, PageError> {
    let roles = state.store.metadata_overview().await?;
    let bins = crate::trust::state::delegated_bins(&state.store)
        .await
        .map_err(HttpError::from)?;
    let suspended = state
        .store
        .publisher_list()
        .await?
        .into_iter()
        .filter(|p| p.suspended_at.is_some())
        .map(|p| p.name)
        .collect();
    Ok(SignedIndexPage::new(
        roles,
        &bins,
        &suspended,
        crate::clock::now(),
    ))
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
