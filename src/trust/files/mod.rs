//! The `/tuf/` files as the server sends them, from memory instead of a database round
//! trip per request:
//!
//! - metadata by version (`N.ROLE.json`) and targets by hash never change once stored,
//!   so they sit in a byte-bounded cache ([`cache`]) and are never checked again;
//! - `timestamp.json` and `root.json` (the newest versions) are kept with the store's
//!   [`Stamp`](crate::store::Stamp) taken before reading them, and read again when a
//!   later stamp shows a commit since, by this process or another one on the same
//!   database (a CLI `publisher suspend` or `repo rotate-root`, a second replica);
//! - metadata over 1 KiB is also kept gzip-compressed, made once per file
//!   ([`encoding`]), and sent to clients that accept it.
//!
//! Serving from memory beats files written once to disk here: a file would cost an
//! open, a read and a close per request on tokio's blocking pool, where memory costs
//! none (hyper cannot `sendfile`).

mod cache;
mod encoding;

use std::sync::{Arc, RwLock};

pub use encoding::{COMPRESS_OVER, File, Reply, accepts_gzip};

use crate::store::{Stamp, Store, StoreError, StoredMetadata};
use cache::{Cache, Miss};

/// The default memory budget for immutable files. A 10,000-definition index over 20
/// publishers takes about 25 MiB: 10,000 targets of 1.5 KiB plus bookkeeping, and 20
/// roles of 300 KiB with 50 KiB gzip copies.
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;

pub struct Files {
    store: Store,
    immutable: Cache,
    timestamp: Latest,
    root: Latest,
}

impl Files {
    /// `budget`: bytes the immutable files may take in memory.
    pub fn new(store: Store, budget: usize) -> Files {
        Files {
            store,
            immutable: Cache::new(budget),
            timestamp: Latest::new("timestamp"),
            root: Latest::new("root"),
        }
    }

    /// The newest `timestamp.json`; `None` before `repo init`.
    pub async fn timestamp(&self) -> Result<Option<Arc<File>>, StoreError> {
        self.timestamp.get(&self.store).await
    }

    /// The newest `root.json`; `None` before `repo init`.
    pub async fn root(&self) -> Result<Option<Arc<File>>, StoreError> {
        self.root.get(&self.store).await
    }

    /// `VERSION.ROLE.json`.
    pub async fn metadata(
        &self,
        role: &str,
        version: u64,
    ) -> Result<Option<Arc<File>>, StoreError> {
        let key = format!("{version}.{role}");
        let load = || async {
            match self.store.metadata(role, version).await {
                Ok(Some(m)) => Ok(prepare(m).await),
                Ok(None) => Err(Miss::NotFound),
                Err(e) => Err(Miss::Failed(e)),
            }
        };
        found(self.immutable.get_or_load(&key, load).await)
    }

    /// The definition `publisher/name` stored with this sha256 (hex); the tag is the
    /// one the target has always been served with, `"sha256:HEX"`.
    pub async fn target(
        &self,
        publisher: &str,
        name: &str,
        sha256: &str,
    ) -> Result<Option<Arc<File>>, StoreError> {
        let key = format!("{publisher}/{name}/{sha256}");
        let load = || async {
            let hash = format!("sha256:{sha256}");
            match self.store.definition_by_hash(publisher, name, &hash).await {
                // YAML is not compressed: definitions are small, and nginx's usual
                // configuration (gzip_types) leaves YAML alone as well.
                Ok(Some(bytes)) => Ok(File::new(bytes, format!("\"{hash}\""), false)),
                Ok(None) => Err(Miss::NotFound),
                Err(e) => Err(Miss::Failed(e)),
            }
        };
        found(self.immutable.get_or_load(&key, load).await)
    }

    /// Bytes and files held by the immutable cache.
    pub fn cache_usage(&self) -> (usize, usize) {
        self.immutable.usage()
    }
}

fn found(r: Result<Arc<File>, Miss<StoreError>>) -> Result<Option<Arc<File>>, StoreError> {
    match r {
        Ok(file) => Ok(Some(file)),
        Err(Miss::NotFound) => Ok(None),
        Err(Miss::Failed(e)) => Err(e),
    }
}

/// Metadata as served, tagged with its sha256; compressing a large role takes
/// milliseconds, so it runs off the async workers.
async fn prepare(m: StoredMetadata) -> File {
    let etag = format!("\"{}\"", m.sha256);
    if m.bytes.len() <= COMPRESS_OVER {
        return File::new(m.bytes, etag, true);
    }
    let bytes = m.bytes;
    match tokio::task::spawn_blocking(move || File::new(bytes, etag, true)).await {
        Ok(file) => file,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// The newest version of a role that changes (timestamp, root).
struct Latest {
    role: &'static str,
    current: RwLock<Option<Current>>,
}

struct Current {
    /// Taken before `file` was read.
    stamp: Stamp,
    sha256: String,
    file: Arc<File>,
}

impl Latest {
    fn new(role: &'static str) -> Latest {
        Latest {
            role,
            current: RwLock::new(None),
        }
    }

    async fn get(&self, store: &Store) -> Result<Option<Arc<File>>, StoreError> {
        let stamp = store.metadata_stamp().await?;
        let reusable = {
            let current = self.current.read().expect("latest lock");
            match current.as_ref() {
                Some(c) if stamp.unchanged_since(&c.stamp) => return Ok(Some(c.file.clone())),
                Some(c) => Some((c.sha256.clone(), c.file.clone())),
                None => None,
            }
        };
        let Some(m) = store.latest_metadata(self.role).await? else {
            return Ok(None);
        };
        // Something was committed, but not necessarily this role: keep the prepared file
        // (and its gzip copy) when the bytes are the same.
        let sha256 = m.sha256.clone();
        let file = match reusable {
            Some((sha, file)) if sha == sha256 => file,
            _ => Arc::new(prepare(m).await),
        };
        *self.current.write().expect("latest lock") = Some(Current {
            stamp,
            sha256,
            file: file.clone(),
        });
        Ok(Some(file))
    }
}
