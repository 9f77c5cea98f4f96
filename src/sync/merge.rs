//! The precedence rules (also in docs/ARCHITECTURE.md): how built-ins, sources and an
//! organization's sideloads become one view. Pure functions over verified inputs.
//!
//! 1. Offers are grouped by (publisher, name). Within a group, providers rank: the
//!    built-ins first, then sources by priority (higher first, then by name). For each
//!    version the highest-ranked provider's bytes are kept; another provider with
//!    different bytes for that version is a `version_conflict` clash. A yank by any
//!    provider of the same bytes counts.
//! 2. A group holding a built-in takes a marketplace version only when it is newer than
//!    every built-in version: a marketplace can add releases to a built-in, never
//!    replace or downgrade what ships in the binary.
//! 3. Groups offering the same name compete: a group with a built-in wins, then the
//!    group whose best provider ranks highest. The others are reported `shadowed`.
//!    Groups that tie (two publishers on sources of equal priority) are `ambiguous`:
//!    the name is not offered until an operator sets the priorities apart, so that a
//!    newcomer can never take over a name by publishing it.
//! 4. An organization's sideloads of a name replace the base offer for that
//!    organization only (the admin chose them), and the replaced offer is reported
//!    `shadowed`. Other organizations never see them.

use std::collections::BTreeMap;
use std::sync::Arc;

use semver::Version;

use super::view::{BaseView, Clash, ClashKind, Offer, OrgView, Origin, Plugin, Summary, Trust};

/// One verified version from a provider, as the merge takes it.
#[derive(Debug, Clone)]
pub struct Row {
    pub publisher: String,
    pub name: String,
    pub version: Version,
    pub hash: String,
    pub yanked: bool,
    pub trust: Trust,
    pub summary: Arc<Summary>,
}

/// The rows of one source with its configured priority.
#[derive(Debug, Clone)]
pub struct SourceRows {
    pub name: String,
    pub priority: i64,
    pub rows: Vec<Row>,
}

/// How strongly a provider's offers compete for a name: built-ins first, then by
/// source priority. Sources of equal priority compare equal, which is what makes two
/// publishers' offers of one name ambiguous.
type Precedence = (u8, std::cmp::Reverse<i64>);

struct Group {
    best: Precedence,
    newest_builtin: Option<Version>,
    versions: BTreeMap<Version, Offer>,
}

/// Merges the built-ins and the sources into the organization-independent view.
pub fn base(builtins: Vec<Row>, mut sources: Vec<SourceRows>) -> BaseView {
    sources.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
    let mut clashes = Vec::new();
    let mut groups: BTreeMap<(String, String), Group> = BTreeMap::new();
    let providers = std::iter::once(((0, std::cmp::Reverse(0)), builtins)).chain(
        sources
            .into_iter()
            .map(|s| ((1, std::cmp::Reverse(s.priority)), s.rows)),
    );
    for (precedence, rows) in providers {
        for row in rows {
            let key = (row.publisher.clone(), row.name.clone());
            let group = groups.entry(key).or_insert_with(|| Group {
                best: precedence,
                newest_builtin: None,
                versions: BTreeMap::new(),
            });
            let builtin = precedence.0 == 0;
            if builtin {
                group.newest_builtin = group.newest_builtin.clone().max(Some(row.version.clone()));
            }
            add(group, row, builtin, &mut clashes);
        }
    }
    let mut by_name: BTreeMap<String, Vec<(Precedence, Plugin)>> = BTreeMap::new();
    for ((publisher, name), group) in groups {
        if group.versions.is_empty() {
            continue;
        }
        let plugin = Plugin {
            origin: if group.newest_builtin.is_some() {
                Origin::Builtin
            } else {
                Origin::Marketplace
            },
            name: name.clone(),
            publisher: Some(publisher),
            versions: group.versions,
        };
        by_name.entry(name).or_default().push((group.best, plugin));
    }
    let mut plugins = BTreeMap::new();
    for (name, mut offers) in by_name {
        offers.sort_by_key(|(precedence, _)| *precedence);
        let best = offers[0].0;
        if offers.iter().filter(|(p, _)| *p == best).count() > 1 {
            clashes.push(Clash {
                name,
                kind: ClashKind::Ambiguous,
                version: None,
                kept: None,
                others: offers.iter().map(|(_, p)| p.candidate()).collect(),
            });
            continue;
        }
        let mut offers = offers.into_iter().map(|(_, p)| p);
        let first = offers.next().expect("sorted and non-empty");
        let others: Vec<_> = offers.map(|p| p.candidate()).collect();
        if !others.is_empty() {
            clashes.push(Clash {
                name: name.clone(),
                kind: ClashKind::Shadowed,
                version: None,
                kept: Some(first.candidate()),
                others,
            });
        }
        plugins.insert(name, first);
    }
    BaseView { plugins, clashes }
}

fn add(group: &mut Group, row: Row, builtin: bool, clashes: &mut Vec<Clash>) {
    if !builtin
        && let Some(newest) = &group.newest_builtin
        && row.version <= *newest
        && !group.versions.contains_key(&row.version)
    {
        // Rule 2: older than the built-in, so not offered.
        return;
    }
    match group.versions.get_mut(&row.version) {
        Some(kept) if kept.hash == row.hash => kept.yanked |= row.yanked,
        Some(kept) => {
            let kept_plugin = single(&row, kept.clone());
            let other = single(&row, offer(row.clone()));
            clashes.push(Clash {
                name: row.name.clone(),
                kind: ClashKind::VersionConflict,
                version: Some(row.version.clone()),
                kept: Some(kept_plugin.candidate()),
                others: vec![other.candidate()],
            });
        }
        None => {
            group.versions.insert(row.version.clone(), offer(row));
        }
    }
}

fn offer(row: Row) -> Offer {
    Offer {
        version: row.version,
        hash: row.hash,
        yanked: row.yanked,
        trust: row.trust,
        summary: row.summary,
    }
}

/// A one-version plugin, only to describe an offer in a clash report.
fn single(row: &Row, offer: Offer) -> Plugin {
    Plugin {
        name: row.name.clone(),
        publisher: Some(row.publisher.clone()),
        origin: match offer.trust {
            Trust::Builtin => Origin::Builtin,
            Trust::Sideloaded { .. } => Origin::Sideloaded,
            Trust::Marketplace { .. } => Origin::Marketplace,
        },
        versions: BTreeMap::from([(offer.version.clone(), offer)]),
    }
}

/// Lays an organization's sideloads (rule 4) over the base view.
pub fn org_view(base: Arc<BaseView>, org: &str, sideloads: Vec<Row>) -> OrgView {
    let mut overlay: BTreeMap<String, Plugin> = BTreeMap::new();
    for row in sideloads {
        overlay
            .entry(row.name.clone())
            .or_insert_with(|| Plugin {
                name: row.name.clone(),
                publisher: None,
                origin: Origin::Sideloaded,
                versions: BTreeMap::new(),
            })
            .versions
            .insert(row.version.clone(), offer(row));
    }
    let mut clashes = base.clashes.clone();
    for (name, sideload) in &overlay {
        let shadowed: Vec<_> = match base.plugins.get(name) {
            Some(p) => vec![p.candidate()],
            None => clashes
                .iter()
                .filter(|c| &c.name == name && c.kind == ClashKind::Ambiguous)
                .flat_map(|c| c.others.clone())
                .collect(),
        };
        if !shadowed.is_empty() {
            clashes.push(Clash {
                name: name.clone(),
                kind: ClashKind::Shadowed,
                version: None,
                kept: Some(sideload.candidate()),
                others: shadowed,
            });
        }
    }
    OrgView {
        org: org.to_owned(),
        base,
        sideloads: overlay,
        clashes,
    }
}

#[cfg(test)]
mod tests;
