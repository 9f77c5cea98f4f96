//! Server side of publishing and yanking, after authentication: verify the upload,
//! then store it with new signed metadata in one transaction.

use std::collections::BTreeMap;

use tough::schema::{Delegations, Signed, Snapshot, Targets};

use super::publishers::Delegation;
use super::roleset::{CurrentRoles, Registered, RoleUpload, Verified, verify_set};
use super::state::{OnlineKeys, Signer, State, current_role};
use crate::definition::Definition;
use crate::store::{Store, StoreError, StoredMetadata};
use crate::trust::metadata::{metafile, publisher_delegation};
use crate::trust::publisher::plan::delegations_for;
use crate::trust::verify::{PublishError, RoleLifetimes, check_publish, check_resign, check_yank};
use crate::trust::{PublicKey, TrustError};

/// What a publish or yank changed.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Published {
    pub publisher: String,
    /// Plugin name and version (publish), the yanked target names (yank), or nothing
    /// (re-sign).
    pub changed: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// The version of the publisher's top role after the change.
    pub role_version: u64,
    /// Every role the upload stored (top role and/or bins) with its new version.
    pub roles: BTreeMap<String, u64>,
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
    #[error(
        "publisher `{0}` is suspended by the operator; nothing it uploads is accepted until the operator resumes it"
    )]
    Suspended(String),
    #[error(
        "publisher `{0}` is followed from the upstream marketplace {1}: it publishes there, and this marketplace serves what it signed"
    )]
    Followed(String, String),
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
            StoreError::VersionExists {
                publisher,
                name,
                version,
                existing,
            } => AcceptError::Refused(PublishError::AlreadyPublished {
                publisher,
                name,
                version,
                existing,
            }),
            e => AcceptError::Trust(TrustError::Store(e)),
        }
    }
}

/// A publisher's current top role and the bins `names`; a delegated bin the snapshot
/// does not list is corruption (clients could not load the index).
async fn load_roles(
    store: &Store,
    snapshot: &Snapshot,
    publisher: &str,
    top: Option<Signed<Targets>>,
    names: &[String],
) -> Result<CurrentRoles, TrustError> {
    let mut bins = BTreeMap::new();
    let delegated = |n: &String| {
        top.as_ref()
            .and_then(|t| t.signed.delegations.as_ref())
            .is_some_and(|d| d.roles.iter().any(|r| &r.name == n))
    };
    for name in names {
        match current_role(store, snapshot, name).await? {
            Some((_, bin)) => {
                bins.insert(name.clone(), bin);
            }
            None if delegated(name) => {
                return Err(TrustError::Corrupt(format!(
                    "{publisher}'s role delegates {name}, which the snapshot does not list"
                )));
            }
            None => {}
        }
    }
    Ok(CurrentRoles { top, bins })
}

/// What the server holds now for the roles an upload touches, and its verdict on them.
async fn verify_upload(
    store: &Store,
    state: &State,
    who: &PublisherKeys,
    upload: &RoleUpload,
    now: i64,
    lifetimes: &RoleLifetimes,
) -> Result<(CurrentRoles, Verified), AcceptError> {
    let snapshot = &state.snapshot.signed.signed;
    let top = current_role(store, snapshot, &who.name)
        .await?
        .map(|(_, s)| s);
    let names = CurrentRoles::bins_needed(&who.name, top.as_ref(), upload);
    let current = load_roles(store, snapshot, &who.name, top, &names).await?;
    let registered = Registered {
        publisher: &who.name,
        keys: &who.publics,
        threshold: who.threshold,
        delegations: &who.delegations,
    };
    let verified = verify_set(&registered, snapshot, &current, upload, now, lifetimes)?;
    Ok((current, verified))
}

/// Every key that signed one of the uploaded roles.
fn signers(verified: &Verified) -> Vec<String> {
    let mut ids: Vec<String> = verified
        .roles
        .iter()
        .flat_map(|(_, r, _)| r.signatures.iter().map(|s| hex::encode(s.keyid.as_ref())))
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

fn outcome(
    publisher: &str,
    changed: Vec<String>,
    hash: Option<String>,
    verified: &Verified,
    snapshot_version: u64,
) -> Published {
    Published {
        publisher: publisher.into(),
        changed,
        hash,
        role_version: verified.top_version,
        roles: verified
            .roles
            .iter()
            .map(|(n, r, _)| (n.clone(), r.signed.version.get()))
            .collect(),
        snapshot_version,
    }
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
    if let Some(origin) = record.origin {
        return Err(AcceptError::Followed(name.into(), origin));
    }
    if record.suspended_at.is_some() {
        return Err(AcceptError::Suspended(name.into()));
    }
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

/// The roles as uploaded, targets when the delegation is new or names other keys than
/// the registered ones, and the snapshot and timestamp that publish them.
async fn signed_files(
    keys: &OnlineKeys,
    state: &State,
    publisher: &PublisherKeys,
    roles: &[(String, Signed<Targets>, Vec<u8>)],
    now: i64,
) -> Result<(Vec<StoredMetadata>, u64), AcceptError> {
    let name = &publisher.name;
    let mut files = Vec::new();
    let mut snapshot_meta = state.snapshot.signed.signed.meta.clone();
    for (role_name, role, bytes) in roles {
        let role_version = role.signed.version.get();
        files.push(StoredMetadata {
            role: role_name.clone(),
            version: role_version,
            bytes: bytes.clone(),
            sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes)),
            expires_at: role.signed.expires.as_second(),
            created_at: now,
        });
        snapshot_meta.insert(format!("{role_name}.json"), metafile(role_version, bytes));
    }
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
        let mut targets = state.targets.signed.signed.clone();
        let d = targets.delegations.get_or_insert_with(Delegations::new);
        match d.roles.iter_mut().find(|r| &r.name == name) {
            Some(r) => *r = wanted,
            None => d.roles.push(wanted),
        }
        d.keys
            .extend(publisher.publics.iter().map(PublicKey::tuf_entry));
        // A rotated-out key no role names any more leaves the metadata.
        let used: std::collections::HashSet<_> = d
            .roles
            .iter()
            .flat_map(|r| r.keyids.iter().cloned())
            .collect();
        d.keys.retain(|id, _| used.contains(id));
        let (file, entry) = super::state::next_targets(keys, state, targets, now).await?;
        snapshot_meta.insert("targets.json".into(), entry);
        files.push(file);
    }
    let (published, snapshot_version) =
        super::state::sign_snapshot_and_timestamp(keys, state, snapshot_meta, now).await?;
    files.extend(published);
    Ok((files, snapshot_version))
}

/// Publishes `definitions` (one, or a batch) with the publisher's signed roles, which
/// must add exactly those as targets.
pub async fn accept(
    store: &Store,
    signer: &Signer,
    publisher: &str,
    definitions: &[&[u8]],
    upload: &RoleUpload,
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
        return Err(PublishError::NoDefinition.into());
    }
    let who = publisher_keys(store, publisher).await?;
    let state = super::state::current(store)
        .await?
        .ok_or(AcceptError::NotInitialized)?;
    let (_, verified) = verify_upload(store, &state, &who, upload, now, &signer.lifetimes).await?;
    let defs = check_publish(publisher, &verified.old, &verified.new, defs)?;
    let (files, snapshot_version) =
        signed_files(&signer.keys, &state, &who, &verified.roles, now).await?;
    store
        .publish(publisher, &defs, &signers(&verified), &files, now)
        .await?;
    let changed = defs
        .iter()
        .map(|d| format!("{} {}", d.name(), d.version_text()))
        .collect();
    let hash = (defs.len() == 1).then(|| defs[0].hash.clone());
    Ok(outcome(
        publisher,
        changed,
        hash,
        &verified,
        snapshot_version,
    ))
}

/// A signed role update that adds no definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleUpdate {
    /// Marks targets yanked; they leave listings but stay downloadable by hash.
    Yank,
    /// The same targets re-signed: renews expiry, or moves the roles onto keys
    /// `publisher rotate-key` registered.
    Resign,
}

/// Stores a role update the publisher signed, with new snapshot and timestamp (and
/// targets when the delegation's keys change).
pub async fn accept_update(
    store: &Store,
    signer: &Signer,
    publisher: &str,
    kind: RoleUpdate,
    upload: &RoleUpload,
    now: i64,
) -> Result<Published, AcceptError> {
    let who = publisher_keys(store, publisher).await?;
    let state = super::state::current(store)
        .await?
        .ok_or(AcceptError::NotInitialized)?;
    let (current, verified) =
        verify_upload(store, &state, &who, upload, now, &signer.lifetimes).await?;
    if current.top.is_none() {
        return Err(AcceptError::NothingPublished(publisher.into()));
    }
    let yanked = match kind {
        RoleUpdate::Yank => check_yank(&verified.old, &verified.new)?,
        RoleUpdate::Resign => {
            check_resign(&verified.old, &verified.new)?;
            Vec::new()
        }
    };
    let (files, snapshot_version) =
        signed_files(&signer.keys, &state, &who, &verified.roles, now).await?;
    if kind == RoleUpdate::Resign {
        // Versions keep the signer recorded when they were published; only the metadata
        // that vouches for them changes.
        store.put_metadata(&files).await?;
    } else {
        let hashes: Vec<String> = yanked
            .iter()
            .map(|n| {
                let t = &verified.new[&tough::TargetName::new(n.as_str()).expect("verified")];
                format!("sha256:{}", hex::encode(t.hashes.sha256.as_ref()))
            })
            .collect();
        store.yank(publisher, &hashes, &files, now).await?;
    }
    Ok(outcome(
        publisher,
        yanked,
        None,
        &verified,
        snapshot_version,
    ))
}

/// What [`maintain_builtins`] signed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BuiltinUpdate {
    /// Built-in definitions newly signed into the index.
    pub added: usize,
    /// The built-in roles were re-signed before they expire.
    pub renewed: bool,
}

/// Keeps the built-in publisher's roles current, through the same checks as an upload:
/// signs in every stored built-in they do not list yet (a new binary brought new
/// definitions), and re-signs them once any is past half its lifetime. The server holds
/// this publisher's key, so unlike other publishers' roles it never lets them expire.
pub async fn maintain_builtins(
    store: &Store,
    signer: &Signer,
    now: i64,
) -> Result<BuiltinUpdate, AcceptError> {
    use crate::definition::BUILTIN_PUBLISHER;
    use crate::trust::publisher::plan::{Change, Current, Limits, Plan, plan};
    let Some(state) = super::state::current(store).await? else {
        return Ok(BuiltinUpdate::default());
    };
    let snapshot = &state.snapshot.signed.signed;
    let Some((stored_top, top)) = current_role(store, snapshot, BUILTIN_PUBLISHER).await? else {
        return Err(TrustError::Corrupt(format!("the {BUILTIN_PUBLISHER} role is missing")).into());
    };
    let names = crate::trust::bins::delegated(BUILTIN_PUBLISHER, &top.signed);
    let loaded = load_roles(store, snapshot, BUILTIN_PUBLISHER, Some(top), &names).await?;
    let listed: std::collections::HashSet<String> = loaded
        .top
        .iter()
        .chain(loaded.bins.values())
        .flat_map(|r| r.signed.targets.keys().map(|t| t.raw().to_owned()))
        .collect();
    let defs = store.publisher_definitions(BUILTIN_PUBLISHER).await?;
    let missing: Vec<(&Definition, bool)> = defs
        .iter()
        .filter(|(d, _)| {
            !listed.contains(&crate::trust::metadata::target_name(BUILTIN_PUBLISHER, d))
        })
        .map(|(d, y)| (d, *y))
        .collect();
    // Lifetimes as signed: the top role's, kept from `repo init`.
    let lifetime = (stored_top.expires_at - stored_top.created_at).max(60);
    let half_gone = |r: &Signed<Targets>| r.signed.expires.as_second() - lifetime / 2 <= now;
    let due = loaded.top.iter().chain(loaded.bins.values()).any(half_gone);
    let change = match (missing.is_empty(), due) {
        (false, _) => Change::Add(missing.clone()),
        (true, true) => Change::Resign,
        (true, false) => return Ok(BuiltinUpdate::default()),
    };
    let lifetime = signer
        .lifetimes
        .clamp(std::time::Duration::from_secs(lifetime as u64));
    let current = Current {
        top: loaded.top,
        bins: loaded.bins,
    };
    let keys = &signer.keys;
    let upload = match plan(
        BUILTIN_PUBLISHER,
        &current,
        &change,
        &[&keys.builtin],
        lifetime,
        now,
        Limits::default(),
    )
    .await?
    {
        Plan::Ready(u) => RoleUpload {
            top: u.top,
            bins: u.bins,
        },
        Plan::Fetch(names) => {
            return Err(TrustError::Corrupt(format!(
                "bins {} could not be loaded",
                names.join(", ")
            ))
            .into());
        }
        // `missing` holds only built-ins the role lacks.
        Plan::AlreadyPublished => return Ok(BuiltinUpdate::default()),
    };
    let who = publisher_keys(store, BUILTIN_PUBLISHER).await?;
    let (_, verified) = verify_upload(store, &state, &who, &upload, now, &signer.lifetimes)
        .await
        .map_err(|e| {
            TrustError::Sign(format!(
                "the built-in publisher key does not match its registration: {e}"
            ))
        })?;
    let (files, _) = signed_files(keys, &state, &who, &verified.roles, now).await?;
    store.put_metadata(&files).await?;
    store
        .record_signers(BUILTIN_PUBLISHER, &[keys.builtin.public().key_id()])
        .await?;
    Ok(BuiltinUpdate {
        added: missing.len(),
        renewed: missing.is_empty(),
    })
}
