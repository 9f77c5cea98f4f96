//! Server side of publishing: whether to accept a role a publisher signed. Checks what
//! every upload shares (signature threshold with the registered keys, next version,
//! expiry, ownership of every path), then what the operation may change: a publish adds
//! exactly its definitions, a yank only turns `custom.yanked` on, a re-sign changes no
//! target. The change checks compare target maps, whichever roles list them.

use std::collections::HashMap;
use std::time::Duration;

use tough::TargetName;
use tough::schema::{Delegations, Signed, Target, Targets};

use super::bins::BinsError;
use super::envelope::{self, EnvelopeError};
use super::metadata::{target, target_extras, target_name};
use crate::clock::human_duration;
use crate::definition::Definition;

/// Why an upload was refused. Each names what to fix.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("the upload holds no role: give `role`, `bins` or both")]
    NoRole,
    #[error("publisher {publisher} has no role yet; the first upload must include `role`")]
    FirstRoleMissing { publisher: String },
    #[error(transparent)]
    Metadata(#[from] EnvelopeError),
    #[error(
        "role {role} expires {}, in {}; this marketplace accepts roles valid for between {} and {} (sign again with an --expires in that range)",
        timestamp(*.expires),
        human_duration(*.remaining),
        human_duration(secs(.allowed.min)),
        human_duration(secs(.allowed.max))
    )]
    Lifetime {
        role: String,
        /// Unix seconds.
        expires: i64,
        /// Seconds from upload to expiry.
        remaining: i64,
        allowed: RoleLifetimes,
    },
    #[error(
        "role {role} is not signed by {threshold} of the publisher keys it is delegated to: {reason}"
    )]
    Signature {
        role: String,
        threshold: u64,
        reason: EnvelopeError,
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
    #[error("target {target} lies outside {publisher}/*/* (publishers own only their own path)")]
    OutsidePath { target: String, publisher: String },
    #[error(
        "published target {target} was changed or removed; published versions are immutable (yank instead)"
    )]
    Immutable { target: String },
    /// Another publish stored this version between verification and storing.
    #[error(
        "{publisher}/{name} version {version} is already published with hash {existing}; published versions are immutable"
    )]
    AlreadyPublished {
        publisher: String,
        name: String,
        version: String,
        existing: String,
    },
    #[error(
        "the role must add exactly the uploaded definition(s) as [{}]; it adds [{}]",
        .expected.join(", "),
        .added.join(", ")
    )]
    WrongTargets {
        expected: Vec<String>,
        added: Vec<String>,
    },
    #[error("the upload holds no definition; a publish adds at least one")]
    NoDefinition,
    #[error(
        "a re-sign keeps the same targets as now, but the role adds targets (publish them instead)"
    )]
    ResignAddsTargets,
    #[error("a yank keeps the same targets as now, but the role adds or removes targets")]
    YankChangesTargets,
    #[error("a yank must leave at least one target newly yanked; nothing changed")]
    NothingYanked,
    #[error("uploaded definition bytes do not match target {target} (length or sha256 differ)")]
    BytesMismatch { target: String },
    #[error(
        "target {target}: {reason}; the marketplace's keys of `custom` must be what it derives from the definition and its companion document (sign with `marketplace publish`)"
    )]
    Custom { target: String, reason: String },
    #[error("role {role} must expire in the future, in whole seconds")]
    Expiry { role: String },
    #[error("publishers may not delegate further")]
    NestedDelegation,
    #[error("hashed bins are malformed: {0}")]
    BadBins(#[from] BinsError),
    #[error(
        "{bin} is not a bin of {publisher}'s current role (its bins may have changed); fetch the current metadata and sign again"
    )]
    NotABin { bin: String, publisher: String },
}

/// Unix seconds as an RFC 3339 time, or the number itself when out of range.
fn timestamp(secs: i64) -> String {
    jiff::Timestamp::from_second(secs).map_or_else(|_| secs.to_string(), |t| t.to_string())
}

/// A publisher's targets, whichever roles list them.
pub type TargetMap = HashMap<TargetName, Target>;

/// A publish changes no published target and adds exactly `defs`, byte for byte; the
/// keys of each new target's `custom` that [`target`] derives agree with it. Returns
/// `defs` with the extras their targets carry (`custom.extras`, signed by the
/// publisher).
pub fn check_publish(
    publisher: &str,
    old: &TargetMap,
    new: &TargetMap,
    defs: Vec<Definition>,
) -> Result<Vec<Definition>, PublishError> {
    for (name, t) in old {
        match new.get(name) {
            Some(n) if n == t => {}
            _ => return Err(immutable(name)),
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
            expected,
            added: added.into_iter().map(str::to_owned).collect(),
        });
    }
    defs.into_iter()
        .map(|def| {
            let name = target_name(publisher, &def);
            let t = &new[&TargetName::new(name.as_str()).expect("a listed name")];
            if t.length != def.bytes.len() as u64
                || t.hashes.sha256.as_ref()
                    != hex::decode(def.hash.trim_start_matches("sha256:")).unwrap_or_default()
            {
                return Err(PublishError::BytesMismatch { target: name });
            }
            let custom = |reason: String| PublishError::Custom {
                target: name.clone(),
                reason,
            };
            let extras = target_extras(t, def.name()).map_err(custom)?;
            let def = def.with_extras(extras).map_err(|e| custom(e.to_string()))?;
            // What the marketplace says in `custom` must agree with the file; a target
            // signed with other TUF tooling may leave it out (then no extras), and may
            // carry keys of the publisher's own, which no one here reads.
            let derived = target(&def, is_yanked(t));
            let mut keys: Vec<&String> = derived.custom.keys().collect();
            keys.sort();
            if let Some(key) = keys.into_iter().find(|k| {
                t.custom
                    .get(*k)
                    .is_some_and(|v| Some(v) != derived.custom.get(*k))
            }) {
                return Err(custom(format!(
                    "custom.{key} is not what the definition says"
                )));
            }
            Ok(def)
        })
        .collect()
}

/// A re-sign keeps every target exactly as it is.
pub fn check_resign(old: &TargetMap, new: &TargetMap) -> Result<(), PublishError> {
    for (name, t) in old {
        if new.get(name) != Some(t) {
            return Err(immutable(name));
        }
    }
    if new.len() != old.len() {
        return Err(PublishError::ResignAddsTargets);
    }
    Ok(())
}

fn immutable(target: &TargetName) -> PublishError {
    PublishError::Immutable {
        target: target.raw().to_owned(),
    }
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
        return Err(PublishError::YankChangesTargets);
    }
    let mut yanked = Vec::new();
    for (name, old) in old {
        let new = new.get(name).ok_or_else(|| immutable(name))?;
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
            return Err(immutable(name));
        }
        if is && !was {
            yanked.push(name.raw().to_owned());
        }
    }
    if yanked.is_empty() {
        return Err(PublishError::NothingYanked);
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
                expires,
                remaining,
                allowed: *self,
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
        .map_err(|reason| PublishError::Signature {
            role: role_name.into(),
            threshold,
            reason,
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
        return Err(PublishError::Expiry {
            role: role_name.into(),
        });
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
