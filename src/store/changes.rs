//! How a reader keeping signed metadata in memory learns, without a query, that it may
//! have changed: a counter this process bumps after each commit of metadata, and the
//! state of the database's write-ahead log, which every commit by any process (the CLI's
//! `publisher suspend`, `repo rotate-root`, another replica) appends to.
//!
//! A stamp costs an atomic load and one `stat` of the `-wal` file. Two stamps being
//! equal proves nothing was committed in between only when the log's modification time
//! was already [`SETTLE`] in the past at the first: file times are coarse (a kernel
//! tick), two commits can land within one, and a commit writes the log a moment before
//! it becomes visible to readers. So a reader that loads while the log changed recently
//! must load again on its next request, until the log has been quiet for `SETTLE`.

use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// How long the write-ahead log must have been unmodified before a stamp is trusted.
/// Far above a kernel tick and the gap between writing a commit and publishing it.
pub const SETTLE: Duration = Duration::from_secs(2);

pub(super) struct Changes {
    /// Commits of metadata by this process (through any clone of the `Store`).
    generation: AtomicU64,
    /// The `-wal` file beside the database; `None` for an in-memory database, which no
    /// other process can write.
    wal: Option<Wal>,
}

/// The log, kept open: `fstat` on it costs a fraction of a `stat` by path. SQLite never
/// locks the log file (its locks are on the database and `-shm` files), so holding it
/// open changes nothing for SQLite; when SQLite removes it (the last connection to the
/// database closed) the open file reports no links, and the path is looked up again.
struct Wal {
    path: PathBuf,
    file: RwLock<Option<std::fs::File>>,
}

/// What [`crate::store::Store::metadata_stamp`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    generation: u64,
    wal: Option<WalState>,
    /// The log was quiet for [`SETTLE`] when this stamp was taken.
    settled: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WalState {
    inode: u64,
    len: u64,
    modified: SystemTime,
}

impl Stamp {
    /// True when nothing can have been committed between `earlier` and `self`: what
    /// was read after taking `earlier` is still current.
    pub fn unchanged_since(&self, earlier: &Stamp) -> bool {
        earlier.settled && self.generation == earlier.generation && self.wal == earlier.wal
    }
}

impl Changes {
    pub(super) fn new(database: Option<&Path>) -> Changes {
        Changes {
            generation: AtomicU64::new(0),
            wal: database.map(|db| {
                let mut name = db.as_os_str().to_owned();
                name.push("-wal");
                Wal {
                    path: PathBuf::from(name),
                    file: RwLock::new(None),
                }
            }),
        }
    }

    /// Called after (never before) a commit that stored metadata.
    pub(super) fn committed(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub(super) fn stamp(&self) -> Stamp {
        let generation = self.generation.load(Ordering::Acquire);
        let Some(wal) = &self.wal else {
            return Stamp {
                generation,
                wal: None,
                settled: true,
            };
        };
        let wal = wal.state();
        // A modification time in the future (the clock was set back) is never settled.
        let settled = wal.is_none_or(|w| {
            SystemTime::now()
                .duration_since(w.modified)
                .is_ok_and(|age| age >= SETTLE)
        });
        Stamp {
            generation,
            wal,
            settled,
        }
    }
}

impl Wal {
    /// `None` while there is no log: every connection closed, so SQLite checkpointed
    /// and removed it. That is a state like any other; the next commit creates it anew.
    fn state(&self) -> Option<WalState> {
        if let Some(file) = self.file.read().expect("wal lock").as_ref()
            && let Ok(m) = file.metadata()
            && linked(&m)
        {
            return Some(WalState::of(&m));
        }
        let mut file = self.file.write().expect("wal lock");
        *file = std::fs::File::open(&self.path).ok();
        file.as_ref()
            .and_then(|f| f.metadata().ok())
            .map(|m| WalState::of(&m))
    }
}

impl WalState {
    fn of(m: &std::fs::Metadata) -> WalState {
        WalState {
            inode: inode(m),
            len: m.len(),
            modified: m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        }
    }
}

#[cfg(unix)]
fn inode(m: &std::fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(m)
}

#[cfg(not(unix))]
fn inode(_: &std::fs::Metadata) -> u64 {
    0
}

/// Still the file at its path (not removed since it was opened).
#[cfg(unix)]
fn linked(m: &std::fs::Metadata) -> bool {
    std::os::unix::fs::MetadataExt::nlink(m) > 0
}

/// Without link counts, the path is looked up every time.
#[cfg(not(unix))]
fn linked(_: &std::fs::Metadata) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_in_this_process_changes_the_stamp() {
        let changes = Changes::new(None);
        let before = changes.stamp();
        assert!(changes.stamp().unchanged_since(&before));
        changes.committed();
        assert!(!changes.stamp().unchanged_since(&before));
    }

    #[test]
    fn a_recently_written_log_is_not_trusted_until_it_settles() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("x.db");
        let changes = Changes::new(Some(&db));
        // No log yet: settled.
        let none = changes.stamp();
        assert!(changes.stamp().unchanged_since(&none));

        let wal = dir.path().join("x.db-wal");
        std::fs::write(&wal, b"frame").unwrap();
        let fresh = changes.stamp();
        assert!(!fresh.unchanged_since(&none), "the log appeared");
        assert!(
            !changes.stamp().unchanged_since(&fresh),
            "just written: not trusted even though nothing changed since"
        );

        // The same log, last written long ago: trusted; then a write changes it.
        let age = |wal: &std::path::Path| {
            std::fs::File::options()
                .write(true)
                .open(wal)
                .unwrap()
                .set_modified(SystemTime::now() - 2 * SETTLE)
                .unwrap();
        };
        age(&wal);
        let settled = changes.stamp();
        assert!(changes.stamp().unchanged_since(&settled));
        std::fs::write(&wal, b"frame frame").unwrap();
        assert!(!changes.stamp().unchanged_since(&settled));

        // Removed (SQLite's last connection closed) and created again: both seen,
        // though the log was held open.
        age(&wal);
        let before = changes.stamp();
        std::fs::remove_file(&wal).unwrap();
        let removed = changes.stamp();
        assert!(!removed.unchanged_since(&before));
        assert_eq!(removed.wal, None);
        std::fs::write(&wal, b"frame frame").unwrap();
        age(&wal);
        assert!(!changes.stamp().unchanged_since(&removed));
        assert!(changes.stamp().wal.is_some());
    }
}
