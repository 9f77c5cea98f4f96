//! Registering publishers: name rules, their keys, API tokens (shown once, stored as a
//! sha256 hash).

use crate::definition::BUILTIN_PUBLISHER;
use crate::definition::is_dns_label;
use crate::store::Store;
use crate::trust::{PublicKey, TrustError};

/// Role names TUF reserves; a publisher's delegated role is named after the publisher.
const RESERVED: [&str; 5] = ["root", "targets", "snapshot", "timestamp", "mirrors"];
const TOKEN_PREFIX: &str = "mkt_";

pub fn check_name(name: &str) -> Result<(), TrustError> {
    if !is_dns_label(name) {
        return Err(TrustError::PublisherName(
            name.to_owned(),
            "must be a DNS-1123 label (lowercase letters, digits, `-`; at most 63)",
        ));
    }
    if RESERVED.contains(&name) {
        return Err(TrustError::PublisherName(
            name.to_owned(),
            "is a reserved TUF role name",
        ));
    }
    if name == BUILTIN_PUBLISHER {
        return Err(TrustError::PublisherName(
            name.to_owned(),
            "publishes the built-in definitions and is managed by the server",
        ));
    }
    Ok(())
}

/// A new random API token: `mkt_` and 64 hex digits (256 bits).
pub fn new_token() -> String {
    crate::token::generate(TOKEN_PREFIX)
}

pub use crate::token::hash as token_hash;

/// Registers a publisher and returns its first API token (the only time it is shown).
pub async fn add(
    store: &Store,
    name: &str,
    keys: &[PublicKey],
    threshold: u64,
    now: i64,
) -> Result<String, TrustError> {
    check_name(name)?;
    let hexes = key_set(keys, threshold)?;
    let token = new_token();
    store
        .add_publisher(name, &hexes, threshold, &token_hash(&token), now)
        .await?;
    Ok(token)
}

/// Replaces a publisher's keys. Returns whether the publisher has a signed delegation
/// already: then it keeps naming the old keys until the publisher re-signs its role with
/// the new ones (`marketplace resign`), so clients never see a role that fails to verify.
/// Uploads signed by the old keys are refused from now on.
pub async fn rotate(
    store: &Store,
    name: &str,
    keys: &[PublicKey],
    threshold: u64,
) -> Result<bool, TrustError> {
    check_name(name)?;
    let hexes = key_set(keys, threshold)?;
    store
        .replace_publisher_keys(name, &hexes, threshold)
        .await?;
    let targets = super::state::current(store)
        .await?
        .map(|s| s.targets.signed.signed);
    Ok(delegation(targets.as_ref(), name, keys, threshold) != Delegation::Missing)
}

/// How the signed delegation to a publisher compares with its registered keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delegation {
    /// Not in `targets.json` yet: it enters with the publisher's first publish.
    Missing,
    /// Names exactly the registered keys and threshold.
    Current,
    /// Names other keys (after `publisher rotate-key`) until the publisher re-signs.
    Stale,
}

pub fn delegation(
    targets: Option<&tough::schema::Targets>,
    name: &str,
    keys: &[PublicKey],
    threshold: u64,
) -> Delegation {
    let Some(role) = targets
        .and_then(|t| t.delegations.as_ref())
        .and_then(|d| d.roles.iter().find(|r| r.name == name))
    else {
        return Delegation::Missing;
    };
    let mut signed: Vec<String> = role
        .keyids
        .iter()
        .map(|k| hex::encode(k.as_ref()))
        .collect();
    let mut registered: Vec<String> = keys.iter().map(PublicKey::key_id).collect();
    signed.sort();
    registered.sort();
    if signed == registered && role.threshold.get() == threshold {
        Delegation::Current
    } else {
        Delegation::Stale
    }
}

/// Distinct hex keys, with a threshold they can meet.
fn key_set(keys: &[PublicKey], threshold: u64) -> Result<Vec<String>, TrustError> {
    let mut hexes: Vec<String> = keys.iter().map(PublicKey::hex).collect();
    hexes.sort();
    hexes.dedup();
    if hexes.is_empty() || threshold == 0 || threshold > hexes.len() as u64 {
        return Err(TrustError::Threshold {
            threshold,
            keys: hexes.len() as u64,
        });
    }
    Ok(hexes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_tokens() {
        assert!(check_name("acme").is_ok());
        for bad in [
            "Acme",
            "root",
            "snapshot",
            "fundament",
            "a/b",
            "",
            &"x".repeat(64),
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        assert!(a.starts_with("mkt_") && a.len() == 68);
        assert_eq!(token_hash(&a).len(), 64);
        assert_ne!(token_hash(&a), a);
    }
}
