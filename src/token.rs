//! API tokens: the server's publisher tokens and the sync worker's local API tokens.
//! A token is a prefix naming its kind and 256 random bits; it is shown once and kept
//! only as its sha256 hash.

use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};

/// A new token: `prefix` and 64 hex digits (256 bits).
pub fn generate(prefix: &str) -> String {
    format!("{prefix}{}", random_hex(32))
}

/// What a database keeps of a token.
pub fn hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// `bytes` random bytes from the system's secure source, in hex.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    SystemRandom::new()
        .fill(&mut buf)
        .expect("the system random source works");
    hex::encode(buf)
}
