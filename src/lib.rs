//! Fundament plugin marketplace.
//!
//! Layering: `cli` and `server` call the domain modules (`catalog`, `web`, `ops`);
//! those call `store` and `definition`; `store` calls only `definition`. Nothing below
//! the HTTP layer knows about requests or responses.

pub mod catalog;
pub mod cli;
pub mod clock;
pub mod definition;
pub mod http;
pub mod ops;
pub mod ratelimit;
pub mod server;
pub mod store;
pub mod sync;
pub mod trust;
pub mod web;

use axum::Router;

/// State shared by every handler. Build it with [`AppState::new`], then set what
/// differs from the defaults, so new fields do not break callers.
#[derive(Clone)]
pub struct AppState {
    pub store: store::Store,
    /// Present once the signed index is initialized; publishing needs it.
    pub signer: Option<std::sync::Arc<trust::state::Signer>>,
    /// Failed publisher-token authentications, per client address and publisher.
    pub auth_limits: std::sync::Arc<ratelimit::AuthLimiter>,
    /// Take the client address from the rightmost `X-Forwarded-For` entry (set only
    /// behind a reverse proxy that writes it; otherwise clients could pick their own).
    pub trust_forwarded_for: bool,
    /// The `/tuf/` files, served from memory.
    pub files: std::sync::Arc<trust::files::Files>,
}

impl AppState {
    pub fn new(
        store: store::Store,
        signer: Option<std::sync::Arc<trust::state::Signer>>,
    ) -> AppState {
        AppState {
            files: std::sync::Arc::new(trust::files::Files::new(
                store.clone(),
                trust::files::DEFAULT_CACHE_BYTES,
            )),
            store,
            signer,
            auth_limits: Default::default(),
            trust_forwarded_for: false,
        }
    }
}

/// The whole HTTP application; tests drive it directly with `oneshot`.
pub fn app(state: AppState) -> Router {
    let routes = Router::new()
        .merge(web::router())
        .merge(catalog::api::router())
        .merge(ops::router())
        .merge(trust::http::router())
        .fallback(web::not_found);
    server::with_layers(routes).with_state(state)
}
