//! A pull-only client of the OCI distribution API, for the mirror: manifests and
//! indexes read with a cap enforced while reading, blobs as streams, the referrers API,
//! and the registry token dance (Basic, or Bearer from a realm).
//!
//! Why our own and not `oci-client`: the mirror must decide every hop itself (which
//! redirect to follow, which address to connect to, which host gets credentials) and
//! must stop reading a manifest at its cap, and `oci-client` follows reqwest's default
//! of ten redirects anywhere, resolves names itself and reads a manifest whole. What is
//! security-critical and not HTTP plumbing stays in maintained crates or our checked
//! code: challenges are parsed by `http-auth`, TLS is rustls, manifests are parsed and
//! digests verified by `registry::manifest` and the blob store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, LOCATION};
use url::Url;

use super::egress::{MAX_REDIRECTS, Policy, Refusal, Resolver};

/// The largest token answer read from a realm.
const MAX_TOKEN_BYTES: u64 = 64 * 1024;
/// How much of an error answer is read, and how much of it is kept for the operator.
const MAX_ERROR_BYTES: u64 = 4096;
const SHOWN_CHARS: usize = 200;

/// A failed exchange with an upstream. `Display` is for the operator (logs, `mirror
/// status`) and may quote the upstream, cut and escaped; [`FetchError::public`] is in
/// our words only, for pages and the public API.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{hop} refused: {refusal}")]
    Refused { hop: Hop, refusal: Refusal },
    #[error("the upstream answered {status}{}", said_suffix(.said))]
    Status { status: u16, said: String },
    #[error("authentication failed: {detail}")]
    Auth { detail: String },
    #[error("{what} too large: more than {limit} bytes")]
    TooLarge { what: &'static str, limit: u64 },
    #[error("timed out ({detail})")]
    Timeout { detail: String },
    #[error("could not connect: {detail}")]
    Connect { detail: String },
    #[error("the transfer failed: {detail}")]
    Transport { detail: String },
    #[error("invalid answer: {detail}")]
    Invalid { detail: String },
}

/// Which request of an exchange a refusal stopped: the one we built, one an upstream
/// redirected us to, or its token realm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hop {
    Request,
    Redirect,
    Realm,
}

impl std::fmt::Display for Hop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Hop::Request => "request",
            Hop::Redirect => "redirect",
            Hop::Realm => "token realm",
        })
    }
}

fn said_suffix(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

impl FetchError {
    /// What failed, in our words: nothing an upstream sent or chose appears here.
    pub fn public(&self) -> String {
        match self {
            FetchError::Refused {
                hop: Hop::Request,
                refusal: Refusal::Address { .. },
            } => "the upstream's address is not allowed".into(),
            FetchError::Refused { hop, .. } => format!("{hop} refused"),
            FetchError::Status { status, .. } => format!("the upstream answered {status}"),
            FetchError::Auth { .. } => "authentication with the upstream failed".into(),
            FetchError::TooLarge { what, limit } => {
                format!("{what} too large (over {limit} bytes)")
            }
            FetchError::Timeout { .. } => "timed out".into(),
            FetchError::Connect { .. } => "could not connect to the upstream".into(),
            FetchError::Transport { .. } => "the transfer from the upstream failed".into(),
            FetchError::Invalid { .. } => "the upstream's answer is not valid".into(),
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            FetchError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// A reqwest error, classified; our own refusal (from the resolver) is found in
    /// its causes.
    fn from_reqwest(e: reqwest::Error, hop: Hop) -> FetchError {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(s) = source {
            if let Some(refusal) = s.downcast_ref::<Refusal>() {
                return FetchError::Refused {
                    hop,
                    refusal: refusal.clone(),
                };
            }
            source = s.source();
        }
        // The URL is ours (or a redirect's, already named by the refusal rules): without
        // it the cause fits in what `quote` keeps.
        let (timeout, connect) = (e.is_timeout(), e.is_connect());
        let detail = quote(&chain(&e.without_url()));
        if timeout {
            FetchError::Timeout { detail }
        } else if connect {
            FetchError::Connect { detail }
        } else {
            FetchError::Transport { detail }
        }
    }
}

/// An error and its causes on one line (reqwest's own text says little).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        source = s.source();
    }
    message
}

/// Upstream text as an operator may see it: at most [`SHOWN_CHARS`] characters, control
/// characters escaped (a terminal or log viewer interprets nothing), quoted.
pub fn quote(text: &str) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == SHOWN_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() || c == '"' || c == '\\' {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    format!("\"{out}\"")
}

/// How a client talks to one upstream.
pub struct Options {
    /// Extra trust roots (PEM) for the upstream's TLS.
    pub ca: Option<Vec<u8>>,
    pub basic: Option<(String, String)>,
    /// The deadline of one small exchange: a manifest, an index, a token.
    pub request_timeout: Duration,
}

/// A client of one upstream registry (the host pulled from), with the rules of
/// [`Policy`] applied to every request.
pub struct Client {
    http: reqwest::Client,
    policy: Policy,
    basic: Option<(String, String)>,
    /// The `Authorization` that worked per repository, once a challenge was answered.
    authorization: Mutex<HashMap<String, String>>,
    request_timeout: Duration,
}

impl Client {
    pub fn new(policy: Policy, options: Options) -> Result<Client, String> {
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(Resolver {
                named: policy.named.clone(),
            }))
            .connect_timeout(Duration::from_secs(10))
            // Per read: a stalled connection fails; a slow one is bounded by deadlines.
            .read_timeout(Duration::from_secs(60))
            .user_agent(concat!("fundament-marketplace/", env!("CARGO_PKG_VERSION")));
        if let Some(pem) = &options.ca {
            let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| e.to_string())?;
            builder = builder.tls_certs_merge(certs);
        }
        Ok(Client {
            http: builder.build().map_err(|e| chain(&e))?,
            policy,
            basic: options.basic,
            authorization: Mutex::new(HashMap::new()),
            request_timeout: options.request_timeout,
        })
    }

    fn url(&self, path: &str) -> Url {
        self.policy
            .base
            .join(path)
            .expect("registry paths are relative URLs")
    }

    /// A manifest (`reference` a tag or digest): its bytes, read up to `max`, and its
    /// `Content-Type`; `None` when the upstream has none by that reference.
    pub async fn manifest(
        &self,
        repository: &str,
        reference: &str,
        accept: &[&str],
        max: u64,
    ) -> Result<Option<(Bytes, Option<String>)>, FetchError> {
        let path = format!("/v2/{repository}/manifests/{reference}");
        self.small(repository, &path, accept, max, "manifest").await
    }

    /// The referrers of `digest` (an index), or `None` when the upstream has no
    /// referrers API.
    pub async fn referrers(
        &self,
        repository: &str,
        digest: &str,
        max: u64,
    ) -> Result<Option<Bytes>, FetchError> {
        let path = format!("/v2/{repository}/referrers/{digest}");
        let accept = [crate::registry::manifest::OCI_INDEX];
        match self
            .small(repository, &path, &accept, max, "referrers index")
            .await
        {
            Ok(found) => Ok(found.map(|(b, _)| b)),
            // Registries without the API answer these for the unknown route.
            Err(e) if matches!(e.status(), Some(400 | 405 | 501)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A blob's answer, its body not yet read; `None` when the upstream has no such
    /// blob. The caller bounds the transfer.
    pub async fn blob(
        &self,
        repository: &str,
        digest: &str,
    ) -> Result<Option<reqwest::Response>, FetchError> {
        let path = format!("/v2/{repository}/blobs/{digest}");
        let response = self.get(repository, &path, &[], None).await?;
        match response.status() {
            s if s.is_success() => Ok(Some(response)),
            StatusCode::NOT_FOUND => Ok(None),
            status => Err(error_answer(status, response).await),
        }
    }

    /// A GET whose whole answer is read, up to `max`, within the request deadline.
    async fn small(
        &self,
        repository: &str,
        path: &str,
        accept: &[&str],
        max: u64,
        what: &'static str,
    ) -> Result<Option<(Bytes, Option<String>)>, FetchError> {
        let exchange = async {
            let response = self
                .get(repository, path, accept, Some(self.request_timeout))
                .await?;
            match response.status() {
                StatusCode::OK => {
                    let content_type = response
                        .headers()
                        .get(CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    let bytes = read_capped(response, max, what).await?;
                    Ok(Some((bytes, content_type)))
                }
                StatusCode::NOT_FOUND => Ok(None),
                status => Err(error_answer(status, response).await),
            }
        };
        tokio::time::timeout(self.request_timeout, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(FetchError::Timeout {
                    detail: format!("{what} not received in {:?}", self.request_timeout),
                })
            })
    }

    /// GET `path` on the upstream: answers a challenge once, follows allowed
    /// redirects, sends credentials and tokens only to the upstream's own origin.
    async fn get(
        &self,
        repository: &str,
        path: &str,
        accept: &[&str],
        timeout: Option<Duration>,
    ) -> Result<reqwest::Response, FetchError> {
        let mut url = self.url(path);
        self.policy
            .start(&url)
            .await
            .map_err(|refusal| FetchError::Refused {
                hop: Hop::Request,
                refusal,
            })?;
        let mut redirects = 0;
        let mut challenged = false;
        loop {
            let mut request = self.http.get(url.clone());
            if !accept.is_empty() {
                request = request.header(ACCEPT, accept.join(", "));
            }
            if let Some(t) = timeout {
                request = request.timeout(t);
            }
            let own = self.policy.own(&url);
            if own && let Some(a) = self.cached_authorization(repository) {
                request = request.header(AUTHORIZATION, a);
            }
            let response = request.send().await.map_err(|e| {
                let hop = if redirects > 0 {
                    Hop::Redirect
                } else {
                    Hop::Request
                };
                FetchError::from_reqwest(e, hop)
            })?;
            let status = response.status();
            if status.is_redirection() && response.headers().contains_key(LOCATION) {
                redirects += 1;
                if redirects > MAX_REDIRECTS {
                    return Err(FetchError::Refused {
                        hop: Hop::Redirect,
                        refusal: Refusal::TooManyRedirects,
                    });
                }
                let next = location(&url, &response)?;
                self.policy
                    .follow(&url, &next)
                    .await
                    .map_err(|refusal| FetchError::Refused {
                        hop: Hop::Redirect,
                        refusal,
                    })?;
                url = next;
                continue;
            }
            if status == StatusCode::UNAUTHORIZED && own && !challenged {
                challenged = true;
                if self.answer_challenge(repository, &url, &response).await? {
                    continue;
                }
            }
            return Ok(response);
        }
    }

    fn cached_authorization(&self, repository: &str) -> Option<String> {
        self.authorization
            .lock()
            .expect("the authorization lock is never poisoned")
            .get(repository)
            .cloned()
    }

    /// Works out an `Authorization` from a 401's challenge; true when there is one to
    /// try.
    async fn answer_challenge(
        &self,
        repository: &str,
        url: &Url,
        response: &reqwest::Response,
    ) -> Result<bool, FetchError> {
        let header = response
            .headers()
            .get_all(reqwest::header::WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(", ");
        let challenges = http_auth::parse_challenges(&header).map_err(|e| FetchError::Invalid {
            detail: format!("the challenge {}: {e}", quote(&header)),
        })?;
        let bearer = challenges
            .iter()
            .find(|c| c.scheme.eq_ignore_ascii_case("bearer"));
        let authorization = if let Some(c) = bearer {
            let param = |name: &str| {
                c.params
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.to_unescaped())
            };
            let realm = param("realm").ok_or_else(|| FetchError::Invalid {
                detail: "a Bearer challenge without a realm".into(),
            })?;
            let token = self
                .token(url, &realm, param("service"), repository)
                .await?;
            format!("Bearer {token}")
        } else if challenges
            .iter()
            .any(|c| c.scheme.eq_ignore_ascii_case("basic"))
        {
            let Some((user, password)) = &self.basic else {
                return Ok(false);
            };
            format!(
                "Basic {}",
                base64::Engine::encode(
                    &base64::engine::general_purpose::STANDARD,
                    format!("{user}:{password}")
                )
            )
        } else {
            return Ok(false);
        };
        self.authorization
            .lock()
            .expect("the authorization lock is never poisoned")
            .insert(repository.to_owned(), authorization);
        Ok(true)
    }

    /// A pull token for `repository` from `realm`, which must pass the redirect rules
    /// (a realm is where the upstream sends us); credentials go with the request.
    async fn token(
        &self,
        from: &Url,
        realm: &str,
        service: Option<String>,
        repository: &str,
    ) -> Result<String, FetchError> {
        let mut url = Url::parse(realm).map_err(|e| FetchError::Invalid {
            detail: format!("the token realm {}: {e}", quote(realm)),
        })?;
        self.policy
            .follow(from, &url)
            .await
            .map_err(|refusal| FetchError::Refused {
                hop: Hop::Realm,
                refusal,
            })?;
        {
            let mut query = url.query_pairs_mut();
            if let Some(s) = &service {
                query.append_pair("service", s);
            }
            query.append_pair("scope", &format!("repository:{repository}:pull"));
        }
        let mut request = self.http.get(url).timeout(self.request_timeout);
        if let Some((user, password)) = &self.basic {
            request = request.basic_auth(user, Some(password));
        }
        let response = request
            .send()
            .await
            .map_err(|e| FetchError::from_reqwest(e, Hop::Realm))?;
        let status = response.status();
        if !status.is_success() {
            let said = read_said(response).await;
            return Err(FetchError::Auth {
                detail: format!("the token realm answered {status}{}", said_suffix(&said)),
            });
        }
        let bytes = read_capped(response, MAX_TOKEN_BYTES, "token answer").await?;
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let token: Token = serde_json::from_slice(&bytes).map_err(|e| FetchError::Invalid {
            detail: format!("the token answer: {e}"),
        })?;
        token
            .token
            .or(token.access_token)
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or_else(|| FetchError::Invalid {
                detail: "the token answer holds no usable token".into(),
            })
    }
}

/// Where a redirect points, resolved against the URL that answered.
fn location(from: &Url, response: &reqwest::Response) -> Result<Url, FetchError> {
    let value = response
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    from.join(value).map_err(|e| FetchError::Invalid {
        detail: format!("the redirect to {}: {e}", quote(value)),
    })
}

/// The whole body, refused as soon as it passes `max` (by its declared length, or by
/// what arrived): memory never holds more than `max` and one chunk.
async fn read_capped(
    mut response: reqwest::Response,
    max: u64,
    what: &'static str,
) -> Result<Bytes, FetchError> {
    let too_large = || FetchError::TooLarge { what, limit: max };
    let declared = response
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(too_large());
    }
    let mut body = BytesMut::with_capacity(declared.unwrap_or(0).min(max) as usize);
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| FetchError::from_reqwest(e, Hop::Request))?
    {
        if (body.len() + chunk.len()) as u64 > max {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// An answer that is neither success nor "not found", as an error: its status and the
/// start of its body, cut and escaped, for the operator.
async fn error_answer(status: StatusCode, response: reqwest::Response) -> FetchError {
    let said = read_said(response).await;
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        return FetchError::Auth {
            detail: format!("the upstream answered {status}{}", said_suffix(&said)),
        };
    }
    FetchError::Status {
        status: status.as_u16(),
        said,
    }
}

/// The start of an error answer's body, quoted; empty when there is none or it cannot
/// be read.
async fn read_said(response: reqwest::Response) -> String {
    let mut response = response;
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = (MAX_ERROR_BYTES as usize).saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() as u64 >= MAX_ERROR_BYTES {
            break;
        }
    }
    let text = String::from_utf8_lossy(&body);
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        quote(text)
    }
}

/// The origin-only base URL of a registry reached as `host` (`host[:port]`).
pub fn base_url(host: &str, insecure: bool) -> Result<Url, String> {
    let scheme = if insecure { "http" } else { "https" };
    Url::parse(&format!("{scheme}://{host}/")).map_err(|e| format!("{host}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_text_is_cut_and_escaped() {
        assert_eq!(quote("plain"), "\"plain\"");
        assert_eq!(
            quote("a\u{1b}[31mred\n\"x\""),
            "\"a\\u{1b}[31mred\\n\\\"x\\\"\""
        );
        let long = "x".repeat(500);
        let q = quote(&long);
        assert_eq!(q.chars().count(), SHOWN_CHARS + 3, "{q}");
        assert!(q.ends_with("…\""));
    }

    #[test]
    fn public_text_never_carries_what_the_upstream_said() {
        let secret = "ami-id: i-0abc SECRET";
        let errors = [
            FetchError::Status {
                status: 500,
                said: quote(secret),
            },
            FetchError::Auth {
                detail: quote(secret),
            },
            FetchError::Transport {
                detail: quote(secret),
            },
            FetchError::Invalid {
                detail: quote(secret),
            },
            FetchError::Refused {
                hop: Hop::Redirect,
                refusal: Refusal::OtherHost {
                    to: "http://SECRET.internal".into(),
                },
            },
        ];
        for e in errors {
            assert!(e.to_string().contains("SECRET"), "{e}");
            assert!(!e.public().contains("SECRET"), "{}", e.public());
        }
    }
}
