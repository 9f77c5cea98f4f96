//! `marketplace bundle create`: this marketplace's signed index and the selected
//! plugins' mirrored images, streamed into one tar file.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use futures_util::StreamExt;
use tough::schema::{Signed, Targets};

use super::{BundleError, FORMAT, Since, TOC, Toc, TocContent, TocImage, TocTarget};
use crate::blob::{BlobStore, ByteStream, Digest};
use crate::definition::ImageRef;
use crate::store::{ContentKind, Store};
use crate::trust::server::state::{State, current, current_role};
use crate::upstream::Filter;

/// What `create` wrote.
#[derive(Debug, Clone)]
pub struct Created {
    pub toc: Toc,
    /// Selected images that are not mirrored here (yet): left out, named.
    pub not_mirrored: Vec<String>,
    pub bytes: u64,
}

/// One file of the bundle, written in this order.
enum Entry {
    Bytes(String, Vec<u8>),
    Blob(String, Digest, u64),
}

/// Writes the bundle to `out` (through `out.partial`, renamed when complete, so a
/// crash never leaves a truncated bundle under the name). `since` is the table of
/// contents of an earlier bundle: what it had is left out.
/// What to put in a bundle.
#[derive(Debug, Clone, Copy)]
pub struct Selection<'a> {
    pub plugins: &'a Filter,
    /// Platforms of each image index (`OS/ARCH[/VARIANT]`); empty: all.
    pub platforms: &'a [String],
    /// The table of contents of an earlier bundle: what it had is left out.
    pub since: Option<&'a Toc>,
}

pub async fn create(
    store: &Store,
    blobs: Arc<dyn BlobStore>,
    selection: Selection<'_>,
    out: &Path,
    now: i64,
) -> Result<Created, BundleError> {
    let Selection {
        plugins: filter,
        platforms,
        since,
    } = selection;
    let state = current(store).await?.ok_or(BundleError::NotInitialized)?;
    let mut entries = Vec::new();
    let mut toc = Toc {
        format: FORMAT,
        created_at: now,
        plugins: filter.to_string(),
        platforms: platforms.to_vec(),
        root_version: state.root.stored.version,
        timestamp_version: state.timestamp.stored.version,
        snapshot_version: state.snapshot.stored.version,
        since: since.map(|s| Since {
            created_at: s.created_at,
            snapshot_version: s.snapshot_version,
        }),
        ..Default::default()
    };
    metadata(store, &state, &mut toc, &mut entries).await?;
    let known_targets: HashSet<&str> = since
        .map(|s| s.targets.iter().map(|t| t.hash.as_str()).collect())
        .unwrap_or_default();
    let selected = targets(
        store,
        &state,
        filter,
        &known_targets,
        &mut toc,
        &mut entries,
    )
    .await?;
    let mut not_mirrored = Vec::new();
    let mut images: BTreeMap<(String, String, String), TocImage> = BTreeMap::new();
    for (plugin, image) in selected {
        let Ok(image) = ImageRef::parse(&image) else {
            continue;
        };
        let (host, repository) = image.upstream();
        let key = (host.clone(), repository.clone(), image.digest.clone());
        if let Some(found) = images.get_mut(&key) {
            found.plugins.push(plugin);
            continue;
        }
        let Some(mirrored) = store
            .mirrored_content(&host, &repository, &image.digest)
            .await?
        else {
            not_mirrored.push(format!("{host}/{repository}@{} ({plugin})", image.digest));
            continue;
        };
        let keep = match platforms.is_empty() {
            true => None,
            false => Some(kept(&*blobs, &image.digest, &mirrored.content, platforms).await?),
        };
        if keep.as_ref().is_some_and(|k| k.is_empty()) {
            not_mirrored.push(format!(
                "{host}/{repository}@{} ({plugin}): none of the platforms {}",
                image.digest,
                platforms.join(", ")
            ));
            continue;
        }
        images.insert(
            key,
            TocImage {
                host,
                repository,
                digest: image.digest.clone(),
                plugins: vec![plugin],
                content: mirrored
                    .content
                    .into_iter()
                    .filter(|c| keep.as_ref().is_none_or(|k| k.contains(&c.digest)))
                    .map(|c| TocContent {
                        manifest: c.kind == ContentKind::Manifest,
                        digest: c.digest,
                        media_type: c.media_type,
                        size: c.size,
                        subject: c.subject,
                        artifact_type: c.artifact_type,
                        annotations: c.annotations,
                    })
                    .collect(),
                tags: mirrored.tags,
            },
        );
    }
    toc.images = images.into_values().collect();
    layout(&toc, &mut entries)?;
    let known_blobs: BTreeSet<&str> = since
        .map(|s| s.blobs.iter().map(String::as_str).collect())
        .unwrap_or_default();
    let mut all: BTreeMap<String, u64> = BTreeMap::new();
    for c in toc.images.iter().flat_map(|i| &i.content) {
        all.insert(c.digest.clone(), c.size);
    }
    for (digest, size) in &all {
        if known_blobs.contains(digest.as_str()) {
            continue;
        }
        let parsed: Digest = digest
            .parse()
            .map_err(|e| BundleError::Invalid(format!("stored digest {digest}: {e}")))?;
        entries.push(Entry::Blob(
            format!("oci/blobs/sha256/{}", parsed.hex()),
            parsed,
            *size,
        ));
        toc.blobs_included += 1;
        toc.bytes_included += size;
    }
    let mut cumulative: BTreeSet<String> = known_blobs.iter().map(|s| (*s).to_owned()).collect();
    cumulative.extend(all.into_keys());
    toc.blobs = cumulative.into_iter().collect();
    let toc_bytes = serde_json::to_vec_pretty(&toc).expect("the table of contents serializes");
    entries.insert(0, Entry::Bytes(TOC.into(), toc_bytes));
    let bytes = write(entries, blobs, out, now).await?;
    Ok(Created {
        toc,
        not_mirrored,
        bytes,
    })
}

/// The digests of a mirrored image to carry for `platforms`: everything but the index's
/// other platform manifests and the blobs only they need. Empty when the index lists
/// none of the platforms.
async fn kept(
    blobs: &dyn BlobStore,
    pinned: &str,
    content: &[crate::store::Content],
    platforms: &[String],
) -> Result<HashSet<String>, BundleError> {
    use crate::registry::manifest::{MAX_MANIFEST_BYTES, Manifest};
    let read = |digest: String| async move {
        let d: Digest = digest
            .parse()
            .map_err(|e| BundleError::Invalid(format!("stored digest {digest}: {e}")))?;
        let bytes = crate::blob::read_small(blobs, &d, MAX_MANIFEST_BYTES)
            .await?
            .ok_or_else(|| {
                BundleError::Invalid(format!(
                    "manifest {digest} is recorded as mirrored but missing from the blob store"
                ))
            })?;
        Manifest::parse(&bytes, None)
            .map_err(|e| BundleError::Invalid(format!("stored manifest {digest}: {e}")))
    };
    let top = read(pinned.to_owned()).await?;
    if top.children().is_empty() {
        return Ok(content.iter().map(|c| c.digest.clone()).collect());
    }
    let wanted: HashSet<String> = top
        .children_for(platforms)
        .map(|d| d.digest.to_string())
        .collect();
    if wanted.is_empty() {
        return Ok(HashSet::new());
    }
    let mut dropped = HashSet::new();
    let mut needed = HashSet::new();
    for child in top.children() {
        let digest = child.digest.to_string();
        let manifest = read(digest.clone()).await?;
        let blobs: Vec<String> = manifest
            .blobs()
            .iter()
            .map(|b| b.digest.to_string())
            .collect();
        if wanted.contains(&digest) {
            needed.extend(blobs);
        } else {
            dropped.insert(digest);
            dropped.extend(blobs);
        }
    }
    Ok(content
        .iter()
        .map(|c| c.digest.clone())
        .filter(|d| !dropped.contains(d) || needed.contains(d))
        .collect())
}

/// Every root version and the current timestamp, snapshot, targets and every role the
/// snapshot lists, named as `/tuf/metadata/` serves them.
async fn metadata(
    store: &Store,
    state: &State,
    toc: &mut Toc,
    entries: &mut Vec<Entry>,
) -> Result<(), BundleError> {
    let consistent = state.root.signed.signed.consistent_snapshot;
    let mut add = |name: String, bytes: Vec<u8>| {
        toc.metadata.push(name.clone());
        entries.push(Entry::Bytes(format!("tuf/metadata/{name}"), bytes));
    };
    for v in 1..=state.root.stored.version {
        let root = store
            .metadata("root", v)
            .await?
            .ok_or_else(|| BundleError::Invalid(format!("root v{v} is missing here")))?;
        add(format!("{v}.root.json"), root.bytes);
    }
    add(
        "timestamp.json".into(),
        state.timestamp.stored.bytes.clone(),
    );
    let named = |role: &str, v: u64| match consistent {
        true => format!("{v}.{role}.json"),
        false => format!("{role}.json"),
    };
    add(
        named("snapshot", state.snapshot.stored.version),
        state.snapshot.stored.bytes.clone(),
    );
    let mut roles: Vec<(&String, u64)> = state
        .snapshot
        .signed
        .signed
        .meta
        .iter()
        .map(|(k, m)| (k, m.version.get()))
        .collect();
    roles.sort();
    for (file, v) in roles {
        let role = file.trim_end_matches(".json");
        let m = store
            .metadata(role, v)
            .await?
            .ok_or_else(|| BundleError::Invalid(format!("{role} v{v} is missing here")))?;
        add(named(role, v), m.bytes);
    }
    Ok(())
}

/// The targets of every publisher the filter selects (all of them: each publisher's
/// signature covers its whole role), added as `tuf/targets/` files unless `known`;
/// returns the selected plugins' images (`PUBLISHER/NAME`, image reference).
async fn targets(
    store: &Store,
    state: &State,
    filter: &Filter,
    known: &HashSet<&str>,
    toc: &mut Toc,
    entries: &mut Vec<Entry>,
) -> Result<Vec<(String, String)>, BundleError> {
    let snapshot = &state.snapshot.signed.signed;
    let consistent = state.root.signed.signed.consistent_snapshot;
    let publishers = state
        .targets
        .signed
        .signed
        .delegations
        .iter()
        .flat_map(|d| d.roles.iter().map(|r| r.name.clone()))
        .collect::<Vec<_>>();
    let mut images = Vec::new();
    for publisher in publishers {
        let Some((_, top)) = current_role(store, snapshot, &publisher).await? else {
            continue;
        };
        let mut roles: Vec<Signed<Targets>> = Vec::new();
        for bin in crate::trust::bins::delegated(&publisher, &top.signed) {
            if let Some((_, b)) = current_role(store, snapshot, &bin).await? {
                roles.push(b);
            }
        }
        roles.push(top);
        let listed: Vec<(String, tough::schema::Target)> = roles
            .iter()
            .flat_map(|r| r.signed.targets.iter())
            .map(|(n, t)| (n.raw().to_owned(), t.clone()))
            .collect();
        let plugin_of = |name: &str| name.split('/').nth(1).unwrap_or_default().to_owned();
        if !listed
            .iter()
            .any(|(n, _)| filter.selects(&publisher, &plugin_of(n)))
            && !filter.is_all()
        {
            continue;
        }
        for (name, t) in listed {
            let hex = hex::encode(t.hashes.sha256.as_ref());
            let hash = format!("sha256:{hex}");
            let plugin = plugin_of(&name);
            let included = !known.contains(hash.as_str());
            if included {
                let bytes = store
                    .definition_by_hash(&publisher, &plugin, &hash)
                    .await?
                    .ok_or_else(|| BundleError::Invalid(format!("{name} is missing here")))?;
                let path = match (consistent, name.rsplit_once('/')) {
                    (true, Some((dir, file))) => format!("tuf/targets/{dir}/{hex}.{file}"),
                    _ => format!("tuf/targets/{name}"),
                };
                entries.push(Entry::Bytes(path, bytes));
            }
            if filter.selects(&publisher, &plugin)
                && let Some(image) = t.custom.get("image").and_then(|v| v.as_str())
            {
                images.push((format!("{publisher}/{plugin}"), image.to_owned()));
            }
            toc.targets.push(TocTarget {
                name,
                hash,
                included,
            });
        }
    }
    Ok(images)
}

/// `oci/oci-layout` and `oci/index.json`: each image's pinned manifest and its tagged
/// manifests, named as `HOST/REPOSITORY@DIGEST` and `HOST/REPOSITORY:TAG`.
fn layout(toc: &Toc, entries: &mut Vec<Entry>) -> Result<(), BundleError> {
    let mut manifests = Vec::new();
    for image in &toc.images {
        let described = |digest: &str, name: String| {
            image.content.iter().find(|c| c.digest == digest).map(|c| {
                serde_json::json!({
                    "mediaType": c.media_type,
                    "digest": c.digest,
                    "size": c.size,
                    "annotations": { "org.opencontainers.image.ref.name": name },
                })
            })
        };
        let base = format!("{}/{}", image.host, image.repository);
        manifests.extend(described(&image.digest, format!("{base}@{}", image.digest)));
        for (tag, digest) in &image.tags {
            manifests.extend(described(digest, format!("{base}:{tag}")));
        }
    }
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": crate::registry::manifest::OCI_INDEX,
        "manifests": manifests,
    });
    entries.push(Entry::Bytes(
        "oci/oci-layout".into(),
        br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
    ));
    entries.push(Entry::Bytes(
        "oci/index.json".into(),
        serde_json::to_vec(&index).expect("an index serializes"),
    ));
    Ok(())
}

/// Streams the entries into `out.partial` with the `tar` crate (long names as GNU
/// extensions), blobs read chunk by chunk from the blob store, then renames it.
async fn write(
    entries: Vec<Entry>,
    blobs: Arc<dyn BlobStore>,
    out: &Path,
    now: i64,
) -> Result<u64, BundleError> {
    let partial = std::path::PathBuf::from(format!("{}.partial", out.display()));
    let file = std::fs::File::create(&partial)
        .map_err(BundleError::io(format!("creating {}", partial.display())))?;
    let handle = tokio::runtime::Handle::current();
    let written = {
        let partial = partial.clone();
        tokio::task::spawn_blocking(move || -> Result<u64, BundleError> {
            let mut tar = tar::Builder::new(std::io::BufWriter::with_capacity(1 << 20, file));
            let header = |size: u64| {
                let mut h = tar::Header::new_gnu();
                h.set_size(size);
                h.set_mode(0o644);
                h.set_mtime(now.max(0) as u64);
                h.set_entry_type(tar::EntryType::Regular);
                h
            };
            let failed = BundleError::io(format!("writing {}", partial.display()));
            for entry in entries {
                let result = match entry {
                    Entry::Bytes(path, bytes) => {
                        tar.append_data(&mut header(bytes.len() as u64), &path, bytes.as_slice())
                    }
                    Entry::Blob(path, digest, size) => {
                        let blob = handle
                            .block_on(blobs.open(&digest, None))?
                            .ok_or_else(|| {
                                BundleError::Invalid(format!(
                                    "blob {digest} is recorded as mirrored but missing from the blob store (run `marketplace mirror verify`)"
                                ))
                            })?;
                        if blob.size != size {
                            return Err(BundleError::Tampered(format!(
                                "blob {digest}: {} bytes stored, {size} recorded",
                                blob.size
                            )));
                        }
                        let reader = StreamReader {
                            handle: &handle,
                            stream: blob.body,
                            chunk: bytes::Bytes::new(),
                        };
                        tar.append_data(&mut header(size), &path, reader)
                    }
                };
                result.map_err(|e| BundleError::Io(format!("writing {}: {e}", partial.display())))?;
            }
            let mut inner = tar
                .into_inner()
                .map_err(|e| BundleError::Io(format!("writing {}: {e}", partial.display())))?;
            inner
                .flush()
                .map_err(|e| BundleError::Io(format!("writing {}: {e}", partial.display())))?;
            let file = inner
                .into_inner()
                .map_err(|e| BundleError::Io(format!("writing {}: {e}", partial.display())))?;
            file.sync_all().map_err(failed)?;
            Ok(file.metadata().map(|m| m.len()).unwrap_or(0))
        })
        .await
        .map_err(|e| BundleError::Io(format!("writing the bundle: {e}")))?
    };
    match written {
        Ok(bytes) => {
            std::fs::rename(&partial, out)
                .map_err(BundleError::io(format!("renaming to {}", out.display())))?;
            Ok(bytes)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            Err(e)
        }
    }
}

/// A blob's byte stream read synchronously (on a blocking thread) for the tar writer.
struct StreamReader<'a> {
    handle: &'a tokio::runtime::Handle,
    stream: ByteStream,
    chunk: bytes::Bytes,
}

impl Read for StreamReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.handle.block_on(self.stream.next()) {
                Some(chunk) => self.chunk = chunk?,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        self.chunk = self.chunk.slice(n..);
        Ok(n)
    }
}
