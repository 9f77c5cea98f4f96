//! Server side of following an upstream marketplace: the upstream publishers' own roles
//! served under this server's root. Each followed publisher's delegation enters the
//! local top-level `targets` exactly as this server would write it for a publisher with
//! those keys (so an upstream cannot delegate wider paths than a local publisher gets);
//! its role and bins are stored byte for byte as the upstream served them; the local
//! snapshot lists them and is signed, with a timestamp, by the local online keys.
//!
//! Clients of this server verify the same publisher signatures as clients of the
//! upstream: only the top-level roles (root, targets, snapshot, timestamp) are this
//! server's.

use std::collections::{HashMap, HashSet};

use tough::schema::decoded::{Decoded, Hex};
use tough::schema::key::Key;
use tough::schema::{DelegatedRole, Delegations, Targets};

use super::state::{OnlineKeys, State, next_targets, sign_snapshot_and_timestamp};
use crate::store::StoredMetadata;
use crate::trust::client::RoleFile;
use crate::trust::metadata::{metafile, publisher_delegation};
use crate::trust::{PublicKey, TrustError};

/// An upstream publisher's delegation, checked against the index's rules.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamDelegation {
    pub role: DelegatedRole,
    pub keys: Vec<PublicKey>,
    pub threshold: u64,
}

/// The delegation the upstream's `targets` gives `name`, when it is what this server
/// would write for a publisher with those keys and threshold (ed25519 keys whose ids
/// match, paths `NAME/*/*`, terminating); otherwise why not.
pub fn check_delegation(
    delegations: &Delegations,
    name: &str,
) -> Result<UpstreamDelegation, String> {
    let role = delegations
        .roles
        .iter()
        .find(|r| r.name == name)
        .ok_or_else(|| format!("the upstream's targets does not delegate to {name}"))?;
    let mut keys = Vec::new();
    for id in &role.keyids {
        let key = delegations
            .keys
            .get(id)
            .ok_or_else(|| format!("key {} of the delegation is not listed", hex::encode(id)))?;
        let Key::Ed25519 { keyval, .. } = key else {
            return Err(format!(
                "key {} is not an ed25519 key, which this marketplace's publishers use",
                hex::encode(id)
            ));
        };
        let public = PublicKey::parse(&hex::encode(keyval.public.as_ref()))
            .map_err(|e| format!("key {}: {e}", hex::encode(id)))?;
        if &public.tuf_key_id() != id {
            return Err(format!(
                "key id {} is not the id of the key it names",
                hex::encode(id)
            ));
        }
        keys.push(public);
    }
    let threshold = role.threshold.get();
    let wanted = publisher_delegation(name, &keys, threshold).map_err(|e| e.to_string())?;
    if &wanted != role {
        return Err(format!(
            "the delegation to {name} is not one this marketplace writes (paths {name}/*/*, terminating, its own keys)"
        ));
    }
    Ok(UpstreamDelegation {
        role: role.clone(),
        keys,
        threshold,
    })
}

/// What one round changes in the local index.
#[derive(Debug, Default)]
pub struct Change {
    /// Followed publishers' delegations: added, or replacing the one there.
    pub delegate: Vec<UpstreamDelegation>,
    /// Publishers whose delegation leaves (the upstream no longer delegates to them).
    pub remove: Vec<String>,
    /// Role files new to this server, as the upstream served them.
    pub files: Vec<RoleFile>,
}

/// The files one round stores: the new role files and, when anything changed, the next
/// targets (if delegations changed), snapshot and timestamp. Empty when nothing changed.
pub async fn sign_round(
    keys: &OnlineKeys,
    state: &State,
    change: &Change,
    now: i64,
) -> Result<Vec<StoredMetadata>, TrustError> {
    let mut targets: Targets = state.targets.signed.signed.clone();
    let before = targets.delegations.clone();
    let d = targets.delegations.get_or_insert_with(Delegations::new);
    for u in &change.delegate {
        match d.roles.iter_mut().find(|r| r.name == u.role.name) {
            Some(r) => *r = u.role.clone(),
            None => d.roles.push(u.role.clone()),
        }
        d.keys.extend(u.keys.iter().map(PublicKey::tuf_entry));
    }
    d.roles.retain(|r| !change.remove.contains(&r.name));
    let used: HashSet<Decoded<Hex>> = d
        .roles
        .iter()
        .flat_map(|r| r.keyids.iter().cloned())
        .collect();
    d.keys.retain(|id, _| used.contains(id));
    let delegations_changed = targets.delegations != before;
    if !delegations_changed && change.files.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    let mut meta = state.snapshot.signed.signed.meta.clone();
    for f in &change.files {
        out.push(role_file(f, now)?);
        // Entries are replaced, never dropped: python-tuf refuses a snapshot that
        // drops a role, and a suspended publisher's roles stay listed.
        meta.insert(format!("{}.json", f.name), metafile(f.version, &f.bytes));
    }
    if delegations_changed {
        let (file, entry) = next_targets(keys, state, targets, now).await?;
        meta.insert("targets.json".into(), entry);
        out.push(file);
    }
    out.extend(sign_snapshot_and_timestamp(keys, state, meta, now).await?.0);
    Ok(out)
}

/// An upstream role file as stored: its bytes untouched, its expiry read from them.
fn role_file(f: &RoleFile, now: i64) -> Result<StoredMetadata, TrustError> {
    let role: tough::schema::Signed<Targets> = serde_json::from_slice(&f.bytes)
        .map_err(|e| TrustError::Corrupt(format!("{} v{}: {e}", f.name, f.version)))?;
    Ok(StoredMetadata {
        role: f.name.clone(),
        version: f.version,
        sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&f.bytes)),
        bytes: f.bytes.clone(),
        expires_at: role.signed.expires.as_second(),
        created_at: now,
    })
}

/// The versions of the roles the current snapshot lists, by role name.
pub fn listed_versions(state: &State) -> HashMap<String, u64> {
    state
        .snapshot
        .signed
        .signed
        .meta
        .iter()
        .filter_map(|(k, m)| Some((k.strip_suffix(".json")?.to_owned(), m.version.get())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::SigningKey;
    use tough::schema::{PathPattern, PathSet};

    fn delegations(role: DelegatedRole, keys: &[PublicKey]) -> Delegations {
        let mut d = Delegations::new();
        d.keys.extend(keys.iter().map(PublicKey::tuf_entry));
        d.roles.push(role);
        d
    }

    #[test]
    fn an_upstream_delegation_is_taken_only_as_this_marketplace_writes_it() {
        let key = SigningKey::generate().unwrap().public();
        let good = publisher_delegation("acme", std::slice::from_ref(&key), 1).unwrap();
        let d = check_delegation(
            &delegations(good.clone(), std::slice::from_ref(&key)),
            "acme",
        )
        .unwrap();
        assert_eq!((d.keys, d.threshold), (vec![key.clone()], 1));

        // Wider paths would let acme's keys sign other publishers' targets here.
        let mut wide = good.clone();
        wide.paths = PathSet::Paths(vec![PathPattern::new("*").unwrap()]);
        let err =
            check_delegation(&delegations(wide, std::slice::from_ref(&key)), "acme").unwrap_err();
        assert!(err.contains("paths acme/*/*"), "{err}");
        // Not terminating: clients would look past it.
        let mut open = good.clone();
        open.terminating = false;
        assert!(check_delegation(&delegations(open, std::slice::from_ref(&key)), "acme").is_err());
        // A key the delegation names but does not list.
        let err = check_delegation(&delegations(good.clone(), &[]), "acme").unwrap_err();
        assert!(err.contains("is not listed"), "{err}");
        // Not delegated at all.
        let err = check_delegation(&delegations(good, &[key]), "beta").unwrap_err();
        assert!(err.contains("does not delegate to beta"), "{err}");
    }
}
