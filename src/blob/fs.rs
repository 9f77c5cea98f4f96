//! Blobs as files under `DATA_DIR/blobs/`: `sha256/ab/abcd…` for each stored blob,
//! `tmp/` for writes in progress.
//!
//! A write goes to a new file in `tmp/` on a blocking thread fed through a bounded
//! channel, so the network, hashing and the disk overlap and at most a few chunks are
//! in memory. Only when the incoming stream has ended and every byte hashed to the
//! expected digest (and length) is the file fsynced, renamed under its digest and the
//! directory fsynced: a crash at any moment leaves either no file under the digest or
//! the whole, verified one. A write that fails or is cancelled removes its temporary
//! file.
//!
//! A process killed mid-write (SIGKILL, power loss) cannot remove its file. Each writer
//! holds an exclusive `flock` on its temporary file from creating it until it is
//! renamed into place, and the kernel releases that lock when the writer's process
//! dies, whatever kills it; so a temporary file nobody holds locked is abandoned, and
//! [`BlobStore::abandoned`] lists exactly those. The rule needs no age and no process
//! ids: it holds for several processes sharing the data directory (`serve` beside
//! `mirror run`, containers in other pid namespaces on one host), where a pid says
//! nothing and a file's age only guesses (a stalled upstream leaves a live write
//! untouched for minutes, while a restart right after a kill must not wait an hour). On
//! NFS, Linux carries `flock` as a POSIX lock to the server.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use tokio::sync::mpsc;

use super::{Abandoned, Blob, BlobError, BlobStore, ByteStream, Digest, Listed};

/// The largest blob accepted when the caller does not know its size.
pub const MAX_UNSIZED_BYTES: u64 = 32 * 1024 * 1024 * 1024;
/// Bytes per read when serving a blob: large enough that a multi-gigabyte layer costs
/// few thread hand-offs and writes, small enough that a slow client holds little
/// memory (at most [`READ_QUEUE`] chunks ahead of it).
const READ_CHUNK: usize = 1024 * 1024;
const READ_QUEUE: usize = 4;
/// Chunks queued between the network and the writer.
const QUEUE: usize = 8;

#[derive(Debug, Clone)]
pub struct FsBlobStore {
    root: PathBuf,
}

impl FsBlobStore {
    /// Opens (creating) the store under `root`. Temporary files of writes that died are
    /// left for [`BlobStore::abandoned`], so `mirror gc` can list them before removing.
    pub fn open(root: &Path) -> Result<FsBlobStore, BlobError> {
        std::fs::create_dir_all(root.join("sha256")).map_err(BlobError::storage("creating"))?;
        std::fs::create_dir_all(root.join("tmp")).map_err(BlobError::storage("creating"))?;
        Ok(FsBlobStore {
            root: root.to_owned(),
        })
    }

    fn path(&self, digest: &Digest) -> PathBuf {
        let hex = digest.hex();
        self.root.join("sha256").join(&hex[..2]).join(hex)
    }
}

/// A temporary file opened and locked, when no writer holds it: the file and its
/// metadata, or `None` when a writer holds it or it is gone (renamed into place).
fn lock_if_abandoned(path: &Path) -> std::io::Result<Option<(File, std::fs::Metadata)>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
        Err(std::fs::TryLockError::Error(e)) => return Err(e),
    }
    // The name may have been taken over since it was opened; only this file counts.
    let meta = file.metadata()?;
    match std::fs::symlink_metadata(path) {
        Ok(now) if same_file(&now, &meta) => Ok(Some((file, meta))),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

#[cfg(not(unix))]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    a.len() == b.len() && a.modified().ok() == b.modified().ok()
}

fn unix_seconds(at: std::io::Result<SystemTime>) -> i64 {
    at.ok()
        .and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs() as i64)
}

fn abandoned(tmp: &Path) -> Result<Vec<Abandoned>, BlobError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(tmp).map_err(BlobError::storage("listing"))? {
        let entry = entry.map_err(BlobError::storage("listing"))?;
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let Some((_, meta)) =
            lock_if_abandoned(&entry.path()).map_err(BlobError::storage("listing"))?
        else {
            continue;
        };
        out.push(Abandoned {
            name: entry.file_name().to_string_lossy().into_owned(),
            size: meta.len(),
            written_at: unix_seconds(meta.modified()),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// What the writer thread is sent.
enum Piece {
    Bytes(Bytes),
    /// The stream ended: check and commit.
    End,
}

impl BlobStore for FsBlobStore {
    fn put(
        &self,
        digest: &Digest,
        size: Option<u64>,
        body: ByteStream,
    ) -> BoxFuture<'_, Result<u64, BlobError>> {
        let digest = digest.clone();
        Box::pin(async move {
            if let Some(n) = self.stat(&digest).await? {
                return Ok(n);
            }
            let limit = size.unwrap_or(MAX_UNSIZED_BYTES);
            let tmp = self.root.join("tmp").join(format!(
                "{}.{}",
                digest.hex(),
                crate::token::random_hex(8)
            ));
            let target = self.path(&digest);
            let (tx, rx) = mpsc::channel(QUEUE);
            let writer = {
                let digest = digest.clone();
                tokio::task::spawn_blocking(move || write(tmp, target, rx, &digest, size))
            };
            let mut body = body;
            let mut seen = 0u64;
            let fed = async {
                while let Some(chunk) = body.next().await {
                    let chunk = chunk.map_err(BlobError::Source)?;
                    seen += chunk.len() as u64;
                    if seen > limit {
                        return Err(BlobError::TooLarge {
                            digest: digest.clone(),
                            limit,
                        });
                    }
                    if tx.send(Piece::Bytes(chunk)).await.is_err() {
                        return Ok(()); // the writer failed: its error is the one to report
                    }
                }
                let _ = tx.send(Piece::End).await;
                Ok(())
            }
            .await;
            // On an error the channel closes without `End`, and the writer removes its file.
            drop(tx);
            let written = writer
                .await
                .map_err(|e| BlobError::storage("writing")(std::io::Error::other(e)));
            fed?;
            written?
        })
    }

    fn stat(&self, digest: &Digest) -> BoxFuture<'_, Result<Option<u64>, BlobError>> {
        let path = self.path(digest);
        Box::pin(async move {
            match tokio::fs::metadata(&path).await {
                Ok(m) => Ok(Some(m.len())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(BlobError::storage("reading")(e)),
            }
        })
    }

    fn open(
        &self,
        digest: &Digest,
        range: Option<Range<u64>>,
    ) -> BoxFuture<'_, Result<Option<Blob>, BlobError>> {
        let path = self.path(digest);
        let digest = digest.clone();
        Box::pin(async move {
            let opened =
                tokio::task::spawn_blocking(move || -> std::io::Result<Option<(File, u64)>> {
                    match File::open(&path) {
                        Ok(f) => {
                            let size = f.metadata()?.len();
                            Ok(Some((f, size)))
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                        Err(e) => Err(e),
                    }
                })
                .await
                .map_err(|e| BlobError::storage("opening")(std::io::Error::other(e)))?
                .map_err(BlobError::storage("opening"))?;
            let Some((file, size)) = opened else {
                return Ok(None);
            };
            let range = range.unwrap_or(0..size);
            if range.start > range.end || range.end > size {
                return Err(BlobError::BadRange {
                    digest,
                    start: range.start,
                    end: range.end,
                    size,
                });
            }
            Ok(Some(Blob {
                size,
                range: range.clone(),
                body: read(file, range),
            }))
        })
    }

    fn delete(&self, digest: &Digest) -> BoxFuture<'_, Result<bool, BlobError>> {
        let path = self.path(digest);
        Box::pin(async move {
            match tokio::fs::remove_file(&path).await {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(BlobError::storage("deleting")(e)),
            }
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Listed>, BlobError>> {
        let root = self.root.join("sha256");
        Box::pin(async move {
            tokio::task::spawn_blocking(move || list(&root))
                .await
                .map_err(|e| BlobError::storage("listing")(std::io::Error::other(e)))?
        })
    }

    fn abandoned(&self) -> BoxFuture<'_, Result<Vec<Abandoned>, BlobError>> {
        let tmp = self.root.join("tmp");
        Box::pin(async move {
            tokio::task::spawn_blocking(move || abandoned(&tmp))
                .await
                .map_err(|e| BlobError::storage("listing")(std::io::Error::other(e)))?
        })
    }

    fn remove_abandoned(&self, which: &Abandoned) -> BoxFuture<'_, Result<bool, BlobError>> {
        let name = which.name.clone();
        let tmp = self.root.join("tmp");
        Box::pin(async move {
            // Names come from `abandoned`; anything else is not ours to touch.
            if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
                return Ok(false);
            }
            let path = tmp.join(name);
            tokio::task::spawn_blocking(move || -> std::io::Result<bool> {
                // Unlinked while locked, so no writer can have taken it in between.
                let Some((_locked, _)) = lock_if_abandoned(&path)? else {
                    return Ok(false);
                };
                match std::fs::remove_file(&path) {
                    Ok(()) => Ok(true),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                    Err(e) => Err(e),
                }
            })
            .await
            .map_err(|e| BlobError::storage("cleaning")(std::io::Error::other(e)))?
            .map_err(BlobError::storage("cleaning"))
        })
    }
}

/// The writer thread: hashes and writes what arrives; on `End` checks the digest and
/// size, fsyncs, renames into place and fsyncs the directory. Without `End` (the
/// caller failed or was dropped), or on any mismatch, the temporary file is removed.
fn write(
    tmp: PathBuf,
    target: PathBuf,
    mut rx: mpsc::Receiver<Piece>,
    digest: &Digest,
    size: Option<u64>,
) -> Result<u64, BlobError> {
    use sha2::Digest as _;
    struct Remove<'a>(&'a Path, bool);
    impl Drop for Remove<'_> {
        fn drop(&mut self) {
            if self.1 {
                let _ = std::fs::remove_file(self.0);
            }
        }
    }
    let (mut file, tmp) = create_locked(tmp)?;
    let mut guard = Remove(&tmp, true);
    let mut hasher = sha2::Sha256::new();
    let mut written = 0u64;
    loop {
        match rx.blocking_recv() {
            Some(Piece::Bytes(chunk)) => {
                hasher.update(&chunk);
                file.write_all(&chunk)
                    .map_err(BlobError::storage("writing"))?;
                written += chunk.len() as u64;
            }
            Some(Piece::End) => break,
            None => {
                return Err(BlobError::Source(std::io::Error::other(
                    "the write was abandoned",
                )));
            }
        }
    }
    let actual = Digest::from_hash(&hasher.finalize());
    if actual != *digest {
        return Err(BlobError::DigestMismatch {
            expected: digest.clone(),
            actual,
        });
    }
    if let Some(expected) = size.filter(|&s| s != written) {
        return Err(BlobError::SizeMismatch {
            digest: digest.clone(),
            expected,
            actual: written,
        });
    }
    file.sync_all().map_err(BlobError::storage("syncing"))?;
    let dir = target.parent().expect("a blob path has a parent");
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(BlobError::storage("creating"))?;
        sync_dir(dir.parent().expect("a shard has a parent"))?;
    }
    // Still open, so still locked: the file is never abandoned-looking before it has
    // its name.
    std::fs::rename(&tmp, &target).map_err(BlobError::storage("renaming"))?;
    guard.1 = false;
    drop(file);
    sync_dir(dir)?;
    Ok(written)
}

/// Creates the temporary file `tmp` (a fresh name) and takes its lock. A cleaner can
/// see the file between the two steps and remove it as abandoned; the writer then finds
/// its name gone or taken, and starts again under a new one.
fn create_locked(tmp: PathBuf) -> Result<(File, PathBuf), BlobError> {
    let mut tmp = tmp;
    for _ in 0..8 {
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(BlobError::storage("creating a temporary file"))?;
        file.lock()
            .map_err(BlobError::storage("locking a temporary file"))?;
        let ours = file.metadata().map_err(BlobError::storage("locking"))?;
        if std::fs::symlink_metadata(&tmp).is_ok_and(|now| same_file(&now, &ours)) {
            return Ok((file, tmp));
        }
        let name = tmp
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stem = name.split('.').next().unwrap_or_default().to_owned();
        tmp.set_file_name(format!("{stem}.{}", crate::token::random_hex(8)));
    }
    Err(BlobError::storage("creating a temporary file")(
        std::io::Error::other("its name kept being removed"),
    ))
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> Result<(), BlobError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(BlobError::storage("syncing a directory"))
}

#[cfg(not(unix))]
fn sync_dir(_: &Path) -> Result<(), BlobError> {
    Ok(())
}

/// `range` of `file` as a stream, read on a blocking thread a chunk ahead of the client.
fn read(mut file: File, range: Range<u64>) -> ByteStream {
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(READ_QUEUE);
    tokio::task::spawn_blocking(move || {
        if let Err(e) = file.seek(SeekFrom::Start(range.start)) {
            let _ = tx.blocking_send(Err(e));
            return;
        }
        let mut left = range.end - range.start;
        while left > 0 {
            let want = READ_CHUNK.min(left as usize);
            // `read_to_end` fills spare capacity without zeroing it first.
            let mut buf = Vec::with_capacity(want);
            let result = (&mut file)
                .take(want as u64)
                .read_to_end(&mut buf)
                .and_then(|n| {
                    if n == 0 {
                        Err(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "the blob is shorter than its listed size",
                        ))
                    } else {
                        Ok(n)
                    }
                });
            let item = result.map(|n| {
                left -= n as u64;
                Bytes::from(buf)
            });
            let failed = item.is_err();
            // A client that went away closes the channel: stop reading.
            if tx.blocking_send(item).is_err() || failed {
                return;
            }
        }
    });
    Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }))
}

fn list(root: &Path) -> Result<Vec<Listed>, BlobError> {
    let mut out = Vec::new();
    for shard in std::fs::read_dir(root).map_err(BlobError::storage("listing"))? {
        let shard = shard.map_err(BlobError::storage("listing"))?;
        if !shard.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        for entry in std::fs::read_dir(shard.path()).map_err(BlobError::storage("listing"))? {
            let entry = entry.map_err(BlobError::storage("listing"))?;
            let name = entry.file_name();
            // Anything else in the folder is not ours to report or delete.
            let Ok(digest) = format!("sha256:{}", name.to_string_lossy()).parse::<Digest>() else {
                continue;
            };
            let meta = entry.metadata().map_err(BlobError::storage("listing"))?;
            let written_at = unix_seconds(meta.modified());
            out.push(Listed {
                digest,
                size: meta.len(),
                written_at,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
