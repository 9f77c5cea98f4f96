//! Publisher side of publishing: build and sign the next role metadata (publish, yank,
//! re-sign). The server never holds a publisher's key; `trust::verify` checks what the
//! publisher signed against the keys registered for it.

use tough::TargetName;
use tough::schema::{DelegatedTargets, Delegations, KeyHolder, Signed, Targets};

use super::metadata::{
    SPEC_VERSION, expiry, publisher_delegation, sign, target, target_name, version,
};
use super::{PublicKey, SigningKey, TrustError};
use crate::definition::Definition;

/// The delegation the server holds for a publisher, as a TUF key holder.
pub fn delegations_for(
    publisher: &str,
    keys: &[PublicKey],
    threshold: u64,
) -> Result<Delegations, TrustError> {
    let mut d = Delegations::new();
    for k in keys {
        d.keys
            .insert(k.tuf_key().key_id().expect("key id"), k.tuf_key());
    }
    d.roles
        .push(publisher_delegation(publisher, keys, threshold)?);
    Ok(d)
}

/// Publisher side: the next version of the role with `def` added, signed with `keys`.
pub async fn build_role(
    publisher: &str,
    current: Option<&Signed<Targets>>,
    def: &Definition,
    keys: &[&SigningKey],
    threshold: u64,
    lifetime: std::time::Duration,
    now: i64,
) -> Result<Vec<u8>, TrustError> {
    build_role_adding(
        publisher,
        current,
        &[(def, false)],
        keys,
        threshold,
        lifetime,
        now,
    )
    .await
}

/// The next version of the role with each `(definition, yanked)` added as a target.
pub async fn build_role_adding(
    publisher: &str,
    current: Option<&Signed<Targets>>,
    defs: &[(&Definition, bool)],
    keys: &[&SigningKey],
    threshold: u64,
    lifetime: std::time::Duration,
    now: i64,
) -> Result<Vec<u8>, TrustError> {
    let next = current.map_or(1, |c| c.signed.version.get() + 1);
    let mut role = Targets::new(SPEC_VERSION.into(), version(next), expiry(now, lifetime));
    role.delegations = None;
    if let Some(c) = current {
        role.targets = c.signed.targets.clone();
    }
    for (def, yanked) in defs {
        let name = TargetName::new(target_name(publisher, def))
            .map_err(|e| TrustError::Sign(e.to_string()))?;
        role.targets.insert(name, target(def, *yanked));
    }
    sign_role(publisher, role, keys, threshold).await
}

/// A publisher's role signed with its keys: the bytes to upload.
pub async fn sign_role(
    publisher: &str,
    role: Targets,
    keys: &[&SigningKey],
    threshold: u64,
) -> Result<Vec<u8>, TrustError> {
    let publics: Vec<PublicKey> = keys.iter().map(|k| k.public()).collect();
    let holder = KeyHolder::Delegations(delegations_for(publisher, &publics, threshold)?);
    let signed = sign(
        DelegatedTargets {
            name: publisher.into(),
            targets: role,
        },
        &holder,
        keys,
    )
    .await?;
    Ok(signed.buffer().clone())
}

/// Publisher side: the next role version with `names` marked yanked. Everything else
/// stays byte-for-byte the same target; yanking hides a version, never rewrites it.
pub async fn build_yank(
    publisher: &str,
    current: &Signed<Targets>,
    names: &[String],
    keys: &[&SigningKey],
    threshold: u64,
    lifetime: std::time::Duration,
    now: i64,
) -> Result<Vec<u8>, TrustError> {
    let mut role = current.signed.clone();
    role.version = version(current.signed.version.get() + 1);
    role.expires = expiry(now, lifetime);
    for name in names {
        let key = TargetName::new(name.as_str()).map_err(|e| TrustError::Sign(e.to_string()))?;
        let t = role
            .targets
            .get_mut(&key)
            .ok_or_else(|| TrustError::Sign(format!("{name} is not published")))?;
        t.custom
            .insert("yanked".into(), serde_json::Value::Bool(true));
    }
    sign_role(publisher, role, keys, threshold).await
}

/// Publisher side: the next role version with the same targets, signed with `keys`.
/// Renews the role's expiry, and after `marketplace publisher rotate-key` moves the role
/// onto the publisher's new keys.
pub async fn build_resign(
    publisher: &str,
    current: &Signed<Targets>,
    keys: &[&SigningKey],
    threshold: u64,
    lifetime: std::time::Duration,
    now: i64,
) -> Result<Vec<u8>, TrustError> {
    build_yank(publisher, current, &[], keys, threshold, lifetime, now).await
}
