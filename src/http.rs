//! The one HTTP error type at the edge. Domain errors convert into it explicitly; it
//! renders as `{"error": {"code", "message"}}`. Pages wrap it to render HTML instead.
//! Also what several surfaces read from a request: the bearer token, the client address.

use std::net::{IpAddr, SocketAddr};

use axum::Json;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::AppState;
use crate::catalog::CatalogError;
use crate::store::StoreError;

#[derive(Debug, Clone)]
pub struct HttpError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Structured detail, such as the problems of an invalid definition.
    pub details: Option<serde_json::Value>,
    /// Seconds for a `Retry-After` header (429).
    pub retry_after: Option<u64>,
}

impl HttpError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        HttpError {
            status,
            code,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// 429 `rate_limited` with `Retry-After: retry_after_secs`.
    pub fn rate_limited(message: impl Into<String>, retry_after_secs: u64) -> Self {
        HttpError {
            retry_after: Some(retry_after_secs),
            ..HttpError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", message)
        }
    }

    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn unauthorized(message: &str) -> Self {
        HttpError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        HttpError::new(StatusCode::NOT_FOUND, "not_found", what)
    }
}

impl From<StoreError> for HttpError {
    fn from(e: StoreError) -> Self {
        // Handled here, so logged here; the client gets no internals.
        tracing::error!(error = %e, "store failure");
        HttpError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; the operator can find details in the server log",
        )
    }
}

impl From<crate::trust::TrustError> for HttpError {
    fn from(e: crate::trust::TrustError) -> Self {
        match e {
            crate::trust::TrustError::Store(e) => e.into(),
            e => {
                tracing::error!(error = %e, "signed index failure");
                HttpError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error; the operator can find details in the server log",
                )
            }
        }
    }
}

impl From<crate::trust::accept::AcceptError> for HttpError {
    fn from(e: crate::trust::accept::AcceptError) -> Self {
        use crate::trust::accept::AcceptError as A;
        use crate::trust::verify::PublishError as P;
        let message = e.to_string();
        match e {
            A::NotInitialized => {
                HttpError::new(StatusCode::SERVICE_UNAVAILABLE, "not_initialized", message)
            }
            A::UnknownPublisher(_) | A::NothingPublished(_) => HttpError::not_found(message),
            A::Suspended(_) => HttpError::new(StatusCode::FORBIDDEN, "suspended", message),
            A::Invalid(_) | A::InvalidInBatch(..) => HttpError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_definition",
                message,
            ),
            A::Refused(P::Signature { .. }) => {
                HttpError::new(StatusCode::FORBIDDEN, "bad_signature", message)
            }
            A::Refused(P::Stale { .. } | P::VersionGap { .. } | P::NotABin { .. })
            | A::Conflict => HttpError::new(StatusCode::CONFLICT, "stale", message),
            A::Refused(P::Metadata(_)) => HttpError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_metadata",
                message,
            ),
            A::Refused(P::Lifetime { .. }) => {
                HttpError::new(StatusCode::UNPROCESSABLE_ENTITY, "lifetime", message)
            }
            A::Refused(_) => HttpError::new(StatusCode::UNPROCESSABLE_ENTITY, "rejected", message),
            A::Trust(e) => e.into(),
        }
    }
}

impl From<CatalogError> for HttpError {
    fn from(e: CatalogError) -> Self {
        match e {
            CatalogError::BadParameter { .. } => {
                HttpError::new(StatusCode::BAD_REQUEST, "bad_parameter", e.to_string())
            }
            CatalogError::NotFound(what) => HttpError::not_found(format!("{what} not found")),
            CatalogError::Store(e) => e.into(),
        }
    }
}

#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    code: &'a str,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<&'a serde_json::Value>,
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let body = Body {
            error: Inner {
                code: self.code,
                message: &self.message,
                details: self.details.as_ref(),
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, secs.into());
        }
        response
    }
}

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
        let forwarded = state
            .trust_forwarded_for
            .then(|| rightmost_forwarded_for(&parts.headers))
            .flatten();
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip());
        Ok(ClientAddr(forwarded.or(peer)))
    }
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
