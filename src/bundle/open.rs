//! Reading a bundle as hostile input: its table of contents alone (`--since`), or the
//! whole of it extracted into a directory entry by entry (never in memory), with only
//! regular files under the three known places, each within its size cap, and every
//! blob of the image layout hashed against its name.

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use super::{BundleError, FORMAT, TOC, Toc};

/// The largest table of contents, metadata file and definition accepted.
const MAX_TOC_BYTES: u64 = 64 << 20;
const MAX_METADATA_BYTES: u64 = crate::trust::client::MAX_RESPONSE_BYTES as u64;
const MAX_TARGET_BYTES: u64 = crate::definition::MAX_DEFINITION_BYTES as u64;
const MAX_LAYOUT_FILE_BYTES: u64 = 16 << 20;

/// The table of contents of the bundle at `path` (its first entry).
pub fn read_toc(path: &Path) -> Result<Toc, BundleError> {
    let file = std::fs::File::open(path)
        .map_err(BundleError::io(format!("opening {}", path.display())))?;
    let mut archive = tar::Archive::new(std::io::BufReader::new(file));
    let mut entries = archive
        .entries()
        .map_err(|e| BundleError::Invalid(format!("{}: {e}", path.display())))?;
    let first = entries
        .next()
        .ok_or_else(|| BundleError::Invalid("the file is empty".into()))?
        .map_err(|e| BundleError::Invalid(e.to_string()))?;
    let name = first
        .path()
        .map_err(|e| BundleError::Invalid(e.to_string()))?
        .to_string_lossy()
        .into_owned();
    if name != TOC {
        return Err(BundleError::Invalid(format!(
            "its first entry is {name:?}, not {TOC}: not a marketplace bundle"
        )));
    }
    parse_toc(read_capped(first, MAX_TOC_BYTES, TOC)?)
}

fn parse_toc(bytes: Vec<u8>) -> Result<Toc, BundleError> {
    // The format first, so a newer bundle is named as such rather than as malformed.
    #[derive(serde::Deserialize)]
    struct Format {
        format: u32,
    }
    let bad = |e: serde_json::Error| BundleError::Invalid(format!("{TOC}: {e}"));
    let Format { format } = serde_json::from_slice(&bytes).map_err(bad)?;
    if format != FORMAT {
        return Err(BundleError::Invalid(format!(
            "{TOC}: format {format} (this marketplace reads format {FORMAT}; a newer marketplace made it)"
        )));
    }
    serde_json::from_slice(&bytes).map_err(bad)
}

fn read_capped(entry: impl Read, max: u64, what: &str) -> Result<Vec<u8>, BundleError> {
    let mut bytes = Vec::new();
    entry
        .take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| BundleError::Invalid(format!("{what}: {e}")))?;
    if bytes.len() as u64 > max {
        return Err(BundleError::Invalid(format!("{what} is over {max} bytes")));
    }
    Ok(bytes)
}

/// Where an entry may go and how large it may be; `None` for a path outside the
/// bundle's layout.
fn place(name: &str) -> Option<u64> {
    let parts: Vec<&str> = name.split('/').collect();
    let clean = parts
        .iter()
        .all(|p| !p.is_empty() && *p != "." && *p != ".." && !p.contains('\\'));
    if !clean {
        return None;
    }
    match parts.as_slice() {
        ["tuf", "metadata", _] => Some(MAX_METADATA_BYTES),
        ["tuf", "targets", rest @ ..] if !rest.is_empty() && rest.len() <= 3 => {
            Some(MAX_TARGET_BYTES)
        }
        ["oci", "oci-layout"] | ["oci", "index.json"] => Some(MAX_LAYOUT_FILE_BYTES),
        ["oci", "blobs", "sha256", hex]
            if hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
        {
            Some(u64::MAX)
        }
        _ => None,
    }
}

/// Where an extraction puts the layout's blobs: straight into the blob store (which
/// checks each against its digest as it writes), so an import writes every byte once.
pub(super) struct BlobSink {
    pub handle: tokio::runtime::Handle,
    pub blobs: std::sync::Arc<dyn crate::blob::BlobStore>,
}

/// Extracts the bundle at `path` into `dir` (which must be empty), checking every
/// entry and hashing every blob; blobs go to `sink` when given (a blob that is not its
/// digest is never stored; those stored before it stay unreferenced, as any blob no
/// image records, until `mirror gc`). Returns its table of contents. Blocking: run it
/// on a blocking thread.
pub(super) fn extract(
    path: &Path,
    dir: &Path,
    sink: Option<&BlobSink>,
) -> Result<Toc, BundleError> {
    let file = std::fs::File::open(path)
        .map_err(BundleError::io(format!("opening {}", path.display())))?;
    let mut archive = tar::Archive::new(std::io::BufReader::with_capacity(1 << 20, file));
    let entries = archive
        .entries()
        .map_err(|e| BundleError::Invalid(format!("{}: {e}", path.display())))?;
    let mut toc = None;
    let mut seen = std::collections::HashSet::new();
    for entry in entries {
        let mut entry = entry.map_err(|e| BundleError::Invalid(e.to_string()))?;
        let name = entry
            .path()
            .map_err(|e| BundleError::Invalid(e.to_string()))?
            .to_string_lossy()
            .into_owned();
        if toc.is_none() {
            if name != TOC {
                return Err(BundleError::Invalid(format!(
                    "its first entry is {name:?}, not {TOC}: not a marketplace bundle"
                )));
            }
            toc = Some(parse_toc(read_capped(&mut entry, MAX_TOC_BYTES, TOC)?)?);
            continue;
        }
        if entry.header().entry_type() != tar::EntryType::Regular {
            return Err(BundleError::Invalid(format!(
                "{name}: only regular files belong in a bundle"
            )));
        }
        let max = place(&name)
            .ok_or_else(|| BundleError::Invalid(format!("{name}: not a place in a bundle")))?;
        if !seen.insert(name.clone()) {
            return Err(BundleError::Invalid(format!("{name} is in it twice")));
        }
        let size = entry
            .header()
            .size()
            .map_err(|e| BundleError::Invalid(e.to_string()))?;
        if size > max {
            return Err(BundleError::Invalid(format!(
                "{name}: {size} bytes, over {max}"
            )));
        }
        if let (Some(sink), Some(hex)) = (sink, name.strip_prefix("oci/blobs/sha256/")) {
            store_blob(sink, &name, hex, size, &mut entry)?;
            continue;
        }
        let to = dir.join(&name);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .map_err(BundleError::io(format!("creating {}", parent.display())))?;
        }
        let out = std::fs::File::create(&to)
            .map_err(BundleError::io(format!("writing {}", to.display())))?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, out);
        let expected = name.strip_prefix("oci/blobs/sha256/").map(str::to_owned);
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            let n = entry
                .read(&mut buf)
                .map_err(|e| BundleError::Invalid(format!("{name}: {e}")))?;
            if n == 0 {
                break;
            }
            total += n as u64;
            if expected.is_some() {
                hasher.update(&buf[..n]);
            }
            std::io::Write::write_all(&mut out, &buf[..n])
                .map_err(BundleError::io(format!("writing {}", to.display())))?;
        }
        std::io::Write::flush(&mut out)
            .map_err(BundleError::io(format!("writing {}", to.display())))?;
        if total != size {
            return Err(BundleError::Invalid(format!("{name}: cut short")));
        }
        if let Some(expected) = expected {
            let actual = hex::encode(hasher.finalize());
            if actual != expected {
                return Err(BundleError::Tampered(format!(
                    "{name}: the bytes hash to sha256:{actual}"
                )));
            }
        }
    }
    toc.ok_or_else(|| BundleError::Invalid("the file is empty".into()))
}

/// One blob entry streamed into the blob store, which checks its digest and size.
fn store_blob(
    sink: &BlobSink,
    name: &str,
    hex: &str,
    size: u64,
    entry: &mut impl Read,
) -> Result<(), BundleError> {
    let digest: crate::blob::Digest = format!("sha256:{hex}")
        .parse()
        .map_err(|e| BundleError::Invalid(format!("{name}: {e}")))?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(4);
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    let put = {
        let (blobs, digest) = (sink.blobs.clone(), digest.clone());
        sink.handle
            .spawn(async move { blobs.put(&digest, Some(size), Box::pin(body)).await })
    };
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match entry.read(&mut buf) {
            Ok(n) => n,
            Err(e) => {
                let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
                return Err(BundleError::Invalid(format!("{name}: {e}")));
            }
        };
        if n == 0 {
            break;
        }
        if tx
            .blocking_send(Ok(bytes::Bytes::copy_from_slice(&buf[..n])))
            .is_err()
        {
            break; // the store stopped reading: its error says why
        }
    }
    drop(tx);
    match sink.handle.block_on(put) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(crate::blob::BlobError::DigestMismatch { actual, .. })) => Err(
            BundleError::Tampered(format!("{name}: the bytes hash to {actual}")),
        ),
        Ok(Err(e)) => Err(BundleError::Invalid(format!("{name}: {e}"))),
        Err(e) => Err(BundleError::Io(format!("storing {name}: {e}"))),
    }
}

/// A fresh directory for an extraction under `parent`, removed when dropped.
pub(super) struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(parent: &Path) -> Result<Scratch, BundleError> {
        let dir = parent.join(format!("bundle-import-{}", crate::token::random_hex(8)));
        std::fs::create_dir_all(&dir)
            .map_err(BundleError::io(format!("creating {}", dir.display())))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar of `entries` (name, bytes, kind) written with raw header names, so hostile
    /// names the `tar` crate would refuse to write can be crafted.
    fn tar_of(entries: &[(&str, &[u8], tar::EntryType)]) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut b = tar::Builder::new(std::fs::File::create(file.path()).unwrap());
        for (name, bytes, kind) in entries {
            let mut h = tar::Header::new_gnu();
            let raw = &mut h.as_old_mut().name;
            raw[..name.len()].copy_from_slice(name.as_bytes());
            h.set_size(bytes.len() as u64);
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            h.set_cksum();
            b.append(&h, *bytes).unwrap();
        }
        b.finish().unwrap();
        file
    }

    fn toc() -> Vec<u8> {
        serde_json::to_vec(&Toc {
            format: FORMAT,
            ..Default::default()
        })
        .unwrap()
    }

    fn refused(entries: &[(&str, &[u8], tar::EntryType)]) -> String {
        let file = tar_of(entries);
        let dir = tempfile::tempdir().unwrap();
        let err = extract(file.path(), dir.path(), None)
            .unwrap_err()
            .to_string();
        // Nothing was written outside the directory.
        assert!(!dir.path().parent().unwrap().join("evil").exists());
        err
    }

    #[test]
    fn hostile_entries_are_refused_by_name() {
        let toc = toc();
        let regular = tar::EntryType::Regular;
        let err = refused(&[("tuf/metadata/1.root.json", b"{}", regular)]);
        assert!(err.contains("not bundle.json"), "{err}");
        let err = refused(&[("bundle.json", &toc, regular), ("../evil", b"x", regular)]);
        assert!(err.contains("not a place in a bundle"), "{err}");
        let err = refused(&[
            ("bundle.json", &toc, regular),
            ("tuf/../../evil", b"x", regular),
        ]);
        assert!(err.contains("not a place in a bundle"), "{err}");
        let err = refused(&[
            ("bundle.json", &toc, regular),
            ("tuf/metadata/x.json", b"", tar::EntryType::Symlink),
        ]);
        assert!(err.contains("only regular files"), "{err}");
        let err = refused(&[
            ("bundle.json", &toc, regular),
            ("tuf/metadata/a.json", b"1", regular),
            ("tuf/metadata/a.json", b"2", regular),
        ]);
        assert!(err.contains("twice"), "{err}");
        let err = refused(&[("bundle.json", br#"{"format": 99}"#, regular)]);
        assert!(err.contains("format"), "{err}");
        let big = vec![b'x'; MAX_TARGET_BYTES as usize + 1];
        let err = refused(&[
            ("bundle.json", &toc, regular),
            ("tuf/targets/a/b/c.yaml", &big, regular),
        ]);
        assert!(err.contains("over"), "{err}");
    }

    #[test]
    fn a_blob_must_hash_to_its_name() {
        let toc = toc();
        let regular = tar::EntryType::Regular;
        let good = hex::encode(Sha256::digest(b"layer"));
        let file = tar_of(&[
            ("bundle.json", &toc, regular),
            (&format!("oci/blobs/sha256/{good}"), b"layer", regular),
        ]);
        let dir = tempfile::tempdir().unwrap();
        extract(file.path(), dir.path(), None).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("oci/blobs/sha256").join(&good)).unwrap(),
            b"layer"
        );
        let err = refused(&[
            ("bundle.json", &toc, regular),
            (&format!("oci/blobs/sha256/{good}"), b"laYer", regular),
        ]);
        assert!(err.starts_with("tampered:"), "{err}");
        let err = refused(&[
            ("bundle.json", &toc, regular),
            ("oci/blobs/sha256/XYZ", b"x", regular),
        ]);
        assert!(err.contains("not a place"), "{err}");
    }
}
