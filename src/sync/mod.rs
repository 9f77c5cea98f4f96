//! The sync worker: pulls and verifies the signed index of one or more marketplaces
//! into its own database, one source at a time, so a failing or hostile source never
//! touches another's state or empties the catalog.
//!
//! Layering: `round` verifies through `trust::client` (tough) and validates through
//! `definition`, then hands a complete, verified view to `store`; `store` never
//! verifies and never does HTTP. The CLI (`marketplace sync`) is a thin loop over
//! [`round::sync_source`].

pub mod config;
pub mod round;
pub mod store;

pub use config::{Config, ConfigError, SourceConfig};
pub use round::{Reason, RoundError, Synced, sync_source};
pub use store::{SourceStatus, SyncStore};
