//! Mirrored images: one row per image a published definition pins, which is also its
//! mirror job (status, attempts, next attempt, a lease while a worker holds it), and
//! the manifests, blobs and tags a mirrored image serves. The bytes live in the blob
//! store; this is what they are and who may be served them.

/// A mirror job as a worker claims it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorJob {
    pub id: i64,
    pub host: String,
    pub repository: String,
    pub digest: String,
    /// Failed attempts since the last success.
    pub attempts: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentKind {
    Manifest,
    Blob,
}

impl ContentKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ContentKind::Manifest => "manifest",
            ContentKind::Blob => "blob",
        }
    }
}

/// One manifest or blob of a mirrored image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Content {
    pub digest: String,
    pub kind: ContentKind,
    pub media_type: String,
    pub size: u64,
    /// For a referrer manifest: the digest it refers to.
    pub subject: Option<String>,
    pub artifact_type: Option<String>,
    /// For a referrer manifest: its annotations as JSON.
    pub annotations: Option<String>,
}

/// An image's mirror job as the store reads it, for the operator's CLI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorStatus {
    pub host: String,
    pub repository: String,
    pub digest: String,
    /// `pending`, `mirroring`, `mirrored` or `failed`.
    pub status: String,
    pub attempts: i64,
    /// For `failed`: when the next attempt is due (Unix seconds).
    pub next_attempt_at: Option<i64>,
    /// What failed, in our words (shown publicly too).
    pub last_error: Option<String>,
    /// The operator's account of the failure; may quote the upstream, cut and escaped.
    pub last_error_detail: Option<String>,
    /// Bytes of every manifest and blob, once mirrored.
    pub size: Option<i64>,
    /// The cosign key that verified the image's signature, when a policy applied.
    pub verified_by: Option<String>,
    pub updated_at: i64,
}

/// A manifest a repository serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedManifest {
    pub media_type: String,
    pub size: u64,
}

/// A manifest that refers to another (its `subject`), as the referrers API lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referrer {
    pub digest: String,
    pub media_type: String,
    pub size: u64,
    pub artifact_type: Option<String>,
    pub annotations: Option<String>,
}
