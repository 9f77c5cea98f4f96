//! The one HTTP error type at the edge. Domain errors convert into it explicitly; it
//! renders as `{"error": {"code", "message"}}`. Pages wrap it to render HTML instead.

use axum::Json;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::catalog::CatalogError;
use crate::store::StoreError;

#[derive(Debug, Clone)]
pub struct HttpError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Structured detail, such as the problems of an invalid definition.
    pub details: Option<serde_json::Value>,
}

impl HttpError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        HttpError {
            status,
            code,
            message: message.into(),
            details: None,
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
            A::Refused(P::Stale { .. } | P::VersionGap { .. } | P::NotABin(..)) | A::Conflict => {
                HttpError::new(StatusCode::CONFLICT, "stale", message)
            }
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
        (self.status, Json(body)).into_response()
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
