//! Trust: ed25519 keys and (later) the TUF repository the index is published as.
//! Uses the `tough` crate for TUF types, canonical JSON and signatures rather than
//! hand-written verification. Nothing here knows about HTTP.

pub mod http;
pub mod keys;

pub use keys::{KeyError, PublicKey, SigningKey};
