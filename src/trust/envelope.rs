//! Signed TUF metadata exactly as it is served, and its signatures checked over those
//! bytes. Used wherever a role signed by someone else is judged: the server on a
//! publisher's upload, the publisher CLI on what the server returns, the sync worker
//! on everything it downloads.
//!
//! Why not tough's `verify_role`: it re-serializes its typed model and checks the
//! signature over that, so what it accepts is not what is served. It drops an empty
//! `custom` object, drops unrecognized fields inside delegations and normalizes strings
//! to NFC. A role signed over bytes with `custom: {}` that were uploaded without it
//! passed tough and failed python-tuf; a python-tuf-signed role carrying `custom: {}`
//! failed tough. Here the signature is checked over the canonical JSON of the `signed`
//! object as received ([`super::cjson`], securesystemslib's rules), which is what
//! python-tuf and go-tuf verify, and tough's types are only used to read fields.
//!
//! The fields python-tuf insists on are checked here too, so that nothing accepted is
//! refused by it later: `_type` names the role type, `spec_version` is 1.x, `version`
//! is a positive integer and `expires` is `YYYY-MM-DDTHH:MM:SSZ`.

use std::collections::{HashMap, HashSet};

use serde::de::DeserializeOwned;
use serde_json::Value;
use tough::schema::decoded::{Decoded, Hex};
use tough::schema::key::Key;
use tough::schema::{Delegations, Role, RoleType, Root, Signed};

/// Why signed metadata was refused. Each names the role and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("{role}: not valid TUF metadata: {reason}")]
    Malformed { role: String, reason: String },
    #[error("{role}: `_type` is `{found}`, but this is {expected} metadata")]
    WrongType {
        role: String,
        expected: &'static str,
        found: String,
    },
    #[error(
        "{role}: spec_version `{found}` is not supported; TUF clients accept 1.x versions such as 1.0.0"
    )]
    SpecVersion { role: String, found: String },
    #[error(
        "{role}: expires `{found}` must be written as YYYY-MM-DDTHH:MM:SSZ (UTC, whole seconds), the only form python-tuf reads"
    )]
    Expires { role: String, found: String },
    #[error("{role}: {valid} valid signature(s) of the {threshold} required from its keys")]
    Threshold {
        role: String,
        valid: u64,
        threshold: u64,
    },
}

/// One role's metadata as received: its typed fields, and what its signatures cover.
#[derive(Debug, Clone)]
pub struct Envelope<T> {
    /// tough's typed view, for reading fields; never re-serialized to check signatures.
    pub typed: Signed<T>,
    /// Canonical JSON of `signed` exactly as received.
    canonical: Vec<u8>,
    /// (key id as written, signature bytes); undecodable signatures are kept as empty,
    /// which no key verifies.
    signatures: Vec<(String, Vec<u8>)>,
}

/// Parses `bytes` as metadata of type `T` for role `role` (named in errors).
pub fn parse<T: Role + DeserializeOwned>(
    role: &str,
    bytes: &[u8],
) -> Result<Envelope<T>, EnvelopeError> {
    let malformed = |reason: String| EnvelopeError::Malformed {
        role: role.to_owned(),
        reason,
    };
    let whole: Value = serde_json::from_slice(bytes).map_err(|e| malformed(e.to_string()))?;
    let signed = whole
        .get("signed")
        .filter(|s| s.is_object())
        .ok_or_else(|| malformed("`signed` must be an object".into()))?;
    check_common::<T>(role, signed)?;
    let canonical = super::cjson::encode(signed).map_err(|e| malformed(e.to_string()))?;
    let signatures = signatures(&whole).map_err(malformed)?;
    let typed: Signed<T> = serde_json::from_value(whole).map_err(|e| malformed(e.to_string()))?;
    Ok(Envelope {
        typed,
        canonical,
        signatures,
    })
}

fn check_common<T: Role>(role: &str, signed: &Value) -> Result<(), EnvelopeError> {
    let malformed = |reason: &str| EnvelopeError::Malformed {
        role: role.to_owned(),
        reason: reason.to_owned(),
    };
    let expected = role_type_name(T::TYPE);
    match signed.get("_type").and_then(Value::as_str) {
        Some(t) if t == expected => {}
        Some(t) => {
            return Err(EnvelopeError::WrongType {
                role: role.to_owned(),
                expected,
                found: t.to_owned(),
            });
        }
        None => return Err(malformed("`signed._type` must be a string")),
    }
    let spec = signed
        .get("spec_version")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("`signed.spec_version` must be a string"))?;
    if !supported_spec_version(spec) {
        return Err(EnvelopeError::SpecVersion {
            role: role.to_owned(),
            found: spec.to_owned(),
        });
    }
    if signed
        .get("version")
        .and_then(Value::as_u64)
        .is_none_or(|v| v == 0)
    {
        return Err(malformed("`signed.version` must be a whole number above 0"));
    }
    let expires = signed
        .get("expires")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("`signed.expires` must be a string"))?;
    if !strict_expiry(expires) {
        return Err(EnvelopeError::Expires {
            role: role.to_owned(),
            found: expires.to_owned(),
        });
    }
    Ok(())
}

/// `1.MINOR` or `1.MINOR.PATCH`, ASCII digits: what python-tuf accepts (major 1) and
/// what every 1.x client understands.
fn supported_spec_version(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    matches!(parts.len(), 2 | 3)
        && parts[0] == "1"
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// `YYYY-MM-DDTHH:MM:SSZ` naming a real instant.
fn strict_expiry(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    b.len() == 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[19] == b'Z'
        && s.parse::<jiff::Timestamp>().is_ok()
}

fn signatures(whole: &Value) -> Result<Vec<(String, Vec<u8>)>, String> {
    let list = whole
        .get("signatures")
        .and_then(Value::as_array)
        .ok_or("`signatures` must be a list")?;
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(list.len());
    for (i, s) in list.iter().enumerate() {
        let keyid = s.get("keyid").and_then(Value::as_str);
        let sig = s.get("sig").and_then(Value::as_str);
        let (Some(keyid), Some(sig)) = (keyid, sig) else {
            return Err(format!(
                "signatures[{i}] must have string `keyid` and `sig`"
            ));
        };
        // python-tuf and tough both refuse two signatures by one key.
        if !seen.insert(keyid) {
            return Err(format!("two signatures by key {keyid}"));
        }
        out.push((keyid.to_owned(), hex::decode(sig).unwrap_or_default()));
    }
    Ok(out)
}

fn role_type_name(t: RoleType) -> &'static str {
    match t {
        RoleType::Root => "root",
        RoleType::Snapshot => "snapshot",
        RoleType::Targets => "targets",
        RoleType::Timestamp => "timestamp",
        // Not a role this project reads or writes; kept total for tough's enum.
        _ => "unknown",
    }
}

impl<T> Envelope<T> {
    /// The key ids (hex) among `keyids` whose key validly signed, each counted once;
    /// an error unless there are at least `threshold` of them.
    pub fn verify(
        &self,
        role: &str,
        keys: &HashMap<Decoded<Hex>, Key>,
        keyids: &[Decoded<Hex>],
        threshold: u64,
    ) -> Result<Vec<String>, EnvelopeError> {
        let mut valid = Vec::new();
        for id in keyids {
            // Key ids match as written (python-tuf compares the strings); ours are
            // lowercase hex, as every TUF library writes them.
            let id_hex = hex::encode(id.as_ref());
            if valid.contains(&id_hex) {
                continue;
            }
            let Some(key) = keys.get(id) else { continue };
            let signed = self
                .signatures
                .iter()
                .any(|(k, sig)| *k == id_hex && verifies(key, &self.canonical, sig));
            if signed {
                valid.push(id_hex);
            }
        }
        if (valid.len() as u64) < threshold {
            return Err(EnvelopeError::Threshold {
                role: role.to_owned(),
                valid: valid.len() as u64,
                threshold,
            });
        }
        Ok(valid)
    }

    /// Verifies a delegated targets role `name` under `delegations`.
    pub fn verify_delegated(
        &self,
        delegations: &Delegations,
        name: &str,
    ) -> Result<Vec<String>, EnvelopeError> {
        let Some(role) = delegations.roles.iter().find(|r| r.name == name) else {
            return Err(EnvelopeError::Threshold {
                role: name.to_owned(),
                valid: 0,
                threshold: 1,
            });
        };
        self.verify(name, &delegations.keys, &role.keyids, role.threshold.get())
    }

    /// Verifies a top-level role of type `role` under `root`.
    pub fn verify_by_root(
        &self,
        root: &Root,
        role: RoleType,
    ) -> Result<Vec<String>, EnvelopeError> {
        let name = role_type_name(role);
        let Some(keys) = root.roles.get(&role) else {
            return Err(EnvelopeError::Malformed {
                role: "root".into(),
                reason: format!("root names no keys for {name}"),
            });
        };
        self.verify(name, &root.keys, &keys.keyids, keys.threshold.get())
    }
}

/// Only ed25519 keys sign in this project's indexes; a signature by any other kind of
/// key does not count.
fn verifies(key: &Key, message: &[u8], signature: &[u8]) -> bool {
    match key {
        Key::Ed25519 { keyval, .. } => aws_lc_rs::signature::UnparsedPublicKey::new(
            &aws_lc_rs::signature::ED25519,
            keyval.public.as_ref(),
        )
        .verify(message, signature)
        .is_ok(),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
