//! The sync worker: pulls and verifies the signed index of one or more marketplaces
//! into its own database, merges it with the built-in definitions and each
//! organization's sideloads, and answers "what may organization X install?".
//!
//! Layering: `round` verifies through `trust::client` and validates through
//! `definition`, then hands a complete, verified view to `store`; `store` and
//! `sideload` never verify and never do HTTP; `merge`, `view` and `plan` are pure
//! functions over what the store holds. [`Worker`] ties them together for a host
//! program; the CLI (`marketplace sync`) and the local API (`api`) are thin layers
//! over it.

pub mod config;
pub mod merge;
pub mod plan;
mod quick;
pub mod round;
pub mod sideload;
pub mod store;
mod targets;
pub mod view;
pub mod worker;

pub use config::{Config, ConfigError, SourceConfig};
pub use round::{Phases, Reason, RoundError, Synced};
pub use sideload::{Added, Scope, SideloadError};
pub use store::{SourceStatus, SyncStore};
pub use worker::{Status, Worker, WorkerError};
