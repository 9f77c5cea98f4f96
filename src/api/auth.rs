//! Bearer tokens of publishers and reviewers, under the limits on failed
//! authentication (`ratelimit`). The two kinds never stand in for each other: a
//! reviewer's token cannot publish, a publisher's cannot review, and presenting the
//! wrong kind is `403`, not a failed authentication.

use std::net::IpAddr;

use axum::http::{HeaderMap, StatusCode};

use super::AppState;
use super::error::{ErrorCode, HttpError};
use super::extract::bearer;
use crate::trust::server::publishers::token_hash;

/// Who a surface admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Publisher,
    Reviewer,
}

/// The name of the publisher or reviewer (per `role`) whose active token the request
/// carries. A client over its budget is refused before its token is looked at, and
/// only failures (no token, a malformed header, an unknown or revoked token) spend
/// budget. `publisher` is the one the route names, if any.
pub async fn authenticate(
    state: &AppState,
    client: Option<IpAddr>,
    headers: &HeaderMap,
    role: Role,
    publisher: Option<&str>,
) -> Result<String, HttpError> {
    let limits = &state.auth_limits;
    limits
        .check(client, publisher, std::time::Instant::now())
        .map_err(HttpError::from)?;
    let hash = match bearer(headers) {
        Ok(token) => token_hash(token),
        Err(e) => {
            super::auth_failed(state, client, publisher);
            return Err(e);
        }
    };
    let (mine, other) = match role {
        Role::Publisher => (
            state.store.publisher_for_token(&hash).await?,
            "a reviewer's token; this needs the publisher's own token",
        ),
        Role::Reviewer => (
            state.store.reviewer_for_token(&hash).await?,
            "a publisher's token; reviewing needs a reviewer's token (`marketplace reviewer add`)",
        ),
    };
    if let Some(owner) = mine {
        limits.succeeded(client, &owner, std::time::Instant::now());
        return Ok(owner);
    }
    let other_kind = match role {
        Role::Publisher => state.store.reviewer_for_token(&hash).await?,
        Role::Reviewer => state.store.publisher_for_token(&hash).await?,
    };
    if other_kind.is_some() {
        return Err(HttpError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::Forbidden,
            format!("this is {other}"),
        ));
    }
    super::auth_failed(state, client, publisher);
    Err(HttpError::unauthorized("the token is unknown or revoked"))
}
