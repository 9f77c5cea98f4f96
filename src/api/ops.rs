//! Operator endpoints: liveness, readiness and Prometheus metrics.
//!
//! Layering: HTTP only; asks the store whether it answers.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::json;

use super::AppState;
use super::error::HttpError;
use super::layers::Limits;

/// Probes take no body and must answer fast: a readiness check that hangs is a failure.
pub const LIMITS: Limits = Limits {
    body_bytes: 0,
    timeout: Duration::from_secs(5),
};

pub fn router() -> axum::Router<AppState> {
    let routes = axum::Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(super::metrics::metrics));
    LIMITS.apply(routes, HttpError::into_response)
}

/// What a probe answers: `ok` or `ready`, or `unavailable` with the `reason`.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[allow(dead_code)] // a schema only: the probes answer with `json!`
pub(super) struct Probe {
    status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// The process is up and serving; says nothing about dependencies.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "ops",
    responses((status = 200, description = "Up", body = Probe))
)]
pub(super) async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// Ready when the database answers, so a load balancer stops sending traffic to a
/// replica that cannot serve it.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "ops",
    responses(
        (status = 200, description = "Ready", body = Probe),
        (status = 503, description = "The database does not answer", body = Probe),
    )
)]
pub(super) async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<serde_json::Value>) {
    match state.store.ping().await {
        Ok(()) => (StatusCode::OK, Json(json!({"status": "ready"}))),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"status": "unavailable", "reason": "database"})),
            )
        }
    }
}
