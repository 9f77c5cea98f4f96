//! Server side: the operator suspends and resumes a publisher without the publisher.
//!
//! Suspending removes the publisher's delegation from `targets.json` (re-signed with the
//! online targets key, with a new snapshot and timestamp), so no TUF client loads its
//! roles any more: a publisher whose role expired, or whose key leaked, stops affecting
//! anyone at once. Its roles stay listed in the snapshot (python-tuf refuses a snapshot
//! that drops a role) and its files stay served, so resuming restores the removed
//! delegation exactly and every client verifies the publisher's unchanged current role
//! again. Nothing the publisher signed is rewritten.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use tough::schema::decoded::{Decoded, Hex};
use tough::schema::key::Key;
use tough::schema::{DelegatedRole, Delegations};

use super::state::{OnlineKeys, sign_targets};
use crate::definition::BUILTIN_PUBLISHER;
use crate::store::{Store, StoreError};
use crate::trust::TrustError;

#[derive(Debug, thiserror::Error)]
pub enum SuspendError {
    #[error("no publisher `{0}` is registered")]
    UnknownPublisher(String),
    #[error("publisher `{0}` is suspended already; `marketplace publisher resume {0}` lifts it")]
    AlreadySuspended(String),
    #[error("publisher `{0}` is not suspended")]
    NotSuspended(String),
    #[error(
        "publisher `{0}` is followed from {1}, which no longer delegates to it; it comes back when that marketplace restores it"
    )]
    DroppedUpstream(String, String),
    #[error(
        "publisher `{0}` has published nothing, so the index does not delegate to it yet; revoke its tokens to stop it publishing"
    )]
    NotDelegated(String),
    #[error(
        "the built-in publisher `{BUILTIN_PUBLISHER}` ships with the binary and cannot be suspended"
    )]
    Builtin,
    #[error("another change to the index landed meanwhile; run the command again")]
    Conflict,
    #[error(transparent)]
    Trust(#[from] TrustError),
}

impl From<StoreError> for SuspendError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::MetadataExists { .. } => SuspendError::Conflict,
            e => SuspendError::Trust(TrustError::Store(e)),
        }
    }
}

/// What suspension removed from `targets.json`, kept to restore it.
#[derive(Debug, Serialize, Deserialize)]
struct Removed {
    role: DelegatedRole,
    keys: HashMap<Decoded<Hex>, Key>,
}

/// Removes `name`'s delegation from the index. Returns the new targets version.
pub async fn suspend(
    store: &Store,
    keys: &OnlineKeys,
    name: &str,
    now: i64,
) -> Result<u64, SuspendError> {
    if name == BUILTIN_PUBLISHER {
        return Err(SuspendError::Builtin);
    }
    let record = store
        .publisher(name)
        .await?
        .ok_or_else(|| SuspendError::UnknownPublisher(name.into()))?;
    if record.suspended_at.is_some() {
        return Err(SuspendError::AlreadySuspended(name.into()));
    }
    let state = super::state::current(store)
        .await?
        .ok_or(TrustError::NotInitialized)?;
    let mut targets = state.targets.signed.signed.clone();
    let delegations = targets.delegations.get_or_insert_with(Delegations::new);
    let Some(at) = delegations.roles.iter().position(|r| r.name == name) else {
        return Err(SuspendError::NotDelegated(name.into()));
    };
    let role = delegations.roles.remove(at);
    // Keys only this delegation named leave with it; they come back on resume.
    let still_used: std::collections::HashSet<_> = delegations
        .roles
        .iter()
        .flat_map(|r| r.keyids.iter().cloned())
        .collect();
    let mut removed_keys = HashMap::new();
    for id in &role.keyids {
        if let Some(key) = delegations.keys.get(id) {
            removed_keys.insert(id.clone(), key.clone());
        }
        if !still_used.contains(id) {
            delegations.keys.remove(id);
        }
    }
    let removed = serde_json::to_string(&Removed {
        role,
        keys: removed_keys,
    })
    .map_err(|e| TrustError::Sign(e.to_string()))?;
    let files = sign_targets(keys, &state, targets, now).await?;
    let version = state.targets.stored.version + 1;
    store.suspend_publisher(name, &removed, &files, now).await?;
    Ok(version)
}

/// Restores `name`'s delegation exactly as it was removed. Returns the new targets
/// version.
pub async fn resume(
    store: &Store,
    keys: &OnlineKeys,
    name: &str,
    now: i64,
) -> Result<u64, SuspendError> {
    let record = store
        .publisher(name)
        .await?
        .ok_or_else(|| SuspendError::UnknownPublisher(name.into()))?;
    let Some(saved) = store.suspended_delegation(name).await? else {
        return Err(match (record.origin, record.suspended_at) {
            (Some(origin), Some(_)) => SuspendError::DroppedUpstream(name.into(), origin),
            _ => SuspendError::NotSuspended(name.into()),
        });
    };
    let removed: Removed = serde_json::from_str(&saved)
        .map_err(|e| TrustError::Corrupt(format!("the delegation kept for {name}: {e}")))?;
    let state = super::state::current(store)
        .await?
        .ok_or(TrustError::NotInitialized)?;
    let mut targets = state.targets.signed.signed.clone();
    let delegations = targets.delegations.get_or_insert_with(Delegations::new);
    delegations.roles.retain(|r| r.name != name);
    delegations.roles.push(removed.role);
    delegations.keys.extend(removed.keys);
    let files = sign_targets(keys, &state, targets, now).await?;
    let version = state.targets.stored.version + 1;
    store.resume_publisher(name, &files).await?;
    Ok(version)
}
