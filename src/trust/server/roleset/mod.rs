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
    let check = Check {
        who,
        snapshot,
        now,
        lifetimes,
    };
    let new_top = check.new_top(current, upload)?;
    let top = new_top.as_ref().or(current.top.as_ref()).ok_or_else(|| {
        PublishError::FirstRoleMissing {
            publisher: publisher.to_owned(),
        }
    })?;
    let layout = check.layout(top, new_top.is_some())?;
    let mut roles = Vec::new();
    if let (Some(role), Some(bytes)) = (new_top.clone(), &upload.top) {
        roles.push((publisher.to_owned(), role, bytes.clone()));
    }
    let new_map = match layout {
        Layout::Flat => flat_targets(top, upload)?,
        Layout::Binned { prefix_len } => {
            check.binned_targets(top, new_top.is_some(), upload, prefix_len, &mut roles)?
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
    Ok(Verified {
        roles,
        top_version: top.signed.version.get(),
        old: targets_before(publisher, new_top.is_some(), current, upload),
        new: new_map,
    })
}

/// What every role of one upload is checked against.
struct Check<'a> {
    who: &'a Registered<'a>,
    snapshot: &'a Snapshot,
    now: i64,
    lifetimes: &'a RoleLifetimes,
}

impl Check<'_> {
    /// The uploaded top role, verified alone as the next version of the current one.
    fn new_top(
        &self,
        current: &CurrentRoles,
        upload: &RoleUpload,
    ) -> Result<Option<Signed<Targets>>, PublishError> {
        let current_version = current.top.as_ref().map_or(0, |t| t.signed.version.get());
        upload
            .top
            .as_deref()
            .map(|bytes| {
                verify_signed(
                    self.who.publisher,
                    self.who.delegations,
                    current_version,
                    bytes,
                    self.now,
                    self.lifetimes,
                )
            })
            .transpose()
    }

    /// The layout of the top role in force after the upload. A current one that no
    /// longer fits the registered keys says how to move on.
    fn layout(&self, top: &Signed<Targets>, uploaded: bool) -> Result<Layout, BinsError> {
        let who = self.who;
        bins::layout(who.publisher, &top.signed, who.keys, who.threshold).map_err(|e| {
            if uploaded {
                e
            } else {
                BinsError::KeysNoLongerRegistered {
                    problem: Box::new(e),
                }
            }
        })
    }

    /// The targets of the uploaded bins, each bin verified and added to `roles`. A new
    /// top role comes with every bin it delegates.
    fn binned_targets(
        &self,
        top: &Signed<Targets>,
        top_uploaded: bool,
        upload: &RoleUpload,
        prefix_len: usize,
        roles: &mut Vec<(String, Signed<Targets>, Vec<u8>)>,
    ) -> Result<TargetMap, PublishError> {
        let publisher = self.who.publisher;
        let names = bins::delegated(publisher, &top.signed);
        if let Some(missing) = names
            .iter()
            .find(|n| top_uploaded && !upload.bins.contains_key(*n))
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
            let bin = self.verify_bin(name, bytes, delegations, prefix_len)?;
            map.extend(bin.signed.targets.clone());
            roles.push((name.clone(), bin, bytes.clone()));
        }
        Ok(map)
    }

    /// One uploaded bin: signed under `delegations` as its next version, delegating
    /// nothing, every target of the publisher's in the bin its path hash names.
    fn verify_bin(
        &self,
        name: &str,
        bytes: &[u8],
        delegations: &Delegations,
        prefix_len: usize,
    ) -> Result<Signed<Targets>, PublishError> {
        let publisher = self.who.publisher;
        let current_version = self
            .snapshot
            .meta
            .get(&format!("{name}.json"))
            .map_or(0, |m| m.version.get());
        let bin = verify_signed(
            name,
            delegations,
            current_version,
            bytes,
            self.now,
            self.lifetimes,
        )?;
        if delegates_further(&bin.signed) {
            return Err(PublishError::NestedDelegation);
        }
        let prefix = &name[publisher.len() + 1..];
        for target in bin.signed.targets.keys() {
            let belongs = bins::prefix_of(target.raw(), prefix_len);
            if owned_by(publisher, target.raw()) && belongs != prefix {
                return Err(BinsError::Misplaced {
                    target: target.raw().to_owned(),
                    belongs: bins::bin_name(publisher, &belongs),
                    bin: name.to_owned(),
                }
                .into());
            }
        }
        Ok(bin)
    }
}

/// The targets of a flat top role, which comes without bins and delegates nothing.
fn flat_targets(top: &Signed<Targets>, upload: &RoleUpload) -> Result<TargetMap, PublishError> {
    if !upload.bins.is_empty() {
        return Err(BinsError::BinsOfFlatRole.into());
    }
    if delegates_further(&top.signed) {
        return Err(PublishError::NestedDelegation);
    }
    Ok(top.signed.targets.clone())
}

fn delegates_further(role: &Targets) -> bool {
    role.delegations
        .as_ref()
        .is_some_and(|d| !d.roles.is_empty() || !d.keys.is_empty())
}

/// The publisher's targets before the upload, over the roles it concerns: with a new top
/// role every current target, with bins alone the uploaded bins as they are now.
fn targets_before(
    publisher: &str,
    top_uploaded: bool,
    current: &CurrentRoles,
    upload: &RoleUpload,
) -> TargetMap {
    match (top_uploaded, &current.top) {
        (_, None) => TargetMap::new(),
        (true, Some(old_top)) => match bins::prefix_len(publisher, &old_top.signed) {
            None => old_top.signed.targets.clone(),
            Some(_) => bins::union(&current.bins, &bins::delegated(publisher, &old_top.signed)),
        },
        (false, Some(_)) => bins::union(
            &current.bins,
            &upload.bins.keys().cloned().collect::<Vec<_>>(),
        ),
    }
}

#[cfg(test)]
mod tests;
