//! One sync round for one source: a verified refresh of the source's index
//! (`trust::client`) from the trusted state kept in the database, download of the
//! definitions whose hash is new, validation, and one transaction that replaces the
//! source's state. A failure of the index as a whole leaves the previous state
//! untouched; a failure of one publisher's roles keeps that publisher's last good
//! definitions and is recorded with its reason, while every other publisher's changes
//! arrive.

use super::store::{LastGood as _, Sources as _, TrustedMetadata as _};
use std::time::Duration;

use super::config::SourceConfig;
use super::quick;
use super::store::{PublisherFailure, SyncStore, Trusted, TrustedVersions};
use super::targets::{self, TargetSource};
use crate::trust::client::{self, ClientError, Failure, Fetcher, Index, Limits, TrustedState};

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
    pub(super) fn new(reason: Reason, message: impl Into<String>) -> Self {
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
    /// Where the round's time went (all zero for an unchanged index).
    pub phases: Phases,
}

/// Wall time of each step of a round that found a change, as the debug log and the sync
/// benchmark report them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Phases {
    /// Refreshing and verifying the signed metadata (root to every publisher's roles).
    pub metadata: Duration,
    /// Downloading the definitions whose hash is new, each checked against that hash.
    pub downloads: Duration,
    /// Parsing and validating what was downloaded.
    pub parsing: Duration,
    /// The one transaction that replaces the source's state.
    pub store: Duration,
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
            phases: Phases::default(),
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
    let from = TargetSource {
        fetcher: fetcher.clone(),
        base: source.url.clone(),
        consistent,
    };
    let (fetched, parsing) = targets::collect(from, listed, known).await?;
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
    let phases = Phases {
        metadata: loaded,
        downloads: fetched_at.saturating_sub(loaded + parsing),
        parsing,
        store: started.elapsed() - fetched_at,
    };
    tracing::debug!(
        source = %source.name,
        metadata_ms = phases.metadata.as_millis() as u64,
        downloads_ms = phases.downloads.as_millis() as u64,
        parsing_ms = phases.parsing.as_millis() as u64,
        store_ms = phases.store.as_millis() as u64,
        downloaded,
        "round phases"
    );
    Ok(Synced {
        definitions: definitions as usize,
        downloaded,
        unchanged: false,
        trusted: versions,
        failing: store.publisher_failures(&source.name).await?,
        phases,
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
