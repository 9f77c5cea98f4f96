//! The catalog: built-in definitions, queries and the plugin detail view shared by the
//! pages and the JSON API; the public catalog and its curation as Fundament's catalog
//! contract shows them. Services here call the store; the store never calls back.

pub mod builtin;
pub mod changes;
pub mod curation;
mod detail;
pub mod listing;
mod params;
pub mod public;
pub mod rbac;

pub use curation::{Curation, CurationError};
pub use detail::{
    Link, MajorGroup, MirrorInfo, PluginDetail, PluginRefView, VersionInfo, plugin_detail,
};
pub use listing::{ListingView, Listings};
pub use params::{CatalogParams, MAX_PER_PAGE, search_terms};

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("query parameter `{parameter}`: {reason}")]
    BadParameter {
        parameter: &'static str,
        reason: String,
    },
    /// A request field that is not acceptable; the message names the field.
    #[error("{0}")]
    InvalidArgument(String),
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
