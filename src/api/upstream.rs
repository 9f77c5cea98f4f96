//! `GET /api/v1/upstream`: the upstream marketplace this server follows (`serve
//! --upstream`) and how its last round went, for operators and their monitoring.
//!
//! Layering: HTTP only; the report is `upstream`'s.

use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::get;

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

/// The upstream this server follows and how its rounds went.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct UpstreamStatus {
    url: String,
    /// RFC 3339; `null` before the first round.
    last_attempt_at: Option<String>,
    last_success_at: Option<String>,
    /// The last round's report; `null` before the first.
    last_round: Option<crate::upstream::Report>,
}

/// The upstream marketplace this server follows and how its last round went; 404 when
/// it follows none.
#[utoipa::path(
    get,
    path = "/api/v1/upstream",
    operation_id = "upstream_status",
    tag = "upstream",
    responses((status = 200, description = "The upstream and its last round", body = UpstreamStatus))
)]
async fn status(State(state): State<AppState>) -> Result<axum::Json<UpstreamStatus>, HttpError> {
    let Some(url) = &state.upstream else {
        return Err(HttpError::new(
            axum::http::StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            "this marketplace follows no upstream (`serve --upstream`)",
        ));
    };
    let row = state.store.upstream(url).await?;
    let time = |t: Option<i64>| t.map(crate::clock::rfc3339);
    Ok(axum::Json(UpstreamStatus {
        url: url.clone(),
        last_attempt_at: time(row.as_ref().and_then(|r| r.last_attempt_at)),
        last_success_at: time(row.as_ref().and_then(|r| r.last_success_at)),
        // A report this version cannot read (written by another) is shown as none.
        last_round: row
            .as_ref()
            .filter(|r| !r.report.is_empty())
            .and_then(|r| serde_json::from_str(&r.report).ok()),
    }))
}
