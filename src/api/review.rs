//! The reviewers' JSON API (a reviewer's bearer token), for what `admin.v1` does not
//! carry: submissions with their plugin's names, a version's history and what it asks
//! for that the newest published version did not.
//!
//! - `GET /api/v1/review/submissions[?status=pending]` — submissions, oldest first;
//! - `GET /api/v1/review/submissions/{id}` — one, with `history`, `changes` and the
//!   definition's text.
//!
//! Layering: HTTP only; the rules come from `review`, the comparison from
//! `catalog::changes`.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::{Value, json};

use super::AppState;
use super::auth::{Role, authenticate};
use super::error::{ErrorCode, HttpError};
use super::extract::ClientAddr;
use super::layers::Limits;
use crate::definition::Definition;
use crate::review::{self, Actor, Status};
use crate::store::ReviewVersionRow;

/// Reads only: small requests, answers of one definition at most.
pub const LIMITS: Limits = Limits {
    body_bytes: super::MAX_BODY_BYTES,
    timeout: std::time::Duration::from_secs(30),
};

pub fn router() -> axum::Router<AppState> {
    let routes = axum::Router::new()
        .route("/api/v1/review/submissions", get(list))
        .route("/api/v1/review/submissions/{id}", get(show));
    LIMITS.apply(routes, HttpError::into_response)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    status: Option<String>,
}

fn time(t: Option<i64>) -> Value {
    t.map_or(Value::Null, |t| Value::String(crate::clock::rfc3339(t)))
}

fn submission(r: &ReviewVersionRow) -> Value {
    json!({
        "id": r.id,
        "plugin_id": r.listing_id,
        "publisher": r.publisher,
        "name": r.name,
        "version": r.version,
        "definition_hash": r.hash,
        "image": r.image,
        "release_notes": r.release_notes,
        "status": r.status,
        "created": time(Some(r.created_at)),
        "uploaded": time(Some(r.uploaded_at)),
        "submitted": time(r.submitted_at),
        "reviewed": time(r.reviewed_at),
        "reviewer": r.reviewer,
        "rejection_reason": r.rejection_reason,
        "feedback": r.feedback,
        "published": time(r.published_at),
    })
}

async fn reviewer(
    state: &AppState,
    client: ClientAddr,
    headers: &HeaderMap,
) -> Result<Actor, HttpError> {
    Ok(Actor::Reviewer(
        authenticate(state, client.0, headers, Role::Reviewer, None).await?,
    ))
}

async fn list(
    State(state): State<AppState>,
    client: ClientAddr,
    headers: HeaderMap,
    Query(query): Query<ListQuery>,
) -> Result<axum::Json<Value>, HttpError> {
    reviewer(&state, client, &headers).await?;
    let status = match query.status.as_deref() {
        None | Some("all") => None,
        Some(s) => Some(Status::parse(s).ok_or_else(|| {
            HttpError::new(
                StatusCode::BAD_REQUEST,
                ErrorCode::BadParameter,
                format!(
                    "query parameter `status`: `{s}` is not one of draft, pending, changes_requested, approved, rejected, withdrawn, all"
                ),
            )
        })?),
    };
    let rows = review::submissions(&state.store, status).await?;
    Ok(axum::Json(
        json!({ "items": rows.iter().map(submission).collect::<Vec<_>>() }),
    ))
}

async fn show(
    State(state): State<AppState>,
    client: ClientAddr,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, HttpError> {
    let me = reviewer(&state, client, &headers).await?;
    let store = &state.store;
    let v = review::version(store, &me, &id).await?;
    if !v.reviewed {
        return Err(HttpError::not_found(format!(
            "submission {id} not found (that version was published without review)"
        )));
    }
    let bytes = review::manifest(store, &v).await?;
    let history = review::history(store, &v).await?;
    // Bytes under review parsed when uploaded; were one to fail now, there is simply
    // nothing to compare.
    let changes = match Definition::parse_published(&bytes) {
        Ok(new) => review::against_latest(store, &v.row, &new).await?,
        Err(_) => None,
    };
    let mut body = submission(&v.row);
    body["history"] = history
        .iter()
        .map(|e| {
            json!({
                "action": e.action,
                "actor": e.actor,
                "hash": e.hash,
                "feedback": e.feedback,
                "at": crate::clock::rfc3339(e.at),
            })
        })
        .collect();
    body["changes"] = super::catalog::changes_json(changes.as_ref());
    body["definition"] = Value::String(String::from_utf8_lossy(&bytes).into_owned());
    Ok(axum::Json(body))
}
