//! Publishers: their public keys, signature threshold and API tokens (stored hashed).

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublisherRecord {
    pub name: String,
    /// Hex ed25519 public keys.
    pub public_keys: Vec<String>,
    pub threshold: u64,
    pub created_at: i64,
    pub active_tokens: i64,
    /// When the operator suspended it (`publisher suspend`); `None` while active.
    pub suspended_at: Option<i64>,
    /// The upstream marketplace it is followed from (`serve --upstream`); `None` for a
    /// publisher registered here.
    pub origin: Option<String>,
}
