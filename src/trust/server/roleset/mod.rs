//! Server side: whether an uploaded set of a publisher's roles is a valid next state.
//!
//! An upload carries a new top role `P` (flat, or delegating bins), changed bins
//! `P.<prefix>`, or both. Each role is checked alone (signature threshold, next version,
//! expiry), then the set: a binned top is a complete partition over registered keys
//! (`bins::layout`), a new binned top comes with every bin it delegates (tough stops at
//! a delegated role that the snapshot does not list), and each target sits in the bin
//! its path hash names. What the operation changed is then judged on target maps
//! before and after, whichever roles list them (`verify::check_*`).

use std::collections::BTreeMap;

use tough::schema::{Delegations, Signed, Snapshot, Targets};

use crate::trust::PublicKey;
use crate::trust::bins::{self, BinsError, Layout};
use crate::trust::verify::{PublishError, RoleLifetimes, TargetMap, owned_by, verify_signed};

/// The roles of one upload, each exactly as the publisher signed it.
#[derive(Debug, Clone, Default)]
pub struct RoleUpload {
    pub top: Option<Vec<u8>>,
    pub bins: BTreeMap<String, Vec<u8>>,
}

/// A publisher's roles as the current snapshot lists them, as far as the upload needs
/// them: the top role, and the current version of each bin that matters.
#[derive(Debug, Default)]
pub struct CurrentRoles {
    pub top: Option<Signed<Targets>>,
    pub bins: BTreeMap<String, Signed<Targets>>,
}

impl CurrentRoles {
    /// Which bins the server must load to judge `upload`: with a new top role, every
    /// bin the current one delegates (all targets are compared); otherwise the uploaded
    /// ones.
    pub fn bins_needed(
        publisher: &str,
        top: Option<&Signed<Targets>>,
        upload: &RoleUpload,
    ) -> Vec<String> {
        match (&upload.top, top) {
            (Some(_), Some(top)) => bins::delegated(publisher, &top.signed),
            (Some(_), None) => Vec::new(),
            (None, _) => upload.bins.keys().cloned().collect(),
        }
    }
}

/// A verified upload: the roles to store (top first) and the publisher's targets before
/// and after, over the roles concerned.
#[derive(Debug)]
pub struct Verified {
    pub roles: Vec<(String, Signed<Targets>, Vec<u8>)>,
    /// The top role's version after the upload (new or unchanged).
    pub top_version: u64,
    pub old: TargetMap,
    pub new: TargetMap,
}

/// What the server knows of a publisher: its registered keys and threshold, and the
/// delegation built from them.
pub struct Registered<'a> {
    pub publisher: &'a str,
    pub keys: &'a [PublicKey],
    pub threshold: u64,
    pub delegations: &'a Delegations,
}

/// Checks an upload against the publisher's registration and current roles, and each
/// uploaded role's lifetime against the operator's `lifetimes`.
/// `snapshot` gives the current version of every role (bins of an older layout
/// included, so a name is never reused at an old version).
pub fn verify_set(
    who: &Registered<'_>,
    snapshot: &Snapshot,
    current: &CurrentRoles,
    upload: &RoleUpload,
    now: i64,
    lifetimes: &RoleLifetimes,
) -> Result<Verified, PublishError> {
    let publisher = who.publisher;
    if upload.top.is_none() && upload.bins.is_empty() {
        return Err(PublishError::NoRole);
    }
    let current_top_version = current.top.as_ref().map_or(0, |t| t.signed.version.get());
    let new_top = upload
        .top
        .as_deref()
        .map(|b| {
            verify_signed(
                publisher,
                who.delegations,
                current_top_version,
                b,
                now,
                lifetimes,
            )
        })
        .transpose()?;
    let top = new_top.as_ref().or(current.top.as_ref()).ok_or_else(|| {
        PublishError::FirstRoleMissing {
            publisher: publisher.to_owned(),
        }
    })?;
    let layout = bins::layout(publisher, &top.signed, who.keys, who.threshold).map_err(|e| {
        if new_top.is_some() {
            e
        } else {
            BinsError::KeysNoLongerRegistered {
                problem: Box::new(e),
            }
        }
    })?;
    let mut roles = Vec::new();
    if let (Some(role), Some(bytes)) = (new_top.clone(), &upload.top) {
        roles.push((publisher.to_owned(), role, bytes.clone()));
    }
    let new_map = match layout {
        Layout::Flat => {
            if !upload.bins.is_empty() {
                return Err(BinsError::BinsOfFlatRole.into());
            }
            if top
                .signed
                .delegations
                .as_ref()
                .is_some_and(|d| !d.roles.is_empty() || !d.keys.is_empty())
            {
                return Err(PublishError::NestedDelegation);
            }
            top.signed.targets.clone()
        }
        Layout::Binned { prefix_len } => {
            let names = bins::delegated(publisher, &top.signed);
            if let Some(missing) = names
                .iter()
                .find(|n| new_top.is_some() && !upload.bins.contains_key(*n))
            {
                return Err(BinsError::MissingBin {
                    bin: missing.clone(),
                }
                .into());
            }
            let delegations = top.signed.delegations.as_ref().expect("binned");
            let mut map = TargetMap::new();
            for (name, bytes) in &upload.bins {
                if !names.contains(name) {
                    // Most likely another update moved the targets to other bins since
                    // the publisher fetched: a conflict, to sign again on fresh metadata.
                    return Err(PublishError::NotABin {
                        bin: name.clone(),
                        publisher: publisher.into(),
                    });
                }
                let current_version = snapshot
                    .meta
                    .get(&format!("{name}.json"))
                    .map_or(0, |m| m.version.get());
                let bin = verify_signed(name, delegations, current_version, bytes, now, lifetimes)?;
                if bin
                    .signed
                    .delegations
                    .as_ref()
                    .is_some_and(|d| !d.roles.is_empty() || !d.keys.is_empty())
                {
                    return Err(PublishError::NestedDelegation);
                }
                let prefix = &name[publisher.len() + 1..];
                for target in bin.signed.targets.keys() {
                    let belongs = bins::prefix_of(target.raw(), prefix_len);
                    if owned_by(publisher, target.raw()) && belongs != prefix {
                        return Err(BinsError::Misplaced {
                            target: target.raw().to_owned(),
                            belongs: bins::bin_name(publisher, &belongs),
                            bin: name.clone(),
                        }
                        .into());
                    }
                }
                map.extend(bin.signed.targets.clone());
                roles.push((name.clone(), bin, bytes.clone()));
            }
            map
        }
    };
    for name in new_map.keys() {
        if !owned_by(publisher, name.raw()) {
            return Err(PublishError::OutsidePath {
                target: name.raw().into(),
                publisher: publisher.into(),
            });
        }
    }
    let old_map = match (&new_top, &current.top) {
        (_, None) => TargetMap::new(),
        // A new top role: every current target is compared.
        (Some(_), Some(old_top)) => match bins::prefix_len(publisher, &old_top.signed) {
            None => old_top.signed.targets.clone(),
            Some(_) => bins::union(&current.bins, &bins::delegated(publisher, &old_top.signed)),
        },
        // Bins alone: the uploaded bins as they are now.
        (None, Some(_)) => bins::union(
            &current.bins,
            &upload.bins.keys().cloned().collect::<Vec<_>>(),
        ),
    };
    Ok(Verified {
        roles,
        top_version: top.signed.version.get(),
        old: old_map,
        new: new_map,
    })
}

#[cfg(test)]
mod tests;
