//! The precedence rules (also in docs/ARCHITECTURE.md): how built-ins, sources and an
//! organization's sideloads become one view. Pure functions over verified inputs.
//!
//! Providers rank: the built-ins first, then sources by priority, higher first
//! (`Config` refuses two sources of equal priority, so sources never tie).
//!
//! 1. One provider speaks for a (publisher, name): the highest-ranked one offering it.
//!    Its versions, yank flags and bytes are the offer; a lower-ranked source's offer
//!    of the same publisher and name is not mixed in (a publisher name on one
//!    marketplace is not proof of being the same publisher on another), and is
//!    reported `shadowed` when it differs from the offer in any way.
//! 2. A built-in takes, from the best-ranked source offering the same publisher and
//!    name, only the versions newer than every built-in version: a marketplace can add
//!    releases to a built-in, never replace or downgrade what ships in the binary. A
//!    version it offers with other bytes than the built-in is a `version_conflict`.
//! 3. Publishers offering the same name compete by the rank of their provider; the
//!    others are reported `shadowed`. Two publishers of one source tie: the name is
//!    `ambiguous` and not offered until an operator resolves it, so that a newcomer
//!    can never take over a name by publishing it.
//! 4. An organization's sideloads of a name replace the base offer for that
//!    organization only (its admin chose them), and the replaced offer is reported
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

/// Merges the built-ins and the sources into the organization-independent view.
pub fn base(builtins: Vec<Row>, mut sources: Vec<SourceRows>) -> BaseView {
    sources.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
    // (publisher, name) -> each provider's offer, best-ranked first.
    let mut offers: BTreeMap<(String, String), Vec<(usize, Plugin)>> = BTreeMap::new();
    let providers = std::iter::once(builtins).chain(sources.into_iter().map(|s| s.rows));
    for (rank, rows) in providers.enumerate() {
        for row in rows {
            let list = offers
                .entry((row.publisher.clone(), row.name.clone()))
                .or_default();
            if list.last().is_none_or(|(r, _)| *r != rank) {
                list.push((
                    rank,
                    Plugin {
                        name: row.name.clone(),
                        publisher: Some(row.publisher.clone()),
                        origin: if rank == 0 {
                            Origin::Builtin
                        } else {
                            Origin::Marketplace
                        },
                        versions: BTreeMap::new(),
                    },
                ));
            }
            let plugin = &mut list.last_mut().expect("just pushed").1;
            plugin.versions.insert(row.version.clone(), offer(row));
        }
    }
    let mut clashes = Vec::new();
    let mut by_name: BTreeMap<String, Vec<(usize, Plugin)>> = BTreeMap::new();
    for ((_, name), list) in offers {
        let mut list = list.into_iter();
        let (rank, mut winner) = list.next().expect("an entry has an offer");
        let mut rest: Vec<Plugin> = list.map(|(_, p)| p).collect();
        if winner.origin == Origin::Builtin && !rest.is_empty() {
            add_newer(&mut winner, rest.remove(0), &mut clashes);
        }
        let differing: Vec<_> = rest
            .iter()
            .filter(|p| !offers_same(&winner, p))
            .map(Plugin::candidate)
            .collect();
        if !differing.is_empty() {
            clashes.push(Clash {
                name: name.clone(),
                kind: ClashKind::Shadowed,
                version: None,
                kept: Some(winner.candidate()),
                others: differing,
            });
        }
        by_name.entry(name).or_default().push((rank, winner));
    }
    let mut plugins = BTreeMap::new();
    for (name, mut list) in by_name {
        list.sort_by_key(|(rank, _)| *rank);
        let best = list[0].0;
        if list.iter().filter(|(r, _)| *r == best).count() > 1 {
            clashes.push(Clash {
                name,
                kind: ClashKind::Ambiguous,
                version: None,
                kept: None,
                others: list.iter().map(|(_, p)| p.candidate()).collect(),
            });
            continue;
        }
        let mut list = list.into_iter().map(|(_, p)| p);
        let first = list.next().expect("sorted and non-empty");
        let others: Vec<_> = list.map(|p| p.candidate()).collect();
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
    BaseView::new(plugins, clashes)
}

/// Rule 2: the source's versions newer than every built-in version join the built-in.
fn add_newer(builtin: &mut Plugin, source: Plugin, clashes: &mut Vec<Clash>) {
    let newest = builtin.versions.keys().next_back().cloned();
    for (version, offer) in source.versions {
        match builtin.versions.get(&version) {
            Some(kept) if kept.hash != offer.hash => clashes.push(Clash {
                name: builtin.name.clone(),
                kind: ClashKind::VersionConflict,
                version: Some(version),
                kept: Some(builtin.candidate()),
                others: vec![
                    Plugin {
                        versions: BTreeMap::from([(offer.version.clone(), offer)]),
                        origin: Origin::Marketplace,
                        ..builtin.clone()
                    }
                    .candidate(),
                ],
            }),
            Some(_) => {}
            None if Some(&version) > newest.as_ref() => {
                builtin.versions.insert(version, offer);
            }
            // Older than the built-in: not offered.
            None => {}
        }
    }
}

/// Whether a shadowed offer holds nothing the kept one does not (a mirror's copy).
fn offers_same(kept: &Plugin, other: &Plugin) -> bool {
    other.versions.iter().all(|(v, o)| {
        kept.versions
            .get(v)
            .is_some_and(|k| k.hash == o.hash && k.yanked == o.yanked)
    })
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
