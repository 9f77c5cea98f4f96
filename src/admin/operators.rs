//! Operators' tokens for the admin API: `mko_` and 64 hex digits (publishers' are
//! `mkt_`, reviewers' `mkr_`), kept as sha256 hashes; the name is who the log names.
//! Created, listed and revoked on the data directory (`marketplace operator token`):
//! a token is what gives access to the admin API, so none is made through it.

use serde::{Deserialize, Serialize};

use super::AdminError;
use crate::store::Store;

const TOKEN_PREFIX: &str = "mko_";

/// An operator as the list shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OperatorStatus {
    pub name: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

/// Creates an operator's token (or a new one for a revoked operator); returns it, the
/// only time it is shown.
pub async fn create(store: &Store, name: &str, now: i64) -> Result<String, AdminError> {
    if !crate::definition::is_dns_label(name) {
        return Err(AdminError::Invalid {
            field: "NAME".into(),
            reason: "must be lowercase letters, digits and `-` (at most 63)".into(),
        });
    }
    let token = crate::token::generate(TOKEN_PREFIX);
    store
        .add_operator(name, &crate::token::hash(&token), now)
        .await?;
    Ok(token)
}

pub async fn list(store: &Store) -> Result<Vec<OperatorStatus>, AdminError> {
    Ok(store
        .operators()
        .await?
        .into_iter()
        .map(|o| OperatorStatus {
            name: o.name,
            created_at: o.created_at,
            revoked_at: o.revoked_at,
        })
        .collect())
}

pub async fn revoke(store: &Store, name: &str, now: i64) -> Result<(), AdminError> {
    if store.revoke_operator(name, now).await? {
        Ok(())
    } else {
        Err(AdminError::UnknownOperator(name.to_owned()))
    }
}

/// The active operator `token` belongs to; `None` for anything else, a token of
/// another kind included.
pub async fn operator_for(store: &Store, token: &str) -> Result<Option<String>, AdminError> {
    if !token.starts_with(TOKEN_PREFIX) || token.len() > 128 {
        return Ok(None);
    }
    Ok(store.operator_for_token(&crate::token::hash(token)).await?)
}
