//! tough's TUF client (AWS's, used by Bottlerocket) over HTTP: an independent verifier of
//! what the server serves, beside python-tuf. The sync worker has its own client
//! (`marketplace::trust::client`); tough loads every delegated role at once and fails as
//! a whole, which is what these tests want from a referee.

use std::path::Path;

use tough::{RepositoryLoader, Transport, TransportError, TransportErrorKind, TransportStream};
use url::Url;

#[derive(Debug, Clone)]
struct Http(reqwest::Client);

#[tough::async_trait]
impl Transport for Http {
    async fn fetch(&self, url: Url) -> Result<TransportStream, TransportError> {
        let other = |e: Box<dyn std::error::Error + Send + Sync>| {
            TransportError::new_with_cause(TransportErrorKind::Other, url.clone(), e)
        };
        let resp = self
            .0
            .get(url.clone())
            .send()
            .await
            .map_err(|e| other(e.into()))?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Err(TransportError::new(TransportErrorKind::FileNotFound, url));
        }
        if !resp.status().is_success() {
            return Err(other(format!("HTTP status {}", resp.status()).into()));
        }
        let body = resp.bytes().await.map_err(|e| other(e.into()))?;
        Ok(Box::pin(futures_util::stream::iter([Ok(body)])))
    }
}

/// Loads and verifies the index at `base` (ending in `/`) from `root`, keeping tough's
/// trusted state in `datastore`.
pub async fn load(
    root: &[u8],
    base: &Url,
    datastore: &Path,
) -> Result<tough::Repository, tough::error::Error> {
    std::fs::create_dir_all(datastore).unwrap();
    RepositoryLoader::new(
        &root,
        base.join("tuf/metadata/").unwrap(),
        base.join("tuf/targets/").unwrap(),
    )
    .transport(Http(reqwest::Client::new()))
    .datastore(datastore)
    .load()
    .await
}
