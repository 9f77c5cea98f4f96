//! The marketplace's reviewers (`admin.v1.ReviewService`): added with a token (`mkr_`,
//! shown once, kept as its sha256), listed, revoked; a revoked reviewer's decisions
//! stay in the history, and adding it again gives it a new token.

use serde::{Deserialize, Serialize};

use super::{AdminError, Operator};
use crate::store::{Store, StoreError};

/// Reviewer tokens: `mkr_` and 64 hex digits (publishers' are `mkt_`).
const TOKEN_PREFIX: &str = "mkr_";

/// `POST /api/v1/admin/reviewers`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewReviewer {
    #[schema(pattern = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", max_length = 63)]
    pub name: String,
}

/// A reviewer added, with its token (shown once).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AddedReviewer {
    pub name: String,
    pub token: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReviewerStatus {
    pub name: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

pub async fn add(
    store: &Store,
    who: &Operator,
    name: &str,
    now: i64,
) -> Result<AddedReviewer, AdminError> {
    if !crate::definition::is_dns_label(name) {
        return Err(AdminError::Invalid {
            field: "name".into(),
            reason: format!(
                "reviewer name `{name}` must be a DNS-1123 label (lowercase letters, digits, `-`; at most 63)"
            ),
        });
    }
    let token = crate::token::generate(TOKEN_PREFIX);
    store
        .add_reviewer(name, &crate::token::hash(&token), now)
        .await
        .map_err(|e| match e {
            StoreError::ReviewerExists(name) => AdminError::ReviewerExists(name),
            e => e.into(),
        })?;
    tracing::info!(operator = %who, reviewer = %name, "reviewer added");
    Ok(AddedReviewer {
        name: name.to_owned(),
        token,
    })
}

pub async fn list(store: &Store) -> Result<Vec<ReviewerStatus>, AdminError> {
    Ok(store
        .reviewers()
        .await?
        .into_iter()
        .map(|r| ReviewerStatus {
            name: r.name,
            created_at: r.created_at,
            revoked_at: r.revoked_at,
        })
        .collect())
}

pub async fn revoke(store: &Store, who: &Operator, name: &str, now: i64) -> Result<(), AdminError> {
    if !store.revoke_reviewer(name, now).await? {
        return Err(AdminError::UnknownReviewer(name.to_owned()));
    }
    tracing::info!(operator = %who, reviewer = %name, "reviewer revoked");
    Ok(())
}
