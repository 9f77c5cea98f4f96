//! Publisher side over HTTP: fetch the publisher's current roles from a marketplace,
//! sign an update (`publish::plan`) and upload it, again on fresh metadata when another
//! update landed first (409), with backoff until a deadline (`retry`). `marketplace
//! publish`, `yank` and `resign` and the publish benchmark are thin layers over this.
//!
//! Nothing the server sends is signed on trust: the top role must carry a signature by
//! one of the publisher's own keys, and each bin a valid signature under the top role's
//! delegation, so a server cannot slip targets into what the publisher signs.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use tough::schema::Targets;

use super::plan::{Change, Current, Limits, Plan, Upload, delegations_for, plan};
use super::retry::RetryPolicy;
use crate::trust::client::MAX_RESPONSE_BYTES;
use crate::trust::envelope;
use crate::trust::{PublicKey, SigningKey, TrustError};

#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("HTTP: {0}")]
    Http(#[from] reqwest::Error),
    #[error("the server refused ({status}): {message}")]
    Refused {
        status: StatusCode,
        code: String,
        message: String,
    },
    #[error(
        "refusing to build on role metadata that none of these keys signed: {0} (after `marketplace publisher rotate-key`, sign with the new key; a role still signed by the old one moves with `marketplace resign --old-key OLD_PUBKEY`)"
    )]
    Untrusted(String),
    #[error("the server's answer is unusable: {0}")]
    Protocol(String),
    #[error("{0} has published nothing yet")]
    NothingPublished(String),
    #[error(
        "--expires {given} is outside what this marketplace accepts: roles valid for between {min} and {max} (with 10 seconds to spare for the upload)"
    )]
    Lifetime {
        given: String,
        min: String,
        max: String,
    },
    #[error(transparent)]
    Trust(#[from] TrustError),
    #[error(
        "gave up after {attempts} attempt(s) over {:.1} s: {why}; last answer: {last} (a longer --retry-deadline keeps trying)",
        elapsed.as_secs_f64()
    )]
    GaveUp {
        attempts: u32,
        elapsed: Duration,
        why: &'static str,
        last: Box<UploadError>,
    },
}

impl UploadError {
    /// Why trying again on fresh metadata may succeed, or `None` when this answer is
    /// final. A conflict (another update of the role landed first), a failed
    /// connection (nothing was sent), the server's 503 (its database did not answer:
    /// nothing was stored) and a balancer's 502 or 504 (the replica it chose went away;
    /// another answers the retry) qualify: any other refusal is the same on every
    /// attempt, and after a timeout or a broken connection the update may have landed.
    fn retry_reason(&self) -> Option<&'static str> {
        match self {
            UploadError::Refused { status, .. } if *status == StatusCode::CONFLICT => Some(
                "the index kept changing: another update of this publisher's role landed first each time",
            ),
            UploadError::Refused { status, .. }
                if matches!(
                    *status,
                    StatusCode::BAD_GATEWAY
                        | StatusCode::SERVICE_UNAVAILABLE
                        | StatusCode::GATEWAY_TIMEOUT
                ) =>
            {
                Some("the marketplace kept answering that it is unavailable")
            }
            UploadError::Http(e) if e.is_connect() => Some("the marketplace could not be reached"),
            _ => None,
        }
    }
}

/// What an accepted update did: the server's answer and what was uploaded.
#[derive(Debug)]
pub struct Uploaded {
    /// The server's JSON answer (`accept::Published`).
    pub answer: serde_json::Value,
    /// How many targets the uploaded roles list.
    pub targets: usize,
    /// How many bins were uploaded (0 for a flat role).
    pub bins: usize,
    /// Attempts it took (1 when nothing else changed the role meanwhile).
    pub attempts: u32,
    /// From the first attempt's start to the server's acceptance.
    pub elapsed: Duration,
}

/// A marketplace, as one publisher (identified by its API token) talks to it.
pub struct PublisherClient {
    http: reqwest::Client,
    base: String,
    token: String,
    publisher: String,
    retry: RetryPolicy,
    account: Account,
}

/// What the marketplace says of the token's publisher (`GET /api/v1/publishers/me`).
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Account {
    pub publisher: String,
    #[serde(default)]
    pub suspended: bool,
    /// The role lifetimes the server accepts, in seconds (min, max).
    #[serde(default)]
    pub role_lifetime: Option<LifetimeRange>,
    /// The publisher's delegated roles, earliest expiry first.
    #[serde(default)]
    pub roles: Vec<crate::trust::expiry::RoleView>,
}

#[derive(Debug, Clone, Copy, serde::Deserialize)]
pub struct LifetimeRange {
    pub min_seconds: u64,
    pub max_seconds: u64,
}

impl PublisherClient {
    /// Connects to `base` (e.g. `https://plugins.example.com`) and asks which publisher
    /// `token` belongs to.
    pub async fn connect(base: &str, token: &str) -> Result<PublisherClient, UploadError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            .user_agent(concat!("fundament-marketplace/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let base = base.trim_end_matches('/').to_owned();
        let account = fetch_account(&http, &base, token).await?;
        Ok(PublisherClient {
            http,
            base,
            token: token.to_owned(),
            publisher: account.publisher.clone(),
            retry: RetryPolicy::default(),
            account,
        })
    }

    /// The publisher's account as of [`PublisherClient::connect`] (or the last
    /// [`PublisherClient::refresh_account`]).
    pub fn account(&self) -> &Account {
        &self.account
    }

    /// Asks the marketplace again (after an update, for the roles' new expiry).
    pub async fn refresh_account(&mut self) -> Result<&Account, UploadError> {
        self.account = fetch_account(&self.http, &self.base, &self.token).await?;
        Ok(&self.account)
    }

    /// Refuses, before anything is signed, a role lifetime the marketplace would refuse.
    pub fn check_lifetime(&self, lifetime: Duration) -> Result<(), UploadError> {
        let Some(range) = self.account.role_lifetime else {
            return Ok(());
        };
        // The role is signed now and judged on arrival (each retry signs afresh): keep
        // a few seconds for the upload.
        let secs = lifetime.as_secs();
        if secs < range.min_seconds.saturating_add(10) || secs > range.max_seconds {
            let human = |s: u64| crate::clock::human_duration(i64::try_from(s).unwrap_or(i64::MAX));
            return Err(UploadError::Lifetime {
                given: human(secs),
                min: human(range.min_seconds),
                max: human(range.max_seconds),
            });
        }
        Ok(())
    }

    /// Retries updates on conflict with `retry` instead of the default (60 s).
    pub fn with_retry(mut self, retry: RetryPolicy) -> PublisherClient {
        self.retry = retry;
        self
    }

    pub fn publisher(&self) -> &str {
        &self.publisher
    }

    /// The publisher's current top role, accepted only with a signature by one of
    /// `trusted` (the publisher's own keys). No bins are fetched yet.
    pub async fn current(&self, trusted: &[PublicKey]) -> Result<Current, UploadError> {
        let Some(served) = self.role(None).await? else {
            return Ok(Current::default());
        };
        let top = envelope::parse::<Targets>(&self.publisher, &served).map_err(|e| {
            UploadError::Protocol(format!("role metadata is not TUF targets metadata: {e}"))
        })?;
        top.verify_delegated(
            &delegations_for(&self.publisher, trusted, 1)?,
            &self.publisher,
        )
        .map_err(|e| UploadError::Untrusted(e.to_string()))?;
        Ok(Current {
            top: Some(top.typed),
            bins: Default::default(),
        })
    }

    /// `GET /api/v1/publishers/P/role[?bin=NAME]`, the bytes as served; `None` when there
    /// is no such role yet.
    async fn role(&self, bin: Option<&str>) -> Result<Option<Vec<u8>>, UploadError> {
        // Bin names are the publisher name, a dot and hex digits: nothing to escape.
        let query = bin.map(|b| format!("?bin={b}")).unwrap_or_default();
        let resp = self
            .http
            .get(format!(
                "{}/api/v1/publishers/{}/role{query}",
                self.base, self.publisher
            ))
            .send()
            .await?;
        if resp.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !resp.status().is_success() {
            return Err(refusal(resp).await);
        }
        Ok(Some(capped(resp).await?))
    }

    /// Signs `change` on the current roles with `keys` and POSTs it to
    /// `/api/v1/publishers/P/{path}` with the fields of `extra` (the definitions of a
    /// publish). On 409 it waits (exponential backoff, full jitter) and starts again
    /// from fresh metadata, until the retry deadline; then it gives up with
    /// [`UploadError::GaveUp`].
    #[allow(clippy::too_many_arguments)] // one call site per command; a struct adds nothing
    pub async fn update(
        &self,
        path: &str,
        trusted: &[PublicKey],
        change: &Change<'_>,
        keys: &[&SigningKey],
        lifetime: Duration,
        limits: Limits,
        extra: serde_json::Value,
    ) -> Result<Uploaded, UploadError> {
        let started = Instant::now();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let failure = match self
                .attempt(path, trusted, change, keys, lifetime, limits, &extra)
                .await
            {
                Ok(mut done) => {
                    done.attempts = attempts;
                    done.elapsed = started.elapsed();
                    return Ok(done);
                }
                Err(e) => e,
            };
            let Some(why) = failure.retry_reason() else {
                return Err(failure);
            };
            let elapsed = started.elapsed();
            let Some(wait) = self.retry.next_wait(attempts, elapsed, random()) else {
                return Err(UploadError::GaveUp {
                    attempts,
                    elapsed,
                    why,
                    last: Box::new(failure),
                });
            };
            // Expected under concurrent publishing, so not a warning; callers report a
            // summary from `Uploaded::attempts`.
            tracing::debug!(
                attempts,
                wait_ms = wait.as_millis() as u64,
                reason = %failure,
                "signing again on fresh metadata after a wait"
            );
            tokio::time::sleep(wait).await;
        }
    }

    /// One fetch, sign and upload.
    #[allow(clippy::too_many_arguments)] // `update`'s arguments, passed through
    async fn attempt(
        &self,
        path: &str,
        trusted: &[PublicKey],
        change: &Change<'_>,
        keys: &[&SigningKey],
        lifetime: Duration,
        limits: Limits,
        extra: &serde_json::Value,
    ) -> Result<Uploaded, UploadError> {
        let Some(upload) = self.sign(trusted, change, keys, lifetime, limits).await? else {
            // The role lists every definition exactly so already: answered as the
            // server would, with `unchanged` and no role versions.
            return Ok(Uploaded {
                answer: serde_json::json!({
                    "publisher": self.publisher,
                    "unchanged": true,
                }),
                targets: 0,
                bins: 0,
                attempts: 1,
                elapsed: Duration::ZERO,
            });
        };
        let mut body = extra.clone();
        if let Some(top) = &upload.top {
            body["role"] = text(top).into();
        }
        if !upload.bins.is_empty() {
            body["bins"] = upload
                .bins
                .iter()
                .map(|(n, b)| (n.clone(), serde_json::Value::from(text(b))))
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
        let resp = self
            .http
            .post(format!(
                "{}/api/v1/publishers/{}/{path}",
                self.base, self.publisher
            ))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await?;
        Ok(Uploaded {
            answer: json(resp).await?,
            targets: upload.targets,
            bins: upload.bins.len(),
            attempts: 1,
            elapsed: Duration::ZERO,
        })
    }

    /// The signed roles for `change`, fetching the bins the plan asks for.
    async fn sign(
        &self,
        trusted: &[PublicKey],
        change: &Change<'_>,
        keys: &[&SigningKey],
        lifetime: Duration,
        limits: Limits,
    ) -> Result<Option<Upload>, UploadError> {
        let mut current = self.current(trusted).await?;
        if current.top.is_none() && !matches!(change, Change::Add(_)) {
            return Err(UploadError::NothingPublished(self.publisher.clone()));
        }
        loop {
            let now = crate::clock::now();
            match plan(
                &self.publisher,
                &current,
                change,
                keys,
                lifetime,
                now,
                limits,
            )
            .await?
            {
                Plan::Ready(upload) => return Ok(Some(upload)),
                Plan::AlreadyPublished => return Ok(None),
                Plan::Fetch(names) => {
                    for name in names {
                        let bin = self.role(Some(&name)).await?.ok_or_else(|| {
                            UploadError::Protocol(format!(
                                "the server has no bin {name}, which the role delegates"
                            ))
                        })?;
                        current.add_bin(&name, &bin)?;
                    }
                }
            }
        }
    }
}

/// Uniform over `u64`, from the system's secure source (already linked for signing),
/// so concurrent publishers never share a jitter sequence.
fn random() -> u64 {
    use aws_lc_rs::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    aws_lc_rs::rand::SystemRandom::new()
        .fill(&mut bytes)
        .expect("the system random source works");
    u64::from_le_bytes(bytes)
}

fn text(signed: &[u8]) -> String {
    String::from_utf8_lossy(signed).into_owned()
}

async fn fetch_account(
    http: &reqwest::Client,
    base: &str,
    token: &str,
) -> Result<Account, UploadError> {
    let who = json(
        http.get(format!("{base}/api/v1/publishers/me"))
            .bearer_auth(token)
            .send()
            .await?,
    )
    .await?;
    serde_json::from_value(who)
        .map_err(|e| UploadError::Protocol(format!("no publisher named for the token: {e}")))
}

/// A response body, at most [`MAX_RESPONSE_BYTES`].
async fn capped(mut resp: reqwest::Response) -> Result<Vec<u8>, UploadError> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(UploadError::Protocol(format!(
                "response larger than {MAX_RESPONSE_BYTES} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The JSON body of a successful response, or the server's refusal.
async fn json(resp: reqwest::Response) -> Result<serde_json::Value, UploadError> {
    if !resp.status().is_success() {
        return Err(refusal(resp).await);
    }
    let bytes = capped(resp).await?;
    serde_json::from_slice(&bytes).map_err(|e| UploadError::Protocol(format!("not JSON: {e}")))
}

async fn refusal(resp: reqwest::Response) -> UploadError {
    let status = resp.status();
    let body: serde_json::Value = match capped(resp).await {
        Ok(b) => serde_json::from_slice(&b).unwrap_or_default(),
        Err(e) => return e,
    };
    UploadError::Refused {
        status,
        code: body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        message: body["error"]["message"]
            .as_str()
            .unwrap_or("no details")
            .to_owned(),
    }
}
