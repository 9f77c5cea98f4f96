//! What several surfaces read from a request: the bearer token, the client address, and
//! whether the client already holds an entity (`If-None-Match`).

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};

use super::AppState;
use super::error::HttpError;

/// True when the client already holds this entity (RFC 9110 weak comparison).
pub fn client_has(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == etag || t == "*")
}

/// The address a request came from, for rate limits: the TCP peer, or with
/// `AppState::trust_forwarded_for` the rightmost `X-Forwarded-For` entry (the one the
/// reverse proxy in front appended; entries left of it are whatever the client sent).
/// `None` when neither is known, as for in-process requests without `ConnectInfo`.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub Option<IpAddr>);

impl FromRequestParts<AppState> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        Ok(ClientAddr(client_addr(
            state.trust_forwarded_for,
            &parts.headers,
            &parts.extensions,
        )))
    }
}

/// The client's address: the rightmost `X-Forwarded-For` entry when
/// `trust_forwarded_for`, else the peer's (for surfaces that see a request's parts
/// without axum's extractors, such as Connect services).
pub fn client_addr(
    trust_forwarded_for: bool,
    headers: &HeaderMap,
    extensions: &axum::http::Extensions,
) -> Option<IpAddr> {
    let forwarded = trust_forwarded_for
        .then(|| rightmost_forwarded_for(headers))
        .flatten();
    let peer = extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    forwarded.or(peer)
}

/// The last entry of the last `X-Forwarded-For` header, as an address (a port, as
/// some proxies write it, is dropped).
fn rightmost_forwarded_for(headers: &HeaderMap) -> Option<IpAddr> {
    let last = headers
        .get_all("x-forwarded-for")
        .iter()
        .next_back()?
        .to_str()
        .ok()?
        .rsplit(',')
        .next()?
        .trim();
    last.parse::<IpAddr>()
        .ok()
        .or_else(|| last.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer(headers: &HeaderMap) -> Result<&str, HttpError> {
    let value = headers.get(header::AUTHORIZATION).ok_or_else(|| {
        HttpError::unauthorized("an `Authorization: Bearer <token>` header is required")
    })?;
    value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| HttpError::unauthorized("the Authorization header must be `Bearer <token>`"))
}
