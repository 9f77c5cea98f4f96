//! One HTTP GET with a deadline and a size cap: what every file of a marketplace's index
//! is fetched with. A server that trickles bytes hits the deadline, one that sends too
//! much is cut off at the cap, and each case is told apart so the round reports it as
//! `timeout`, `invalid_metadata` (oversized) or `unreachable`.

use std::time::Duration;

use url::Url;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    #[error("no complete answer within {}", crate::clock::human_duration(.0.as_secs() as i64))]
    Timeout(Duration),
    #[error("larger than the {0} bytes allowed")]
    TooLarge(usize),
    #[error("{0}")]
    Failed(String),
}

/// An HTTP client for TUF files; cheap to clone (connections are shared).
#[derive(Debug, Clone)]
pub struct Fetcher {
    client: reqwest::Client,
    deadline: Duration,
}

impl Fetcher {
    /// A client whose requests each end within `deadline`, headers and body included.
    pub fn new(deadline: Duration) -> Result<Fetcher, reqwest::Error> {
        let client = reqwest::Client::builder()
            .connect_timeout(deadline.min(Duration::from_secs(10)))
            .user_agent(concat!("fundament-marketplace/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Fetcher { client, deadline })
    }

    /// The same connections with another per-request deadline.
    pub fn with_deadline(&self, deadline: Duration) -> Fetcher {
        Fetcher {
            client: self.client.clone(),
            deadline,
        }
    }

    /// GETs `url`: `None` on 404 (and 403, which static file servers and buckets answer
    /// for a missing file), the body on success, never more than `max` bytes read.
    pub async fn get(&self, url: Url, max: usize) -> Result<Option<Vec<u8>>, FetchError> {
        match tokio::time::timeout(self.deadline, self.get_inner(url, max)).await {
            Ok(result) => result,
            Err(_) => Err(FetchError::Timeout(self.deadline)),
        }
    }

    async fn get_inner(&self, url: Url, max: usize) -> Result<Option<Vec<u8>>, FetchError> {
        let mut resp = self.client.get(url).send().await.map_err(failed)?;
        match resp.status() {
            s if s.is_success() => {}
            reqwest::StatusCode::NOT_FOUND | reqwest::StatusCode::FORBIDDEN => return Ok(None),
            s => return Err(FetchError::Failed(format!("HTTP status {s}"))),
        }
        if resp.content_length().is_some_and(|n| n > max as u64) {
            return Err(FetchError::TooLarge(max));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > max {
                return Err(FetchError::TooLarge(max));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Some(body))
    }
}

/// reqwest's message with its causes ("error sending request: connection refused").
fn failed(e: reqwest::Error) -> FetchError {
    let mut message = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        cause = c.source();
    }
    FetchError::Failed(message)
}
