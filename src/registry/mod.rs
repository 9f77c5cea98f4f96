//! The marketplace's OCI registry, as a domain: what a mirrored repository serves
//! (manifests, blobs, tags, referrers) and the rule that only images a published
//! definition pins are served, once mirrored. Knows nothing of HTTP (`api::registry`
//! is the `/v2/` surface); bytes come from a `blob::BlobStore`, what they are from the
//! `store`.

pub mod manifest;
pub mod names;

use std::ops::Range;
use std::sync::Arc;

use crate::blob::{Blob, BlobError, BlobStore, Digest};
use crate::store::{Referrer, Store, StoreError};

pub use manifest::{Descriptor, Manifest, ManifestError};
pub use names::Repo;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("repository name `{name}` is invalid: {why}")]
    NameInvalid { name: String, why: String },
    #[error("repository `{0}` is not mirrored here")]
    NameUnknown(String),
    #[error("manifest `{reference}` is not known in `{name}`")]
    ManifestUnknown { name: String, reference: String },
    #[error("blob `{digest}` is not known in `{name}`")]
    BlobUnknown { name: String, digest: String },
    #[error("{0}")]
    DigestInvalid(#[from] crate::blob::DigestError),
    #[error("a stored blob is missing or unreadable: {0}")]
    Blob(#[from] BlobError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A manifest as served: its digest, media type and bytes.
pub struct FoundManifest {
    pub digest: Digest,
    pub media_type: String,
    pub size: u64,
    /// `None` when only the headers were asked for (HEAD).
    pub bytes: Option<Vec<u8>>,
}

/// How long a presigned blob URL stays valid (`serve --blob-redirect`): long enough
/// for a client to follow the redirect and retry once, short enough that a leaked URL
/// soon stops working. S3 checks it when a download starts, so a long download that
/// started in time finishes.
pub const REDIRECT_VALID_FOR: std::time::Duration = std::time::Duration::from_secs(300);

/// The registry's read side.
#[derive(Clone)]
pub struct Registry {
    store: Store,
    blobs: Arc<dyn BlobStore>,
    /// Blob downloads answered with a presigned URL valid this long, when set.
    redirect: Option<std::time::Duration>,
}

impl Registry {
    pub fn new(store: Store, blobs: Arc<dyn BlobStore>) -> Registry {
        Registry {
            store,
            blobs,
            redirect: None,
        }
    }

    /// Blob downloads are redirected to the blob store (presigned URLs valid for
    /// `valid_for`) rather than streamed through.
    pub fn redirecting(mut self, valid_for: std::time::Duration) -> Registry {
        self.redirect = Some(valid_for);
        self
    }

    /// Where a client may download a served blob straight from the blob store, when
    /// redirects are on and the store hands out URLs.
    pub async fn blob_url(&self, digest: &Digest) -> Result<Option<url::Url>, RegistryError> {
        let Some(valid_for) = self.redirect else {
            return Ok(None);
        };
        Ok(self.blobs.presign(digest, valid_for).await?)
    }

    /// A manifest of `repo` by digest or by tag; with its bytes unless `head`.
    ///
    /// A reference that is neither a tag nor a sha256 digest names nothing we could
    /// hold, so it is as unknown as any other: the distribution spec lists 404 as the
    /// only failure of a manifest pull (end-3), its `DIGEST_INVALID` is about pushed
    /// content not matching its digest, and the conformance suite pulls
    /// `.INVALID_MANIFEST_NAME` expecting 404.
    pub async fn manifest(
        &self,
        repo: &Repo,
        reference: &str,
        head: bool,
    ) -> Result<FoundManifest, RegistryError> {
        let unknown = || RegistryError::ManifestUnknown {
            name: repo.name.clone(),
            reference: reference.chars().take(140).collect(),
        };
        let digest = if is_tag(reference) {
            self.store
                .served_tag(&repo.host, &repo.path, reference)
                .await?
                .and_then(|d| d.parse::<Digest>().ok())
        } else {
            reference.parse::<Digest>().ok()
        };
        let found = match &digest {
            Some(digest) => {
                self.store
                    .served_manifest(&repo.host, &repo.path, digest.as_str())
                    .await?
            }
            None => None,
        };
        let (Some(digest), Some(found)) = (digest, found) else {
            return Err(self.miss(repo, unknown()).await);
        };
        let bytes = if head {
            None
        } else {
            let bytes =
                crate::blob::read_small(&*self.blobs, &digest, manifest::MAX_MANIFEST_BYTES)
                    .await?
                    .ok_or_else(|| missing(&digest))?;
            Some(bytes)
        };
        Ok(FoundManifest {
            digest,
            media_type: found.media_type,
            size: found.size,
            bytes,
        })
    }

    /// The size of a blob `repo` serves. Anything but a sha256 digest is unknown, as
    /// for manifests (end-2 lists 404 only).
    pub async fn blob_size(
        &self,
        repo: &Repo,
        digest: &str,
    ) -> Result<(Digest, u64), RegistryError> {
        let unknown = || RegistryError::BlobUnknown {
            name: repo.name.clone(),
            digest: digest.chars().take(140).collect(),
        };
        let Ok(digest) = digest.parse::<Digest>() else {
            return Err(self.miss(repo, unknown()).await);
        };
        match self
            .store
            .served_blob(&repo.host, &repo.path, digest.as_str())
            .await?
        {
            Some(size) => Ok((digest, size)),
            None => Err(self.miss(repo, unknown()).await),
        }
    }

    /// What a miss in `repo` is: `unknown` when the repository serves something,
    /// `NameUnknown` when it serves nothing (never mirrored, or not pinned at all).
    /// Asked only after a miss, so a hit costs no extra query.
    async fn miss(&self, repo: &Repo, unknown: RegistryError) -> RegistryError {
        match self.store.served_repository(&repo.host, &repo.path).await {
            Ok(true) => unknown,
            Ok(false) => RegistryError::NameUnknown(repo.name.clone()),
            Err(e) => e.into(),
        }
    }

    /// A blob's bytes (all or `range`), once [`Registry::blob_size`] said it is served.
    pub async fn open_blob(
        &self,
        digest: &Digest,
        range: Option<Range<u64>>,
    ) -> Result<Blob, RegistryError> {
        self.blobs
            .open(digest, range)
            .await?
            .ok_or_else(|| missing(digest))
    }

    /// Tags of `repo`, sorted, after `last`, at most `n`; 404 for a repository that
    /// serves nothing.
    pub async fn tags(
        &self,
        repo: &Repo,
        last: Option<&str>,
        n: i64,
    ) -> Result<Vec<String>, RegistryError> {
        if !self.store.served_repository(&repo.host, &repo.path).await? {
            return Err(RegistryError::NameUnknown(repo.name.clone()));
        }
        Ok(self
            .store
            .served_tags(&repo.host, &repo.path, last, n)
            .await?)
    }

    /// Manifests of `repo` that refer to `digest`, optionally of one artifact type. An
    /// invalid digest is `DigestInvalid` here: the spec says a referrers request with
    /// one MUST be answered 400.
    pub async fn referrers(
        &self,
        repo: &Repo,
        digest: &str,
        artifact_type: Option<&str>,
    ) -> Result<Vec<Referrer>, RegistryError> {
        let digest: Digest = digest.parse()?;
        if !self.store.served_repository(&repo.host, &repo.path).await? {
            return Err(RegistryError::NameUnknown(repo.name.clone()));
        }
        let mut all = self
            .store
            .referrers(&repo.host, &repo.path, digest.as_str())
            .await?;
        if let Some(t) = artifact_type {
            all.retain(|r| r.artifact_type.as_deref() == Some(t));
        }
        Ok(all)
    }
}

/// A blob the database lists but the blob store lacks: corruption or a collection
/// gone wrong, never the client's fault.
fn missing(digest: &Digest) -> RegistryError {
    RegistryError::Blob(BlobError::Storage {
        doing: "reading",
        error: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{digest} is recorded but not stored"),
        ),
    })
}

/// `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`, the distribution spec's tag.
pub fn is_tag(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}
