//! `marketplace repo export DIR`: the current `/tuf/` tree as static files, laid out as
//! the TUF specification's consistent snapshots name them, so that any plain web server,
//! CDN or a copy carried into an air-gapped site serves an index every TUF client (the
//! sync worker, python-tuf) syncs from:
//!
//! ```text
//! DIR/metadata/N.root.json        every root version (clients walk the chain)
//! DIR/metadata/root.json          the newest root, for bootstrapping by hand
//! DIR/metadata/N.ROLE.json        targets, snapshot and every role the snapshot lists
//! DIR/metadata/timestamp.json     written last
//! DIR/targets/PUBLISHER/NAME/HASH.VERSION.yaml
//! ```
//!
//! Files are immutable by name except `timestamp.json` and `root.json`: an existing one
//! is left alone (so exporting again into the same folder writes only what is new) and
//! every file is written to a temporary name, synced and renamed, with targets first and
//! `timestamp.json` last, so a client reading the folder during an export never sees a
//! timestamp naming files that are not there yet.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use tough::schema::{Signed, Targets};

use crate::store::Store;
use crate::trust::TrustError;

/// What an export wrote.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Exported {
    pub metadata_files: usize,
    pub target_files: usize,
    /// Files already present with the same name (immutable content), left alone.
    pub unchanged: usize,
    pub bytes_written: u64,
    pub timestamp_version: u64,
}

/// Writes the current index under `dir` (the folder served as `/tuf/`).
pub async fn export(store: &Store, dir: &Path) -> Result<Exported, TrustError> {
    let state = super::state::current(store)
        .await?
        .ok_or(TrustError::NotInitialized)?;
    let io = |what: &Path, e: std::io::Error| TrustError::Io(what.display().to_string(), e);
    let (meta_dir, targets_dir) = (dir.join("metadata"), dir.join("targets"));
    for d in [&meta_dir, &targets_dir] {
        std::fs::create_dir_all(d).map_err(|e| io(d, e))?;
    }
    let mut out = Exported {
        timestamp_version: state.timestamp.stored.version,
        ..Exported::default()
    };

    // Targets: every file any role in the snapshot lists (bins of older layouts list
    // nothing the current ones do not).
    let snapshot = &state.snapshot.signed.signed;
    let mut roles = Vec::new();
    for (file, meta) in &snapshot.meta {
        let Some(role) = file.strip_suffix(".json") else {
            continue;
        };
        let stored = store
            .metadata(role, meta.version.get())
            .await?
            .ok_or_else(|| TrustError::Corrupt(format!("{role} v{} is missing", meta.version)))?;
        roles.push(stored);
    }
    let mut written = BTreeSet::new();
    for stored in roles.iter().filter(|m| m.role != "targets") {
        let signed: Signed<Targets> = serde_json::from_slice(&stored.bytes)
            .map_err(|e| TrustError::Corrupt(format!("{}: {e}", stored.role)))?;
        for (name, target) in &signed.signed.targets {
            let raw = name.raw();
            let parts: Vec<&str> = raw.split('/').collect();
            let [publisher, plugin, file] = parts[..] else {
                return Err(TrustError::Corrupt(format!(
                    "target {raw} is not P/NAME/FILE"
                )));
            };
            let hash = hex::encode(target.hashes.sha256.as_ref());
            let path = targets_dir
                .join(publisher)
                .join(plugin)
                .join(format!("{hash}.{file}"));
            if !written.insert(path.clone()) {
                continue;
            }
            if path.exists() {
                out.unchanged += 1;
                continue;
            }
            let bytes = store
                .definition_by_hash(publisher, plugin, &format!("sha256:{hash}"))
                .await?
                .ok_or_else(|| TrustError::Corrupt(format!("the bytes of {raw} are missing")))?;
            write_atomic(&path, &bytes).map_err(|e| io(&path, e))?;
            out.target_files += 1;
            out.bytes_written += bytes.len() as u64;
        }
    }

    // Metadata below the timestamp, immutable by name: roles, then the root chain.
    let mut immutable: Vec<(PathBuf, Vec<u8>)> = roles
        .iter()
        .map(|m| {
            (
                meta_dir.join(format!("{}.{}.json", m.version, m.role)),
                m.bytes.clone(),
            )
        })
        .collect();
    immutable.push((
        meta_dir.join(format!("{}.snapshot.json", state.snapshot.stored.version)),
        state.snapshot.stored.bytes.clone(),
    ));
    for v in 1..=state.root.stored.version {
        let root = store
            .metadata("root", v)
            .await?
            .ok_or_else(|| TrustError::Corrupt(format!("root v{v} is missing")))?;
        immutable.push((meta_dir.join(format!("{v}.root.json")), root.bytes));
    }
    for (path, bytes) in immutable {
        if path.exists() {
            out.unchanged += 1;
            continue;
        }
        write_atomic(&path, &bytes).map_err(|e| io(&path, e))?;
        out.metadata_files += 1;
        out.bytes_written += bytes.len() as u64;
    }
    for (name, bytes) in [
        ("root.json", &state.root.stored.bytes),
        ("timestamp.json", &state.timestamp.stored.bytes),
    ] {
        let path = meta_dir.join(name);
        write_atomic(&path, bytes).map_err(|e| io(&path, e))?;
        out.metadata_files += 1;
        out.bytes_written += bytes.len() as u64;
    }
    Ok(out)
}

/// Temporary file in the same folder, synced, renamed over `path`, folder synced.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
