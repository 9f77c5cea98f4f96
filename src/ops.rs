//! Operator endpoints: liveness and readiness.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use serde_json::json;

use crate::AppState;

pub fn router() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

/// The process is up and serving; says nothing about dependencies.
async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// Ready when the database answers, so a load balancer stops sending traffic to a
/// replica that cannot serve it.
async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<serde_json::Value>) {
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
