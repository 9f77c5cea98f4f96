//! Server side of publishing: whether to accept a role a publisher signed. Checks what
//! every upload shares (signature threshold with the registered keys, next version,
//! expiry, ownership of every path), then what the operation may change: a publish adds
//! exactly its definitions, a yank only turns `custom.yanked` on, a re-sign changes no
//! target. The change checks compare target maps, whichever roles list them.

use std::collections::HashMap;

use tough::TargetName;
use tough::schema::{Delegations, Signed, Target, Targets};

use super::metadata::target_name;
use crate::definition::Definition;

/// Why an upload was refused. Each names what to fix.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("role metadata is not valid TUF targets metadata: {0}")]
    Malformed(String),
    #[error("role metadata is not signed by {threshold} of publisher {publisher}'s keys: {reason}")]
    Signature {
        publisher: String,
        threshold: u64,
        reason: String,
    },
    #[error(
        "role version {got} is stale: the current version is {current}; fetch the current metadata and sign again"
    )]
    Stale { got: u64, current: u64 },
    #[error("role version {got} skips versions: the next version is {expected}")]
    VersionGap { got: u64, expected: u64 },
    #[error("target {0} lies outside {1}/*/* (publishers own only their own path)")]
    OutsidePath(String, String),
    #[error(
        "published target {0} was changed or removed; published versions are immutable (yank instead)"
    )]
    Immutable(String),
    #[error("the role must add exactly the uploaded definition(s) as [{expected}]; {found}")]
    WrongTargets { expected: String, found: String },
    #[error("uploaded definition bytes do not match target {0} (length or sha256 differ)")]
    BytesMismatch(String),
    #[error("role expiry must be in the future and in whole seconds")]
    Expiry,
    #[error("publishers may not delegate further")]
    NestedDelegation,
    #[error("hashed bins are malformed: {0}")]
    BadBins(String),
}

/// A publisher's targets, whichever roles list them.
pub type TargetMap = HashMap<TargetName, Target>;

/// Server side: checks an uploaded role that adds exactly `defs` (one definition, or a
/// batch). `current` is the role as the snapshot lists it now (`None` before the first
/// publish).
pub fn verify_upload(
    publisher: &str,
    delegations: &Delegations,
    current: Option<&Signed<Targets>>,
    uploaded: &[u8],
    defs: &[Definition],
    now: i64,
) -> Result<Signed<Targets>, PublishError> {
    let role = verify_common(publisher, delegations, current, uploaded, now)?;
    let empty = TargetMap::new();
    let old = current.map_or(&empty, |c| &c.signed.targets);
    check_publish(publisher, old, &role.signed.targets, defs)?;
    Ok(role)
}

/// A publish changes no published target and adds exactly `defs`, byte for byte.
pub fn check_publish(
    publisher: &str,
    old: &TargetMap,
    new: &TargetMap,
    defs: &[Definition],
) -> Result<(), PublishError> {
    for (name, t) in old {
        match new.get(name) {
            Some(n) if n == t => {}
            _ => return Err(PublishError::Immutable(name.raw().into())),
        }
    }
    let mut expected: Vec<String> = defs.iter().map(|d| target_name(publisher, d)).collect();
    expected.sort();
    let mut added: Vec<&str> = new
        .keys()
        .filter(|n| !old.contains_key(n))
        .map(TargetName::raw)
        .collect();
    added.sort();
    if added != expected || expected.windows(2).any(|w| w[0] == w[1]) {
        return Err(PublishError::WrongTargets {
            found: format!("it adds [{}]", added.join(", ")),
            expected: expected.join(", "),
        });
    }
    for def in defs {
        let name = target_name(publisher, def);
        let t = &new[&TargetName::new(name.as_str()).expect("a listed name")];
        if t.length != def.bytes.len() as u64
            || t.hashes.sha256.as_ref()
                != hex::decode(def.hash.trim_start_matches("sha256:")).unwrap_or_default()
        {
            return Err(PublishError::BytesMismatch(name));
        }
    }
    Ok(())
}

/// Server side of a re-sign: the next version, signed by the registered keys, with
/// exactly the current targets.
pub fn verify_resign(
    publisher: &str,
    delegations: &Delegations,
    current: &Signed<Targets>,
    uploaded: &[u8],
    now: i64,
) -> Result<Signed<Targets>, PublishError> {
    let role = verify_common(publisher, delegations, Some(current), uploaded, now)?;
    check_resign(&current.signed.targets, &role.signed.targets)?;
    Ok(role)
}

/// A re-sign keeps every target exactly as it is.
pub fn check_resign(old: &TargetMap, new: &TargetMap) -> Result<(), PublishError> {
    for (name, t) in old {
        if new.get(name) != Some(t) {
            return Err(PublishError::Immutable(name.raw().into()));
        }
    }
    if new.len() != old.len() {
        return Err(PublishError::WrongTargets {
            expected: "the same targets as now".into(),
            found: "a re-sign adds targets (publish them instead)".into(),
        });
    }
    Ok(())
}

fn is_yanked(t: &Target) -> bool {
    t.custom
        .get("yanked")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

/// Server side of a yank: the same targets with the same bytes, and `custom.yanked`
/// turned from false to true on at least one of them. Returns the role and the newly
/// yanked target names.
pub fn verify_yank(
    publisher: &str,
    delegations: &Delegations,
    current: &Signed<Targets>,
    uploaded: &[u8],
    now: i64,
) -> Result<(Signed<Targets>, Vec<String>), PublishError> {
    let role = verify_common(publisher, delegations, Some(current), uploaded, now)?;
    let yanked = check_yank(&current.signed.targets, &role.signed.targets)?;
    Ok((role, yanked))
}

/// A yank keeps every target's bytes and summary and turns `custom.yanked` from false to
/// true on at least one; returns the newly yanked target names.
pub fn check_yank(old: &TargetMap, new: &TargetMap) -> Result<Vec<String>, PublishError> {
    if new.len() != old.len() {
        return Err(PublishError::WrongTargets {
            expected: "the same targets as now".into(),
            found: "a yank adds or removes targets".into(),
        });
    }
    let mut yanked = Vec::new();
    for (name, old) in old {
        let new = new
            .get(name)
            .ok_or_else(|| PublishError::Immutable(name.raw().into()))?;
        let (was, is) = (is_yanked(old), is_yanked(new));
        let mut old_custom = old.custom.clone();
        let mut new_custom = new.custom.clone();
        old_custom.remove("yanked");
        new_custom.remove("yanked");
        if new.length != old.length
            || new.hashes != old.hashes
            || old_custom != new_custom
            || (was && !is)
        {
            return Err(PublishError::Immutable(name.raw().into()));
        }
        if is && !was {
            yanked.push(name.raw().to_owned());
        }
    }
    if yanked.is_empty() {
        return Err(PublishError::WrongTargets {
            expected: "at least one target newly yanked".into(),
            found: "nothing changed".into(),
        });
    }
    yanked.sort();
    Ok(yanked)
}

/// Checks every role upload shares: parse, threshold signature, next version, expiry,
/// no nested delegations, every target at `PUBLISHER/NAME/FILE`.
fn verify_common(
    publisher: &str,
    delegations: &Delegations,
    current: Option<&Signed<Targets>>,
    uploaded: &[u8],
    now: i64,
) -> Result<Signed<Targets>, PublishError> {
    let role: Signed<Targets> =
        serde_json::from_slice(uploaded).map_err(|e| PublishError::Malformed(e.to_string()))?;
    let threshold = delegations.roles.first().map_or(1, |r| r.threshold.get());
    delegations
        .verify_role(&role, publisher)
        .map_err(|e| PublishError::Signature {
            publisher: publisher.into(),
            threshold,
            reason: e.to_string(),
        })?;
    let got = role.signed.version.get();
    let current_version = current.map_or(0, |c| c.signed.version.get());
    if got <= current_version {
        return Err(PublishError::Stale {
            got,
            current: current_version,
        });
    }
    if got != current_version + 1 {
        return Err(PublishError::VersionGap {
            got,
            expected: current_version + 1,
        });
    }
    let expires = role.signed.expires;
    if expires.as_second() <= now || expires.subsec_nanosecond() != 0 {
        return Err(PublishError::Expiry);
    }
    if role
        .signed
        .delegations
        .as_ref()
        .is_some_and(|d| !d.roles.is_empty() || !d.keys.is_empty())
    {
        return Err(PublishError::NestedDelegation);
    }
    for name in role.signed.targets.keys() {
        if !owned_by(publisher, name.raw()) {
            return Err(PublishError::OutsidePath(
                name.raw().into(),
                publisher.into(),
            ));
        }
    }
    Ok(role)
}

/// `PUBLISHER/NAME/FILE` exactly: three segments, the way python-tuf matches
/// `PUBLISHER/*/*` (a `*` never spans a `/`), so every client agrees on ownership.
fn owned_by(publisher: &str, target: &str) -> bool {
    let parts: Vec<&str> = target.split('/').collect();
    parts.len() == 3
        && parts[0] == publisher
        && parts[1..]
            .iter()
            .all(|p| !p.is_empty() && *p != "." && *p != "..")
}

#[cfg(test)]
mod tests {
    use tough::schema::{DelegatedTargets, KeyHolder};

    use super::*;
    use crate::catalog::builtin;
    use crate::trust::SigningKey;
    use crate::trust::metadata::{sign, target, version};
    use crate::trust::publish::{build_role, delegations_for};

    const DAY: std::time::Duration = std::time::Duration::from_secs(86_400);

    fn defs() -> Vec<Definition> {
        builtin::definitions().unwrap()
    }

    struct Fixture {
        key: SigningKey,
        delegations: Delegations,
        now: i64,
    }

    fn fixture() -> Fixture {
        let key = SigningKey::generate().unwrap();
        let delegations = delegations_for("acme", &[key.public()], 1).unwrap();
        Fixture {
            key,
            delegations,
            now: 1_790_000_000,
        }
    }

    /// A hand-modified role, signed with the publisher's key.
    async fn resign(f: &Fixture, role: Targets) -> Vec<u8> {
        let holder = KeyHolder::Delegations(f.delegations.clone());
        let targets = DelegatedTargets {
            name: "acme".into(),
            targets: role,
        };
        sign(targets, &holder, &[&f.key])
            .await
            .unwrap()
            .buffer()
            .clone()
    }

    async fn first(f: &Fixture, def: &Definition) -> (Vec<u8>, Signed<Targets>) {
        let bytes = build_role("acme", None, def, &[&f.key], 1, DAY, f.now)
            .await
            .unwrap();
        let role = verify_upload(
            "acme",
            &f.delegations,
            None,
            &bytes,
            std::slice::from_ref(def),
            f.now,
        )
        .expect("a well-formed first publish");
        (bytes, role)
    }

    #[tokio::test]
    async fn accepts_a_first_and_a_second_publish() {
        let f = fixture();
        let d = defs();
        let (_, v1) = first(&f, &d[0]).await;
        let bytes = build_role("acme", Some(&v1), &d[1], &[&f.key], 1, DAY, f.now)
            .await
            .unwrap();
        let v2 = verify_upload(
            "acme",
            &f.delegations,
            Some(&v1),
            &bytes,
            std::slice::from_ref(&d[1]),
            f.now,
        )
        .unwrap();
        assert_eq!(v2.signed.version.get(), 2);
        assert_eq!(v2.signed.targets.len(), 2);
    }

    #[tokio::test]
    async fn refuses_each_kind_of_bad_upload() {
        let f = fixture();
        let d = defs();
        let (_, v1) = first(&f, &d[0]).await;
        let rogue = SigningKey::generate().unwrap();
        let upload_on_v1 = |delegations: &Delegations, bytes: &[u8], def: &Definition| {
            verify_upload(
                "acme",
                delegations,
                Some(&v1),
                bytes,
                std::slice::from_ref(def),
                f.now,
            )
        };

        // Signed by a key the publisher does not have.
        let bytes = build_role("acme", Some(&v1), &d[1], &[&rogue], 1, DAY, f.now)
            .await
            .unwrap();
        assert!(matches!(
            upload_on_v1(&f.delegations, &bytes, &d[1]),
            Err(PublishError::Signature { .. })
        ));

        // Below threshold: the publisher needs 2 of 2 keys and signs with one.
        let second = SigningKey::generate().unwrap();
        let two = delegations_for("acme", &[f.key.public(), second.public()], 2).unwrap();
        assert!(matches!(
            upload_on_v1(
                &two,
                &build_role("acme", Some(&v1), &d[1], &[&f.key], 1, DAY, f.now)
                    .await
                    .unwrap(),
                &d[1]
            ),
            Err(PublishError::Signature { .. })
        ));

        // Version not incremented: a replay of v1 on top of v1.
        let (v1_bytes, _) = first(&f, &d[0]).await;
        assert!(matches!(
            upload_on_v1(&f.delegations, &v1_bytes, &d[0]),
            Err(PublishError::Stale { got: 1, current: 1 })
        ));

        // Bytes that do not match the new target.
        let bytes = build_role("acme", Some(&v1), &d[1], &[&f.key], 1, DAY, f.now)
            .await
            .unwrap();
        assert!(matches!(
            upload_on_v1(&f.delegations, &bytes, &d[2]),
            Err(PublishError::WrongTargets { .. })
        ));

        // A target under another publisher's path.
        let mut role = v1.signed.clone();
        role.version = version(2);
        role.targets.insert(
            TargetName::new(format!("other/{}/1.0.0.yaml", d[1].name())).unwrap(),
            target(&d[1], false),
        );
        let signed = resign(&f, role).await;
        assert!(matches!(
            upload_on_v1(&f.delegations, &signed, &d[1]),
            Err(PublishError::OutsidePath(..))
        ));

        // A published target removed.
        let mut role = v1.signed.clone();
        role.version = version(2);
        role.targets.clear();
        role.targets.insert(
            TargetName::new(target_name("acme", &d[1])).unwrap(),
            target(&d[1], false),
        );
        let signed = resign(&f, role).await;
        assert!(matches!(
            upload_on_v1(&f.delegations, &signed, &d[1]),
            Err(PublishError::Immutable(_))
        ));

        // Expired on arrival.
        let bytes = build_role(
            "acme",
            Some(&v1),
            &d[1],
            &[&f.key],
            1,
            DAY,
            f.now - 2 * 86_400,
        )
        .await
        .unwrap();
        assert!(matches!(
            upload_on_v1(&f.delegations, &bytes, &d[1]),
            Err(PublishError::Expiry)
        ));

        // Not JSON at all.
        assert!(matches!(
            verify_upload(
                "acme",
                &f.delegations,
                None,
                b"{",
                std::slice::from_ref(&d[0]),
                f.now
            ),
            Err(PublishError::Malformed(_))
        ));
    }

    #[test]
    fn ownership_is_per_segment() {
        assert!(owned_by("acme", "acme/x/1.0.0.yaml"));
        for bad in [
            "acme/x/y/1.0.0.yaml",
            "acme/1.0.0.yaml",
            "other/x/1.yaml",
            "acme/../1.yaml",
            "acme//1.yaml",
        ] {
            assert!(!owned_by("acme", bad), "{bad}");
        }
    }
}
