//! The signed index as operators watch it: every role's current version and expiry.

use serde::{Deserialize, Serialize};

use super::AdminError;
use crate::store::Store;

/// One role's newest version.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RoleStatus {
    pub role: String,
    pub version: u64,
    pub expires_at: i64,
    /// Seconds until it expires (negative once expired).
    pub expires_in: i64,
    pub expired: bool,
    pub expiring_soon: bool,
}

/// Every role, earliest expiry first.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct IndexStatus {
    pub initialized: bool,
    pub roles: Vec<RoleStatus>,
}

pub async fn status(store: &Store, now: i64) -> Result<IndexStatus, AdminError> {
    let mut roles: Vec<RoleStatus> = store
        .metadata_overview()
        .await?
        .into_iter()
        .map(|m| RoleStatus {
            expired: m.expires_at <= now,
            expiring_soon: m.expires_at - now < crate::trust::expiry::WARN_WITHIN,
            role: m.role,
            version: m.version,
            expires_at: m.expires_at,
            expires_in: m.expires_at - now,
        })
        .collect();
    roles.sort_by(|a, b| a.expires_at.cmp(&b.expires_at).then(a.role.cmp(&b.role)));
    Ok(IndexStatus {
        initialized: roles.iter().any(|r| r.role == "root"),
        roles,
    })
}
