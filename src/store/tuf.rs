//! Signed TUF metadata as stored: bytes exactly as signed. The store neither signs nor
//! verifies.

/// One stored metadata file.
#[derive(Debug, Clone)]
pub struct StoredMetadata {
    pub role: String,
    pub version: u64,
    pub bytes: Vec<u8>,
    /// Hex sha256 of `bytes`.
    pub sha256: String,
    pub expires_at: i64,
    /// When it was signed; with `expires_at` this gives the lifetime to sign the next
    /// version with.
    pub created_at: i64,
}
