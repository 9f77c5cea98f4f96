//! Atom feeds of new versions: `/feed.atom` (the catalog), `/publishers/{publisher}/feed.atom`
//! and `/plugins/{publisher}/{name}/feed.atom`. The pages link them with
//! `<link rel="alternate" type="application/atom+xml">`.
//!
//! Layering: HTTP only; the store's rows drawn by `web::feed`.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

use super::AppState;
use super::error::HttpError;
use super::extract::client_has;
use super::layers::Limits;
use crate::store::{FeedScope, FeedVersion};
use crate::web::feed::{self, Feed};

/// Entries per feed: the newest versions. Readers poll; older ones are on the pages.
pub const ENTRIES: i64 = 50;

/// Feeds take no body and are one indexed query.
pub const LIMITS: Limits = Limits {
    body_bytes: 0,
    timeout: Duration::from_secs(30),
};

pub fn router() -> axum::Router<AppState> {
    let routes = axum::Router::new()
        .route("/feed.atom", get(catalog))
        .route("/publishers/{publisher}/feed.atom", get(publisher))
        .route("/plugins/{publisher}/{name}/feed.atom", get(plugin));
    LIMITS.apply(routes, HttpError::into_response)
}

async fn catalog(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, HttpError> {
    let versions = state.store.feed(&FeedScope::Catalog, ENTRIES).await?;
    answer(&state, &headers, &Feed::catalog(), versions, 0).await
}

async fn publisher(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    // A suspended publisher is hidden here as on every public surface.
    let created = match state.store.publisher(&name).await? {
        Some(p) if p.suspended_at.is_none() => p.created_at,
        _ => return Err(HttpError::not_found(format!("no publisher {name}"))),
    };
    let versions = state
        .store
        .feed(&FeedScope::Publisher(name.clone()), ENTRIES)
        .await?;
    answer(&state, &headers, &Feed::publisher(&name), versions, created).await
}

async fn plugin(
    State(state): State<AppState>,
    Path((publisher, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    // A plugin whose every version is yanked keeps its feed: that is how a reader
    // learns of the last yank.
    let missing = || HttpError::not_found(format!("no plugin {publisher}/{name}"));
    let plugin = state
        .store
        .plugin(&publisher, &name)
        .await?
        .filter(|p| !p.suspended)
        .ok_or_else(missing)?;
    let scope = FeedScope::Plugin {
        publisher: plugin.publisher.clone(),
        name: plugin.name.clone(),
    };
    let versions = state.store.feed(&scope, ENTRIES).await?;
    let listings = state.listings.current(&state.store).await?;
    let listed = listings
        .get(&crate::ids::plugin(&publisher, &name))
        .map(|l| l.display_name.as_str())
        .unwrap_or_default();
    let shown = versions.first().map_or("", |v| v.display_name.as_str());
    let title = crate::catalog::listing::or(listed, crate::catalog::listing::or(shown, &name));
    let feed = Feed::plugin(&publisher, &name, title);
    answer(&state, &headers, &feed, versions, plugin.created_at).await
}

/// The feed document, with an entity tag of its bytes so readers polling it get a 304
/// while nothing changed; `created` is its time while it lists nothing.
async fn answer(
    state: &AppState,
    headers: &HeaderMap,
    feed: &Feed,
    mut versions: Vec<FeedVersion>,
    created: i64,
) -> Result<Response, HttpError> {
    // A publisher's listing names a plugin as the catalog shows it.
    let listings = state.listings.current(&state.store).await?;
    for v in &mut versions {
        if let Some(l) = listings.get(&crate::ids::plugin(&v.publisher, &v.name)) {
            if !l.display_name.is_empty() {
                v.display_name = l.display_name.clone();
            }
            if !l.description_short.is_empty() {
                v.description = l.description_short.clone();
            }
        }
    }
    let body = feed::render(feed, &versions, created);
    let etag = format!(
        "\"{}\"",
        &hex::encode(Sha256::digest(body.as_bytes()))[..32]
    );
    let etag_value = HeaderValue::from_str(&etag).expect("hex is a valid header value");
    let cache = HeaderValue::from_static("public, max-age=60");
    if client_has(headers, &etag) {
        return Ok((
            StatusCode::NOT_MODIFIED,
            [(header::ETAG, etag_value), (header::CACHE_CONTROL, cache)],
        )
            .into_response());
    }
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/atom+xml; charset=utf-8"),
            ),
            (header::ETAG, etag_value),
            (header::CACHE_CONTROL, cache),
        ],
        body,
    )
        .into_response())
}
