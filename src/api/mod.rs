//! The HTTP layer: one file per surface, each with its `router()`, its own body limit
//! and timeout (`Limits`), and its own way of drawing errors.
//!
//! - `pages`: the server-rendered catalog (HTML errors);
//! - `catalog`: the JSON read API under `/api/v1/plugins`;
//! - `feeds`: Atom feeds of new versions (catalog, publisher, plugin);
//! - `tuf`: the signed index's files under `/tuf/`;
//! - `publishing`: publish, yank, re-sign, `/api/v1/publishers...` (publisher tokens);
//! - `review`: the reviewers' JSON API under `/api/v1/review/` (reviewer tokens);
//! - `upstream`: the upstream followed and its last round, `/api/v1/upstream`;
//! - `admin`: the admin API under `/api/v1/admin/` (operator tokens);
//! - `openapi`: the JSON API's OpenAPI 3.1 description, `/api/v1/openapi.json`;
//! - `registry`: the OCI pull API under `/v2/` (its own error body);
//! - `ops`: `/healthz`, `/readyz`, `/metrics` (`metrics`: the exposition, and the
//!   request metrics of both applications);
//! - `connect`: Fundament's Connect contracts (here `catalog.v1`, `registry.v1` and
//!   `admin.v1`);
//! - `worker`: the sync worker's local API (its own application, its own state).
//!
//! `error` is the one edge error type ([`HttpError`], codes in [`ErrorCode`]), `auth`
//! publisher and reviewer tokens, `extract`
//! what surfaces read from requests (bearer token, client address, `If-None-Match`),
//! `layers` the middleware.
//!
//! Layering: the only module that knows about requests and responses. It calls the
//! domain modules (`catalog`, `store`, `trust`, `sync`, `web` for view models); none of
//! them calls back, and none of them depends on axum.

pub mod admin;
pub mod auth;
pub mod catalog;
pub mod connect;
pub mod error;
pub mod extract;
pub mod feeds;
pub mod layers;
pub mod metrics;
pub mod openapi;
pub mod ops;
pub mod pages;
pub mod publishing;
pub mod registry;
pub mod review;
pub mod tuf;
pub mod upstream;
pub mod worker;

use std::sync::Arc;

use axum::Router;

pub use error::{ErrorCode, HttpError};
pub use layers::{Limits, MAX_BODY_BYTES, MAX_HEADER_BYTES};
pub use publishing::MAX_PUBLISH_BODY_BYTES;

use crate::catalog::Curation;
use crate::ratelimit::AuthLimiter;
use crate::store::Store;
use crate::trust::server::state::Signer;

/// State shared by the server's handlers. Build it with [`AppState::new`], then set what
/// differs from the defaults, so new fields do not break callers.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    /// Present once the signed index is initialized; publishing needs it.
    pub signer: Option<Arc<Signer>>,
    /// Failed token authentications (publisher tokens, and `/v2/` pull tokens), per
    /// client address and publisher: one budget per address for guessing any of our
    /// tokens.
    pub auth_limits: Arc<AuthLimiter>,
    /// Take the client address from the rightmost `X-Forwarded-For` entry (set only
    /// behind a reverse proxy that writes it; otherwise clients could pick their own).
    pub trust_forwarded_for: bool,
    /// The `/tuf/` files, served from memory.
    pub files: Arc<crate::trust::files::Files>,
    /// Mirrored images for `/v2/`; without it the registry serves nothing.
    pub registry: Option<crate::registry::Registry>,
    /// When set, `/v2/` answers only requests carrying one of these tokens (kept as
    /// hex sha256); anonymous pulls otherwise.
    pub pull_tokens: Option<Arc<std::collections::HashSet<String>>>,
    /// Categories, featured plugins and labels of `catalog.v1.CatalogService`, loaded
    /// at start (`serve --curation`); the compiled-in default otherwise.
    pub curation: Arc<crate::catalog::curation::LiveCuration>,
    /// Whether a new target needs an approved review (`serve --review`).
    pub review: crate::review::ReviewMode,
    /// Publishers' listings, kept per catalog generation for the catalog surfaces.
    pub listings: Arc<crate::catalog::Listings>,
    /// The upstream marketplace followed (`serve --upstream`), as its state is stored.
    pub upstream: Option<String>,
    /// What `/metrics` counts: requests, publishes and refusals.
    pub metrics: Arc<metrics::Metrics>,
}

impl AppState {
    pub fn new(store: Store, signer: Option<Arc<Signer>>) -> AppState {
        AppState {
            files: Arc::new(crate::trust::files::Files::new(
                store.clone(),
                crate::trust::files::DEFAULT_CACHE_BYTES,
            )),
            store,
            signer,
            auth_limits: Default::default(),
            trust_forwarded_for: false,
            registry: None,
            pull_tokens: None,
            curation: Arc::new(crate::catalog::curation::LiveCuration::fixed(
                Curation::builtin(),
            )),
            review: crate::review::ReviewMode::Off,
            listings: Default::default(),
            upstream: None,
            metrics: Default::default(),
        }
    }
}

/// Records a failed token check from `client` (for `publisher`, when the route names
/// one) against the limits in `AppState::auth_limits`.
fn auth_failed(state: &AppState, client: Option<std::net::IpAddr>, publisher: Option<&str>) {
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

/// The server's whole HTTP application; tests drive it directly with `oneshot`.
pub fn app(state: AppState) -> Router {
    let routes = Router::new()
        .merge(pages::router())
        .merge(catalog::router())
        .merge(feeds::router())
        .merge(ops::router())
        .merge(tuf::router())
        .merge(publishing::router())
        .merge(review::router())
        .merge(upstream::router())
        .merge(admin::router())
        .merge(openapi::router())
        .merge(registry::router())
        .merge(connect::catalog::router(&state))
        .merge(connect::publication::router(&state))
        .merge(connect::review::router(&state))
        .merge(pages::fallback());
    let http = state.metrics.http.clone();
    layers::with_layers(routes, http, metrics::server_surface).with_state(state)
}
