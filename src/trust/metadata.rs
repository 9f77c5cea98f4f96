//! Building and signing TUF roles with `tough`'s schema types and our canonical JSON.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::time::Duration;

use serde::Serialize;
use sha2::{Digest, Sha256};
use tough::schema::decoded::{Decoded, Hex};
use tough::schema::{
    DelegatedRole, Hashes, KeyHolder, Metafile, PathPattern, PathSet, Role, RoleId, RoleType,
    Signature, Signed, Target,
};

use super::{PublicKey, SigningKey, TrustError};
use crate::definition::Definition;
use crate::store::StoredMetadata;

pub const SPEC_VERSION: &str = "1.0.0";

/// How long each role's metadata stays valid after it is signed.
#[derive(Debug, Clone, Copy)]
pub struct Lifetimes {
    pub root: Duration,
    pub targets: Duration,
    pub publisher: Duration,
    pub snapshot: Duration,
    pub timestamp: Duration,
}

impl Default for Lifetimes {
    fn default() -> Self {
        const DAY: u64 = 86_400;
        Lifetimes {
            root: Duration::from_secs(365 * DAY),
            targets: Duration::from_secs(365 * DAY),
            publisher: Duration::from_secs(365 * DAY),
            snapshot: Duration::from_secs(7 * DAY),
            timestamp: Duration::from_secs(DAY),
        }
    }
}

/// Expiry in whole seconds: python-tuf parses `%Y-%m-%dT%H:%M:%SZ` and refuses fractions.
pub fn expiry(now: i64, lifetime: Duration) -> jiff::Timestamp {
    let secs = now.saturating_add(i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX / 2));
    jiff::Timestamp::from_second(secs).unwrap_or(jiff::Timestamp::MAX)
}

pub fn version(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap_or(NonZeroU64::MIN)
}

/// A role signed over the canonical JSON of exactly what is stored and served.
///
/// Not tough's `SignedRole`: it signs olpc-cjson's form (strings normalized to NFC), so
/// a role carrying a string not in NFC would be signed over other bytes than python-tuf
/// and our own verifier ([`super::envelope`]) check. Signing and verifying share
/// [`super::cjson`].
#[derive(Debug, Clone)]
pub struct SignedMeta<T> {
    signed: Signed<T>,
    buffer: Vec<u8>,
    sha256: Vec<u8>,
}

impl<T> SignedMeta<T> {
    /// The typed role with its signatures.
    pub fn signed(&self) -> &Signed<T> {
        &self.signed
    }

    /// The bytes to store and serve.
    pub fn buffer(&self) -> &Vec<u8> {
        &self.buffer
    }

    pub fn sha256(&self) -> &[u8] {
        &self.sha256
    }
}

impl<T: Serialize> SignedMeta<T> {
    /// Adds signatures made over the same content (root rotation: the old root keys
    /// sign the new root too).
    pub fn add_signatures(mut self, more: &[Signature]) -> Result<SignedMeta<T>, TrustError> {
        for sig in more {
            if !self.signed.signatures.iter().any(|s| s.keyid == sig.keyid) {
                self.signed.signatures.push(sig.clone());
            }
        }
        self.buffer = serialized(&self.signed)?;
        self.sha256 = Sha256::digest(&self.buffer).to_vec();
        Ok(self)
    }
}

fn serialized<T: Serialize>(signed: &Signed<T>) -> Result<Vec<u8>, TrustError> {
    let mut buffer =
        serde_json::to_vec_pretty(signed).map_err(|e| TrustError::Sign(e.to_string()))?;
    buffer.push(b'\n');
    Ok(buffer)
}

/// The key ids `holder` authorizes to sign `role`, and how many must.
fn authorized<T: Role>(role: &T, holder: &KeyHolder) -> Option<(Vec<String>, u64)> {
    let ids = |ids: &[Decoded<Hex>]| ids.iter().map(|i| hex::encode(i.as_ref())).collect();
    match (holder, role.role_id()) {
        (KeyHolder::Root(root), RoleId::StandardRole(t)) => root
            .roles
            .get(&t)
            .map(|r| (ids(&r.keyids), r.threshold.get())),
        (KeyHolder::Delegations(d), RoleId::DelegatedRole(name)) => d
            .roles
            .iter()
            .find(|r| r.name == name)
            .map(|r| (ids(&r.keyids), r.threshold.get())),
        _ => None,
    }
}

/// Signs `role` with those of `keys` that `holder` authorizes for it (root or
/// delegations); as many as the threshold must be among them, except for root, whose
/// rotation collects signatures from two key sets.
pub async fn sign<T>(
    role: T,
    holder: &KeyHolder,
    keys: &[&SigningKey],
) -> Result<SignedMeta<T>, TrustError>
where
    T: Role + Serialize,
{
    let (allowed, threshold) = authorized(&role, holder)
        .ok_or_else(|| TrustError::Sign(format!("no keys are named for {} metadata", T::TYPE)))?;
    let value = serde_json::to_value(&role).map_err(|e| TrustError::Sign(e.to_string()))?;
    let canonical = super::cjson::encode(&value).map_err(|e| TrustError::Sign(e.to_string()))?;
    let mut signatures = Vec::new();
    for key in keys {
        let id = key.public().key_id();
        if !allowed.contains(&id)
            || signatures
                .iter()
                .any(|s: &Signature| hex::encode(s.keyid.as_ref()) == id)
        {
            continue;
        }
        signatures.push(Signature {
            keyid: hex::decode(&id).expect("hex key id").into(),
            sig: key.sign_raw(&canonical).into(),
        });
    }
    if T::TYPE != RoleType::Root && (signatures.len() as u64) < threshold {
        return Err(TrustError::Sign(format!(
            "{} of the keys given may sign {} metadata, which needs {threshold}",
            signatures.len(),
            T::TYPE
        )));
    }
    let signed = Signed {
        signed: role,
        signatures,
    };
    let buffer = serialized(&signed)?;
    Ok(SignedMeta {
        sha256: Sha256::digest(&buffer).to_vec(),
        buffer,
        signed,
    })
}

/// The stored form of a signed role.
pub fn stored<T>(
    name: &str,
    version: u64,
    signed_at: i64,
    expires: jiff::Timestamp,
    signed: &SignedMeta<T>,
) -> StoredMetadata {
    StoredMetadata {
        role: name.to_owned(),
        version,
        bytes: signed.buffer().clone(),
        sha256: hex::encode(signed.sha256()),
        expires_at: expires.as_second(),
        created_at: signed_at,
    }
}

/// Snapshot and timestamp entries: version, length and hash of the exact bytes.
pub fn metafile(version_number: u64, bytes: &[u8]) -> Metafile {
    Metafile {
        length: Some(bytes.len() as u64),
        hashes: Some(Hashes {
            sha256: Sha256::digest(bytes).to_vec().into(),
            _extra: HashMap::new(),
        }),
        version: version(version_number),
        _extra: HashMap::new(),
    }
}

/// Target path of a definition: `PUBLISHER/NAME/VERSION.yaml`, canonical semver.
pub fn target_name(publisher: &str, def: &Definition) -> String {
    format!("{publisher}/{}/{}.yaml", def.name(), def.version)
}

/// The publisher's delegation: every target under `PUBLISHER/`, terminating. The pattern
/// has one `*` per path segment because python-tuf (like the spec's fnmatch) does not
/// let `*` cross a `/`.
pub fn publisher_delegation(
    publisher: &str,
    keys: &[PublicKey],
    threshold: u64,
) -> Result<DelegatedRole, TrustError> {
    Ok(DelegatedRole {
        name: publisher.to_owned(),
        keyids: keys.iter().map(PublicKey::tuf_key_id).collect(),
        threshold: version(threshold),
        paths: PathSet::Paths(vec![
            PathPattern::new(format!("{publisher}/*/*"))
                .map_err(|e| TrustError::Sign(e.to_string()))?,
        ]),
        terminating: true,
        targets: None,
    })
}

/// A definition as a TUF target, with what a client needs without downloading the file,
/// and the marketplace's own metadata about it (`extras`), which only this signature
/// covers: the definition's bytes are exactly Fundament's schema.
///
/// For a new target the server requires these keys of `custom`, where present, to be
/// exactly this (see [`super::verify::check_publish`]), so what a client reads here
/// agrees with the file.
pub fn target(def: &Definition, yanked: bool) -> Target {
    let approval = def.approval();
    let custom = serde_json::json!({
        "name": def.name(),
        "version": def.version_text(),
        "approval": {
            "internetAccess": approval.internet_access,
            "kubeSystemDeployment": approval.kube_system_deployment,
            "privileged": approval.privileged,
        },
        "extras": def.extras,
        "image": def.image.to_string(),
        "yanked": yanked,
    });
    Target {
        length: def.bytes.len() as u64,
        hashes: Hashes {
            sha256: Sha256::digest(&def.bytes).to_vec().into(),
            _extra: HashMap::new(),
        },
        custom: serde_json::from_value(custom).expect("an object"),
        _extra: HashMap::new(),
    }
}

/// The extras a target's `custom` carries for `plugin`: empty for a target signed
/// before extras existed; an error naming the field when they are malformed.
pub fn target_extras(t: &Target, plugin: &str) -> Result<crate::definition::Extras, String> {
    match t.custom.get("extras") {
        None => Ok(Default::default()),
        Some(v) => crate::definition::Extras::from_custom(v, plugin),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_summary_counts_declared_capabilities_and_carries_extras() {
        // Fundament-style: internet access is declared only as a capability.
        let def = Definition::parse(include_bytes!("../../tests/common/fundament-style.yaml"))
            .expect("valid definition")
            .with_extras(crate::definition::Extras {
                dependencies: vec!["cert-manager".into()],
                ..Default::default()
            })
            .unwrap();
        let t = target(&def, false);
        let custom = serde_json::to_value(&t.custom).unwrap();
        assert_eq!(
            custom["approval"],
            serde_json::json!({
                "internetAccess": true, "privileged": false, "kubeSystemDeployment": false,
            })
        );
        assert_eq!(
            custom["extras"],
            serde_json::json!({
                "dependencies": ["cert-manager"], "suggestedPlugins": [], "clusterCapabilities": [],
            })
        );
        assert_eq!(custom["name"], "webhook-relay");
        assert_eq!(custom["yanked"], false);
        assert_eq!(target_extras(&t, "webhook-relay").unwrap(), def.extras);
    }
}
