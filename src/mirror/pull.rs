//! Pulling one image from its upstream into the blob store: the pinned manifest (an
//! index or an image), every platform manifest of an index, every config and layer,
//! cosign's signature and attestation tags, and the OCI referrers of the pinned digest.
//! Manifests are kept byte for byte, so every digest stays what the definition pins;
//! every blob is checked against its digest (and its descriptor's size) while written.

use std::collections::BTreeMap;

use futures_util::{StreamExt, TryStreamExt};

use super::client::Client;
use super::signature::{self, CosignKey, MAX_PAYLOAD_BYTES, SIGNATURE_ANNOTATION, SIMPLE_SIGNING};
use super::{Deadlines, MirrorError};
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
    /// The registry pulled from: the job's host, the endpoint configured for it, or the
    /// upstream marketplace's `/v2/`.
    pub from: &'a str,
    /// The repository there: the job's, or the marketplace's name for it
    /// (`HOST/PATH`).
    pub repository: &'a str,
    pub client: &'a Client,
    pub deadlines: Deadlines,
    pub blobs: &'a dyn BlobStore,
    pub job: &'a MirrorJob,
    /// Blob downloads in flight.
    pub parallel: usize,
    /// Cosign keys one of which must have signed the image; empty: no policy.
    pub keys: &'a [CosignKey],
    /// The platforms of an index to pull (`OS/ARCH[/VARIANT]`); empty: all of them.
    pub platforms: &'a [String],
    /// Bytes received so far, for progress reports.
    pub received: &'a std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Puller<'_> {
    fn place(&self) -> String {
        format!("{}/{}", self.from, self.repository)
    }

    pub async fn pull(&self) -> Result<Pulled, MirrorError> {
        let mut out = Pulled::default();
        let pinned: Digest = self.job.digest.parse().map_err(|e| MirrorError::Invalid {
            what: self.place(),
            detail: format!("the pinned digest: {e}"),
        })?;
        let top = self
            .manifest(pinned.as_str(), Some(&pinned), None)
            .await?
            .ok_or_else(|| MirrorError::NotFound {
                what: format!("{}@{pinned}", self.place()),
            })?;
        let mut images = Vec::new();
        let mut signatures = Vec::new();
        let children: Vec<_> = top.1.children_for(self.platforms).cloned().collect();
        if !top.1.children().is_empty() && children.is_empty() {
            return Err(MirrorError::Invalid {
                what: format!("{}@{pinned}", self.place()),
                detail: format!(
                    "the index lists none of the platforms wanted ({})",
                    self.platforms.join(", ")
                ),
            });
        }
        for child in &children {
            let (content, manifest) = self.child(child).await?;
            out.content.push(content);
            images.push(manifest);
        }
        out.content.push(top.0);
        images.push(top.1);

        // cosign's tags: `sha256-<hex>.sig` (signatures) and `.att` (attestations).
        for suffix in ["sig", "att"] {
            let tag = format!("sha256-{}.{suffix}", pinned.hex());
            if let Some((content, manifest)) = self.manifest(&tag, None, None).await? {
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
        // The reasons quote payloads the upstream served: for the operator only.
        let public = if reasons.is_empty() {
            format!(
                "no cosign signature (tag sha256-{}.sig); the publisher requires one by {}",
                pinned.hex(),
                ids.join(", ")
            )
        } else {
            format!("no cosign signature verifies with {}", ids.join(", "))
        };
        Err(MirrorError::Signature {
            what: what(),
            detail: if reasons.is_empty() {
                public.clone()
            } else {
                format!("{public} ({})", reasons.join("; "))
            },
            public,
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
            .manifest(d.digest.as_str(), Some(&d.digest), None)
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

    /// A manifest by `reference` (tag or digest), stored byte for byte; `None` when
    /// the upstream has no such manifest. `expected` is the digest it must hash to (by
    /// digest), `subject` what it refers to (a referrer). Read with our cap enforced
    /// while reading: a larger answer is refused after at most that many bytes.
    async fn manifest(
        &self,
        reference: &str,
        expected: Option<&Digest>,
        subject: Option<(&Digest, &Descriptor)>,
    ) -> Result<Option<(Content, Manifest)>, MirrorError> {
        let what = || format!("{}:{reference}", self.place());
        let bytes = match self
            .client
            .manifest(self.repository, reference, &ACCEPTED, MAX_MANIFEST_BYTES)
            .await
        {
            Ok(Some((bytes, _))) => bytes,
            Ok(None) => return Ok(None),
            Err(error) => {
                return Err(MirrorError::Fetch {
                    what: what(),
                    error,
                });
            }
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

    /// The referrers of `pinned` the upstream lists: through the referrers API, or
    /// the tag schema (`sha256-<hex>`) when it has no such API. A registry with
    /// neither lists none.
    async fn referrers(&self, pinned: &Digest) -> Result<Vec<(Content, Manifest)>, MirrorError> {
        let what = || format!("{}@{pinned} referrers", self.place());
        let fetched = self
            .client
            .referrers(self.repository, pinned.as_str(), MAX_MANIFEST_BYTES)
            .await
            .map_err(|error| MirrorError::Fetch {
                what: what(),
                error,
            })?;
        let index = match fetched {
            Some(bytes) => bytes,
            None => {
                let tag = format!("sha256-{}", pinned.hex());
                match self
                    .client
                    .manifest(
                        self.repository,
                        &tag,
                        &[crate::registry::manifest::OCI_INDEX],
                        MAX_MANIFEST_BYTES,
                    )
                    .await
                {
                    Ok(Some((bytes, _))) => bytes,
                    Ok(None) => return Ok(Vec::new()),
                    // A registry that refuses the tag's shape has no referrers for us.
                    Err(e) if matches!(e.status(), Some(400 | 405 | 501)) => {
                        return Ok(Vec::new());
                    }
                    Err(error) => {
                        return Err(MirrorError::Fetch {
                            what: what(),
                            error,
                        });
                    }
                }
            }
        };
        let listed = match Manifest::parse(&index, None) {
            Ok(Manifest::Index { manifests, .. }) => manifests,
            // Not an index (a tag of that name holding something else): nothing listed.
            Ok(Manifest::Image { .. }) => return Ok(Vec::new()),
            Err(error) => {
                return Err(MirrorError::Manifest {
                    what: what(),
                    error,
                });
            }
        };
        let mut out = Vec::new();
        for d in listed {
            if let Some(found) = self
                .manifest(d.digest.as_str(), Some(&d.digest), Some((pinned, &d)))
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
        // The deadline follows the declared size: a trickling upstream fails the job
        // and frees its slot, where the per-read timeout alone would wait forever.
        let deadline = self.deadlines.blob(d.size);
        let transfer = async {
            let response = self
                .client
                .blob(self.repository, d.digest.as_str())
                .await
                .map_err(|error| MirrorError::Fetch {
                    what: what(),
                    error,
                })?
                .ok_or_else(|| MirrorError::NotFound { what: what() })?;
            if let Some(n) = response.content_length().filter(|n| *n != d.size) {
                return Err(MirrorError::Invalid {
                    what: what(),
                    detail: format!(
                        "the upstream sends {n} bytes, the manifest lists {}",
                        d.size
                    ),
                });
            }
            let received = self.received.clone();
            let counted = response
                .bytes_stream()
                .map_err(|e| std::io::Error::other(super::client::chain(&e)))
                .inspect_ok(move |chunk| {
                    received.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
                });
            self.blobs
                .put(&d.digest, Some(d.size), Box::pin(counted))
                .await
                .map_err(|error| MirrorError::Blob {
                    what: what(),
                    error,
                })
        };
        // Dropping the transfer at its deadline drops the writer, which removes its
        // temporary file.
        match tokio::time::timeout(deadline, transfer).await {
            Ok(done) => done.map(|_| ())?,
            Err(_) => {
                return Err(MirrorError::Timeout {
                    what: what(),
                    after: deadline,
                    reason: "the blob's deadline, from its size and the minimum rate",
                });
            }
        }
        Ok(content)
    }
}
