//! Hashed-bin delegations inside a publisher's role.
//!
//! A publisher's role `P` is delegated `P/*/*` by `targets`. While it is small it lists
//! its targets itself ("flat"). A large one would be uploaded, verified, stored and
//! downloaded whole on every publish (about 600 bytes per target), so it holds no
//! targets and instead delegates bins `P.<prefix>` by `path_hash_prefixes` to the same
//! keys: a publish then re-signs one bin. `.` never occurs in a publisher name, so a bin
//! name cannot clash with another publisher's role.
//!
//! Which layout to use is the publisher's choice (it signs the roles); the server only
//! checks that a binned role is a complete, well-formed partition over the registered
//! keys.

use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};

use tough::schema::{DelegatedRole, Delegations, PathHashPrefix, PathSet, Signed, Targets};

use super::PublicKey;
use super::metadata::{SPEC_VERSION, version};
use super::verify::TargetMap;
use crate::store::StoredMetadata;

/// A flat role past this many targets is split into bins.
pub const FLAT_MAX_TARGETS: usize = 1024;
/// A bin past this many targets makes the publisher re-bin with a longer prefix.
pub const BIN_MAX_TARGETS: usize = 2048;
/// Hex digits of the longest bin prefix: 256 bins.
pub const MAX_PREFIX_LEN: usize = 2;

/// What is wrong with a publisher's bins (shown after "hashed bins are malformed: ").
#[derive(Debug, thiserror::Error)]
pub enum BinsError {
    #[error("a role that delegates bins lists no targets itself")]
    TargetsBesideBins,
    #[error("bins are named {publisher}.<1 to {MAX_PREFIX_LEN} hex digits>")]
    Naming { publisher: String },
    #[error("bins must be delegated to keys registered for the publisher")]
    UnregisteredKeys,
    #[error(
        "the bins' threshold must be at least the publisher's threshold {publisher_threshold} and at most their {keys} key(s)"
    )]
    Threshold {
        bin_threshold: u64,
        publisher_threshold: u64,
        keys: usize,
    },
    #[error("the role must list exactly the keys its bins are delegated to")]
    KeysListed,
    #[error("{needed} bins with {prefix_len}-digit prefixes are needed, {given} given")]
    BinCount {
        needed: usize,
        prefix_len: usize,
        given: usize,
    },
    #[error(
        "delegation {found} must be `{expected}`: path hash prefix {prefix}, terminating, the same keys and threshold as every bin"
    )]
    Delegation {
        found: String,
        expected: String,
        prefix: String,
    },
    #[error("a role that lists its targets itself has no bins; upload the role alone")]
    BinsOfFlatRole,
    #[error("a new role that delegates bins comes with every bin it delegates; {bin} is missing")]
    MissingBin { bin: String },
    #[error("target {target} belongs in bin {belongs}, not {bin}")]
    Misplaced {
        target: String,
        belongs: String,
        bin: String,
    },
    /// Bins alone were uploaded, but the current top role no longer fits the registered
    /// keys (after a rotation).
    #[error(
        "the current role delegates its bins to keys that are no longer registered ({problem}); re-sign everything with `marketplace resign`"
    )]
    KeysNoLongerRegistered { problem: Box<BinsError> },
}

/// How a publisher's role holds its targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Flat,
    /// `16^prefix_len` bins, each delegated one hex prefix of that length.
    Binned {
        prefix_len: usize,
    },
}

/// The role name of the bin holding targets whose path hash starts with `prefix`.
pub fn bin_name(publisher: &str, prefix: &str) -> String {
    format!("{publisher}.{prefix}")
}

/// The publisher of the bin named `role` (`P` of `P.<prefix>`); `None` for a role that
/// is not a bin.
pub fn publisher_of_bin(role: &str) -> Option<&str> {
    role.split_once('.').map(|(publisher, _)| publisher)
}

/// Whether `role` names a possible bin of `publisher`: `P.` and 1 to
/// [`MAX_PREFIX_LEN`] lowercase hex digits (the names `bin_name` makes).
pub fn is_bin_of(publisher: &str, role: &str) -> bool {
    role.strip_prefix(publisher)
        .and_then(|rest| rest.strip_prefix('.'))
        .is_some_and(|prefix| {
            !prefix.is_empty()
                && prefix.len() <= MAX_PREFIX_LEN
                && prefix
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        })
}

/// A publisher's current bins summed up as one entry, for overviews.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoldedBins {
    pub publisher: String,
    pub count: usize,
    pub lowest_version: u64,
    pub highest_version: u64,
    /// When the most recently signed bin was signed.
    pub signed_at: i64,
    /// When the first bin to expire expires.
    pub expires_at: i64,
}

/// Splits stored roles into the roles that are not bins and, per publisher, its bins
/// among `current` folded into one entry (by publisher name). Bins not in `current`
/// (of an older layout, still listed in the snapshot but never fetched) are left out.
pub fn fold(
    roles: Vec<StoredMetadata>,
    current: &HashSet<String>,
) -> (Vec<StoredMetadata>, Vec<FoldedBins>) {
    let mut folded: BTreeMap<String, FoldedBins> = BTreeMap::new();
    let mut others = Vec::new();
    for m in roles {
        match publisher_of_bin(&m.role) {
            None => others.push(m),
            Some(_) if !current.contains(&m.role) => {}
            Some(publisher) => {
                let e = folded
                    .entry(publisher.to_owned())
                    .or_insert_with(|| FoldedBins {
                        publisher: publisher.to_owned(),
                        count: 0,
                        lowest_version: m.version,
                        highest_version: m.version,
                        signed_at: m.created_at,
                        expires_at: m.expires_at,
                    });
                e.count += 1;
                e.lowest_version = e.lowest_version.min(m.version);
                e.highest_version = e.highest_version.max(m.version);
                e.signed_at = e.signed_at.max(m.created_at);
                e.expires_at = e.expires_at.min(m.expires_at);
            }
        }
    }
    (others, folded.into_values().collect())
}

/// The first `len` hex digits of sha256(target path): how TUF clients (python-tuf,
/// tough) match `path_hash_prefixes`.
pub fn prefix_of(target: &str, len: usize) -> String {
    let mut hex = hex::encode(Sha256::digest(target.as_bytes()));
    hex.truncate(len);
    hex
}

/// Every hex prefix of `len` digits, in order.
pub fn prefixes(len: usize) -> Vec<String> {
    let count = 16usize.pow(len as u32);
    (0..count).map(|i| format!("{i:0len$x}")).collect()
}

/// The top role of a binned layout: no targets, every bin delegated to `keys`.
pub fn binned_top(
    publisher: &str,
    keys: &[PublicKey],
    threshold: u64,
    prefix_len: usize,
    next_version: u64,
    expires: jiff::Timestamp,
) -> Targets {
    let mut top = Targets::new(SPEC_VERSION.into(), version(next_version), expires);
    let mut d = Delegations::new();
    d.keys.extend(keys.iter().map(PublicKey::tuf_entry));
    let keyids: Vec<_> = keys.iter().map(PublicKey::tuf_key_id).collect();
    for prefix in prefixes(prefix_len) {
        d.roles.push(DelegatedRole {
            name: bin_name(publisher, &prefix),
            keyids: keyids.clone(),
            threshold: version(threshold),
            paths: PathSet::PathHashPrefixes(vec![
                PathHashPrefix::new(prefix).expect("a hex prefix"),
            ]),
            terminating: true,
            targets: None,
        });
    }
    top.delegations = Some(d);
    top
}

/// The prefix length of a top role that delegates bins, read from its first bin's name;
/// `None` for a role that lists its targets itself. Structure is checked by [`layout`].
pub fn prefix_len(publisher: &str, role: &Targets) -> Option<usize> {
    role.delegations
        .as_ref()?
        .roles
        .first()?
        .name
        .strip_prefix(&format!("{publisher}."))
        .map(str::len)
}

/// The bins a top role delegates (none for a flat one).
pub fn delegated(publisher: &str, top: &Targets) -> Vec<String> {
    match prefix_len(publisher, top) {
        Some(_) => top
            .delegations
            .iter()
            .flat_map(|d| d.roles.iter().map(|r| r.name.clone()))
            .collect(),
        None => Vec::new(),
    }
}

/// The targets the bins `names` list together (a name not in `loaded` adds nothing).
pub fn union(loaded: &BTreeMap<String, Signed<Targets>>, names: &[String]) -> TargetMap {
    names
        .iter()
        .filter_map(|n| loaded.get(n))
        .flat_map(|b| b.signed.targets.clone())
        .collect()
}

/// The layout of a publisher's top role. A binned one must be what [`binned_top`]
/// builds: no targets of its own, every prefix of one length, each bin terminating and
/// delegated to the same keys, all of them registered for the publisher, with at least
/// the publisher's registered `threshold`. (The publisher chooses which of its keys sign
/// the bins; the operator's threshold still holds.)
pub fn layout(
    publisher: &str,
    role: &Targets,
    registered: &[PublicKey],
    threshold: u64,
) -> Result<Layout, BinsError> {
    let Some(d) = role
        .delegations
        .as_ref()
        .filter(|d| !d.roles.is_empty() || !d.keys.is_empty())
    else {
        return Ok(Layout::Flat);
    };
    if !role.targets.is_empty() {
        return Err(BinsError::TargetsBesideBins);
    }
    let prefix_len = prefix_len(publisher, role)
        .filter(|n| (1..=MAX_PREFIX_LEN).contains(n))
        .ok_or_else(|| BinsError::Naming {
            publisher: publisher.to_owned(),
        })?;
    let first = &d.roles[0];
    let signers: Vec<PublicKey> = registered
        .iter()
        .filter(|k| first.keyids.contains(&k.tuf_key_id()))
        .cloned()
        .collect();
    let bin_threshold = first.threshold.get();
    if signers.len() != first.keyids.len() {
        return Err(BinsError::UnregisteredKeys);
    }
    if bin_threshold < threshold || bin_threshold > signers.len() as u64 {
        return Err(BinsError::Threshold {
            bin_threshold,
            publisher_threshold: threshold,
            keys: signers.len(),
        });
    }
    let expected = binned_top(
        publisher,
        &signers,
        bin_threshold,
        prefix_len,
        1,
        role.expires,
    );
    let expected = expected.delegations.expect("built with delegations");
    if d.keys != expected.keys {
        return Err(BinsError::KeysListed);
    }
    if d.roles.len() != expected.roles.len() {
        return Err(BinsError::BinCount {
            needed: expected.roles.len(),
            prefix_len,
            given: d.roles.len(),
        });
    }
    for (got, want) in d.roles.iter().zip(&expected.roles) {
        let same = got.name == want.name
            && got.paths == want.paths
            && got.terminating
            && got.threshold == want.threshold
            && sorted(&got.keyids) == sorted(&want.keyids);
        if !same {
            return Err(BinsError::Delegation {
                found: got.name.clone(),
                expected: want.name.clone(),
                prefix: want.name[publisher.len() + 1..].to_owned(),
            });
        }
    }
    Ok(Layout::Binned { prefix_len })
}

fn sorted<T: Clone + Ord>(items: &[T]) -> Vec<T> {
    let mut v = items.to_vec();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::SigningKey;

    #[test]
    fn bin_names_of_a_publisher() {
        for ok in ["acme.0", "acme.f", "acme.3a"] {
            assert!(is_bin_of("acme", ok), "{ok}");
        }
        for bad in [
            "acme", "acme.", "acme.A", "acme.abc", "acme.g", "acmex.0", "beta.0", "acme..0",
        ] {
            assert!(!is_bin_of("acme", bad), "{bad}");
        }
    }

    #[test]
    fn prefixes_and_names() {
        assert_eq!(prefixes(1).len(), 16);
        assert_eq!(prefixes(2).len(), 256);
        assert_eq!(prefixes(2)[0], "00");
        assert_eq!(prefixes(2)[255], "ff");
        // sha256("acme/x/1.0.0.yaml"), as python-tuf and tough compute it.
        let full = hex::encode(Sha256::digest(b"acme/x/1.0.0.yaml"));
        assert_eq!(prefix_of("acme/x/1.0.0.yaml", 2), full[..2]);
        assert_eq!(bin_name("acme", "3f"), "acme.3f");
    }

    #[test]
    fn folds_current_bins_per_publisher_and_drops_older_layouts() {
        let meta = |role: &str, version: u64, created_at: i64, expires_at: i64| StoredMetadata {
            role: role.into(),
            version,
            bytes: Vec::new(),
            sha256: String::new(),
            expires_at,
            created_at,
        };
        let roles = vec![
            meta("targets", 4, 10, 1_000),
            meta("acme", 2, 10, 900),
            meta("acme.0", 3, 20, 800),
            meta("acme.1", 5, 30, 700),
            meta("acme.00", 9, 90, 90),
        ];
        let current: HashSet<String> = ["acme.0".into(), "acme.1".into()].into();
        let (others, folded) = fold(roles, &current);
        let names: Vec<&str> = others.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(names, ["targets", "acme"]);
        assert_eq!(
            folded,
            [FoldedBins {
                publisher: "acme".into(),
                count: 2,
                lowest_version: 3,
                highest_version: 5,
                signed_at: 30,
                expires_at: 700,
            }]
        );
        assert_eq!(publisher_of_bin("acme.3f"), Some("acme"));
        assert_eq!(publisher_of_bin("acme"), None);
    }

    #[test]
    fn accepts_what_it_builds_and_refuses_deviations() {
        let key = SigningKey::generate().unwrap().public();
        let other = SigningKey::generate().unwrap().public();
        let expires = jiff::Timestamp::from_second(2_000_000_000).unwrap();
        let flat = Targets::new(SPEC_VERSION.into(), version(1), expires);
        assert_eq!(
            layout("acme", &flat, std::slice::from_ref(&key), 1).unwrap(),
            Layout::Flat
        );
        for len in 1..=MAX_PREFIX_LEN {
            let top = binned_top("acme", std::slice::from_ref(&key), 1, len, 2, expires);
            assert_eq!(
                layout("acme", &top, std::slice::from_ref(&key), 1).unwrap(),
                Layout::Binned { prefix_len: len }
            );
            // Other keys than the registered ones.
            assert!(layout("acme", &top, std::slice::from_ref(&other), 1).is_err());
            // One of two registered keys, when the registered threshold is 1, but not 2.
            let both = [key.clone(), other.clone()];
            assert!(layout("acme", &top, &both, 1).is_ok());
            assert!(layout("acme", &top, &both, 2).is_err());
        }
        let top = binned_top("acme", std::slice::from_ref(&key), 1, 1, 2, expires);
        // A missing bin leaves targets no client could find.
        let mut missing = top.clone();
        missing.delegations.as_mut().unwrap().roles.pop();
        assert!(layout("acme", &missing, std::slice::from_ref(&key), 1).is_err());
        // A bin claiming a prefix that belongs to another.
        let mut swapped = top.clone();
        swapped.delegations.as_mut().unwrap().roles[0].paths =
            PathSet::PathHashPrefixes(vec![PathHashPrefix::new("f").unwrap()]);
        assert!(layout("acme", &swapped, std::slice::from_ref(&key), 1).is_err());
        // A bin named after another publisher.
        let mut foreign = top.clone();
        foreign.delegations.as_mut().unwrap().roles[0].name = "beta.0".into();
        assert!(layout("acme", &foreign, std::slice::from_ref(&key), 1).is_err());
        // Non-terminating, or targets listed beside the bins.
        let mut open = top.clone();
        open.delegations.as_mut().unwrap().roles[3].terminating = false;
        assert!(layout("acme", &open, std::slice::from_ref(&key), 1).is_err());
        let def = &crate::catalog::builtin::definitions().unwrap()[0];
        let mut mixed = top.clone();
        mixed.targets.insert(
            tough::TargetName::new(crate::trust::metadata::target_name("acme", def)).unwrap(),
            crate::trust::metadata::target(def, false),
        );
        assert!(matches!(
            layout("acme", &mixed, std::slice::from_ref(&key), 1),
            Err(e @ BinsError::TargetsBesideBins) if e.to_string().contains("no targets")
        ));
        // Three-digit prefixes are beyond the supported 256 bins.
        let deep = binned_top("acme", std::slice::from_ref(&key), 1, 3, 2, expires);
        assert!(layout("acme", &deep, std::slice::from_ref(&key), 1).is_err());
    }
}
