//! The image mirror as operators see it: every pinned image's status, and failed images
//! made due now.

use serde::{Deserialize, Serialize};

use super::{AdminError, Operator};
use crate::store::{MirrorStatus, Store};

/// One image: what `mirror status --json` prints and the admin API answers; scripts
/// read it, so it is its own type and not the store's row.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageStatus {
    pub host: String,
    pub repository: String,
    pub digest: String,
    pub status: String,
    pub attempts: i64,
    pub next_attempt_at: Option<i64>,
    pub last_error: Option<String>,
    pub last_error_detail: Option<String>,
    pub size: Option<i64>,
    pub verified_by: Option<String>,
    pub updated_at: i64,
}

impl From<&MirrorStatus> for ImageStatus {
    fn from(i: &MirrorStatus) -> Self {
        ImageStatus {
            host: i.host.clone(),
            repository: i.repository.clone(),
            digest: i.digest.clone(),
            status: i.status.clone(),
            attempts: i.attempts,
            next_attempt_at: i.next_attempt_at,
            last_error: i.last_error.clone(),
            last_error_detail: i.last_error_detail.clone(),
            size: i.size,
            verified_by: i.verified_by.clone(),
            updated_at: i.updated_at,
        }
    }
}

/// Every pinned image.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Images {
    pub images: Vec<ImageStatus>,
}

pub async fn status(store: &Store) -> Result<Images, AdminError> {
    Ok(Images {
        images: store
            .mirror_statuses()
            .await?
            .iter()
            .map(ImageStatus::from)
            .collect(),
    })
}

/// `POST /api/v1/admin/mirror/retry`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryRequest {
    /// Only images whose `HOST/PATH@DIGEST` contains this text; all failed ones without.
    #[serde(default)]
    pub filter: Option<String>,
}

/// How many failed images were made due now.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Retried {
    pub retried: u64,
}

pub async fn retry(
    store: &Store,
    who: &Operator,
    request: &RetryRequest,
    now: i64,
) -> Result<Retried, AdminError> {
    if let Some(f) = &request.filter
        && (f.len() > 512 || f.chars().any(char::is_control))
    {
        return Err(AdminError::Invalid {
            field: "filter".into(),
            reason: "at most 512 characters, none of them control characters".into(),
        });
    }
    let retried = store.retry_mirrors(request.filter.as_deref(), now).await?;
    tracing::info!(operator = %who, filter = request.filter.as_deref().unwrap_or(""), retried, "mirror retry");
    Ok(Retried { retried })
}
