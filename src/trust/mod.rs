//! Trust: ed25519 keys and the TUF repository the index is published as. Metadata is
//! read into the `tough` crate's TUF schema types; signatures are made and checked over
//! the canonical JSON of the bytes as served (`cjson`, `envelope`), with python-tuf as
//! the referee in tests.
//!
//! Three sides over shared parts (`keys`, `cjson`, `envelope`, `metadata`, `verify`,
//! `bins`, `expiry`, `files`): `server` (the operator's repository and what publishers
//! upload), `publisher` (planning, signing and uploading an update) and `client`
//! (fetching and verifying an index). `files` holds the `/tuf/` files in memory with
//! their gzip copies and entity tags, chosen from header values given as text.
//!
//! Layering: calls the store and `definition`; `server` may use `publisher::plan`,
//! `publisher` may use `client`, `client` only the shared parts; nothing here knows
//! about HTTP requests (the `/tuf/` surface is `api::tuf`).

pub mod bins;
pub mod cjson;
pub mod client;
pub mod envelope;
pub mod expiry;
pub mod files;
pub mod keys;
pub mod metadata;
pub mod publisher;
pub mod server;
pub mod verify;

pub use keys::{KeyError, PublicKey, SigningKey};

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the signed index is not initialized; run `marketplace repo init` first")]
    NotInitialized,
    #[error("the signed index is already initialized; root changes go through `repo rotate-root`")]
    AlreadyInitialized,
    #[error(
        "threshold {threshold} is impossible with {keys} key(s); it must be between 1 and the number of keys"
    )]
    Threshold { threshold: u64, keys: u64 },
    #[error("publisher name `{0}` {1}")]
    PublisherName(String, &'static str),
    #[error("signing failed: {0}")]
    Sign(String),
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    #[error("stored signed metadata is inconsistent: {0}")]
    Corrupt(String),
}
