//! Verifying a marketplace's signed index as a client: tough's TUF client over HTTP.
//! The sync worker builds on this; tests use it as our own verifier beside python-tuf.

use std::path::Path;
use std::time::Duration;

use tough::{RepositoryLoader, Transport, TransportError, TransportErrorKind, TransportStream};
use url::Url;

/// The largest response accepted for any one metadata or target file; TUF lengths in
/// snapshot and targets metadata bound most files more tightly.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// HTTP transport for tough with timeouts and a response size cap.
#[derive(Debug, Clone)]
pub struct HttpTransport {
    client: reqwest::Client,
}

impl HttpTransport {
    pub fn new() -> Result<HttpTransport, reqwest::Error> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .user_agent(concat!("fundament-marketplace/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(HttpTransport { client })
    }
}

impl HttpTransport {
    /// GETs one file: `None` on 404, an error on anything but success, and never more
    /// than `max` bytes read.
    pub async fn get(&self, url: Url, max: usize) -> Result<Option<Vec<u8>>, GetError> {
        let failed = |e: reqwest::Error| GetError::Failed(e.to_string());
        let mut resp = self.client.get(url).send().await.map_err(failed)?;
        match resp.status() {
            s if s.is_success() => {}
            reqwest::StatusCode::NOT_FOUND => return Ok(None),
            s => return Err(GetError::Failed(format!("HTTP status {s}"))),
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > max {
                return Err(GetError::TooLarge(max));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Some(body))
    }
}

#[tough::async_trait]
impl Transport for HttpTransport {
    async fn fetch(&self, url: Url) -> Result<TransportStream, TransportError> {
        let other = |e: Box<dyn std::error::Error + Send + Sync>| {
            TransportError::new_with_cause(TransportErrorKind::Other, url.clone(), e)
        };
        let mut resp = self
            .client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| other(e.into()))?;
        match resp.status() {
            s if s.is_success() => {}
            // A missing N+1.root.json is how a client learns the root chain ends here.
            reqwest::StatusCode::NOT_FOUND | reqwest::StatusCode::FORBIDDEN => {
                return Err(TransportError::new(TransportErrorKind::FileNotFound, url));
            }
            s => return Err(other(format!("HTTP status {s}").into())),
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| other(e.into()))? {
            if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(other(
                    format!("response larger than {MAX_RESPONSE_BYTES} bytes").into(),
                ));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Box::pin(futures_util::stream::iter([Ok(body.into())])))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GetError {
    #[error("{0}")]
    Failed(String),
    #[error("response larger than {0} bytes")]
    TooLarge(usize),
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("HTTP client: {0}")]
    Http(#[from] reqwest::Error),
    #[error("{0} is not a usable marketplace URL")]
    Url(String),
    #[error("cannot create the client state directory {0}: {1}")]
    Datastore(String, #[source] std::io::Error),
    #[error("the signed index failed verification: {0}")]
    Verify(Box<tough::error::Error>),
}

impl From<tough::error::Error> for ClientError {
    fn from(e: tough::error::Error) -> Self {
        ClientError::Verify(Box::new(e))
    }
}

/// Loads and verifies a marketplace's index from `base` (e.g. `https://host/`), starting
/// from `trusted_root` and the state kept in `datastore` (rollback is detected across
/// runs because the last trusted metadata is kept there).
pub async fn load(
    trusted_root: &[u8],
    base: &Url,
    datastore: &Path,
) -> Result<tough::Repository, ClientError> {
    load_with(HttpTransport::new()?, trusted_root, base, datastore).await
}

/// [`load`] over a given transport, so a long-running client reuses its connections.
pub async fn load_with<T: Transport + Send + Sync + 'static>(
    transport: T,
    trusted_root: &[u8],
    base: &Url,
    datastore: &Path,
) -> Result<tough::Repository, ClientError> {
    let join = |p: &str| base.join(p).map_err(|_| ClientError::Url(base.to_string()));
    std::fs::create_dir_all(datastore)
        .map_err(|e| ClientError::Datastore(datastore.display().to_string(), e))?;
    let repo = RepositoryLoader::new(&trusted_root, join("tuf/metadata/")?, join("tuf/targets/")?)
        .transport(transport)
        .datastore(datastore)
        .load()
        .await?;
    Ok(repo)
}
