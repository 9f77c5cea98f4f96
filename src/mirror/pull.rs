//! Pulling one image from its upstream into the blob store: the pinned manifest (an
//! index or an image), every platform manifest of an index, every config and layer,
//! cosign's signature and attestation tags, and the OCI referrers of the pinned digest.
//! Manifests are kept byte for byte, so every digest stays what the definition pins;
//! every blob is checked against its digest (and its descriptor's size) while written.

use std::collections::BTreeMap;

use futures_util::{StreamExt, TryStreamExt};
use oci_client::Reference;
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;

use super::MirrorError;
use super::signature::{self, CosignKey, MAX_PAYLOAD_BYTES, SIGNATURE_ANNOTATION, SIMPLE_SIGNING};
use crate::blob::{BlobStore, Digest, once};
use crate::registry::Descriptor;
use crate::registry::manifest::{ACCEPTED, MAX_MANIFEST_BYTES, Manifest};
use crate::store::{Content, ContentKind, MirrorJob};

/// What one image consists of, once every piece is stored.
#[derive(Debug, Default)]
pub(super) struct Pulled {
    pub content: Vec<Content>,
    pub tags: Vec<(String, String)>,
    /// The registered cosign key whose signature of the image verified.
    pub verified_by: Option<String>,
}

pub(super) struct Puller<'a> {
    /// The registry pulled from: the job's host, or the endpoint configured for it.
    pub from: &'a str,
    pub client: &'a oci_client::Client,
    pub auth: &'a RegistryAuth,
    pub blobs: &'a dyn BlobStore,
    pub job: &'a MirrorJob,
    /// Blob downloads in flight.
    pub parallel: usize,
    /// Cosign keys one of which must have signed the image; empty: no policy.
    pub keys: &'a [CosignKey],
    /// Bytes received so far, for progress reports.
    pub received: &'a std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Puller<'_> {
    fn reference(&self, digest: &str) -> Reference {
        Reference::with_digest(
            self.from.to_owned(),
            self.job.repository.clone(),
            digest.to_owned(),
        )
    }

    fn place(&self) -> String {
        format!("{}/{}", self.from, self.job.repository)
    }

    pub async fn pull(&self) -> Result<Pulled, MirrorError> {
        let mut out = Pulled::default();
        let pinned: Digest = self.job.digest.parse().map_err(|e| MirrorError::Invalid {
            what: self.place(),
            detail: format!("the pinned digest: {e}"),
        })?;
        let top = self
            .manifest(&self.reference(pinned.as_str()), Some(&pinned), None)
            .await?
            .ok_or_else(|| MirrorError::NotFound {
                what: format!("{}@{pinned}", self.place()),
            })?;
        let mut images = Vec::new();
        let mut signatures = Vec::new();
        for child in top.1.children() {
            let (content, manifest) = self.child(child).await?;
            out.content.push(content);
            images.push(manifest);
        }
        out.content.push(top.0);
        images.push(top.1);

        // cosign's tags: `sha256-<hex>.sig` (signatures) and `.att` (attestations).
        for suffix in ["sig", "att"] {
            let tag = format!("sha256-{}.{suffix}", pinned.hex());
            let reference = Reference::with_tag(
                self.from.to_owned(),
                self.job.repository.clone(),
                tag.clone(),
            );
            if let Some((content, manifest)) = self.manifest(&reference, None, None).await? {
                out.tags.push((tag, content.digest.clone()));
                out.content.push(content);
                if suffix == "sig" {
                    signatures.push(manifest.clone());
                }
                images.push(manifest);
            }
        }
        for (content, manifest) in self.referrers(&pinned).await? {
            out.content.push(content);
            images.push(manifest);
        }

        let mut wanted: BTreeMap<Digest, Descriptor> = BTreeMap::new();
        for image in &images {
            for d in image.blobs() {
                wanted.entry(d.digest.clone()).or_insert_with(|| d.clone());
            }
        }
        let fetched: Vec<Content> = futures_util::stream::iter(wanted.into_values())
            .map(|d| async move { self.blob(&d).await })
            .buffer_unordered(self.parallel.max(1))
            .try_collect()
            .await?;
        out.content.extend(fetched);
        if !self.keys.is_empty() {
            out.verified_by = Some(self.signed(&pinned, &signatures).await?);
        }
        Ok(out)
    }

    /// The id of a registered key one of whose signatures (stored by now) vouches for
    /// `pinned`, or why none does.
    async fn signed(
        &self,
        pinned: &Digest,
        signatures: &[Manifest],
    ) -> Result<String, MirrorError> {
        let what = || format!("{}@{pinned}", self.place());
        let ids: Vec<&str> = self.keys.iter().map(|k| CosignKey::short(&k.id)).collect();
        let mut reasons = Vec::new();
        for layer in signatures.iter().flat_map(|m| m.blobs()) {
            let Some(sig) = layer
                .annotations
                .as_ref()
                .and_then(|a| a.get(SIGNATURE_ANNOTATION))
                .filter(|_| layer.media_type == SIMPLE_SIGNING)
            else {
                continue;
            };
            let payload = crate::blob::read_small(self.blobs, &layer.digest, MAX_PAYLOAD_BYTES)
                .await
                .map_err(|error| MirrorError::Blob {
                    what: what(),
                    error,
                })?
                .ok_or_else(|| MirrorError::Invalid {
                    what: what(),
                    detail: format!("signature payload {} was not stored", layer.digest),
                })?;
            match signature::verify(self.keys, &payload, sig, pinned) {
                Ok(key) => return Ok(key),
                Err(why) => reasons.push(format!("{}: {why}", layer.digest)),
            }
        }
        Err(MirrorError::Signature {
            what: what(),
            detail: if reasons.is_empty() {
                format!(
                    "no cosign signature (tag sha256-{}.sig); the publisher requires one by {}",
                    pinned.hex(),
                    ids.join(", ")
                )
            } else {
                format!(
                    "no cosign signature verifies with {} ({})",
                    ids.join(", "),
                    reasons.join("; ")
                )
            },
        })
    }

    /// A platform manifest an index lists: pulled by digest, its size as listed.
    async fn child(&self, d: &Descriptor) -> Result<(Content, Manifest), MirrorError> {
        if d.size > MAX_MANIFEST_BYTES {
            return Err(MirrorError::Invalid {
                what: format!("{}@{}", self.place(), d.digest),
                detail: format!(
                    "a manifest of {} bytes is listed; at most {MAX_MANIFEST_BYTES} are accepted",
                    d.size
                ),
            });
        }
        let (content, manifest) = self
            .manifest(&self.reference(d.digest.as_str()), Some(&d.digest), None)
            .await?
            .ok_or_else(|| MirrorError::NotFound {
                what: format!("{}@{} (listed by the index)", self.place(), d.digest),
            })?;
        if content.size != d.size {
            return Err(MirrorError::Invalid {
                what: format!("{}@{}", self.place(), d.digest),
                detail: format!("{} bytes, the index lists {}", content.size, d.size),
            });
        }
        Ok((content, manifest))
    }

    /// A manifest by `reference`, stored byte for byte; `None` when the upstream has no
    /// such manifest. `expected` is the digest it must hash to (by digest), `subject`
    /// what it refers to (a referrer).
    async fn manifest(
        &self,
        reference: &Reference,
        expected: Option<&Digest>,
        subject: Option<(&Digest, &Descriptor)>,
    ) -> Result<Option<(Content, Manifest)>, MirrorError> {
        let what = || {
            format!(
                "{}:{}",
                self.place(),
                reference.digest().or(reference.tag()).unwrap_or("")
            )
        };
        let bytes = match self
            .client
            .pull_manifest_raw(reference, self.auth, &ACCEPTED)
            .await
        {
            Ok((bytes, _)) => bytes,
            Err(e) if not_found(&e) => return Ok(None),
            Err(e) => return Err(upstream(what(), &e)),
        };
        let digest = Digest::of(&bytes);
        if let Some(expected) = expected.filter(|e| **e != digest) {
            return Err(MirrorError::Invalid {
                what: what(),
                detail: format!("the manifest hashes to {digest}, not {expected}"),
            });
        }
        let manifest = Manifest::parse(&bytes, None).map_err(|error| MirrorError::Manifest {
            what: what(),
            error,
        })?;
        self.blobs
            .put(&digest, Some(bytes.len() as u64), once(bytes.clone()))
            .await
            .map_err(|error| MirrorError::Blob {
                what: what(),
                error,
            })?;
        let content = Content {
            digest: digest.to_string(),
            kind: ContentKind::Manifest,
            media_type: manifest.media_type().to_owned(),
            size: bytes.len() as u64,
            subject: subject.map(|(s, _)| s.to_string()),
            artifact_type: subject.and_then(|(_, d)| {
                d.artifact_type
                    .clone()
                    .or_else(|| manifest.artifact_type().map(str::to_owned))
            }),
            annotations: subject
                .and_then(|(_, d)| d.annotations.as_ref())
                .map(|a| serde_json::to_string(a).expect("a map serializes")),
        };
        Ok(Some((content, manifest)))
    }

    /// The referrers of `pinned` the upstream lists (through the referrers API, or the
    /// tag schema oci-client falls back to). A registry without either lists none.
    async fn referrers(&self, pinned: &Digest) -> Result<Vec<(Content, Manifest)>, MirrorError> {
        let index = match self
            .client
            .pull_referrers(&self.reference(pinned.as_str()), None)
            .await
        {
            Ok(index) => index,
            Err(e) if not_found(&e) || unsupported(&e) => return Ok(Vec::new()),
            Err(e) => return Err(upstream(format!("{}@{pinned} referrers", self.place()), &e)),
        };
        let mut out = Vec::new();
        for d in index.manifests {
            // Re-read as our own descriptor type: a malformed entry is refused here.
            let d: Descriptor = serde_json::to_value(&d)
                .and_then(serde_json::from_value)
                .map_err(|e| MirrorError::Invalid {
                    what: format!("{}@{pinned} referrers", self.place()),
                    detail: e.to_string(),
                })?;
            if let Some(found) = self
                .manifest(
                    &self.reference(d.digest.as_str()),
                    Some(&d.digest),
                    Some((pinned, &d)),
                )
                .await?
            {
                out.push(found);
            }
        }
        Ok(out)
    }

    /// A config or layer, streamed into the blob store unless it is there already.
    async fn blob(&self, d: &Descriptor) -> Result<Content, MirrorError> {
        let what = || format!("{}@{}", self.place(), d.digest);
        let content = Content {
            digest: d.digest.to_string(),
            kind: ContentKind::Blob,
            media_type: d.media_type.clone(),
            size: d.size,
            subject: None,
            artifact_type: None,
            annotations: None,
        };
        if self
            .blobs
            .stat(&d.digest)
            .await
            .map_err(|error| MirrorError::Blob {
                what: what(),
                error,
            })?
            == Some(d.size)
        {
            return Ok(content);
        }
        let reference = self.reference(d.digest.as_str());
        let stream = self
            .client
            .pull_blob_stream(&reference, d.digest.as_str())
            .await
            .map_err(|e| {
                if not_found(&e) {
                    MirrorError::NotFound { what: what() }
                } else {
                    upstream(what(), &e)
                }
            })?;
        if let Some(n) = stream.content_length.filter(|n| *n != d.size) {
            return Err(MirrorError::Invalid {
                what: what(),
                detail: format!(
                    "the upstream sends {n} bytes, the manifest lists {}",
                    d.size
                ),
            });
        }
        let received = self.received.clone();
        let counted = stream.stream.inspect_ok(move |chunk| {
            received.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
        });
        self.blobs
            .put(&d.digest, Some(d.size), Box::pin(counted))
            .await
            .map_err(|error| MirrorError::Blob {
                what: what(),
                error,
            })?;
        Ok(content)
    }
}

fn not_found(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::ServerError { code, .. } => *code == 404,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                OciErrorCode::ManifestUnknown
                    | OciErrorCode::BlobUnknown
                    | OciErrorCode::NameUnknown
                    | OciErrorCode::NotFound
            )
        }),
        _ => false,
    }
}

/// A registry that has no referrers API and refuses the fallback tag's shape.
fn unsupported(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::ServerError { code, .. } => matches!(code, 400 | 405 | 501),
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                OciErrorCode::Unsupported | OciErrorCode::ManifestInvalid
            )
        }),
        OciDistributionError::UnsupportedMediaTypeError(_)
        | OciDistributionError::ManifestParsingError(_)
        | OciDistributionError::VersionedParsingError(_) => true,
        _ => false,
    }
}

fn upstream(what: String, e: &OciDistributionError) -> MirrorError {
    // reqwest's errors carry their cause chain; one line is enough for an operator.
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        source = s.source();
    }
    MirrorError::Upstream { what, message }
}
