//! The catalog: built-in definitions, queries and the plugin detail view shared by the
//! pages and the JSON API. Services here call the store; the store never calls back.

pub mod builtin;
mod detail;
mod params;
pub mod rbac;

pub use detail::{Link, MajorGroup, PluginDetail, PluginRefView, VersionInfo, plugin_detail};
pub use params::{CatalogParams, MAX_PER_PAGE};

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("query parameter `{parameter}`: {reason}")]
    BadParameter {
        parameter: &'static str,
        reason: String,
    },
    #[error("{0} not found")]
    NotFound(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Parses a raw query string strictly (unknown parameters are refused).
pub fn parse_params(raw: Option<&str>) -> Result<CatalogParams, CatalogError> {
    serde_urlencoded::from_str(raw.unwrap_or("")).map_err(|e| CatalogError::BadParameter {
        parameter: "query",
        reason: e.to_string(),
    })
}
