//! Server side of publishing and yanking, after authentication: verify the upload,
//! then store it with new signed metadata in one transaction.

use tough::schema::{Delegations, KeyHolder, Signed, Snapshot, Targets, Timestamp};

use super::metadata::{
    SPEC_VERSION, expiry, metafile, publisher_delegation, sign, stored, version,
};
use super::publish::delegations_for;
use super::publishers::Delegation;
use super::state::{OnlineKeys, State};
use super::verify::{PublishError, verify_resign, verify_upload, verify_yank};
use super::{PublicKey, TrustError};
use crate::definition::Definition;
use crate::store::{Store, StoreError, StoredMetadata};

/// What a publish or yank changed.
#[derive(Debug, serde::Serialize)]
pub struct Published {
    pub publisher: String,
    /// Plugin name and version (publish), the yanked target names (yank), or nothing
    /// (re-sign).
    pub changed: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    pub role_version: u64,
    pub snapshot_version: u64,
}

/// Why the server did not publish.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    #[error("the signed index is not initialized")]
    NotInitialized,
    #[error("no publisher `{0}` is registered")]
    UnknownPublisher(String),
    #[error("publisher `{0}` has published nothing yet")]
    NothingPublished(String),
    #[error(transparent)]
    Invalid(#[from] crate::definition::InvalidDefinition),
    #[error("definition #{0} of the batch: {1}")]
    InvalidInBatch(usize, crate::definition::InvalidDefinition),
    #[error(transparent)]
    Refused(#[from] PublishError),
    #[error("another publish changed the index first; fetch the current metadata and sign again")]
    Conflict,
    #[error(transparent)]
    Trust(#[from] TrustError),
}

impl From<StoreError> for AcceptError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::MetadataExists { .. } => AcceptError::Conflict,
            e @ StoreError::VersionExists { .. } => {
                AcceptError::Refused(PublishError::Immutable(e.to_string()))
            }
            e => AcceptError::Trust(TrustError::Store(e)),
        }
    }
}

/// The current role of a publisher as the newest snapshot lists it.
pub async fn current_role(
    store: &Store,
    snapshot: &Snapshot,
    publisher: &str,
) -> Result<Option<(StoredMetadata, Signed<Targets>)>, TrustError> {
    let Some(meta) = snapshot.meta.get(&format!("{publisher}.json")) else {
        return Ok(None);
    };
    let stored = store
        .metadata(publisher, meta.version.get())
        .await?
        .ok_or_else(|| TrustError::Corrupt(format!("{publisher} v{} is missing", meta.version)))?;
    let signed = serde_json::from_slice(&stored.bytes)
        .map_err(|e| TrustError::Corrupt(format!("{publisher}: {e}")))?;
    Ok(Some((stored, signed)))
}

/// A registered publisher's keys, as the server checks them.
struct PublisherKeys {
    name: String,
    publics: Vec<PublicKey>,
    threshold: u64,
    delegations: Delegations,
}

async fn publisher_keys(store: &Store, name: &str) -> Result<PublisherKeys, AcceptError> {
    let record = store
        .publisher(name)
        .await?
        .ok_or_else(|| AcceptError::UnknownPublisher(name.into()))?;
    let publics = record
        .public_keys
        .iter()
        .map(|k| PublicKey::parse(k))
        .collect::<Result<Vec<_>, _>>()
        .map_err(TrustError::from)?;
    Ok(PublisherKeys {
        delegations: delegations_for(name, &publics, record.threshold)?,
        name: name.into(),
        publics,
        threshold: record.threshold,
    })
}

/// The role as uploaded, targets when the delegation is new or names other keys than the
/// registered ones, and the snapshot and timestamp that publish them.
async fn signed_files(
    keys: &OnlineKeys,
    state: &State,
    publisher: &PublisherKeys,
    role: &Signed<Targets>,
    role_bytes: &[u8],
    now: i64,
) -> Result<(Vec<StoredMetadata>, u64), AcceptError> {
    let name = &publisher.name;
    let role_version = role.signed.version.get();
    let holder = KeyHolder::Root(state.root.signed.signed.clone());
    let mut files = vec![StoredMetadata {
        role: name.clone(),
        version: role_version,
        bytes: role_bytes.to_vec(),
        sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(role_bytes)),
        expires_at: role.signed.expires.as_second(),
        created_at: now,
    }];
    let mut snapshot_meta = state.snapshot.signed.signed.meta.clone();
    snapshot_meta.insert(format!("{name}.json"), metafile(role_version, role_bytes));
    let delegation = super::publishers::delegation(
        Some(&state.targets.signed.signed),
        name,
        &publisher.publics,
        publisher.threshold,
    );
    if delegation != Delegation::Current {
        let wanted = publisher_delegation(name, &publisher.publics, publisher.threshold)?;
        // The delegation enters targets together with the role it names (first publish),
        // or moves to the keys `publisher rotate-key` registered, together with the role
        // re-signed by them: clients never see a role its delegation does not verify.
        let n = state.targets.stored.version + 1;
        let expires = expiry(now, state.targets.lifetime());
        let mut targets = state.targets.signed.signed.clone();
        targets.version = version(n);
        targets.expires = expires;
        let d = targets.delegations.get_or_insert_with(Delegations::new);
        match d.roles.iter_mut().find(|r| &r.name == name) {
            Some(r) => *r = wanted,
            None => d.roles.push(wanted),
        }
        for k in &publisher.publics {
            d.keys
                .insert(k.tuf_key().key_id().expect("key id"), k.tuf_key());
        }
        // A rotated-out key no role names any more leaves the metadata.
        let used: std::collections::HashSet<_> = d
            .roles
            .iter()
            .flat_map(|r| r.keyids.iter().cloned())
            .collect();
        d.keys.retain(|id, _| used.contains(id));
        let signed = sign(targets, &holder, &[&keys.targets]).await?;
        snapshot_meta.insert("targets.json".into(), metafile(n, signed.buffer()));
        files.push(stored("targets", n, now, expires, &signed));
    }
    let snapshot_version = state.snapshot.stored.version + 1;
    let snapshot_expires = expiry(now, state.snapshot.lifetime());
    let mut snapshot = Snapshot::new(
        SPEC_VERSION.into(),
        version(snapshot_version),
        snapshot_expires,
    );
    snapshot.meta = snapshot_meta;
    let signed_snapshot = sign(snapshot, &holder, &[&keys.snapshot]).await?;
    let timestamp_version = state.timestamp.stored.version + 1;
    let timestamp_expires = expiry(now, state.timestamp.lifetime());
    let mut timestamp = Timestamp::new(
        SPEC_VERSION.into(),
        version(timestamp_version),
        timestamp_expires,
    );
    timestamp.meta.insert(
        "snapshot.json".into(),
        metafile(snapshot_version, signed_snapshot.buffer()),
    );
    let signed_timestamp = sign(timestamp, &holder, &[&keys.timestamp]).await?;
    files.push(stored(
        "snapshot",
        snapshot_version,
        now,
        snapshot_expires,
        &signed_snapshot,
    ));
    files.push(stored(
        "timestamp",
        timestamp_version,
        now,
        timestamp_expires,
        &signed_timestamp,
    ));
    Ok((files, snapshot_version))
}

/// Publishes `definitions` (one, or a batch) with the publisher's signed `role_bytes`,
/// which must add exactly those as targets.
pub async fn accept(
    store: &Store,
    keys: &OnlineKeys,
    publisher: &str,
    definitions: &[&[u8]],
    role_bytes: &[u8],
    now: i64,
) -> Result<Published, AcceptError> {
    let defs = definitions
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            Definition::parse(bytes).map_err(|e| match definitions.len() {
                1 => AcceptError::Invalid(e),
                _ => AcceptError::InvalidInBatch(i + 1, e),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if defs.is_empty() {
        return Err(PublishError::WrongTargets {
            expected: "at least one definition".into(),
            found: "the upload has none".into(),
        }
        .into());
    }
    let who = publisher_keys(store, publisher).await?;
    let state = super::state::current(store)
        .await?
        .ok_or(AcceptError::NotInitialized)?;
    let current = current_role(store, &state.snapshot.signed.signed, publisher).await?;
    let role = verify_upload(
        publisher,
        &who.delegations,
        current.as_ref().map(|(_, s)| s),
        role_bytes,
        &defs,
        now,
    )?;
    let (files, snapshot_version) =
        signed_files(keys, &state, &who, &role, role_bytes, now).await?;
    let signer_ids: Vec<String> = role
        .signatures
        .iter()
        .map(|s| hex::encode(s.keyid.as_ref()))
        .collect();
    store
        .publish(publisher, &defs, &signer_ids, &files, now)
        .await?;
    Ok(Published {
        publisher: publisher.into(),
        changed: defs
            .iter()
            .map(|d| format!("{} {}", d.name(), d.version_text()))
            .collect(),
        hash: (defs.len() == 1).then(|| defs[0].hash.clone()),
        role_version: role.signed.version.get(),
        snapshot_version,
    })
}

/// A signed role update that adds no definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleUpdate {
    /// Marks targets yanked; they leave listings but stay downloadable by hash.
    Yank,
    /// The same targets re-signed: renews expiry, or moves the role onto keys
    /// `publisher rotate-key` registered.
    Resign,
}

/// Stores a role update the publisher signed, with new snapshot and timestamp (and
/// targets when the delegation's keys change).
pub async fn accept_update(
    store: &Store,
    keys: &OnlineKeys,
    publisher: &str,
    kind: RoleUpdate,
    role_bytes: &[u8],
    now: i64,
) -> Result<Published, AcceptError> {
    let who = publisher_keys(store, publisher).await?;
    let state = super::state::current(store)
        .await?
        .ok_or(AcceptError::NotInitialized)?;
    let (_, current) = current_role(store, &state.snapshot.signed.signed, publisher)
        .await?
        .ok_or_else(|| AcceptError::NothingPublished(publisher.into()))?;
    let (role, yanked) = match kind {
        RoleUpdate::Yank => verify_yank(publisher, &who.delegations, &current, role_bytes, now)?,
        RoleUpdate::Resign => (
            verify_resign(publisher, &who.delegations, &current, role_bytes, now)?,
            Vec::new(),
        ),
    };
    let (files, snapshot_version) =
        signed_files(keys, &state, &who, &role, role_bytes, now).await?;
    if kind == RoleUpdate::Resign {
        // Versions keep the signer recorded when they were published; only the metadata
        // that vouches for them changes.
        store.put_metadata(&files).await?;
    } else {
        let hashes: Vec<String> = yanked
            .iter()
            .map(|n| {
                let t =
                    &role.signed.targets[&tough::TargetName::new(n.as_str()).expect("verified")];
                format!("sha256:{}", hex::encode(t.hashes.sha256.as_ref()))
            })
            .collect();
        store.yank(publisher, &hashes, &files, now).await?;
    }
    Ok(Published {
        publisher: publisher.into(),
        changed: yanked,
        hash: None,
        role_version: role.signed.version.get(),
        snapshot_version,
    })
}

/// Signs into the built-in publisher's role every stored built-in it does not list yet
/// (a new binary brought new definitions). Returns how many were added.
pub async fn sign_new_builtins(
    store: &Store,
    keys: &OnlineKeys,
    now: i64,
) -> Result<usize, AcceptError> {
    use crate::catalog::builtin::BUILTIN_PUBLISHER;
    let Some(state) = super::state::current(store).await? else {
        return Ok(0);
    };
    let Some((stored_role, current)) =
        current_role(store, &state.snapshot.signed.signed, BUILTIN_PUBLISHER).await?
    else {
        return Err(TrustError::Corrupt(format!("the {BUILTIN_PUBLISHER} role is missing")).into());
    };
    let defs = store.publisher_definitions(BUILTIN_PUBLISHER).await?;
    let missing: Vec<(&Definition, bool)> = defs
        .iter()
        .filter(|(d, _)| {
            let name = super::metadata::target_name(BUILTIN_PUBLISHER, d);
            !current.signed.targets.keys().any(|t| t.raw() == name)
        })
        .map(|(d, y)| (d, *y))
        .collect();
    if missing.is_empty() {
        return Ok(0);
    }
    let who = publisher_keys(store, BUILTIN_PUBLISHER).await?;
    let lifetime = std::time::Duration::from_secs(
        (stored_role.expires_at - stored_role.created_at).max(60) as u64,
    );
    let bytes = super::publish::build_role_adding(
        BUILTIN_PUBLISHER,
        Some(&current),
        &missing,
        &[&keys.builtin],
        1,
        lifetime,
        now,
    )
    .await?;
    let role: Signed<Targets> =
        serde_json::from_slice(&bytes).map_err(|e| TrustError::Sign(e.to_string()))?;
    who.delegations
        .verify_role(&role, BUILTIN_PUBLISHER)
        .map_err(|e| {
            TrustError::Sign(format!(
                "the built-in publisher key does not match its registration: {e}"
            ))
        })?;
    let (files, _) = signed_files(keys, &state, &who, &role, &bytes, now).await?;
    store.put_metadata(&files).await?;
    store
        .record_signers(BUILTIN_PUBLISHER, &[keys.builtin.public().key_id()])
        .await?;
    Ok(missing.len())
}
