//! One sync round for one source: a verified refresh of the source's index
//! (`trust::client`) from the trusted state kept in the database, download of the
//! definitions whose hash is new, validation, and one transaction that replaces the
//! source's state. A failure of the index as a whole leaves the previous state
//! untouched; a failure of one publisher's roles keeps that publisher's last good
//! definitions and is recorded with its reason, while every other publisher's changes
//! arrive.

use futures_util::{StreamExt, TryStreamExt};
use tough::schema::Target;

use super::config::SourceConfig;
use super::quick;
use super::store::{PublisherFailure, SourceDefinition, SyncStore, Trusted, TrustedVersions};
use super::view::Summary;
use crate::definition::{Definition, MAX_DEFINITION_BYTES};
use crate::trust::client::{
    self, ClientError, Failure, FetchError, Fetcher, Index, Limits, Listed, TrustedState,
};

/// Downloads in flight per source: enough to hide loopback and LAN latency.
const PARALLEL_DOWNLOADS: usize = 16;

/// Why a round (or one publisher's part of it) failed, as `/status` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The marketplace did not answer (connection refused or reset, HTTP error).
    Unreachable,
    /// A request or the whole round did not finish within its deadline.
    Timeout,
    /// Signed metadata is past its expiry: a frozen or stale mirror, or a role its
    /// publisher did not renew.
    Expired,
    /// Metadata older than what this worker already trusts.
    RolledBack,
    /// Signatures do not meet the threshold of the trusted keys.
    BadSignature,
    /// Metadata or target bytes that do not match the hash or length signed for them.
    Tampered,
    /// Metadata that is missing, oversized, malformed or breaks the rules of the index.
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
            Reason::Timeout => "timeout",
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

impl From<Failure> for Reason {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Unreachable => Reason::Unreachable,
            Failure::Timeout => Reason::Timeout,
            Failure::Expired => Reason::Expired,
            Failure::RolledBack => Reason::RolledBack,
            Failure::BadSignature => Reason::BadSignature,
            Failure::Tampered => Reason::Tampered,
            Failure::InvalidMetadata => Reason::InvalidMetadata,
        }
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

impl From<ClientError> for RoundError {
    fn from(e: ClientError) -> Self {
        RoundError::new(e.kind.into(), e.message)
    }
}

/// What a good round did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synced {
    /// Definitions the source offers now (failing publishers' kept ones included).
    pub definitions: usize,
    /// Of those, downloaded this round (new hashes).
    pub downloaded: usize,
    /// The timestamp was the one already trusted: nothing else was fetched.
    pub unchanged: bool,
    pub trusted: TrustedVersions,
    /// Publishers whose roles failed verification; their last good definitions stay.
    pub failing: Vec<PublisherFailure>,
}

/// Runs one round for `source` within its round deadline and records its outcome
/// (success or reason) in `store`. The source must be registered
/// (`SyncStore::add_source`; `Worker` does it at open), so a warm round writes nothing
/// but its outcome.
pub async fn sync_source(
    store: &SyncStore,
    fetcher: &Fetcher,
    source: &SourceConfig,
    now: i64,
) -> Result<Synced, RoundError> {
    let fetcher = fetcher.with_deadline(source.request_timeout);
    let outcome =
        match tokio::time::timeout(source.round_timeout, round(store, &fetcher, source, now)).await
        {
            Ok(outcome) => outcome,
            Err(_) => Err(RoundError::new(
                Reason::Timeout,
                format!(
                    "the round took longer than its {} deadline (roundTimeout)",
                    crate::clock::human_duration(source.round_timeout.as_secs() as i64)
                ),
            )),
        };
    match outcome {
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
    fetcher: &Fetcher,
    source: &SourceConfig,
    now: i64,
) -> Result<Synced, RoundError> {
    let trusted = store.trusted(&source.name).await?;
    let failing_before = store.publisher_failures(&source.name).await?;
    // A publisher failing because a file was missing or did not match the bytes the
    // snapshot pins may heal without any new metadata (a mirror catching up): such a
    // failure is looked at again every round. An expired or wrongly signed role stays
    // so until the index changes, which the timestamp shows.
    let may_heal = failing_before.iter().any(|f| {
        f.reason == Reason::Tampered.as_str() || f.reason == Reason::InvalidMetadata.as_str()
    });
    if let Some(t) = &trusted
        && !may_heal
        && quick::unchanged(fetcher, &source.url, t, now).await
    {
        store.record_unchanged(&source.name, now).await?;
        return Ok(Synced {
            definitions: t.definitions as usize,
            downloaded: 0,
            unchanged: true,
            trusted: t.versions.clone(),
            failing: failing_before,
        });
    }
    let started = std::time::Instant::now();
    let state = TrustedState {
        root: trusted.as_ref().map_or(&source.root, |t| &t.root),
        timestamp: trusted.as_ref().map(|t| t.timestamp.as_slice()),
        snapshot: trusted.as_ref().map(|t| t.snapshot.as_slice()),
    };
    let index = client::refresh(fetcher, &source.url, state, &Limits::default(), now).await?;
    let versions = trusted_versions(&index);
    if let Some(t) = &trusted {
        // The client measures rollbacks against the trusted bytes; this repeats the
        // check against the versions stored beside them, whatever the client did.
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
    let consistent = index.root.typed.signed.consistent_snapshot;
    let mut listed = Vec::new();
    let mut failing = Vec::new();
    for publisher in &index.publishers {
        match &publisher.outcome {
            Ok(targets) => listed.extend(
                targets
                    .listed
                    .iter()
                    .map(|l| (publisher.name.clone(), l.clone())),
            ),
            Err(e) => {
                tracing::warn!(source = %source.name, publisher = %publisher.name, reason = %Reason::from(e.kind), error = %e.message,
                    "a publisher's roles failed verification; its last good definitions stay");
                // `since` and the count are this round's; the store keeps the first
                // round's `since` and counts up while the failure lasts.
                failing.push(PublisherFailure {
                    publisher: publisher.name.clone(),
                    reason: Reason::from(e.kind).as_str().to_owned(),
                    message: e.message.clone(),
                    since: now,
                    consecutive_failures: 1,
                })
            }
        }
    }
    let known = store.known_hashes(&source.name).await?;
    let from = std::sync::Arc::new(TargetSource {
        fetcher: fetcher.clone(),
        base: source.url.clone(),
        consistent,
    });
    // Each download and its parse is its own task, so both run on every core; a stream
    // of handles keeps PARALLEL_DOWNLOADS in flight and stops at the first failure.
    let fetched: Vec<SourceDefinition> = futures_util::stream::iter(listed)
        .map(|(publisher, listed)| {
            let known = known.get(&listed.name).cloned();
            let from = from.clone();
            tokio::spawn(async move { definition(&from, listed, publisher, known).await })
        })
        .buffer_unordered(PARALLEL_DOWNLOADS)
        .map(|joined| joined.map_err(|e| RoundError::new(Reason::Local, e.to_string()))?)
        .try_collect()
        .await?;
    let downloaded = fetched.iter().filter(|d| d.bytes.is_some()).count();
    let fetched_at = started.elapsed();
    let kept = Trusted {
        versions: versions.clone(),
        definitions: 0,
        root: index.root.bytes.clone(),
        timestamp: index.timestamp.bytes.clone(),
        snapshot: index.snapshot.bytes.clone(),
    };
    let definitions = store
        .replace_source(&source.name, &fetched, &failing, &kept, now)
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
        definitions: definitions as usize,
        downloaded,
        unchanged: false,
        trusted: versions,
        failing: store.publisher_failures(&source.name).await?,
    })
}

/// Versions and the earliest expiry of everything the round now trusts. Failing
/// publishers' roles are left out: they are reported, and the shortcut of later rounds
/// must not be disabled by a role that stays expired.
fn trusted_versions(index: &Index) -> TrustedVersions {
    let mut earliest = (
        index.root.typed.signed.expires.as_second(),
        "root".to_owned(),
    );
    let mut consider = |expires: i64, role: &str| {
        if expires < earliest.0 {
            earliest = (expires, role.to_owned());
        }
    };
    consider(
        index.timestamp.typed.signed.expires.as_second(),
        "timestamp",
    );
    consider(index.snapshot.typed.signed.expires.as_second(), "snapshot");
    consider(index.targets.typed.signed.expires.as_second(), "targets");
    for p in &index.publishers {
        if let Ok(t) = &p.outcome {
            consider(t.expires_at, &t.expires_role);
        }
    }
    TrustedVersions {
        root: index.root.typed.signed.version.get(),
        timestamp: index.timestamp.typed.signed.version.get(),
        snapshot: index.snapshot.typed.signed.version.get(),
        targets: index.targets.typed.signed.version.get(),
        timestamp_expires_at: index.timestamp.typed.signed.expires.as_second(),
        expires_at: earliest.0,
        expires_role: earliest.1,
    }
}

/// The stored form of one listed target: bytes downloaded and validated when its hash is
/// new to this source.
async fn definition(
    from: &TargetSource,
    listed: Listed,
    publisher: String,
    known_hash: Option<String>,
) -> Result<SourceDefinition, RoundError> {
    let Listed {
        name,
        target,
        signers: signer_key_ids,
    } = listed;
    let hash = format!("sha256:{}", hex::encode(target.hashes.sha256.as_ref()));
    let invalid =
        |why: String| RoundError::new(Reason::InvalidDefinition, format!("{name}: {why}"));
    // Checked before anything is fetched: the name becomes part of a URL.
    let parts: Vec<&str> = name.split('/').collect();
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
        if crate::trust::metadata::target_name(&publisher, &def) != name {
            return Err(invalid(format!(
                "the file describes {} {}, not what its path says",
                def.name(),
                def.version_text()
            )));
        }
        Some((bytes, Summary::of(&def).to_json()))
    };
    Ok(SourceDefinition {
        target: name.clone(),
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
    fetcher: Fetcher,
    base: url::Url,
    consistent: bool,
}

/// Downloads one target by the TUF specification's consistent-snapshot name
/// (`PUBLISHER/NAME/HASH.VERSION.yaml`, what python-tuf asks for and any static copy of
/// `/tuf/` holds) and checks it against the hash and length its role signed.
async fn fetch(from: &TargetSource, name: &str, target: &Target) -> Result<Vec<u8>, RoundError> {
    use sha2::Digest;
    let url = client::target_url(&from.base, from.consistent, name, target).ok_or_else(|| {
        RoundError::new(
            Reason::InvalidMetadata,
            format!("{name}: not a usable path"),
        )
    })?;
    let max = usize::try_from(target.length).unwrap_or(usize::MAX);
    let bytes = match from.fetcher.get(url, max).await {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            return Err(RoundError::new(
                Reason::InvalidMetadata,
                format!("{name}: listed, but the marketplace has no such file"),
            ));
        }
        Err(FetchError::TooLarge(_)) => {
            return Err(RoundError::new(
                Reason::Tampered,
                format!(
                    "{name}: longer than the {} bytes signed for it",
                    target.length
                ),
            ));
        }
        Err(e @ FetchError::Timeout(_)) => {
            return Err(RoundError::new(Reason::Timeout, format!("{name}: {e}")));
        }
        Err(FetchError::Failed(e)) => {
            return Err(RoundError::new(Reason::Unreachable, format!("{name}: {e}")));
        }
    };
    if bytes.len() as u64 != target.length
        || sha2::Sha256::digest(&bytes)[..] != *target.hashes.sha256
    {
        return Err(RoundError::new(
            Reason::Tampered,
            format!("{name}: the bytes do not match the hash signed for them"),
        ));
    }
    Ok(bytes)
}
