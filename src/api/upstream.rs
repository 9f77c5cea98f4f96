//! `GET /api/v1/upstream`: the upstream marketplace this server follows (`serve
//! --upstream`) and how its last round went, for operators and their monitoring.
//!
//! Layering: HTTP only; the report is `upstream`'s.

use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::{Value, json};

use super::AppState;
use super::error::{ErrorCode, HttpError};
use super::layers::Limits;

pub const LIMITS: Limits = Limits {
    body_bytes: super::MAX_BODY_BYTES,
    timeout: std::time::Duration::from_secs(10),
};

pub fn router() -> axum::Router<AppState> {
    let routes = axum::Router::new().route("/api/v1/upstream", get(status));
    LIMITS.apply(routes, HttpError::into_response)
}

fn time(t: Option<i64>) -> Value {
    t.map_or(Value::Null, |t| Value::String(crate::clock::rfc3339(t)))
}

async fn status(State(state): State<AppState>) -> Result<axum::Json<Value>, HttpError> {
    let Some(url) = &state.upstream else {
        return Err(HttpError::new(
            axum::http::StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            "this marketplace follows no upstream (`serve --upstream`)",
        ));
    };
    let row = state.store.upstream(url).await?;
    let report: Value = row
        .as_ref()
        .filter(|r| !r.report.is_empty())
        .and_then(|r| serde_json::from_str::<crate::upstream::Report>(&r.report).ok())
        .map_or(Value::Null, |r| {
            serde_json::to_value(r).unwrap_or(Value::Null)
        });
    Ok(axum::Json(json!({
        "url": url,
        "last_attempt_at": time(row.as_ref().and_then(|r| r.last_attempt_at)),
        "last_success_at": time(row.as_ref().and_then(|r| r.last_success_at)),
        "last_round": report,
    })))
}
