//! One sync round for one source: TUF refresh with persistent trusted state, download
//! of the definitions whose hash is new, validation, and one transaction that replaces
//! the source's state. Any failure leaves the previous state untouched and is recorded
//! with its reason.

use std::path::{Path, PathBuf};

use futures_util::{StreamExt, TryStreamExt};
use tough::TargetName;
use tough::schema::{Target, Targets};

use super::config::SourceConfig;
use super::store::{SourceDefinition, SyncStore, TrustedVersions};
use crate::definition::{Definition, MAX_DEFINITION_BYTES};
use crate::trust::client::ClientError;

/// Downloads in flight per source: enough to hide loopback and LAN latency.
const PARALLEL_DOWNLOADS: usize = 16;

/// Why a round failed, as `/status` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The marketplace did not answer (connection, timeout, HTTP error).
    Unreachable,
    /// Signed metadata is past its expiry: a frozen or stale mirror.
    Expired,
    /// Metadata older than what this worker already trusts.
    RolledBack,
    /// Signatures do not meet the threshold of the trusted keys.
    BadSignature,
    /// Metadata or target bytes that do not match what was signed, or malformed.
    InvalidMetadata,
    /// A verified target that is not a valid definition for its path.
    InvalidDefinition,
    /// This worker's own storage failed.
    Local,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Unreachable => "unreachable",
            Reason::Expired => "expired",
            Reason::RolledBack => "rolled_back",
            Reason::BadSignature => "bad_signature",
            Reason::InvalidMetadata => "invalid_metadata",
            Reason::InvalidDefinition => "invalid_definition",
            Reason::Local => "local",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct RoundError {
    pub reason: Reason,
    pub message: String,
}

impl RoundError {
    fn new(reason: Reason, message: impl Into<String>) -> Self {
        RoundError {
            reason,
            message: message.into(),
        }
    }
}

impl From<super::store::SyncStoreError> for RoundError {
    fn from(e: super::store::SyncStoreError) -> Self {
        RoundError::new(Reason::Local, e.to_string())
    }
}

/// What a good round did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synced {
    /// Definitions the source offers now.
    pub definitions: usize,
    /// Of those, downloaded this round (new hashes).
    pub downloaded: usize,
    pub trusted: TrustedVersions,
}

/// Where a source's TUF client state lives (the last trusted metadata, so rollback is
/// detected across restarts).
pub fn datastore(data_dir: &Path, source: &str) -> PathBuf {
    data_dir.join("tuf").join(source)
}

/// Runs one round for `source` and records its outcome (success or reason) in `store`.
pub async fn sync_source(
    store: &SyncStore,
    source: &SourceConfig,
    data_dir: &Path,
    now: i64,
) -> Result<Synced, RoundError> {
    store.add_source(&source.name, source.url.as_str()).await?;
    match round(store, source, data_dir, now).await {
        Ok(done) => Ok(done),
        Err(e) => {
            store
                .record_failure(&source.name, e.reason.as_str(), &e.message, now)
                .await?;
            Err(e)
        }
    }
}

async fn round(
    store: &SyncStore,
    source: &SourceConfig,
    data_dir: &Path,
    now: i64,
) -> Result<Synced, RoundError> {
    let datastore = datastore(data_dir, &source.name);
    // tough starts from the root it is given; the newest root it verified is kept in
    // its datastore, so start from that one once there is one.
    let root = match std::fs::read(datastore.join("root.json")) {
        Ok(bytes) => bytes,
        Err(_) => source.root.clone(),
    };
    let repo = crate::trust::client::load(&root, &source.url, &datastore)
        .await
        .map_err(classify)?;
    let mut listed = Vec::new();
    let targets = repo.targets();
    walk(&targets.signed, None, &signers(targets), &mut listed)?;
    let known = store.known_hashes(&source.name).await?;
    let repo = &repo;
    let fetched: Vec<SourceDefinition> = futures_util::stream::iter(listed)
        .map(|(name, target, publisher, signer_ids)| {
            let known = known.get(name.raw()).cloned();
            async move { definition(repo, name, target, publisher, signer_ids, known).await }
        })
        .buffer_unordered(PARALLEL_DOWNLOADS)
        .try_collect()
        .await?;
    let downloaded = fetched.iter().filter(|d| d.bytes.is_some()).count();
    let trusted = TrustedVersions {
        root: repo.root().signed.version.get(),
        timestamp: repo.timestamp().signed.version.get(),
        snapshot: repo.snapshot().signed.version.get(),
        targets: repo.targets().signed.version.get(),
        timestamp_expires_at: repo.timestamp().signed.expires.as_second(),
    };
    store
        .replace_source(&source.name, &fetched, &trusted, now)
        .await?;
    Ok(Synced {
        definitions: fetched.len(),
        downloaded,
        trusted,
    })
}

fn signers(role: &tough::schema::Signed<Targets>) -> String {
    let mut ids: Vec<String> = role
        .signatures
        .iter()
        .map(|s| hex::encode(s.keyid.as_ref()))
        .collect();
    ids.sort();
    ids.join(" ")
}

/// Every target in the delegation tree, with the publisher (the first-level delegated
/// role) that vouches for it and the keys that signed the role listing it. A target
/// outside its publisher's path is refused, whatever the client library allowed.
fn walk(
    role: &Targets,
    publisher: Option<&str>,
    signer_ids: &str,
    out: &mut Vec<(TargetName, Target, String, String)>,
) -> Result<(), RoundError> {
    for (name, target) in &role.targets {
        let owner = name.raw().split('/').next().unwrap_or_default();
        match publisher {
            Some(p) if p == owner => {}
            _ => {
                return Err(RoundError::new(
                    Reason::InvalidMetadata,
                    format!(
                        "target {} is listed by {} instead of its publisher's role",
                        name.raw(),
                        publisher.unwrap_or("targets")
                    ),
                ));
            }
        }
        out.push((
            name.clone(),
            target.clone(),
            owner.to_owned(),
            signer_ids.to_owned(),
        ));
    }
    for delegated in role.delegations.iter().flat_map(|d| &d.roles) {
        if let Some(signed) = &delegated.targets {
            let publisher = publisher.unwrap_or(&delegated.name);
            walk(&signed.signed, Some(publisher), &signers(signed), out)?;
        }
    }
    Ok(())
}

/// The stored form of one listed target: bytes downloaded and validated when its hash is
/// new to this source.
async fn definition(
    repo: &tough::Repository,
    name: TargetName,
    target: Target,
    publisher: String,
    signer_key_ids: String,
    known_hash: Option<String>,
) -> Result<SourceDefinition, RoundError> {
    let hash = format!("sha256:{}", hex::encode(target.hashes.sha256.as_ref()));
    let invalid =
        |why: String| RoundError::new(Reason::InvalidDefinition, format!("{}: {why}", name.raw()));
    let parts: Vec<&str> = name.raw().split('/').collect();
    let [_, plugin, file] = parts[..] else {
        return Err(invalid("not PUBLISHER/NAME/VERSION.yaml".into()));
    };
    let version = file
        .strip_suffix(".yaml")
        .ok_or_else(|| invalid("not PUBLISHER/NAME/VERSION.yaml".into()))?;
    let bytes = if known_hash.as_deref() == Some(hash.as_str()) {
        None
    } else {
        if target.length > MAX_DEFINITION_BYTES as u64 {
            return Err(invalid(format!(
                "{} bytes, more than the {MAX_DEFINITION_BYTES} a definition may have",
                target.length
            )));
        }
        use tough::IntoVec;
        let stream = repo
            .read_target(&name)
            .await
            .map_err(|e| classify(ClientError::from(e)))?
            .ok_or_else(|| invalid("listed but not found".into()))?;
        let bytes = stream
            .into_vec()
            .await
            .map_err(|e| classify(ClientError::from(e)))?;
        let def = Definition::parse(&bytes).map_err(|e| invalid(e.to_string()))?;
        if crate::trust::metadata::target_name(&publisher, &def) != name.raw() {
            return Err(invalid(format!(
                "the file describes {} {}, not what its path says",
                def.name(),
                def.version_text()
            )));
        }
        Some(bytes)
    };
    Ok(SourceDefinition {
        target: name.raw().to_owned(),
        publisher,
        name: plugin.to_owned(),
        version: version.to_owned(),
        hash,
        yanked: target
            .custom
            .get("yanked")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false),
        signer_key_ids,
        bytes,
    })
}

/// Sorts a client failure into the reasons `/status` names.
fn classify(e: ClientError) -> RoundError {
    use tough::error::Error as T;
    let message = e.to_string();
    let reason = match &e {
        ClientError::Http(_) => Reason::Unreachable,
        ClientError::Url(_) => Reason::Local,
        ClientError::Datastore(..) => Reason::Local,
        ClientError::Verify(inner) => match inner.as_ref() {
            T::Transport { source, .. } => match source.kind() {
                tough::TransportErrorKind::FileNotFound => Reason::InvalidMetadata,
                _ => Reason::Unreachable,
            },
            T::ExpiredMetadata { .. } => Reason::Expired,
            T::OlderMetadata { .. }
            | T::OlderSnapshotInTimestamp { .. }
            | T::SnapshotRoleRollback { .. } => Reason::RolledBack,
            T::VerifyMetadata { .. }
            | T::VerifyRoleMetadata { .. }
            | T::VerifyTrustedMetadata { .. } => Reason::BadSignature,
            T::DatastoreCreate { .. }
            | T::DatastoreOpen { .. }
            | T::DatastoreRemove { .. }
            | T::DatastoreSerialize { .. }
            | T::DatastoreInit { .. }
            | T::SystemTimeSteppedBackward { .. } => Reason::Local,
            _ => Reason::InvalidMetadata,
        },
    };
    RoundError::new(reason, message)
}
