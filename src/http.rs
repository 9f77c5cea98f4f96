//! The one HTTP error type at the edge. Domain errors convert into it explicitly; it
//! renders as `{"error": {"code", "message"}}`. Pages wrap it to render HTML instead.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::catalog::CatalogError;
use crate::store::StoreError;

#[derive(Debug, Clone)]
pub struct HttpError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl HttpError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        HttpError {
            status,
            code,
            message: message.into(),
        }
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
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let body = Body {
            error: Inner {
                code: self.code,
                message: &self.message,
            },
        };
        (self.status, Json(body)).into_response()
    }
}
