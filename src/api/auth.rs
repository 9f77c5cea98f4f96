//! Bearer tokens of publishers, reviewers and operators, under the limits on failed
//! authentication (`ratelimit`). The kinds never stand in for each other: a reviewer's
//! token cannot publish, a publisher's cannot review, neither reaches the admin API,
//! and presenting the wrong kind is `403`, not a failed authentication.

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
    /// The admin API (`marketplace operator token create`).
    Operator,
}

impl Role {
    const ALL: [Role; 3] = [Role::Publisher, Role::Reviewer, Role::Operator];

    /// "a publisher", as a refusal names a token of this kind.
    fn kind(self) -> &'static str {
        match self {
            Role::Publisher => "a publisher",
            Role::Reviewer => "a reviewer",
            Role::Operator => "an operator",
        }
    }

    /// What a surface for this role needs, as a refusal says it.
    fn needs(self) -> &'static str {
        match self {
            Role::Publisher => "this needs the publisher's own token",
            Role::Reviewer => "reviewing needs a reviewer's token (`marketplace reviewer add`)",
            Role::Operator => {
                "the admin API needs an operator's token (`marketplace operator token create`)"
            }
        }
    }

    /// The active owner of the token hashed as `hash`, among this role's tokens.
    async fn owner(self, state: &AppState, hash: &str) -> Result<Option<String>, HttpError> {
        Ok(match self {
            Role::Publisher => state.store.publisher_for_token(hash).await?,
            Role::Reviewer => state.store.reviewer_for_token(hash).await?,
            Role::Operator => state.store.operator_for_token(hash).await?,
        })
    }
}

/// The name of the publisher, reviewer or operator (per `role`) whose active token the
/// request carries. A client over its budget is refused before its token is looked at,
/// and only failures (no token, a malformed header, an unknown or revoked token) spend
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
    if let Some(owner) = role.owner(state, &hash).await? {
        limits.succeeded(client, &owner, std::time::Instant::now());
        return Ok(owner);
    }
    for other in Role::ALL.into_iter().filter(|r| *r != role) {
        if other.owner(state, &hash).await?.is_some() {
            return Err(HttpError::new(
                StatusCode::FORBIDDEN,
                ErrorCode::Forbidden,
                format!("this is {}'s token; {}", other.kind(), role.needs()),
            ));
        }
    }
    super::auth_failed(state, client, publisher);
    Err(HttpError::unauthorized("the token is unknown or revoked"))
}
