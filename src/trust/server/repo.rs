//! The marketplace's TUF repository: creating it, and rotating its root keys.
//!
//! Online keys (targets, snapshot, timestamp, and the built-in `fundament` publisher's,
//! since built-ins ship inside this binary) live in `DATA_DIR/keys/` with mode 0600.
//! Root keys are only read for `repo init` and rotation and are never stored here.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tough::schema::{
    DelegatedTargets, Delegations, KeyHolder, Role, RoleKeys, RoleType, Root, Snapshot, Targets,
    Timestamp,
};

use crate::definition::BUILTIN_PUBLISHER;
use crate::definition::Definition;
use crate::store::Store;
use crate::store::StoredMetadata;
use crate::trust::metadata::{
    Lifetimes, SPEC_VERSION, expiry, metafile, publisher_delegation, sign, stored, target,
    target_name, version,
};
use crate::trust::{SigningKey, TrustError};

/// Online keys, by file name in the keys directory.
const ONLINE_KEYS: [&str; 4] = ["targets", "snapshot", "timestamp", BUILTIN_PUBLISHER];

pub struct InitParams {
    pub root_keys: Vec<SigningKey>,
    pub root_threshold: u64,
    pub lifetimes: Lifetimes,
}

#[derive(Debug)]
pub struct InitReport {
    pub root_key_ids: Vec<String>,
    pub online_key_ids: Vec<(String, String)>,
    pub builtin_targets: usize,
}

/// Where the online keys are kept unless `--keys-dir` says otherwise.
pub fn keys_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("keys")
}

/// Loads an online key, generating it on first use (a crashed earlier `init` may have
/// left keys behind without metadata; they are reused rather than replaced).
fn online_key(dir: &Path, name: &str) -> Result<SigningKey, TrustError> {
    let path = dir.join(format!("{name}.pem"));
    if path.exists() {
        return Ok(SigningKey::load_group_readable(&path)?);
    }
    let key = SigningKey::generate()?;
    key.save_new(&path)?;
    Ok(key)
}

/// Creates root, targets (delegating `fundament/*/*` to the built-in publisher), the
/// `fundament` role with every stored built-in, snapshot and timestamp, all stored in one
/// transaction. Refuses to run twice.
pub async fn init(
    store: &Store,
    keys_dir: &Path,
    params: InitParams,
    now: i64,
) -> Result<InitReport, TrustError> {
    if store.latest_metadata("root").await?.is_some() {
        return Err(TrustError::AlreadyInitialized);
    }
    check_threshold(params.root_threshold, &params.root_keys)?;
    let online = online_keys(keys_dir)?;
    let lt = params.lifetimes;
    let root = root_v1(&params, &online, expiry(now, lt.root));
    let root_file = sign_root_v1(&root, &params.root_keys, now).await?;
    let holder = KeyHolder::Root(root);

    // the built-in publisher's role, then the top-level targets delegating to it
    let builtin_key = &online[BUILTIN_PUBLISHER];
    let delegations = builtin_delegations(builtin_key)?;
    let builtins = store.publisher_definitions(BUILTIN_PUBLISHER).await?;
    let publisher_role = builtin_role(&builtins, expiry(now, lt.publisher))?;
    let builtin_holder = KeyHolder::Delegations(delegations.clone());
    let publisher_file = first_version(
        BUILTIN_PUBLISHER,
        publisher_role,
        &builtin_holder,
        builtin_key,
        now,
    )
    .await?;
    let mut top = Targets::new(SPEC_VERSION.into(), version(1), expiry(now, lt.targets));
    top.delegations = Some(delegations);
    let targets_file = first_version("targets", top, &holder, &online["targets"], now).await?;

    let mut snapshot = Snapshot::new(SPEC_VERSION.into(), version(1), expiry(now, lt.snapshot));
    for file in [&targets_file, &publisher_file] {
        snapshot
            .meta
            .insert(format!("{}.json", file.role), metafile(1, &file.bytes));
    }
    let snapshot_file =
        first_version("snapshot", snapshot, &holder, &online["snapshot"], now).await?;

    let mut timestamp = Timestamp::new(SPEC_VERSION.into(), version(1), expiry(now, lt.timestamp));
    timestamp
        .meta
        .insert("snapshot.json".into(), metafile(1, &snapshot_file.bytes));
    let timestamp_file =
        first_version("timestamp", timestamp, &holder, &online["timestamp"], now).await?;

    let files = [
        root_file,
        targets_file,
        publisher_file,
        snapshot_file,
        timestamp_file,
    ];
    // Keys first: if init stops before the metadata is stored, running it again works.
    store
        .set_publisher_keys(BUILTIN_PUBLISHER, &[builtin_key.public().hex()], 1)
        .await?;
    store.put_metadata(&files).await?;
    store
        .record_signers(BUILTIN_PUBLISHER, &[builtin_key.public().key_id()])
        .await?;

    Ok(InitReport {
        root_key_ids: params
            .root_keys
            .iter()
            .map(|k| k.public().key_id())
            .collect(),
        online_key_ids: ONLINE_KEYS
            .iter()
            .map(|n| (n.to_string(), online[n].public().key_id()))
            .collect(),
        builtin_targets: builtins.len(),
    })
}

/// A root threshold `keys` can meet, and at least one signature.
fn check_threshold(threshold: u64, keys: &[SigningKey]) -> Result<(), TrustError> {
    let n = keys.len() as u64;
    if threshold == 0 || threshold > n {
        return Err(TrustError::Threshold { threshold, keys: n });
    }
    Ok(())
}

/// The online keys, loaded or generated, in `dir` (created private to this user).
fn online_keys(dir: &Path) -> Result<HashMap<&'static str, SigningKey>, TrustError> {
    std::fs::create_dir_all(dir).map_err(|e| TrustError::Io(dir.display().to_string(), e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| TrustError::Io(dir.display().to_string(), e))?;
    }
    ONLINE_KEYS
        .iter()
        .map(|n| online_key(dir, n).map(|k| (*n, k)))
        .collect()
}

/// Root version 1: the offline root keys with their threshold; targets, snapshot and
/// timestamp each one online key.
fn root_v1(
    params: &InitParams,
    online: &HashMap<&str, SigningKey>,
    expires: jiff::Timestamp,
) -> Root {
    let mut keys = HashMap::new();
    let mut role_ids = |ks: &[&SigningKey]| {
        ks.iter()
            .map(|k| {
                let (id, key) = k.public().tuf_entry();
                keys.insert(id.clone(), key);
                id
            })
            .collect::<Vec<_>>()
    };
    let root_refs: Vec<&SigningKey> = params.root_keys.iter().collect();
    let mut roles = HashMap::new();
    roles.insert(
        RoleType::Root,
        role_keys(role_ids(&root_refs), params.root_threshold),
    );
    for (role, name) in [
        (RoleType::Targets, "targets"),
        (RoleType::Snapshot, "snapshot"),
        (RoleType::Timestamp, "timestamp"),
    ] {
        roles.insert(role, role_keys(role_ids(&[&online[name]]), 1));
    }
    Root {
        spec_version: SPEC_VERSION.into(),
        consistent_snapshot: true,
        version: version(1),
        expires,
        keys,
        roles,
        _extra: HashMap::new(),
    }
}

/// `root` signed by every root key, checked to meet its own threshold.
async fn sign_root_v1(
    root: &Root,
    root_keys: &[SigningKey],
    now: i64,
) -> Result<StoredMetadata, TrustError> {
    let root_refs: Vec<&SigningKey> = root_keys.iter().collect();
    let signed = sign(root.clone(), &KeyHolder::Root(root.clone()), &root_refs).await?;
    // Signing root does not enforce the threshold (cross-signing needs that): check it.
    root.verify_role(signed.signed())
        .map_err(|e| TrustError::Sign(e.to_string()))?;
    Ok(stored("root", 1, now, root.expires, &signed))
}

/// What the top-level targets role delegates: `fundament/*/*` to the built-in key.
fn builtin_delegations(builtin_key: &SigningKey) -> Result<Delegations, TrustError> {
    let delegation = publisher_delegation(BUILTIN_PUBLISHER, &[builtin_key.public()], 1)?;
    let mut delegations = Delegations::new();
    let (id, key) = builtin_key.public().tuf_entry();
    delegations.keys.insert(id, key);
    delegations.roles.push(delegation);
    Ok(delegations)
}

/// The built-in publisher's role version 1, listing every stored built-in.
fn builtin_role(
    builtins: &[(Definition, bool)],
    expires: jiff::Timestamp,
) -> Result<DelegatedTargets, TrustError> {
    let mut role = Targets::new(SPEC_VERSION.into(), version(1), expires);
    role.delegations = None;
    for (def, yanked) in builtins {
        let name = tough::TargetName::new(target_name(BUILTIN_PUBLISHER, def))
            .map_err(|e| TrustError::Sign(e.to_string()))?;
        role.targets.insert(name, target(def, *yanked));
    }
    Ok(DelegatedTargets {
        name: BUILTIN_PUBLISHER.into(),
        targets: role,
    })
}

/// Version 1 of role `name`, signed with its one online key, as stored.
async fn first_version<T: Role>(
    name: &str,
    role: T,
    holder: &KeyHolder,
    key: &SigningKey,
    now: i64,
) -> Result<StoredMetadata, TrustError> {
    let expires = role.expires();
    let signed = sign(role, holder, &[key]).await?;
    Ok(stored(name, 1, now, expires, &signed))
}

fn role_keys(
    keyids: Vec<tough::schema::decoded::Decoded<tough::schema::decoded::Hex>>,
    threshold: u64,
) -> RoleKeys {
    RoleKeys {
        keyids,
        threshold: version(threshold),
        _extra: HashMap::new(),
    }
}

/// Signs `N+1.root.json` replacing the root keys: the old root's threshold of keys and
/// the new root's threshold both sign it, so clients holding root N can step to N+1.
/// Online keys are unchanged. Returns the new root version.
pub async fn rotate_root(
    store: &Store,
    old_keys: &[SigningKey],
    new_keys: &[SigningKey],
    new_threshold: u64,
    lifetime: Option<std::time::Duration>,
    now: i64,
) -> Result<u64, TrustError> {
    let current = store
        .latest_metadata("root")
        .await?
        .ok_or(TrustError::NotInitialized)?;
    let old: tough::schema::Signed<Root> = serde_json::from_slice(&current.bytes)
        .map_err(|e| TrustError::Corrupt(format!("root: {e}")))?;
    check_threshold(new_threshold, new_keys)?;
    let mut root = old.signed.clone();
    let n = current.version + 1;
    root.version = version(n);
    let lifetime = lifetime.unwrap_or(std::time::Duration::from_secs(
        (current.expires_at - current.created_at).max(60) as u64,
    ));
    let expires = expiry(now, lifetime);
    root.expires = expires;
    // Drop the old root keys no other role uses, then add the new ones.
    let old_ids = old
        .signed
        .roles
        .get(&RoleType::Root)
        .map(|r| r.keyids.clone())
        .unwrap_or_default();
    for id in &old_ids {
        let used_elsewhere = root
            .roles
            .iter()
            .any(|(role, keys)| *role != RoleType::Root && keys.keyids.contains(id));
        if !used_elsewhere {
            root.keys.remove(id);
        }
    }
    let mut new_ids = Vec::new();
    for k in new_keys {
        let (id, key) = k.public().tuf_entry();
        root.keys.insert(id.clone(), key);
        new_ids.push(id);
    }
    root.roles
        .insert(RoleType::Root, role_keys(new_ids, new_threshold));

    let old_refs: Vec<&SigningKey> = old_keys.iter().collect();
    let new_refs: Vec<&SigningKey> = new_keys.iter().collect();
    let current_must = |e: String| {
        TrustError::Sign(format!(
            "the current root's keys must sign the new root: {e}"
        ))
    };
    let new_must =
        |e: String| TrustError::Sign(format!("the new root keys must sign the new root: {e}"));
    let by_old = sign(
        root.clone(),
        &KeyHolder::Root(old.signed.clone()),
        &old_refs,
    )
    .await
    .map_err(|e| current_must(e.to_string()))?;
    let signed = sign(root.clone(), &KeyHolder::Root(root.clone()), &new_refs)
        .await
        .map_err(|e| new_must(e.to_string()))?
        .add_signatures(&by_old.signed().signatures)?;
    old.signed
        .verify_role(signed.signed())
        .map_err(|e| current_must(e.to_string()))?;
    root.verify_role(signed.signed())
        .map_err(|e| new_must(e.to_string()))?;
    store
        .put_metadata(&[stored("root", n, now, expires, &signed)])
        .await?;
    Ok(n)
}
