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
    let toc: Toc =
        serde_json::from_slice(&bytes).map_err(|e| BundleError::Invalid(format!("{TOC}: {e}")))?;
    if toc.format != FORMAT {
        return Err(BundleError::Invalid(format!(
            "{TOC}: format {} (this marketplace reads format {FORMAT})",
            toc.format
        )));
    }
    Ok(toc)
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

/// Extracts the bundle at `path` into `dir` (which must be empty), checking every
/// entry and hashing every blob; returns its table of contents. Blocking: run it on a
/// blocking thread.
pub(super) fn extract(path: &Path, dir: &Path) -> Result<Toc, BundleError> {
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
