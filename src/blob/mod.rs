//! Content-addressed blob storage for mirrored image content (layers, configs,
//! manifests). Knows nothing of OCI, HTTP or the database: a blob is bytes named by
//! their sha256, and a store never holds a blob under a digest its bytes do not hash
//! to. Which blobs are still referenced is the registry's business (`mirror gc` asks it).
//!
//! [`BlobStore`] is a small object-safe trait with two implementations:
//! [`FsBlobStore`] keeps blobs under the data directory (one process, or processes
//! sharing one disk), [`S3BlobStore`] in an S3-compatible bucket (replicas).

mod digest;
mod fs;
mod s3;

use std::ops::Range;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;

pub use digest::{Digest, DigestError};
pub use fs::FsBlobStore;
pub use s3::{S3BlobStore, S3Location};

/// Bytes in flight, chunk by chunk; never a whole blob in memory.
pub type ByteStream = BoxStream<'static, Result<Bytes, std::io::Error>>;

/// A stored blob opened for reading: its whole size, and the bytes asked for.
pub struct Blob {
    pub size: u64,
    /// The requested range, or the whole blob.
    pub range: Range<u64>,
    pub body: ByteStream,
}

/// A stored blob as listed, for collection and verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub digest: Digest,
    pub size: u64,
    /// Seconds since the Unix epoch of the blob's last write: a blob written moments
    /// ago may belong to a mirror that has not recorded its reference yet.
    pub written_at: i64,
}

/// What a write that died left behind (partial bytes nobody will finish), for
/// collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abandoned {
    /// The store's own name for it (a file under `blobs/tmp/` for [`FsBlobStore`]).
    pub name: String,
    pub size: u64,
    /// Seconds since the Unix epoch of its last write.
    pub written_at: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    #[error("the bytes hash to {actual}, not {expected}")]
    DigestMismatch { expected: Digest, actual: Digest },
    #[error("{digest}: more than the {limit} bytes expected")]
    TooLarge { digest: Digest, limit: u64 },
    #[error("{digest}: {actual} bytes, {expected} expected")]
    SizeMismatch {
        digest: Digest,
        expected: u64,
        actual: u64,
    },
    #[error("{digest}: range {start}-{end} outside the blob's {size} bytes")]
    BadRange {
        digest: Digest,
        start: u64,
        end: u64,
        size: u64,
    },
    /// Reading the incoming bytes failed (the upstream went away, a timeout).
    #[error("reading the blob's bytes failed: {0}")]
    Source(std::io::Error),
    #[error("blob storage failed while {doing}: {error}")]
    Storage {
        doing: &'static str,
        error: std::io::Error,
    },
}

impl BlobError {
    pub(crate) fn storage(doing: &'static str) -> impl FnOnce(std::io::Error) -> BlobError {
        move |error| BlobError::Storage { doing, error }
    }
}

/// Where mirrored content lives.
pub trait BlobStore: Send + Sync + 'static {
    /// Stores what `body` yields under `digest`, checking the hash (and `size`, when
    /// known) while writing; nothing is stored under `digest` unless every byte
    /// matched. A blob already present is left as it is and its size returned (the
    /// body is not read). Returns the stored size.
    fn put(
        &self,
        digest: &Digest,
        size: Option<u64>,
        body: ByteStream,
    ) -> BoxFuture<'_, Result<u64, BlobError>>;

    /// The size of a stored blob, or `None`.
    fn stat(&self, digest: &Digest) -> BoxFuture<'_, Result<Option<u64>, BlobError>>;

    /// Opens a stored blob, the whole of it or `range` (end exclusive), or `None`.
    fn open(
        &self,
        digest: &Digest,
        range: Option<Range<u64>>,
    ) -> BoxFuture<'_, Result<Option<Blob>, BlobError>>;

    /// Removes a blob; false when there was none.
    fn delete(&self, digest: &Digest) -> BoxFuture<'_, Result<bool, BlobError>>;

    /// Every stored blob, in no particular order.
    fn list(&self) -> BoxFuture<'_, Result<Vec<Listed>, BlobError>>;

    /// Writes whose process died before finishing them: never one still in progress,
    /// in this process or another sharing the store.
    fn abandoned(&self) -> BoxFuture<'_, Result<Vec<Abandoned>, BlobError>>;

    /// Removes an abandoned write [`BlobStore::abandoned`] listed; false when it is gone
    /// or no longer abandoned.
    fn remove_abandoned(&self, which: &Abandoned) -> BoxFuture<'_, Result<bool, BlobError>>;

    /// A URL anyone holding it may `GET` the blob from, directly from the store, for
    /// `valid_for`; `None` when the store cannot hand out such URLs (files on disk).
    /// Whether the blob exists is not checked.
    fn presign(
        &self,
        _digest: &Digest,
        _valid_for: std::time::Duration,
    ) -> BoxFuture<'_, Result<Option<url::Url>, BlobError>> {
        Box::pin(async { Ok(None) })
    }
}

/// Reads a whole blob into memory: for manifests and configs, which are small and
/// capped by `max` (a larger blob is [`BlobError::TooLarge`]).
pub async fn read_small(
    store: &dyn BlobStore,
    digest: &Digest,
    max: u64,
) -> Result<Option<Vec<u8>>, BlobError> {
    let mut out = Vec::new();
    let found = each_chunk(store, digest, Some(max), |chunk| {
        out.extend_from_slice(chunk)
    })
    .await?;
    Ok(found.map(|()| out))
}

/// Opens a stored blob and hands its bytes to `f` chunk by chunk; `None` when there is
/// no such blob. A blob over `max` is refused before anything is read.
async fn each_chunk(
    store: &dyn BlobStore,
    digest: &Digest,
    max: Option<u64>,
    mut f: impl FnMut(&[u8]),
) -> Result<Option<()>, BlobError> {
    use futures_util::TryStreamExt;
    let Some(blob) = store.open(digest, None).await? else {
        return Ok(None);
    };
    if let Some(limit) = max.filter(|&m| blob.size > m) {
        return Err(BlobError::TooLarge {
            digest: digest.clone(),
            limit,
        });
    }
    let mut body = blob.body;
    while let Some(chunk) = body
        .try_next()
        .await
        .map_err(BlobError::storage("reading"))?
    {
        f(&chunk);
    }
    Ok(Some(()))
}

/// A stream of one in-memory buffer, for small blobs (manifests) and tests.
pub fn once(bytes: impl Into<Bytes>) -> ByteStream {
    let bytes = bytes.into();
    Box::pin(futures_util::stream::once(async move { Ok(bytes) }))
}

/// Re-reads a stored blob and hashes it: `Some(true)` when its bytes still hash to its
/// digest, `Some(false)` when they do not (disk corruption, a hand edit), `None` when
/// it is gone.
pub async fn verify(store: &dyn BlobStore, digest: &Digest) -> Result<Option<bool>, BlobError> {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    let found = each_chunk(store, digest, None, |chunk| hasher.update(chunk)).await?;
    Ok(found.map(|()| Digest::from_hash(&hasher.finalize()) == *digest))
}
