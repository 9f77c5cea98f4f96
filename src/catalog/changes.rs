//! What an upgrade asks for: one pure function comparing two definitions of a plugin,
//! so that an administrator consents to exactly the difference. It reads approvals
//! through `Definition::approval` (the one reading of capabilities) and RBAC through
//! `rbac::summarize` (the words the plugin page uses), so a change is stated as the
//! page states the version.
//!
//! Pure: compares parsed definitions, no I/O. Callers: `review show`, the plugin page,
//! the JSON API (`…/versions/{v}/changes?from=`) and the worker's upgrade plans.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::rbac::{self, AccessLevel};
use crate::definition::{Definition, Need, PolicyRule};

/// One resource's access before and after, as the plugin page names both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct AccessChange {
    /// `pods`, `certificates.cert-manager.io`, `all resources in all API groups` ...
    pub resource: String,
    /// `None`: the old version had no access to it.
    pub from: Option<AccessLevel>,
    /// `None`: the new version has none.
    pub to: Option<AccessLevel>,
}

/// A console menu entry: its scope (`organization`, `project`) and resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, utoipa::ToSchema)]
pub struct MenuItem {
    pub scope: &'static str,
    pub crd: String,
    /// Its label, when it has one.
    pub label: Option<String>,
}

/// What `to` asks for that `from` did not, and what it no longer asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Changes {
    pub from_version: String,
    pub to_version: String,
    /// Approvals an administrator gives before install: `internet_access`,
    /// `kube_system_deployment`, `privileged`.
    pub approvals_added: Vec<&'static str>,
    pub approvals_dropped: Vec<&'static str>,
    /// `spec.permissions.capabilities` as written, approval or not.
    pub capabilities_added: Vec<String>,
    pub capabilities_removed: Vec<String>,
    /// Resources newly granted or granted more (read → read-write → admin).
    pub access_raised: Vec<AccessChange>,
    /// Resources no longer granted or granted less.
    pub access_lowered: Vec<AccessChange>,
    pub crds_added: Vec<String>,
    pub crds_removed: Vec<String>,
    pub menu_added: Vec<MenuItem>,
    pub menu_removed: Vec<MenuItem>,
    /// Old and new `spec.image`, when it changes.
    pub image: Option<(String, String)>,
    /// The marketplace's extras: plugins it now depends on, or no longer.
    pub dependencies_added: Vec<String>,
    pub dependencies_removed: Vec<String>,
}

fn need_name(n: Need) -> &'static str {
    match n {
        Need::InternetAccess => "internet_access",
        Need::KubeSystemDeployment => "kube_system_deployment",
        Need::Privileged => "privileged",
    }
}

fn need_words(name: &str) -> &'static str {
    match name {
        "internet_access" => "internet access",
        "kube_system_deployment" => "deploying into kube-system",
        _ => "privileged containers",
    }
}

/// `after` minus `before`, sorted.
fn added<T: Ord + Clone>(before: &BTreeSet<T>, after: &BTreeSet<T>) -> Vec<T> {
    after.difference(before).cloned().collect()
}

fn access(def: &Definition) -> BTreeMap<String, AccessLevel> {
    let rules: Vec<&PolicyRule> = def
        .manifest
        .spec
        .permissions
        .rbac
        .iter()
        .map(|r| &r.value)
        .collect();
    rbac::summarize(&rules)
        .into_iter()
        .map(|a| (a.resource, a.level))
        .collect()
}

fn menu(def: &Definition) -> BTreeSet<MenuItem> {
    let m = &def.manifest.spec.menu;
    let scoped = |scope: &'static str, entries: &[crate::definition::MenuEntry]| {
        entries
            .iter()
            .map(|e| MenuItem {
                scope,
                crd: e.crd.value.clone(),
                label: e.label.clone(),
            })
            .collect::<Vec<_>>()
    };
    scoped("organization", &m.organization)
        .into_iter()
        .chain(scoped("project", &m.project))
        .collect()
}

/// What upgrading from `from` to `to` changes in what the plugin may do.
pub fn between(from: &Definition, to: &Definition) -> Changes {
    let needs = |d: &Definition| -> BTreeSet<&'static str> {
        let a = d.approval();
        Need::ALL
            .into_iter()
            .filter(|n| a.needs(*n))
            .map(need_name)
            .collect()
    };
    let capabilities = |d: &Definition| -> BTreeSet<String> {
        d.manifest
            .spec
            .permissions
            .capabilities
            .iter()
            .map(|c| c.value.clone())
            .collect()
    };
    let crds = |d: &Definition| -> BTreeSet<String> {
        d.manifest
            .spec
            .crds
            .iter()
            .map(|c| c.value.clone())
            .collect()
    };
    let deps =
        |d: &Definition| -> BTreeSet<String> { d.extras.dependencies.iter().cloned().collect() };

    let (old_access, new_access) = (access(from), access(to));
    let mut access_raised = Vec::new();
    let mut access_lowered = Vec::new();
    let resources: BTreeSet<&String> = old_access.keys().chain(new_access.keys()).collect();
    for resource in resources {
        let (before, after) = (
            old_access.get(resource).copied(),
            new_access.get(resource).copied(),
        );
        let change = AccessChange {
            resource: resource.clone(),
            from: before,
            to: after,
        };
        // `None` sorts below every level: no access is the least.
        match after.cmp(&before) {
            std::cmp::Ordering::Greater => access_raised.push(change),
            std::cmp::Ordering::Less => access_lowered.push(change),
            std::cmp::Ordering::Equal => {}
        }
    }

    let (old_menu, new_menu) = (menu(from), menu(to));
    let image = (from.image != to.image).then(|| (from.image.to_string(), to.image.to_string()));
    Changes {
        from_version: from.version_text().to_owned(),
        to_version: to.version_text().to_owned(),
        approvals_added: added(&needs(from), &needs(to)),
        approvals_dropped: added(&needs(to), &needs(from)),
        capabilities_added: added(&capabilities(from), &capabilities(to)),
        capabilities_removed: added(&capabilities(to), &capabilities(from)),
        access_raised,
        access_lowered,
        crds_added: added(&crds(from), &crds(to)),
        crds_removed: added(&crds(to), &crds(from)),
        menu_added: added(&old_menu, &new_menu),
        menu_removed: added(&new_menu, &old_menu),
        image,
        dependencies_added: added(&deps(from), &deps(to)),
        dependencies_removed: added(&deps(to), &deps(from)),
    }
}

fn level_words(level: AccessLevel) -> &'static str {
    match level {
        AccessLevel::Read => "read",
        AccessLevel::ReadWrite => "read and change",
        AccessLevel::Admin => "administer",
    }
}

fn menu_words(m: &MenuItem) -> String {
    match &m.label {
        Some(label) => format!("{} menu entry \"{label}\" ({})", m.scope, m.crd),
        None => format!("{} menu entry for {}", m.scope, m.crd),
    }
}

impl Changes {
    /// Whether the new version needs consent the old one did not have: an approval, a
    /// capability, more API access or a new CRD.
    pub fn asks_for_more(&self) -> bool {
        !self.approvals_added.is_empty()
            || !self.capabilities_added.is_empty()
            || !self.access_raised.is_empty()
            || !self.crds_added.is_empty()
    }

    /// Nothing changes in what the plugin may do or installs.
    pub fn is_empty(&self) -> bool {
        self.lines().is_empty()
    }

    /// One sentence per change, what needs consent first: for the CLI and pages.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for a in &self.approvals_added {
            out.push(format!("needs approval for {} (new)", need_words(a)));
        }
        for c in &self.capabilities_added {
            if !self.approvals_added.contains(&c.as_str()) {
                out.push(format!("adds capability {c}"));
            }
        }
        for a in &self.access_raised {
            out.push(match a.from {
                None => format!(
                    "may {} {} (new)",
                    level_words(a.to.unwrap_or(AccessLevel::Read)),
                    a.resource
                ),
                Some(before) => format!(
                    "may {} {} (was: {})",
                    level_words(a.to.unwrap_or(AccessLevel::Read)),
                    a.resource,
                    level_words(before)
                ),
            });
        }
        for c in &self.crds_added {
            out.push(format!("installs CRD {c} (new)"));
        }
        for m in &self.menu_added {
            out.push(format!("adds {}", menu_words(m)));
        }
        for d in &self.dependencies_added {
            out.push(format!("depends on {d} (new)"));
        }
        if let Some((old, new)) = &self.image {
            out.push(format!("runtime image changes from {old} to {new}"));
        }
        for a in &self.approvals_dropped {
            out.push(format!("no longer needs approval for {}", need_words(a)));
        }
        for c in &self.capabilities_removed {
            if !self.approvals_dropped.contains(&c.as_str()) {
                out.push(format!("drops capability {c}"));
            }
        }
        for a in &self.access_lowered {
            out.push(match a.to {
                None => format!("no longer has access to {}", a.resource),
                Some(after) => format!(
                    "may only {} {} (was: {})",
                    level_words(after),
                    a.resource,
                    level_words(a.from.unwrap_or(AccessLevel::Admin))
                ),
            });
        }
        for c in &self.crds_removed {
            out.push(format!("no longer installs CRD {c}"));
        }
        for m in &self.menu_removed {
            out.push(format!("removes {}", menu_words(m)));
        }
        for d in &self.dependencies_removed {
            out.push(format!("no longer depends on {d}"));
        }
        out
    }
}

#[cfg(test)]
mod tests;
