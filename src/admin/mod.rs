//! Operating the marketplace: what `marketplace publisher|mirror|operator ...` do on the
//! data directory and what the admin API (`/api/v1/admin/...`, with an operator's token)
//! does for operators of replicas, as one set of operations with one set of answers.
//! The CLI prints an answer; the admin API sends it as JSON, and the CLI with
//! `--server` prints what it received, so both say the same.
//!
//! Every operation that changes something is logged at info with `operator`: the
//! operator's name from its token, or `local:USER` on the data directory.
//!
//! Layering: calls `trust::server` (publishers, suspension, state), `store`, `mirror`'s
//! cosign key parsing; knows nothing of HTTP.

pub mod index;
pub mod mirror;
pub mod operators;
pub mod publishers;
pub mod reviewers;

use crate::store::StoreError;
use crate::trust::TrustError;
use crate::trust::server::suspend::SuspendError;

/// Why an operation was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("no publisher `{0}` is registered")]
    UnknownPublisher(String),
    #[error("publisher `{0}` already exists")]
    PublisherExists(String),
    #[error(
        "publisher {name} is followed from the upstream marketplace {origin}: its keys and tokens are the upstream's (it publishes there)"
    )]
    Followed { name: String, origin: String },
    /// A field of the request; the message names it.
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    #[error("operator `{0}` exists with an active token; revoke it first")]
    OperatorExists(String),
    #[error("no active operator `{0}`")]
    UnknownOperator(String),
    #[error("reviewer `{0}` already exists; revoke it first to give it a new token")]
    ReviewerExists(String),
    #[error("no active reviewer `{0}`")]
    UnknownReviewer(String),
    #[error("the signed index is not initialized; run `marketplace repo init` first")]
    NotInitialized,
    #[error(transparent)]
    Suspend(#[from] SuspendError),
    #[error(transparent)]
    Trust(TrustError),
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for AdminError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::PublisherExists(name) => AdminError::PublisherExists(name),
            StoreError::NoSuchPublisher(name) => AdminError::UnknownPublisher(name),
            StoreError::OperatorExists(name) => AdminError::OperatorExists(name),
            e => AdminError::Store(e),
        }
    }
}

impl From<TrustError> for AdminError {
    fn from(e: TrustError) -> Self {
        match e {
            TrustError::Store(e) => e.into(),
            TrustError::NotInitialized => AdminError::NotInitialized,
            e => AdminError::Trust(e),
        }
    }
}

/// Who an operation is done by, as the log names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator(pub String);

impl Operator {
    /// Someone on the data directory: `local:` and the user's login name.
    pub fn local() -> Operator {
        let user = std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .unwrap_or_else(|_| "unknown".to_owned());
        Operator(format!("local:{user}"))
    }
}

impl std::fmt::Display for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
