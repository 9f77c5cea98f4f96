//! What an organization may install: the types of a merged view and the queries on it
//! (latest per major, upgrades). Building views is `merge`; this module holds no I/O.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use semver::Version;
use serde::Serialize;

use crate::definition::Definition;
use crate::ids;

/// Who vouches for a version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Trust {
    /// Compiled into this binary (the `catalog/` folder).
    Builtin,
    /// Verified from a marketplace's signed index: the publisher's role listed it, signed
    /// by these keys.
    Marketplace {
        source: String,
        publisher: String,
        #[serde(rename = "keyIds")]
        key_ids: Vec<String>,
    },
    /// Inserted by the organization's admin through the sideload API.
    Sideloaded { org: String },
}

/// What a view needs of a definition and the extras signed beside it, extracted once
/// when it is validated. Offers serialize it; the worker's database stores it in a
/// format of its own (`sync::store::summary_json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = OfferSummary)]
pub struct Summary {
    pub display_name: String,
    pub description: String,
    pub requirements: RequirementsSummary,
    pub dependencies: Vec<String>,
    pub suggested_plugins: Vec<String>,
    pub image: String,
    /// `metadata.tags`.
    pub tags: Vec<String>,
    /// `metadata.version` as written (`v1.19.3`): Fundament pins and compares the
    /// version as its definitions spell it.
    pub version_as_written: String,
    /// Why Fundament cannot install this version (fields of the older design it
    /// carries); such a version is left out of Fundament's `organization.v1` contract.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_installable: Option<String>,
}

/// What an admin approves before install ([`Definition::approval`], from
/// `spec.permissions.capabilities`) and what the cluster must offer (the extras).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequirementsSummary {
    pub internet_access: bool,
    pub kube_system_deployment: bool,
    pub privileged: bool,
    /// Cluster capabilities (`custom.extras.clusterCapabilities`).
    pub capabilities: Vec<String>,
}

impl RequirementsSummary {
    /// The requirements that need an admin's approval, as names Fundament shows.
    pub fn to_approve(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.internet_access {
            out.push("internetAccess".to_owned());
        }
        if self.kube_system_deployment {
            out.push("kubeSystemDeployment".to_owned());
        }
        if self.privileged {
            out.push("privileged".to_owned());
        }
        out.extend(self.capabilities.iter().map(|c| format!("capability:{c}")));
        out
    }
}

impl Summary {
    pub fn of(def: &Definition) -> Summary {
        let r = def.approval();
        Summary {
            display_name: def.display_name().to_owned(),
            description: def.description().to_owned(),
            requirements: RequirementsSummary {
                internet_access: r.internet_access,
                kube_system_deployment: r.kube_system_deployment,
                privileged: r.privileged,
                capabilities: def.extras.cluster_capabilities.clone(),
            },
            dependencies: def.extras.dependencies.clone(),
            suggested_plugins: def.extras.suggested_plugins.clone(),
            image: def.manifest.spec.image.to_string(),
            tags: def.tags().map(str::to_owned).collect(),
            version_as_written: def.version_text().to_owned(),
            not_installable: def.not_installable(),
        }
    }
}

/// One version a view offers.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Offer {
    #[serde(serialize_with = "as_text")]
    #[schema(value_type = String, example = "1.19.3")]
    pub version: Version,
    /// `sha256:HEX` of the definition's bytes: the consent pin.
    pub hash: String,
    pub yanked: bool,
    pub trust: Trust,
    #[serde(flatten)]
    pub summary: Arc<Summary>,
}

fn as_text<S: serde::Serializer>(v: &Version, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// Where a plugin of a view comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    Builtin,
    Marketplace,
    Sideloaded,
}

/// A plugin name as one organization sees it: one publisher's versions.
#[derive(Debug, Clone)]
pub struct Plugin {
    pub name: String,
    /// The publisher (`fundament` for built-ins); `None` for a sideload.
    pub publisher: Option<String>,
    pub origin: Origin,
    pub versions: BTreeMap<Version, Offer>,
}

impl Plugin {
    /// The version to install for each major, newest major first: the newest
    /// non-yanked release, or the newest non-yanked pre-release when a major has no
    /// release. A major whose versions are all yanked offers nothing.
    pub fn latest_per_major(&self) -> Vec<&Offer> {
        let mut by_major: BTreeMap<u64, &Offer> = BTreeMap::new();
        for offer in self.versions.values().filter(|o| !o.yanked) {
            let better = match by_major.get(&offer.version.major) {
                None => true,
                Some(best) => {
                    let (a, b) = (offer.version.pre.is_empty(), best.version.pre.is_empty());
                    (a && !b) || (a == b && offer.version > best.version)
                }
            };
            if better {
                by_major.insert(offer.version.major, offer);
            }
        }
        by_major.into_values().rev().collect()
    }

    /// The newest installable version of the newest major.
    pub fn latest(&self) -> Option<&Offer> {
        self.latest_per_major().into_iter().next()
    }

    /// Versions an installation at `from` may move to: same major (an upgrade never
    /// changes the install namespace), newer, not yanked; pre-releases only when `from`
    /// is one. Oldest first.
    pub fn upgrades(&self, from: &Version) -> Vec<&Offer> {
        self.versions
            .range((std::ops::Bound::Excluded(from), std::ops::Bound::Unbounded))
            .map(|(_, o)| o)
            .filter(|o| o.version.major == from.major && !o.yanked)
            .filter(|o| o.version.pre.is_empty() || !from.pre.is_empty())
            .collect()
    }

    pub fn candidate(&self) -> Candidate {
        let mut sources: Vec<String> = Vec::new();
        for offer in self.versions.values() {
            let label = match &offer.trust {
                Trust::Builtin => "builtin".to_owned(),
                Trust::Marketplace { source, .. } => source.clone(),
                Trust::Sideloaded { .. } => "sideload".to_owned(),
            };
            if !sources.contains(&label) {
                sources.push(label);
            }
        }
        Candidate {
            publisher: self.publisher.clone(),
            origin: self.origin,
            sources,
        }
    }
}

/// One of the offers for a name, as a clash report names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Candidate {
    pub publisher: Option<String>,
    pub origin: Origin,
    /// `builtin`, `sideload`, or the names of the sources offering it.
    pub sources: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClashKind {
    /// Another publisher offers the same name; the precedence rules picked `kept`.
    Shadowed,
    /// Publishers of equal precedence offer the same name: none is offered until an
    /// operator sets the sources' priorities apart.
    Ambiguous,
    /// Two offers of the same publisher, name and version with different bytes;
    /// `kept` is the one of higher precedence.
    VersionConflict,
}

/// A name offered more than once, reported rather than silently resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Clash {
    pub name: String,
    pub kind: ClashKind,
    /// The version, for a `version_conflict`.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "opt_text")]
    #[schema(value_type = Option<String>)]
    pub version: Option<Version>,
    pub kept: Option<Candidate>,
    pub others: Vec<Candidate>,
}

fn opt_text<S: serde::Serializer>(v: &Option<Version>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
    }
}

/// Built-ins and every source, merged: the part of each organization's view that does
/// not depend on the organization. Rebuilt after a round changes something.
#[derive(Debug, Clone, Default)]
pub struct BaseView {
    pub plugins: BTreeMap<String, Plugin>,
    pub clashes: Vec<Clash>,
    /// Each plugin's name by its stable id (`ids::org_plugin`), so finding one by id is
    /// a lookup, not a hash of every name per request.
    ids: HashMap<String, String>,
    /// Versions offered in all.
    versions: usize,
}

impl BaseView {
    pub fn new(plugins: BTreeMap<String, Plugin>, clashes: Vec<Clash>) -> BaseView {
        let ids = plugins
            .keys()
            .map(|name| (ids::org_plugin(name), name.clone()))
            .collect();
        let versions = plugins.values().map(|p| p.versions.len()).sum();
        BaseView {
            plugins,
            clashes,
            ids,
            versions,
        }
    }
}

/// One organization's view: the base with the organization's sideloads laid over it.
#[derive(Debug, Clone)]
pub struct OrgView {
    pub org: String,
    pub base: Arc<BaseView>,
    pub sideloads: BTreeMap<String, Plugin>,
    /// The base's clashes and the names the organization's sideloads shadow.
    pub clashes: Vec<Clash>,
}

impl OrgView {
    pub fn plugin(&self, name: &str) -> Option<&Plugin> {
        self.sideloads
            .get(name)
            .or_else(|| self.base.plugins.get(name))
    }

    /// How many versions the organization is offered: the base's, with each sideloaded
    /// name's versions in place of what the base offers under that name.
    pub fn offered_versions(&self) -> usize {
        self.sideloads.values().fold(self.base.versions, |n, p| {
            n - self
                .base
                .plugins
                .get(&p.name)
                .map_or(0, |b| b.versions.len())
                + p.versions.len()
        })
    }

    /// The plugin offered under the stable id `id` (`ids::org_plugin`, a name's hash):
    /// a lookup in the base's index, and a hash of each of the organization's few
    /// sideloads.
    pub fn by_id(&self, id: &str) -> Option<&Plugin> {
        match self.base.ids.get(id) {
            Some(name) => self.plugin(name),
            None => self
                .sideloads
                .values()
                .find(|p| ids::org_plugin(&p.name) == id),
        }
    }

    /// Every plugin offered to the organization, by name.
    pub fn plugins(&self) -> impl Iterator<Item = &Plugin> {
        let mut merged: BTreeMap<&str, &Plugin> = self
            .base
            .plugins
            .iter()
            .map(|(k, v)| (k.as_str(), v))
            .collect();
        merged.extend(self.sideloads.iter().map(|(k, v)| (k.as_str(), v)));
        merged.into_values()
    }

    /// The clash, if any, that keeps `name` from being offered at all.
    pub fn ambiguity(&self, name: &str) -> Option<&Clash> {
        if self.plugin(name).is_some() {
            return None;
        }
        self.clashes
            .iter()
            .find(|c| c.name == name && c.kind == ClashKind::Ambiguous)
    }
}
