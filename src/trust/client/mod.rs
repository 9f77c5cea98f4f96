//! Client side of the signed index: fetching a marketplace's TUF metadata over HTTP and
//! verifying it as the TUF client workflow says ([`refresh`]), the way the sync worker
//! needs it. The server side (`accept`, `roleset`, `verify`, `state`) never calls this.
//!
//! Why our own workflow rather than tough's `Repository`: tough loads and verifies every
//! delegated role up front and fails the whole load when any one is expired or bad, so
//! one publisher that forgets to renew its role would stall every other publisher's
//! updates on every worker. Here each publisher's roles are judged apart (a failure
//! fails that publisher only, as python-tuf, which loads delegations lazily, also
//! behaves); signatures are checked over the bytes as served ([`super::envelope`]);
//! every file has a size cap per role kind and every request a deadline. tough's schema
//! types are still what the metadata is read into; python-tuf is the referee in tests.

mod delegated; // each publisher's roles and bins, apart
mod fetch;
mod refresh;

pub use fetch::{FetchError, Fetcher};
pub use refresh::{
    Index, Listed, Publisher, PublisherTargets, RoleFile, TrustedState, Verified, refresh,
    target_url,
};

/// The largest response accepted for any one file, whatever its signed length says.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Size caps per role kind when the signed metadata gives no length: python-tuf's
/// defaults (`UpdaterConfig`), so both clients refuse the same oversized files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub root: usize,
    pub timestamp: usize,
    pub snapshot: usize,
    pub targets: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            root: 512_000,
            timestamp: 16_384,
            snapshot: 2_000_000,
            targets: 5_000_000,
        }
    }
}

/// Why verification failed, in the terms `/status` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The marketplace did not answer (connection refused, reset, HTTP error status).
    Unreachable,
    /// A request did not finish within its deadline (a slow or trickling server).
    Timeout,
    /// Signed metadata past its expiry: a frozen or stale mirror, or a role not renewed.
    Expired,
    /// Metadata older than what is already trusted.
    RolledBack,
    /// Signatures do not meet the threshold of the trusted keys.
    BadSignature,
    /// Bytes that do not match the hash or length signed for them.
    Tampered,
    /// Metadata that is missing, oversized, malformed or breaks the index's rules.
    InvalidMetadata,
}

/// A verification failure: its kind and what exactly failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ClientError {
    pub kind: Failure,
    pub message: String,
}

impl ClientError {
    pub fn new(kind: Failure, message: impl Into<String>) -> Self {
        ClientError {
            kind,
            message: message.into(),
        }
    }
}
