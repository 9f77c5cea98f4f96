//! Server side of publishing: whether to accept a role a publisher signed. Checks what
//! every upload shares (signature threshold with the registered keys, next version,
//! expiry, ownership of every path), then what the operation may change: a publish adds
//! exactly its definitions, a yank only turns `custom.yanked` on, a re-sign changes no
//! target. The change checks compare target maps, whichever roles list them.

use std::collections::HashMap;
use std::time::Duration;

use tough::TargetName;
use tough::schema::{Delegations, Signed, Target, Targets};

use super::envelope::{self, EnvelopeError};
use super::metadata::target_name;
use crate::definition::Definition;

/// Why an upload was refused. Each names what to fix.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("role metadata is not valid TUF targets metadata: {0}")]
    Malformed(String),
    #[error(transparent)]
    Metadata(#[from] EnvelopeError),
    #[error(
        "role {role} expires {expires}, in {remaining}; this marketplace accepts roles valid for between {min} and {max} (sign again with an --expires in that range)"
    )]
    Lifetime {
        role: String,
        expires: String,
        remaining: String,
        min: String,
        max: String,
    },
    #[error(
        "role {role} is not signed by {threshold} of the publisher keys it is delegated to: {reason}"
    )]
    Signature {
        role: String,
        threshold: u64,
        reason: String,
    },
    #[error(
        "role {role} version {got} is stale: the current version is {current}; fetch the current metadata and sign again"
    )]
    Stale {
        role: String,
        got: u64,
        current: u64,
    },
    #[error("role {role} version {got} skips versions: the next version is {expected}")]
    VersionGap {
        role: String,
        got: u64,
        expected: u64,
    },
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
    #[error("role {0} must expire in the future, in whole seconds")]
    Expiry(String),
    #[error("publishers may not delegate further")]
    NestedDelegation,
    #[error("hashed bins are malformed: {0}")]
    BadBins(String),
    #[error(
        "{0} is not a bin of {1}'s current role (its bins may have changed); fetch the current metadata and sign again"
    )]
    NotABin(String, String),
}

/// A publisher's targets, whichever roles list them.
pub type TargetMap = HashMap<TargetName, Target>;

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

/// How long a publisher's role (or bin) may remain valid when it is uploaded: the
/// operator's policy (`serve --min-role-lifetime/--max-role-lifetime`).
///
/// The minimum keeps a publisher from stalling itself with a role about to expire (every
/// TUF client refuses expired metadata); the maximum bounds how long a role signed with
/// a since-compromised key stays valid without the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoleLifetimes {
    pub min: Duration,
    pub max: Duration,
}

impl Default for RoleLifetimes {
    fn default() -> Self {
        const DAY: u64 = 86_400;
        RoleLifetimes {
            min: Duration::from_secs(7 * DAY),
            max: Duration::from_secs(730 * DAY),
        }
    }
}

impl RoleLifetimes {
    /// Whether a role expiring at `expires` may be accepted at `now`.
    pub fn check(&self, role: &str, expires: i64, now: i64) -> Result<(), PublishError> {
        let remaining = expires.saturating_sub(now);
        if remaining < secs(self.min) || remaining > secs(self.max) {
            return Err(PublishError::Lifetime {
                role: role.to_owned(),
                expires: jiff::Timestamp::from_second(expires)
                    .map_or_else(|_| expires.to_string(), |t| t.to_string()),
                remaining: crate::clock::human_duration(remaining),
                min: crate::clock::human_duration(secs(self.min)),
                max: crate::clock::human_duration(secs(self.max)),
            });
        }
        Ok(())
    }

    /// `lifetime` moved into the accepted range, with a margin above the minimum so the
    /// role is still acceptable by the time it reaches the server.
    pub fn clamp(&self, lifetime: Duration) -> Duration {
        let floor = self.min + Duration::from_secs(3600).min(self.min);
        lifetime.max(floor).min(self.max.max(floor))
    }
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// Checks one uploaded role alone: parse, a threshold of signatures (over the bytes as
/// uploaded) under the delegation of `role_name` in `holder`, the next version after
/// `current_version` (0: none yet), expiry in whole seconds within `lifetimes`.
pub fn verify_signed(
    role_name: &str,
    holder: &Delegations,
    current_version: u64,
    uploaded: &[u8],
    now: i64,
    lifetimes: &RoleLifetimes,
) -> Result<Signed<Targets>, PublishError> {
    let envelope = envelope::parse::<Targets>(role_name, uploaded)?;
    let threshold = holder
        .roles
        .iter()
        .find(|r| r.name == role_name)
        .map_or(1, |r| r.threshold.get());
    envelope
        .verify_delegated(holder, role_name)
        .map_err(|e| PublishError::Signature {
            role: role_name.into(),
            threshold,
            reason: e.to_string(),
        })?;
    let role = envelope.typed;
    let got = role.signed.version.get();
    if got <= current_version {
        return Err(PublishError::Stale {
            role: role_name.into(),
            got,
            current: current_version,
        });
    }
    if got != current_version + 1 {
        return Err(PublishError::VersionGap {
            role: role_name.into(),
            got,
            expected: current_version + 1,
        });
    }
    let expires = role.signed.expires;
    if expires.as_second() <= now || expires.subsec_nanosecond() != 0 {
        return Err(PublishError::Expiry(role_name.into()));
    }
    lifetimes.check(role_name, expires.as_second(), now)?;
    Ok(role)
}

/// `PUBLISHER/NAME/FILE` exactly: three segments, the way python-tuf matches
/// `PUBLISHER/*/*` (a `*` never spans a `/`), so every client agrees on ownership.
pub(crate) fn owned_by(publisher: &str, target: &str) -> bool {
    let parts: Vec<&str> = target.split('/').collect();
    parts.len() == 3
        && parts[0] == publisher
        && parts[1..]
            .iter()
            .all(|p| !p.is_empty() && *p != "." && *p != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

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
