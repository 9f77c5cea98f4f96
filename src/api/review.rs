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

use super::AppState;
use super::auth::{Role, authenticate};
use super::catalog::ChangesAnswer;
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

/// Which submissions to list.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// `draft`, `pending`, `changes_requested`, `approved`, `rejected`, `withdrawn`, or
    /// `all` (the default).
    #[param(pattern = "^(draft|pending|changes_requested|approved|rejected|withdrawn|all)$")]
    status: Option<String>,
}

/// An RFC 3339 time (UTC).
fn time(t: i64) -> String {
    crate::clock::rfc3339(t)
}

/// A version in review.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct Submission {
    /// The version's stable id.
    id: String,
    /// The plugin's stable id.
    plugin_id: String,
    publisher: String,
    name: String,
    version: String,
    definition_hash: String,
    image: String,
    release_notes: String,
    /// `draft`, `pending`, `changes_requested`, `approved`, `rejected` or `withdrawn`.
    status: String,
    /// RFC 3339 times.
    created: String,
    uploaded: String,
    submitted: Option<String>,
    reviewed: Option<String>,
    reviewer: Option<String>,
    rejection_reason: Option<String>,
    feedback: String,
    /// When these exact bytes entered the signed index.
    published: Option<String>,
}

impl From<&ReviewVersionRow> for Submission {
    fn from(r: &ReviewVersionRow) -> Submission {
        Submission {
            id: r.id.clone(),
            plugin_id: r.listing_id.clone(),
            publisher: r.publisher.clone(),
            name: r.name.clone(),
            version: r.version.clone(),
            definition_hash: r.hash.clone(),
            image: r.image.clone(),
            release_notes: r.release_notes.clone(),
            status: r.status.clone(),
            created: time(r.created_at),
            uploaded: time(r.uploaded_at),
            submitted: r.submitted_at.map(time),
            reviewed: r.reviewed_at.map(time),
            reviewer: r.reviewer.clone(),
            rejection_reason: r.rejection_reason.clone(),
            feedback: r.feedback.clone(),
            published: r.published_at.map(time),
        }
    }
}

#[derive(serde::Serialize, utoipa::ToSchema)]
struct Submissions {
    items: Vec<Submission>,
}

/// One upload, submission or decision.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct HistoryEntry {
    action: String,
    /// `publisher:NAME` or `reviewer:NAME`.
    actor: String,
    /// The hash of the bytes it concerned.
    hash: String,
    feedback: String,
    /// RFC 3339.
    at: String,
}

/// A submission with its history, what it asks for that the newest published version
/// did not, and its definition's text.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct SubmissionDetail {
    #[serde(flatten)]
    submission: Submission,
    history: Vec<HistoryEntry>,
    /// `null` when no version of the plugin is published yet.
    changes: Option<ChangesAnswer>,
    definition: String,
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

/// Submissions, oldest first.
#[utoipa::path(
    get,
    path = "/api/v1/review/submissions",
    operation_id = "list_submissions",
    tag = "review",
    params(ListQuery),
    security(("reviewer_token" = [])),
    responses((status = 200, description = "The submissions", body = Submissions))
)]
async fn list(
    State(state): State<AppState>,
    client: ClientAddr,
    headers: HeaderMap,
    Query(query): Query<ListQuery>,
) -> Result<axum::Json<Submissions>, HttpError> {
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
    Ok(axum::Json(Submissions {
        items: rows.iter().map(Submission::from).collect(),
    }))
}

/// One submission, with its history, its changes and its definition.
#[utoipa::path(
    get,
    path = "/api/v1/review/submissions/{id}",
    operation_id = "get_submission",
    tag = "review",
    params(("id" = String, Path, description = "The version's stable id")),
    security(("reviewer_token" = [])),
    responses((status = 200, description = "The submission", body = SubmissionDetail))
)]
async fn show(
    State(state): State<AppState>,
    client: ClientAddr,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<axum::Json<SubmissionDetail>, HttpError> {
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
    Ok(axum::Json(SubmissionDetail {
        submission: Submission::from(&v.row),
        history: history
            .into_iter()
            .map(|e| HistoryEntry {
                action: e.action,
                actor: e.actor,
                hash: e.hash,
                feedback: e.feedback,
                at: time(e.at),
            })
            .collect(),
        changes: changes.map(ChangesAnswer::new),
        definition: String::from_utf8_lossy(&bytes).into_owned(),
    }))
}
