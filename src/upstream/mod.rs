//! Following an upstream marketplace (`serve --upstream`): each round verifies the
//! upstream's index as a TUF client does (root chain from the configured root,
//! rollback protection from what the last round trusted, each publisher judged apart),
//! then serves every followed publisher's own signed roles byte for byte under this
//! server's root, with its definitions, yanks and suspensions; this server signs only
//! its top-level targets, snapshot and timestamp.
//!
//! Layering: calls `trust::client` (verification), `trust::server` (signing the local
//! index), `store` and `definition`; knows nothing of HTTP serving.

mod download;
pub mod filter;
mod round;

use serde::{Deserialize, Serialize};
use url::Url;

pub use filter::{Filter, FilterError};
pub use round::{Mode, follow, follow_with};

/// The upstream a server follows.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// Where its `/tuf/` is fetched from: the marketplace's base URL, ending in `/`
    /// (for a bundle being imported, the loopback server that serves it).
    pub url: Url,
    /// The name its state and publishers are kept under: the URL as configured.
    pub origin: String,
    /// The root the operator configured (`--upstream-root`): trusted until the first
    /// round verifies a newer one.
    pub root: Vec<u8>,
    pub filter: Filter,
}

/// The largest root file accepted from the operator.
const MAX_ROOT_BYTES: usize = 512_000;

impl Upstream {
    /// `url` (`http(s)://HOST[:PORT][/PATH]`) and the root file's bytes, checked to be a
    /// root that signs itself.
    pub fn new(url: &str, root: Vec<u8>, filter: Filter) -> Result<Upstream, UpstreamError> {
        let bad = |reason: String| UpstreamError::Config(format!("--upstream {url}: {reason}"));
        let mut parsed = Url::parse(url).map_err(|e| bad(e.to_string()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(bad("only http and https are followed".into()));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(bad("credentials do not belong in the URL".into()));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(bad("a query or fragment has no place in the URL".into()));
        }
        if !parsed.path().ends_with('/') {
            let path = format!("{}/", parsed.path());
            parsed.set_path(&path);
        }
        if root.len() > MAX_ROOT_BYTES {
            return Err(UpstreamError::Config(format!(
                "--upstream-root: larger than the {MAX_ROOT_BYTES} bytes a root may have"
            )));
        }
        crate::trust::envelope::parse::<tough::schema::Root>("--upstream-root", &root)
            .map_err(|e| UpstreamError::Config(format!("--upstream-root: {e}")))
            .and_then(|r| {
                r.verify_by_root(&r.typed.signed, tough::schema::RoleType::Root)
                    .map_err(|e| {
                        UpstreamError::Config(format!(
                            "--upstream-root: not signed by its own root keys: {e}"
                        ))
                    })
            })?;
        Ok(Upstream {
            origin: parsed.to_string(),
            url: parsed,
            root,
            filter,
        })
    }

    /// The key its state and publishers are stored under: the URL as configured.
    pub fn key(&self) -> &str {
        &self.origin
    }

    /// The same upstream, its files fetched from `url` (a bundle served on loopback).
    pub fn fetched_from(&self, url: Url) -> Upstream {
        Upstream {
            url,
            ..self.clone()
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("{0}")]
    Config(String),
    /// The upstream's index could not be verified: nothing was applied.
    #[error("the upstream's index did not verify: {0}")]
    Refresh(#[from] crate::trust::client::ClientError),
    #[error("the signed index is not initialized; run `marketplace repo init`")]
    NotInitialized,
    #[error("another change to the index landed meanwhile; the next round applies the upstream's")]
    Conflict,
    /// A strict round (a bundle) found publishers that did not verify: nothing applied.
    #[error("nothing was applied: {0}")]
    HeldBack(String),
    #[error(transparent)]
    Trust(#[from] crate::trust::TrustError),
    #[error(transparent)]
    Store(crate::store::StoreError),
}

impl From<crate::store::StoreError> for UpstreamError {
    fn from(e: crate::store::StoreError) -> Self {
        match e {
            crate::store::StoreError::MetadataExists { .. } => UpstreamError::Conflict,
            e => UpstreamError::Store(e),
        }
    }
}

/// What one round did, stored with the upstream and logged.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = UpstreamRound)]
pub struct Report {
    pub upstream: String,
    /// When the round started (Unix seconds).
    pub at: i64,
    /// Why the round failed as a whole (nothing applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The upstream's root and snapshot versions verified.
    #[serde(default)]
    pub upstream_root: u64,
    #[serde(default)]
    pub upstream_snapshot: u64,
    /// The local snapshot version this round signed; `None` when nothing changed.
    #[serde(default)]
    pub snapshot: Option<u64>,
    pub publishers: Vec<PublisherReport>,
    /// Where the round's time went, in milliseconds.
    #[serde(default)]
    pub phases: Phases,
}

/// Milliseconds a round spent on each part.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = UpstreamPhases)]
pub struct Phases {
    /// The TUF refresh: root, timestamp, snapshot, targets, every publisher's roles.
    pub metadata: u64,
    /// New definitions downloaded, checked and parsed.
    pub definitions: u64,
    /// The local index signed and the round stored (the report stored with the round
    /// counts up to its write).
    pub store: u64,
}

/// One upstream publisher in a round.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = UpstreamPublisher)]
pub struct PublisherReport {
    pub name: String,
    pub status: Status,
    /// Why it is not followed as the upstream serves it (held back, clash, suspended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Definitions its roles list; new ones stored and versions yanked this round.
    #[serde(default)]
    pub definitions: usize,
    #[serde(default)]
    pub added: usize,
    #[serde(default)]
    pub yanked: usize,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = UpstreamPublisherStatus)]
pub enum Status {
    /// Served as the upstream serves it.
    Followed,
    /// Its roles or definitions failed verification this round: what was served
    /// before stays, nothing new is taken.
    HeldBack,
    /// A publisher of this marketplace (or the built-in one) has the name: left out.
    Clash,
    /// `--upstream-plugins` selects none of its plugins.
    NotSelected,
    /// The operator suspended it here (`publisher suspend`).
    SuspendedHere,
    /// The upstream no longer delegates to it (suspended or removed there), or the
    /// filter no longer selects it: suspended here.
    Gone,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Followed => "followed",
            Status::HeldBack => "held back",
            Status::Clash => "left out (its name is taken here)",
            Status::NotSelected => "not selected",
            Status::SuspendedHere => "suspended here",
            Status::Gone => "gone upstream",
        })
    }
}

impl Report {
    /// Publishers with `status`, by name.
    pub fn with(&self, status: Status) -> Vec<&str> {
        self.publishers
            .iter()
            .filter(|p| p.status == status)
            .map(|p| p.name.as_str())
            .collect()
    }
}
