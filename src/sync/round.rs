//! One sync round for one source: TUF refresh with persistent trusted state, download
//! of the definitions whose hash is new, validation, and one transaction that replaces
//! the source's state. Any failure leaves the previous state untouched and is recorded
//! with its reason.

use std::path::{Path, PathBuf};

use futures_util::{StreamExt, TryStreamExt};
use tough::TargetName;
use tough::schema::{Target, Targets};

use super::config::SourceConfig;
use super::quick;
use super::store::{SourceDefinition, SyncStore, Trusted, TrustedVersions};
use super::view::Summary;
use crate::definition::{Definition, MAX_DEFINITION_BYTES};
use crate::trust::client::{ClientError, GetError, HttpTransport};

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
    /// Metadata or target bytes that do not match the hash or length signed for them.
    Tampered,
    /// Metadata that is malformed or breaks the rules of the index.
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
            Reason::Tampered => "tampered",
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
    /// The timestamp was the one already trusted: nothing else was fetched.
    pub unchanged: bool,
    pub trusted: TrustedVersions,
}

/// Where tough keeps a source's metadata during a round. Rebuilt from the database at
/// the start of each round; the database, not this folder, is the trusted state.
pub fn datastore(data_dir: &Path, source: &str) -> PathBuf {
    data_dir.join("tuf").join(source)
}

/// Runs one round for `source` and records its outcome (success or reason) in `store`.
/// The source must be registered (`SyncStore::add_source`; `Worker` does it at open), so
/// a warm round writes nothing but its outcome.
pub async fn sync_source(
    store: &SyncStore,
    transport: &HttpTransport,
    source: &SourceConfig,
    data_dir: &Path,
    now: i64,
) -> Result<Synced, RoundError> {
    match round(store, transport, source, data_dir, now).await {
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
    transport: &HttpTransport,
    source: &SourceConfig,
    data_dir: &Path,
    now: i64,
) -> Result<Synced, RoundError> {
    let trusted = store.trusted(&source.name).await?;
    if let Some(t) = &trusted
        && quick::unchanged(transport, &source.url, t, now).await
    {
        store.record_unchanged(&source.name, now).await?;
        return Ok(Synced {
            definitions: t.definitions as usize,
            downloaded: 0,
            unchanged: true,
            trusted: t.versions.clone(),
        });
    }
    let started = std::time::Instant::now();
    let datastore = datastore(data_dir, &source.name);
    prepare_datastore(&datastore, trusted.as_ref())?;
    let root = trusted.as_ref().map_or(&source.root, |t| &t.root);
    let prefetched = super::prefetch::Prefetched::new(transport.clone(), &source.url).await;
    let repo = crate::trust::client::load_with(prefetched, root, &source.url, &datastore)
        .await
        .map_err(classify)?;
    let versions = trusted_versions(&repo);
    if let Some(t) = &trusted {
        // tough measures rollbacks against the datastore rebuilt above; this repeats the
        // check against the database so that it holds whatever tough does.
        let before = &t.versions;
        if versions.timestamp < before.timestamp || versions.snapshot < before.snapshot {
            return Err(RoundError::new(
                Reason::RolledBack,
                format!(
                    "timestamp v{} and snapshot v{} are older than the trusted v{} and v{}",
                    versions.timestamp, versions.snapshot, before.timestamp, before.snapshot
                ),
            ));
        }
    }
    let loaded = started.elapsed();
    let mut listed = Vec::new();
    let targets = repo.targets();
    walk(&targets.signed, None, &signers(targets), &mut listed)?;
    let known = store.known_hashes(&source.name).await?;
    let from = std::sync::Arc::new(TargetSource {
        transport: transport.clone(),
        base: source.url.clone(),
        consistent_snapshot: repo.root().signed.consistent_snapshot,
    });
    // Each download and its parse is its own task, so both run on every core; a stream
    // of handles keeps PARALLEL_DOWNLOADS in flight and stops at the first failure.
    let fetched: Vec<SourceDefinition> = futures_util::stream::iter(listed)
        .map(|(name, target, publisher, signer_ids)| {
            let known = known.get(name.raw()).cloned();
            let from = from.clone();
            tokio::spawn(async move {
                definition(&from, name, target, publisher, signer_ids, known).await
            })
        })
        .buffer_unordered(PARALLEL_DOWNLOADS)
        .map(|joined| joined.map_err(|e| RoundError::new(Reason::Local, e.to_string()))?)
        .try_collect()
        .await?;
    let downloaded = fetched.iter().filter(|d| d.bytes.is_some()).count();
    let fetched_at = started.elapsed();
    let read = |file: &str| {
        std::fs::read(datastore.join(file))
            .map_err(|e| RoundError::new(Reason::Local, format!("reading verified {file}: {e}")))
    };
    let kept = Trusted {
        versions: versions.clone(),
        definitions: fetched.len() as u64,
        root: read("root.json")?,
        timestamp: read("timestamp.json")?,
        snapshot: read("snapshot.json")?,
    };
    store
        .replace_source(&source.name, &fetched, &kept, now)
        .await?;
    tracing::debug!(
        source = %source.name,
        metadata_ms = loaded.as_millis() as u64,
        downloads_ms = (fetched_at - loaded).as_millis() as u64,
        store_ms = (started.elapsed() - fetched_at).as_millis() as u64,
        downloaded,
        "round phases"
    );
    Ok(Synced {
        definitions: fetched.len(),
        downloaded,
        unchanged: false,
        trusted: versions,
    })
}

/// Empties the round's datastore and puts back the trusted timestamp and snapshot,
/// which tough measures rollbacks against.
fn prepare_datastore(dir: &Path, trusted: Option<&Trusted>) -> Result<(), RoundError> {
    let local = |e: std::io::Error| {
        RoundError::new(Reason::Local, format!("preparing {}: {e}", dir.display()))
    };
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(local(e)),
    }
    std::fs::create_dir_all(dir).map_err(local)?;
    if let Some(t) = trusted {
        std::fs::write(dir.join("timestamp.json"), &t.timestamp).map_err(local)?;
        std::fs::write(dir.join("snapshot.json"), &t.snapshot).map_err(local)?;
    }
    Ok(())
}

/// Versions and the earliest expiry of everything the repository now trusts.
fn trusted_versions(repo: &tough::Repository) -> TrustedVersions {
    let mut earliest = (repo.root().signed.expires, "root".to_owned());
    let mut consider = |expires: jiff::Timestamp, role: &str| {
        if expires < earliest.0 {
            earliest = (expires, role.to_owned());
        }
    };
    consider(repo.timestamp().signed.expires, "timestamp");
    consider(repo.snapshot().signed.expires, "snapshot");
    consider(repo.targets().signed.expires, "targets");
    let mut stack = vec![&repo.targets().signed];
    while let Some(role) = stack.pop() {
        for d in role.delegations.iter().flat_map(|d| &d.roles) {
            if let Some(signed) = &d.targets {
                consider(signed.signed.expires, &d.name);
                stack.push(&signed.signed);
            }
        }
    }
    TrustedVersions {
        root: repo.root().signed.version.get(),
        timestamp: repo.timestamp().signed.version.get(),
        snapshot: repo.snapshot().signed.version.get(),
        targets: repo.targets().signed.version.get(),
        timestamp_expires_at: repo.timestamp().signed.expires.as_second(),
        expires_at: earliest.0.as_second(),
        expires_role: earliest.1,
    }
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
    from: &TargetSource,
    name: TargetName,
    target: Target,
    publisher: String,
    signer_key_ids: String,
    known_hash: Option<String>,
) -> Result<SourceDefinition, RoundError> {
    let hash = format!("sha256:{}", hex::encode(target.hashes.sha256.as_ref()));
    let invalid =
        |why: String| RoundError::new(Reason::InvalidDefinition, format!("{}: {why}", name.raw()));
    // Checked before anything is fetched: the name becomes part of a URL.
    let parts: Vec<&str> = name.raw().split('/').collect();
    let shape = || invalid("not PUBLISHER/NAME/VERSION.yaml".into());
    let [_, plugin, file] = parts[..] else {
        return Err(shape());
    };
    let version = file.strip_suffix(".yaml").ok_or_else(shape)?;
    if !crate::definition::is_dns_label(plugin)
        || crate::definition::parse_version(version).is_err()
    {
        return Err(shape());
    }
    let bytes = if known_hash.as_deref() == Some(hash.as_str()) {
        None
    } else {
        if target.length > MAX_DEFINITION_BYTES as u64 {
            return Err(invalid(format!(
                "{} bytes, more than the {MAX_DEFINITION_BYTES} a definition may have",
                target.length
            )));
        }
        let bytes = fetch(from, &name, &target).await?;
        // A definition parses in well under a millisecond: in the task, not handed to
        // the blocking pool (the hand-off cost more than the parse).
        let def = Definition::parse(&bytes).map_err(|e| invalid(e.to_string()))?;
        if crate::trust::metadata::target_name(&publisher, &def) != name.raw() {
            return Err(invalid(format!(
                "the file describes {} {}, not what its path says",
                def.name(),
                def.version_text()
            )));
        }
        Some((bytes, Summary::of(&def).to_json()))
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

/// Where target files are fetched from, as the verified root says.
struct TargetSource {
    transport: HttpTransport,
    base: url::Url,
    consistent_snapshot: bool,
}

/// Downloads one target and checks it against the hash and length its role signed.
///
/// tough's `read_target` does the same check, but also rewrites a clock file in its
/// datastore for every target under one lock, which serializes a cold round of
/// thousands of targets. tough has verified the metadata (expiry included) when this
/// runs; this only holds bytes to the signed hash, which `sha2` computes.
async fn fetch(
    from: &TargetSource,
    name: &TargetName,
    target: &Target,
) -> Result<Vec<u8>, RoundError> {
    use sha2::Digest;
    let signed = target.hashes.sha256.as_ref();
    let file = if from.consistent_snapshot {
        format!("tuf/targets/{}.{}", hex::encode(signed), name.raw())
    } else {
        format!("tuf/targets/{}", name.raw())
    };
    let url = from
        .base
        .join(&file)
        .map_err(|e| RoundError::new(Reason::Local, format!("{file}: {e}")))?;
    let max = usize::try_from(target.length).unwrap_or(usize::MAX);
    let bytes = match from.transport.get(url, max).await {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            return Err(RoundError::new(
                Reason::InvalidMetadata,
                format!(
                    "{}: listed, but the marketplace has no such file",
                    name.raw()
                ),
            ));
        }
        Err(GetError::TooLarge(_)) => {
            return Err(RoundError::new(
                Reason::Tampered,
                format!(
                    "{}: longer than the {} bytes signed for it",
                    name.raw(),
                    target.length
                ),
            ));
        }
        Err(GetError::Failed(e)) => {
            return Err(RoundError::new(
                Reason::Unreachable,
                format!("{}: {e}", name.raw()),
            ));
        }
    };
    if bytes.len() as u64 != target.length || sha2::Sha256::digest(&bytes)[..] != *signed {
        return Err(RoundError::new(
            Reason::Tampered,
            format!(
                "{}: the bytes do not match the hash signed for them",
                name.raw()
            ),
        ));
    }
    Ok(bytes)
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
            // tough reports bytes that break their signed hash or length from inside
            // the download stream, wrapped as a transport error.
            T::Transport { source, .. } if wraps_tampering(source) => Reason::Tampered,
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
            T::HashMismatch { .. } | T::MaxSizeExceeded { .. } => Reason::Tampered,
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

fn wraps_tampering(e: &tough::TransportError) -> bool {
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(
            tough::error::Error::HashMismatch { .. } | tough::error::Error::MaxSizeExceeded { .. },
        ) = c.downcast_ref::<tough::error::Error>()
        {
            return true;
        }
        cause = c.source();
    }
    false
}
