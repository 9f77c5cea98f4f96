//! Publisher side of publishing: build and sign the next role metadata (publish, yank,
//! re-sign). The server never holds a publisher's key; `trust::verify` checks what the
//! publisher signed against the keys registered for it.

use std::collections::BTreeMap;

use tough::TargetName;
use tough::schema::{DelegatedTargets, Delegations, KeyHolder, Signed, Targets};

use crate::trust::bins::{self, BIN_MAX_TARGETS, FLAT_MAX_TARGETS};
use crate::trust::verify::TargetMap;

use crate::definition::Definition;
use crate::trust::metadata::{
    SPEC_VERSION, expiry, publisher_delegation, sign, target, target_name, version,
};
use crate::trust::{PublicKey, SigningKey, TrustError};

/// The delegation the server holds for a publisher, as a TUF key holder.
pub fn delegations_for(
    publisher: &str,
    keys: &[PublicKey],
    threshold: u64,
) -> Result<Delegations, TrustError> {
    let mut d = Delegations::new();
    d.keys.extend(keys.iter().map(PublicKey::tuf_entry));
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

/// The next version of a flat role with the same targets, signed with `keys` (what
/// [`plan`] does for `Change::Resign` on a role without bins).
pub async fn build_resign(
    publisher: &str,
    current: &Signed<Targets>,
    keys: &[&SigningKey],
    threshold: u64,
    lifetime: std::time::Duration,
    now: i64,
) -> Result<Vec<u8>, TrustError> {
    let mut role = current.signed.clone();
    role.version = version(current.signed.version.get() + 1);
    role.expires = expiry(now, lifetime);
    sign_role(publisher, role, keys, threshold).await
}

/// What a role update does to a publisher's targets.
#[derive(Debug, Clone)]
pub enum Change<'a> {
    /// Adds each `(definition, yanked)` as a target.
    Add(Vec<(&'a Definition, bool)>),
    /// Marks these targets yanked.
    Yank(Vec<String>),
    /// Changes no target: renews expiry, or moves the roles onto the signing keys.
    Resign,
}

/// When a publisher's targets move into bins. The publisher decides; the server accepts
/// either layout as long as it is well formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A flat role with more targets is split into bins.
    pub flat_max: usize,
    /// A bin with more targets makes the publisher re-bin with longer prefixes.
    pub bin_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            flat_max: FLAT_MAX_TARGETS,
            bin_max: BIN_MAX_TARGETS,
        }
    }
}

/// A publisher's current metadata as far as fetched: its top role and the bins loaded so
/// far. Bins are accepted only with valid signatures under the top role's delegation.
#[derive(Debug, Clone, Default)]
pub struct Current {
    pub top: Option<Signed<Targets>>,
    pub bins: BTreeMap<String, Signed<Targets>>,
}

impl Current {
    /// Adds a fetched bin (its bytes as served) after checking it is one the top role
    /// delegates and that the keys it is delegated to signed those bytes.
    pub fn add_bin(&mut self, name: &str, served: &[u8]) -> Result<(), TrustError> {
        let delegations = self
            .top
            .as_ref()
            .and_then(|t| t.signed.delegations.as_ref())
            .ok_or_else(|| TrustError::Sign(format!("{name}: the role delegates no bins")))?;
        let bin = crate::trust::envelope::parse::<Targets>(name, served)
            .and_then(|b| b.verify_delegated(delegations, name).map(|_| b))
            .map_err(|e| TrustError::Sign(format!("bin {name} is not validly signed: {e}")))?;
        self.bins.insert(name.to_owned(), bin.typed);
        Ok(())
    }
}

/// The signed roles of one update, each exactly as signed: a new top role (flat, or one
/// delegating bins) and/or bins by name.
#[derive(Debug, Clone, Default)]
pub struct Upload {
    pub top: Option<Vec<u8>>,
    pub bins: BTreeMap<String, Vec<u8>>,
    /// How many targets the uploaded roles list together.
    pub targets: usize,
}

/// The next step of building an update.
#[derive(Debug)]
pub enum Plan {
    /// These bins are needed first (fetch them, [`Current::add_bin`], plan again).
    Fetch(Vec<String>),
    Ready(Upload),
    /// A publish whose every definition the role already lists exactly as it would add
    /// it (the same file published again, or an earlier attempt that landed although
    /// its answer was lost): nothing to sign.
    AlreadyPublished,
}

/// Publisher side: the signed roles that apply `change` to `current`. A flat role past
/// `limits.flat_max` targets becomes a top role with bins; a bin past `limits.bin_max`
/// makes every bin move to longer prefixes. A publish or yank re-signs only the bins it
/// touches; a re-sign, a layout change or new signing keys re-sign every role.
pub async fn plan(
    publisher: &str,
    current: &Current,
    change: &Change<'_>,
    keys: &[&SigningKey],
    lifetime: std::time::Duration,
    now: i64,
    limits: Limits,
) -> Result<Plan, TrustError> {
    let planner = Planner {
        signing: Signing {
            publisher,
            keys,
            expires: expiry(now, lifetime),
        },
        current,
        change,
        top_version: current.top.as_ref().map_or(0, |t| t.signed.version.get()),
        limits,
    };
    match current
        .top
        .as_ref()
        .and_then(|t| bins::prefix_len(publisher, &t.signed))
    {
        None => planner.flat().await,
        Some(len) => planner.binned(len).await,
    }
}

/// One update being planned.
struct Planner<'a> {
    signing: Signing<'a>,
    current: &'a Current,
    change: &'a Change<'a>,
    top_version: u64,
    limits: Limits,
}

impl Planner<'_> {
    /// From a flat role (or none yet): the next flat role, or bins once it is too large.
    async fn flat(&self) -> Result<Plan, TrustError> {
        let mut map = self
            .current
            .top
            .as_ref()
            .map(|t| t.signed.targets.clone())
            .unwrap_or_default();
        if self.already_published(&map)? {
            return Ok(Plan::AlreadyPublished);
        }
        self.apply(&mut map)?;
        if map.len() > self.limits.flat_max {
            return self.rebin(map, 1).await;
        }
        let mut role = Targets::new(
            SPEC_VERSION.into(),
            version(self.top_version + 1),
            self.signing.expires,
        );
        role.delegations = None;
        let targets = map.len();
        role.targets = map;
        Ok(Plan::Ready(Upload {
            top: Some(self.signing.sign(self.signing.publisher, role).await?),
            bins: BTreeMap::new(),
            targets,
        }))
    }

    /// From a top role delegating bins of `len` hex digits: the touched bins re-signed,
    /// or every bin when the change touches them all, the keys changed or a bin is full.
    async fn binned(&self, len: usize) -> Result<Plan, TrustError> {
        let publisher = self.signing.publisher;
        let touched = self.touched();
        if touched.is_empty() {
            // Everything is re-signed (with the same prefix length).
            return self.resign_every_bin(len, len).await;
        }
        let mut names: Vec<String> = touched
            .iter()
            .map(|t| bins::bin_name(publisher, &bins::prefix_of(t, len)))
            .collect();
        names.sort();
        names.dedup();
        let need = self.missing(&names);
        if !need.is_empty() {
            return Ok(Plan::Fetch(need));
        }
        let mut map = bins::union(&self.current.bins, &names);
        if self.already_published(&map)? {
            return Ok(Plan::AlreadyPublished);
        }
        self.apply(&mut map)?;
        let mut per_bin: BTreeMap<String, TargetMap> = names
            .iter()
            .map(|n| (n.clone(), TargetMap::new()))
            .collect();
        for (name, t) in map {
            let bin = bins::bin_name(publisher, &bins::prefix_of(name.raw(), len));
            per_bin.entry(bin).or_default().insert(name, t);
        }
        if len < bins::MAX_PREFIX_LEN && per_bin.values().any(|m| m.len() > self.limits.bin_max) {
            return self.resign_every_bin(len, len + 1).await;
        }
        let mut upload = Upload::default();
        for (name, targets) in per_bin {
            upload.targets += targets.len();
            let next = self.current.bins[&name].signed.version.get() + 1;
            upload
                .bins
                .insert(name.clone(), self.signing.bin(&name, next, targets).await?);
        }
        Ok(Plan::Ready(upload))
    }

    /// The targets this change touches, when only their bins need signing; empty when
    /// every role is re-signed (a re-sign, or bins delegated to other keys than ours).
    fn touched(&self) -> Vec<String> {
        match self.change {
            Change::Resign => Vec::new(),
            _ if !self.bins_are_ours() => Vec::new(),
            Change::Add(defs) => defs
                .iter()
                .map(|(d, _)| target_name(self.signing.publisher, d))
                .collect(),
            Change::Yank(names) => names.clone(),
        }
    }

    /// Whether the bins are delegated to exactly the signing keys, all of them needed.
    fn bins_are_ours(&self) -> bool {
        self.current
            .top
            .as_ref()
            .and_then(|t| t.signed.delegations.as_ref())
            .and_then(|d| d.roles.first())
            .is_some_and(|r| {
                let mut mine: Vec<_> = self.signing.ids();
                let mut theirs = r.keyids.clone();
                mine.sort();
                theirs.sort();
                mine == theirs && r.threshold.get() == self.signing.keys.len() as u64
            })
    }

    /// Every current bin of `len` digits loaded (else the ones to fetch), the change
    /// applied to all targets, spread over bins of at least `min_len` digits.
    async fn resign_every_bin(&self, len: usize, min_len: usize) -> Result<Plan, TrustError> {
        let all: Vec<String> = bins::prefixes(len)
            .iter()
            .map(|p| bins::bin_name(self.signing.publisher, p))
            .collect();
        let need = self.missing(&all);
        if !need.is_empty() {
            return Ok(Plan::Fetch(need));
        }
        let mut map = bins::union(&self.current.bins, &all);
        if self.already_published(&map)? {
            return Ok(Plan::AlreadyPublished);
        }
        self.apply(&mut map)?;
        self.rebin(map, min_len).await
    }

    /// Those of `names` not fetched yet.
    fn missing(&self, names: &[String]) -> Vec<String> {
        names
            .iter()
            .filter(|n| !self.current.bins.contains_key(*n))
            .cloned()
            .collect()
    }

    fn apply(&self, map: &mut TargetMap) -> Result<(), TrustError> {
        apply(self.signing.publisher, map, self.change)
    }

    /// Whether this change is a publish whose every definition `map` (the targets of
    /// the roles it touches) already lists exactly as the publish would add it.
    fn already_published(&self, map: &TargetMap) -> Result<bool, TrustError> {
        let Change::Add(defs) = self.change else {
            return Ok(false);
        };
        for (def, yanked) in defs {
            let name = TargetName::new(target_name(self.signing.publisher, def))
                .map_err(|e| TrustError::Sign(e.to_string()))?;
            if map.get(&name) != Some(&target(def, *yanked)) {
                return Ok(false);
            }
        }
        Ok(!defs.is_empty())
    }

    /// Every target spread over bins of at least `min_len` hex digits (more while a bin
    /// would exceed `limits.bin_max`), with a new top role delegating them.
    async fn rebin(&self, map: TargetMap, min_len: usize) -> Result<Plan, TrustError> {
        let signing = &self.signing;
        let publisher = signing.publisher;
        let mut len = min_len.max(1);
        let mut per_bin = split(publisher, &map, len);
        while len < bins::MAX_PREFIX_LEN && per_bin.values().any(|m| m.len() > self.limits.bin_max)
        {
            len += 1;
            per_bin = split(publisher, &map, len);
        }
        let publics: Vec<PublicKey> = signing.keys.iter().map(|k| k.public()).collect();
        let top = bins::binned_top(
            publisher,
            &publics,
            signing.keys.len() as u64,
            len,
            self.top_version + 1,
            signing.expires,
        );
        let mut upload = Upload {
            top: Some(signing.sign(publisher, top).await?),
            bins: BTreeMap::new(),
            targets: map.len(),
        };
        for (name, targets) in per_bin {
            // Bins of a new prefix length start at version 1.
            let next = self
                .current
                .bins
                .get(&name)
                .map_or(1, |b| b.signed.version.get() + 1);
            upload
                .bins
                .insert(name.clone(), signing.bin(&name, next, targets).await?);
        }
        Ok(Plan::Ready(upload))
    }
}

/// Targets by the bin of `len`-digit prefixes they belong in; every bin present.
fn split(publisher: &str, map: &TargetMap, len: usize) -> BTreeMap<String, TargetMap> {
    let mut per_bin: BTreeMap<String, TargetMap> = bins::prefixes(len)
        .iter()
        .map(|p| (bins::bin_name(publisher, p), TargetMap::new()))
        .collect();
    for (name, t) in map {
        let bin = bins::bin_name(publisher, &bins::prefix_of(name.raw(), len));
        per_bin
            .get_mut(&bin)
            .expect("every prefix has a bin")
            .insert(name.clone(), t.clone());
    }
    per_bin
}

/// Applies `change` to a target map.
fn apply(publisher: &str, map: &mut TargetMap, change: &Change<'_>) -> Result<(), TrustError> {
    match change {
        Change::Add(defs) => {
            for (def, yanked) in defs {
                let name = TargetName::new(target_name(publisher, def))
                    .map_err(|e| TrustError::Sign(e.to_string()))?;
                map.insert(name, target(def, *yanked));
            }
        }
        Change::Yank(names) => {
            for name in names {
                let key =
                    TargetName::new(name.as_str()).map_err(|e| TrustError::Sign(e.to_string()))?;
                map.get_mut(&key)
                    .ok_or_else(|| TrustError::Sign(format!("{name} is not published")))?
                    .custom
                    .insert("yanked".into(), serde_json::Value::Bool(true));
            }
        }
        Change::Resign => {}
    }
    Ok(())
}

/// The publisher's keys and the expiry of everything signed in one update.
struct Signing<'a> {
    publisher: &'a str,
    keys: &'a [&'a SigningKey],
    expires: jiff::Timestamp,
}

impl Signing<'_> {
    fn ids(&self) -> Vec<tough::schema::decoded::Decoded<tough::schema::decoded::Hex>> {
        self.keys.iter().map(|k| k.public().tuf_key_id()).collect()
    }

    async fn sign(&self, role_name: &str, role: Targets) -> Result<Vec<u8>, TrustError> {
        sign_role(role_name, role, self.keys, self.keys.len() as u64).await
    }

    async fn bin(&self, name: &str, next: u64, targets: TargetMap) -> Result<Vec<u8>, TrustError> {
        let mut role = Targets::new(SPEC_VERSION.into(), version(next), self.expires);
        role.delegations = None;
        role.targets = targets;
        self.sign(name, role).await
    }
}
