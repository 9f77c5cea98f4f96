//! Building and signing TUF roles with `tough`'s schema types.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::time::Duration;

use aws_lc_rs::rand::SystemRandom;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tough::editor::signed::SignedRole;
use tough::key_source::KeySource;
use tough::schema::{
    DelegatedRole, Hashes, KeyHolder, Metafile, PathPattern, PathSet, Role, Target,
};
use tough::sign::Sign;

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

/// Adapts a loaded [`SigningKey`] to tough's key-source interface (read-only).
#[derive(Debug)]
struct LoadedKey(Vec<u8>);

#[tough::async_trait]
impl KeySource for LoadedKey {
    async fn as_sign(
        &self,
    ) -> Result<Box<dyn Sign>, Box<dyn std::error::Error + Send + Sync + 'static>> {
        Ok(Box::new(tough::sign::parse_keypair(&self.0)?))
    }

    async fn write(
        &self,
        _: &str,
        _: &str,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync + 'static>> {
        Err("signing keys are written only by `marketplace keys generate`".into())
    }
}

impl SigningKey {
    fn key_source(&self) -> Box<dyn KeySource> {
        Box::new(LoadedKey(self.pkcs8_der().to_vec()))
    }
}

/// Signs `role` with `keys`; `holder` says which keys may sign it (root or delegations).
pub async fn sign<T>(
    role: T,
    holder: &KeyHolder,
    keys: &[&SigningKey],
) -> Result<SignedRole<T>, TrustError>
where
    T: Role + Serialize,
{
    let sources: Vec<Box<dyn KeySource>> = keys.iter().map(|k| k.key_source()).collect();
    SignedRole::new(role, holder, &sources, &SystemRandom::new())
        .await
        .map_err(|e| TrustError::Sign(e.to_string()))
}

/// The stored form of a signed role.
pub fn stored<T: Role + Serialize>(
    name: &str,
    version: u64,
    signed_at: i64,
    expires: jiff::Timestamp,
    signed: &SignedRole<T>,
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
        keyids: keys
            .iter()
            .map(|k| k.tuf_key().key_id().expect("ed25519 key id"))
            .collect(),
        threshold: version(threshold),
        paths: PathSet::Paths(vec![
            PathPattern::new(format!("{publisher}/*/*"))
                .map_err(|e| TrustError::Sign(e.to_string()))?,
        ]),
        terminating: true,
        targets: None,
    })
}

/// A definition as a TUF target, with what a client needs without downloading the file.
pub fn target(def: &Definition, yanked: bool) -> Target {
    let req = def.approval();
    let custom = serde_json::json!({
        "name": def.name(),
        "version": def.version_text(),
        "requirements": {
            "internetAccess": req.internet_access,
            "privileged": req.privileged,
            "kubeSystemDeployment": req.kube_system_deployment,
            "capabilities": req.capabilities,
        },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_summary_counts_declared_capabilities() {
        // Fundament-style: internet access is declared only as a capability.
        let def = Definition::parse(include_bytes!("../../tests/common/fundament-style.yaml"))
            .expect("valid definition");
        let custom = serde_json::to_value(&target(&def, false).custom).unwrap();
        assert_eq!(
            custom["requirements"],
            serde_json::json!({
                "internetAccess": true, "privileged": false, "kubeSystemDeployment": false,
                "capabilities": []
            })
        );
        assert_eq!(custom["name"], "webhook-relay");
        assert_eq!(custom["yanked"], false);
    }
}
