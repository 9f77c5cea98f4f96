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
    #[error("`{0}` is neither a tag nor a digest")]
    ReferenceInvalid(String),
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

/// The registry's read side.
#[derive(Clone)]
pub struct Registry {
    store: Store,
    blobs: Arc<dyn BlobStore>,
}

impl Registry {
    pub fn new(store: Store, blobs: Arc<dyn BlobStore>) -> Registry {
        Registry { store, blobs }
    }

    /// A manifest of `repo` by digest or by tag; with its bytes unless `head`.
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
        let digest = if reference.contains(':') {
            reference.parse::<Digest>()?
        } else if is_tag(reference) {
            let digest = self
                .store
                .served_tag(&repo.host, &repo.path, reference)
                .await?
                .ok_or_else(unknown)?;
            digest.parse::<Digest>()?
        } else {
            return Err(RegistryError::ReferenceInvalid(
                reference.chars().take(140).collect(),
            ));
        };
        let found = self
            .store
            .served_manifest(&repo.host, &repo.path, digest.as_str())
            .await?
            .ok_or_else(unknown)?;
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

    /// The size of a blob `repo` serves.
    pub async fn blob_size(
        &self,
        repo: &Repo,
        digest: &str,
    ) -> Result<(Digest, u64), RegistryError> {
        let digest: Digest = digest.parse()?;
        let size = self
            .store
            .served_blob(&repo.host, &repo.path, digest.as_str())
            .await?
            .ok_or_else(|| RegistryError::BlobUnknown {
                name: repo.name.clone(),
                digest: digest.to_string(),
            })?;
        Ok((digest, size))
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

    /// Manifests of `repo` that refer to `digest`, optionally of one artifact type.
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
