//! The current signed state of the repository, the server's next targets, snapshot and
//! timestamp, and re-signing them before they expire. Publishing, suspension and
//! re-signing share the same read-modify-commit cycle: read the newest verified
//! metadata, build new versions, store them in one transaction that fails if another
//! writer got there first.

use std::collections::HashMap;
use std::path::Path;

use tough::schema::{KeyHolder, Metafile, Root, Signed, Snapshot, Targets, Timestamp};

use crate::store::{Store, StoreError, StoredMetadata};
use crate::trust::metadata::{SPEC_VERSION, expiry, metafile, sign, stored, version};
use crate::trust::{SigningKey, TrustError};

/// The keys the server signs with; root keys are never among them.
pub struct OnlineKeys {
    pub targets: SigningKey,
    pub snapshot: SigningKey,
    pub timestamp: SigningKey,
    /// The built-in publisher's key: built-ins ship inside the binary, so the server
    /// signs them.
    pub builtin: SigningKey,
}

impl OnlineKeys {
    /// Loads `{targets,snapshot,timestamp,fundament}.pem` from `dir` (`DATA_DIR/keys`
    /// unless `--keys-dir` names another, such as a mounted Secret); `None` before
    /// `repo init`. The files' group may read them (a Secret mounted with `fsGroup`).
    pub fn load(dir: &Path) -> Result<Option<OnlineKeys>, TrustError> {
        if !dir.join("timestamp.pem").exists() {
            return Ok(None);
        }
        let load = |n: &str| SigningKey::load_group_readable(&dir.join(format!("{n}.pem")));
        Ok(Some(OnlineKeys {
            targets: load("targets")?,
            snapshot: load("snapshot")?,
            timestamp: load("timestamp")?,
            builtin: load(crate::definition::BUILTIN_PUBLISHER)?,
        }))
    }
}

/// The server's signing capability: online keys, and a lock so one process never signs
/// two competing snapshots at once (other replicas are caught by the store's version
/// check instead).
pub struct Signer {
    pub keys: OnlineKeys,
    pub lock: tokio::sync::Mutex<()>,
    /// The lifetimes publisher roles may be uploaded with.
    pub lifetimes: crate::trust::verify::RoleLifetimes,
}

impl Signer {
    pub fn new(keys: OnlineKeys, lifetimes: crate::trust::verify::RoleLifetimes) -> Signer {
        Signer {
            keys,
            lock: tokio::sync::Mutex::new(()),
            lifetimes,
        }
    }
}

/// A role's signed metadata with the stored row it came from.
pub struct Current<T> {
    pub signed: Signed<T>,
    pub stored: StoredMetadata,
}

impl<T> Current<T> {
    /// The lifetime this role was signed with, kept for its next version.
    pub(crate) fn lifetime(&self) -> std::time::Duration {
        std::time::Duration::from_secs(
            self.stored
                .expires_at
                .saturating_sub(self.stored.created_at)
                .max(60) as u64,
        )
    }

    /// Past half its lifetime: re-sign now, well before clients would refuse it.
    fn due(&self, now: i64) -> bool {
        let half = (self.stored.expires_at - self.stored.created_at) / 2;
        now >= self.stored.created_at + half
    }
}

pub struct State {
    pub root: Current<Root>,
    pub targets: Current<Targets>,
    pub snapshot: Current<Snapshot>,
    pub timestamp: Current<Timestamp>,
}

fn parse<T: serde::de::DeserializeOwned>(m: StoredMetadata) -> Result<Current<T>, TrustError> {
    let signed = serde_json::from_slice(&m.bytes)
        .map_err(|e| TrustError::Corrupt(format!("{} v{}: {e}", m.role, m.version)))?;
    Ok(Current { signed, stored: m })
}

/// The newest consistent state, following timestamp → snapshot → targets as clients do,
/// with every signature checked against the newest root. `None` before `repo init`.
pub async fn current(store: &Store) -> Result<Option<State>, TrustError> {
    let Some(root) = store.latest_metadata("root").await? else {
        return Ok(None);
    };
    let root: Current<Root> = parse(root)?;
    let missing = |what: String| TrustError::Corrupt(format!("{what} is missing"));
    let timestamp: Current<Timestamp> = parse(
        store
            .latest_metadata("timestamp")
            .await?
            .ok_or_else(|| missing("timestamp".into()))?,
    )?;
    let snapshot_version = timestamp
        .signed
        .signed
        .meta
        .get("snapshot.json")
        .map(|m| m.version.get())
        .ok_or_else(|| missing("timestamp's snapshot entry".into()))?;
    let snapshot: Current<Snapshot> = parse(
        store
            .metadata("snapshot", snapshot_version)
            .await?
            .ok_or_else(|| missing(format!("snapshot v{snapshot_version}")))?,
    )?;
    let targets_version = snapshot
        .signed
        .signed
        .meta
        .get("targets.json")
        .map(|m| m.version.get())
        .ok_or_else(|| missing("snapshot's targets entry".into()))?;
    let targets: Current<Targets> = parse(
        store
            .metadata("targets", targets_version)
            .await?
            .ok_or_else(|| missing(format!("targets v{targets_version}")))?,
    )?;
    let r = &root.signed.signed;
    let bad = |e: tough::schema::Error| TrustError::Corrupt(e.to_string());
    r.verify_role(&root.signed).map_err(bad)?;
    r.verify_role(&timestamp.signed).map_err(bad)?;
    r.verify_role(&snapshot.signed).map_err(bad)?;
    r.verify_role(&targets.signed).map_err(bad)?;
    Ok(Some(State {
        root,
        targets,
        snapshot,
        timestamp,
    }))
}

/// The hashed bins the publishers' current roles delegate (empty before `repo init`).
/// Bins of an older layout stay in the snapshot but are not among them.
pub async fn delegated_bins(
    store: &Store,
) -> Result<std::collections::HashSet<String>, TrustError> {
    match current(store).await? {
        Some(state) => bins_of(store, &state).await,
        None => Ok(Default::default()),
    }
}

/// [`delegated_bins`] of an already loaded `state`.
pub async fn bins_of(
    store: &Store,
    state: &State,
) -> Result<std::collections::HashSet<String>, TrustError> {
    let mut bins = std::collections::HashSet::new();
    let publishers = state
        .targets
        .signed
        .signed
        .delegations
        .iter()
        .flat_map(|d| &d.roles);
    for p in publishers {
        let snapshot = &state.snapshot.signed.signed;
        let Some((_, top)) = current_role(store, snapshot, &p.name).await? else {
            continue;
        };
        bins.extend(crate::trust::bins::delegated(&p.name, &top.signed));
    }
    Ok(bins)
}

/// `targets` signed as the next targets version: the file to store and its snapshot
/// entry. Every change of targets (re-signing, a delegation entering or moving,
/// suspension) goes through here.
pub async fn next_targets(
    keys: &OnlineKeys,
    state: &State,
    mut targets: Targets,
    now: i64,
) -> Result<(StoredMetadata, Metafile), TrustError> {
    let holder = KeyHolder::Root(state.root.signed.signed.clone());
    let n = state.targets.stored.version + 1;
    let expires = expiry(now, state.targets.lifetime());
    targets.version = version(n);
    targets.expires = expires;
    let signed = sign(targets, &holder, &[&keys.targets]).await?;
    let entry = metafile(n, signed.buffer());
    Ok((stored("targets", n, now, expires, &signed), entry))
}

/// The next snapshot, listing `meta`.
async fn next_snapshot(
    keys: &OnlineKeys,
    state: &State,
    meta: HashMap<String, Metafile>,
    now: i64,
) -> Result<StoredMetadata, TrustError> {
    let holder = KeyHolder::Root(state.root.signed.signed.clone());
    let n = state.snapshot.stored.version + 1;
    let expires = expiry(now, state.snapshot.lifetime());
    let mut snapshot = Snapshot::new(SPEC_VERSION.into(), version(n), expires);
    snapshot.meta = meta;
    let signed = sign(snapshot, &holder, &[&keys.snapshot]).await?;
    Ok(stored("snapshot", n, now, expires, &signed))
}

/// The next timestamp, naming `snapshot`.
async fn next_timestamp(
    keys: &OnlineKeys,
    state: &State,
    snapshot: &StoredMetadata,
    now: i64,
) -> Result<StoredMetadata, TrustError> {
    let holder = KeyHolder::Root(state.root.signed.signed.clone());
    let n = state.timestamp.stored.version + 1;
    let expires = expiry(now, state.timestamp.lifetime());
    let mut timestamp = Timestamp::new(SPEC_VERSION.into(), version(n), expires);
    timestamp.meta.insert(
        "snapshot.json".into(),
        metafile(snapshot.version, &snapshot.bytes),
    );
    let signed = sign(timestamp, &holder, &[&keys.timestamp]).await?;
    Ok(stored("timestamp", n, now, expires, &signed))
}

/// The next snapshot (listing `meta`) and the timestamp naming it, signed with the
/// online keys: what every change to the index is published with. Returns the files to
/// store and the new snapshot version.
pub async fn sign_snapshot_and_timestamp(
    keys: &OnlineKeys,
    state: &State,
    meta: HashMap<String, Metafile>,
    now: i64,
) -> Result<(Vec<StoredMetadata>, u64), TrustError> {
    let snapshot = next_snapshot(keys, state, meta, now).await?;
    let timestamp = next_timestamp(keys, state, &snapshot, now).await?;
    let version = snapshot.version;
    Ok((vec![snapshot, timestamp], version))
}

/// `targets` signed as the next targets version, with the snapshot and timestamp that
/// publish it: how the server changes delegations on its own (suspend, resume).
pub async fn sign_targets(
    keys: &OnlineKeys,
    state: &State,
    targets: Targets,
    now: i64,
) -> Result<Vec<StoredMetadata>, TrustError> {
    let (file, entry) = next_targets(keys, state, targets, now).await?;
    let mut meta = state.snapshot.signed.signed.meta.clone();
    meta.insert("targets.json".into(), entry);
    let mut files = vec![file];
    files.extend(sign_snapshot_and_timestamp(keys, state, meta, now).await?.0);
    Ok(files)
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Refreshed {
    pub targets: Option<u64>,
    pub snapshot: Option<u64>,
    pub timestamp: Option<u64>,
}

/// Re-signs what is past half its lifetime (targets, snapshot, timestamp; a new snapshot
/// always brings a new timestamp), so a healthy server never serves expired metadata.
/// Publisher roles and root are signed by keys the server does not hold.
pub async fn refresh(store: &Store, keys: &OnlineKeys, now: i64) -> Result<Refreshed, TrustError> {
    let Some(state) = current(store).await? else {
        return Ok(Refreshed::default());
    };
    let mut files = Vec::new();
    let mut done = Refreshed::default();
    if state.targets.due(now) {
        files = sign_targets(keys, &state, state.targets.signed.signed.clone(), now).await?;
    } else if state.snapshot.due(now) {
        let meta = state.snapshot.signed.signed.meta.clone();
        files = sign_snapshot_and_timestamp(keys, &state, meta, now)
            .await?
            .0;
    } else if state.timestamp.due(now) {
        files.push(next_timestamp(keys, &state, &state.snapshot.stored, now).await?);
    }
    for f in &files {
        let slot = match f.role.as_str() {
            "targets" => &mut done.targets,
            "snapshot" => &mut done.snapshot,
            _ => &mut done.timestamp,
        };
        *slot = Some(f.version);
    }
    if files.is_empty() {
        return Ok(done);
    }
    match store.put_metadata(&files).await {
        Ok(()) => Ok(done),
        // Another writer (a publish, another replica) signed newer versions first; its
        // metadata is fresh, so there is nothing left to do this round.
        Err(StoreError::MetadataExists { .. }) => Ok(Refreshed::default()),
        Err(e) => Err(e.into()),
    }
}

/// Every publisher role and hashed bin the current index delegates (suspended publishers
/// are not delegated, so not listed), earliest expiry first.
pub async fn publisher_roles(
    store: &Store,
) -> Result<Vec<crate::trust::expiry::RoleExpiry>, TrustError> {
    let Some(state) = current(store).await? else {
        return Ok(Vec::new());
    };
    let publishers: Vec<String> = state
        .targets
        .signed
        .signed
        .delegations
        .iter()
        .flat_map(|d| d.roles.iter().map(|r| r.name.clone()))
        .collect();
    let bins = bins_of(store, &state).await?;
    let mut out: Vec<crate::trust::expiry::RoleExpiry> = store
        .metadata_overview()
        .await?
        .into_iter()
        .filter_map(|m| {
            let publisher = match crate::trust::bins::publisher_of_bin(&m.role) {
                None if publishers.contains(&m.role) => m.role.clone(),
                Some(p) if bins.contains(&m.role) => p.to_owned(),
                _ => return None,
            };
            Some(crate::trust::expiry::RoleExpiry {
                publisher,
                role: m.role,
                version: m.version,
                expires_at: m.expires_at,
            })
        })
        .collect();
    out.sort_by(|a, b| a.expires_at.cmp(&b.expires_at).then(a.role.cmp(&b.role)));
    Ok(out)
}

/// The current version of a role (a publisher's top role or one of its bins) as the
/// newest snapshot lists it.
pub async fn current_role(
    store: &Store,
    snapshot: &Snapshot,
    role: &str,
) -> Result<Option<(StoredMetadata, Signed<Targets>)>, TrustError> {
    let Some(meta) = snapshot.meta.get(&format!("{role}.json")) else {
        return Ok(None);
    };
    let stored = store
        .metadata(role, meta.version.get())
        .await?
        .ok_or_else(|| TrustError::Corrupt(format!("{role} v{} is missing", meta.version)))?;
    let signed = serde_json::from_slice(&stored.bytes)
        .map_err(|e| TrustError::Corrupt(format!("{role}: {e}")))?;
    Ok(Some((stored, signed)))
}
