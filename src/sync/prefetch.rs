//! Fetching a cold round's metadata in parallel. tough loads the delegated roles one
//! after another (100 publishers: 100 round trips and most of a cold round's metadata
//! time); this fetches every role the snapshot lists at once, beforehand, and hands tough
//! the bytes when it asks for them.
//!
//! Nothing here is trusted: tough verifies each file exactly as if it had fetched it
//! (hash and length from the snapshot, signatures, versions). A file tough asks for that
//! was not prefetched, or any failure here, simply means tough fetches it itself.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use tough::schema::{Signed, Snapshot, Timestamp};
use tough::{Transport, TransportError, TransportStream};
use url::Url;

use crate::trust::client::{HttpTransport, MAX_RESPONSE_BYTES};

/// The transport tough uses in a round: prefetched files first, then the network.
#[derive(Debug, Clone)]
pub struct Prefetched {
    inner: HttpTransport,
    files: Arc<Mutex<HashMap<Url, Vec<u8>>>>,
}

impl Prefetched {
    /// Prefetches the metadata the marketplace at `base` lists now (best effort).
    pub async fn new(inner: HttpTransport, base: &Url) -> Prefetched {
        let files = fetch_listed(&inner, base).await.unwrap_or_default();
        Prefetched {
            inner,
            files: Arc::new(Mutex::new(files)),
        }
    }
}

#[tough::async_trait]
impl Transport for Prefetched {
    async fn fetch(&self, url: Url) -> Result<TransportStream, TransportError> {
        let hit = self.files.lock().expect("prefetch lock").remove(&url);
        match hit {
            Some(bytes) => Ok(Box::pin(futures_util::stream::iter([Ok(bytes.into())]))),
            None => self.inner.fetch(url).await,
        }
    }
}

/// timestamp.json, then the snapshot it names, then every role that snapshot lists
/// (by their versioned names), 16 at a time. `None` on the first problem.
async fn fetch_listed(t: &HttpTransport, base: &Url) -> Option<HashMap<Url, Vec<u8>>> {
    let meta = base.join("tuf/metadata/").ok()?;
    let timestamp = t
        .get(meta.join("timestamp.json").ok()?, MAX_RESPONSE_BYTES)
        .await
        .ok()??;
    let timestamp: Signed<Timestamp> = serde_json::from_slice(&timestamp).ok()?;
    let version = timestamp.signed.meta.get("snapshot.json")?.version;
    let snapshot_url = meta.join(&format!("{version}.snapshot.json")).ok()?;
    let snapshot = t
        .get(snapshot_url.clone(), MAX_RESPONSE_BYTES)
        .await
        .ok()??;
    let listed: Signed<Snapshot> = serde_json::from_slice(&snapshot).ok()?;
    let mut files = HashMap::from([(snapshot_url, snapshot)]);
    let urls: Vec<(Url, usize)> = listed
        .signed
        .meta
        .iter()
        .filter_map(|(file, m)| {
            let url = meta.join(&format!("{}.{file}", m.version)).ok()?;
            let max = m.length.map_or(MAX_RESPONSE_BYTES, |l| {
                usize::try_from(l).unwrap_or(MAX_RESPONSE_BYTES)
            });
            Some((url, max.min(MAX_RESPONSE_BYTES)))
        })
        .collect();
    let fetched: Vec<Option<(Url, Vec<u8>)>> = futures_util::stream::iter(urls)
        .map(|(url, max)| async move {
            let bytes = t.get(url.clone(), max).await.ok()??;
            Some((url, bytes))
        })
        .buffer_unordered(16)
        .collect()
        .await;
    files.extend(fetched.into_iter().flatten());
    Some(files)
}
