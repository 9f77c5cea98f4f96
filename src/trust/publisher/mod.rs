//! The publisher side of the signed index: planning and signing the roles of an update,
//! flat or binned (`plan`), and carrying it to a server over HTTP (`uploader`, with the
//! backoff schedule of its retries in `retry`).
//!
//! Layering: calls the shared trust modules and `trust::client` (fetching with limits);
//! never calls `trust::server`, and never touches the store.

pub mod plan;
pub mod retry;
pub mod uploader;
