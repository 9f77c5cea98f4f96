//! RBAC rules summarised in plain words: which resource, and whether the plugin may read
//! it, change it, or administer it; or, for Fundament's catalog contract, which verbs.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::definition::PolicyRule;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AccessLevel {
    Read,
    ReadWrite,
    Admin,
}

impl AccessLevel {
    pub fn label(self) -> &'static str {
        match self {
            AccessLevel::Read => "read",
            AccessLevel::ReadWrite => "read-write",
            AccessLevel::Admin => "admin",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Access {
    /// `pods`, `certificates.cert-manager.io`, `all resources in apps` ...
    pub resource: String,
    pub level: AccessLevel,
}

const READ_VERBS: [&str; 3] = ["get", "list", "watch"];
/// Verbs that let a holder gain more rights than the rule names.
const ESCALATING_VERBS: [&str; 4] = ["*", "escalate", "bind", "impersonate"];

fn level(verbs: &[String]) -> AccessLevel {
    if verbs.iter().any(|v| ESCALATING_VERBS.contains(&v.as_str())) {
        AccessLevel::Admin
    } else if verbs.iter().all(|v| READ_VERBS.contains(&v.as_str())) {
        AccessLevel::Read
    } else {
        AccessLevel::ReadWrite
    }
}

fn resource_label(group: &str, resource: &str) -> String {
    match (group, resource) {
        ("*", "*") => "all resources in all API groups".into(),
        ("", "*") => "all core resources".into(),
        (g, "*") => format!("all resources in {g}"),
        ("", r) => r.to_owned(),
        ("*", r) => format!("{r} (any API group)"),
        (g, r) => format!("{r}.{g}"),
    }
}

/// What one rule applies to, each named as [`Access::resource`] names it.
fn targets(rule: &PolicyRule) -> Vec<String> {
    let groups: Vec<&str> = if rule.api_groups.is_empty() {
        vec![""]
    } else {
        rule.api_groups.iter().map(String::as_str).collect()
    };
    // A rule limited to named objects grants less than one over every object: the
    // names are part of what is shown.
    let only = if rule.resource_names.is_empty() {
        String::new()
    } else {
        format!(" (only {})", rule.resource_names.join(", "))
    };
    let mut targets: Vec<String> = Vec::new();
    for g in &groups {
        for r in &rule.resources {
            targets.push(format!("{}{only}", resource_label(g, r)));
        }
    }
    targets
}

/// One entry per resource with the highest access any rule grants, sorted by resource.
pub fn summarize(rules: &[&PolicyRule]) -> Vec<Access> {
    let mut out: BTreeMap<String, AccessLevel> = BTreeMap::new();
    for rule in rules {
        let lvl = level(&rule.verbs);
        for t in targets(rule) {
            let e = out.entry(t).or_insert(lvl);
            *e = (*e).max(lvl);
        }
    }
    out.into_iter()
        .map(|(resource, level)| Access { resource, level })
        .collect()
}

/// A resource and every verb the rules grant on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceVerbs {
    /// Named as in [`Access::resource`]: `pods`, `certificates.cert-manager.io`, ...
    pub resource: String,
    pub verbs: Vec<String>,
}

/// One entry per resource in the order the rules first name it, with the verbs as
/// written (each once): what a console lists under "permissions" without judging them.
pub fn verbs_by_resource(rules: &[&PolicyRule]) -> Vec<ResourceVerbs> {
    let mut out: Vec<ResourceVerbs> = Vec::new();
    for rule in rules {
        for resource in targets(rule) {
            let at = match out.iter().position(|e| e.resource == resource) {
                Some(at) => at,
                None => {
                    out.push(ResourceVerbs {
                        resource,
                        verbs: Vec::new(),
                    });
                    out.len() - 1
                }
            };
            for verb in &rule.verbs {
                if !out[at].verbs.contains(verb) {
                    out[at].verbs.push(verb.clone());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect();
        PolicyRule {
            api_groups: s(groups),
            resources: s(resources),
            verbs: s(verbs),
            ..Default::default()
        }
    }

    #[test]
    fn levels_and_merging() {
        let rules = [
            rule(&[""], &["secrets"], &["get", "list", "watch"]),
            rule(&[""], &["secrets"], &["create"]),
            rule(&["cert-manager.io"], &["certificates", "issuers"], &["get"]),
            rule(&["apps"], &["*"], &["*"]),
            rule(&["rbac.authorization.k8s.io"], &["clusterroles"], &["bind"]),
        ];
        let refs: Vec<&PolicyRule> = rules.iter().collect();
        let got: Vec<(String, &str)> = summarize(&refs)
            .into_iter()
            .map(|a| (a.resource, a.level.label()))
            .collect();
        assert_eq!(
            got,
            [
                ("all resources in apps".to_string(), "admin"),
                ("certificates.cert-manager.io".to_string(), "read"),
                (
                    "clusterroles.rbac.authorization.k8s.io".to_string(),
                    "admin"
                ),
                ("issuers.cert-manager.io".to_string(), "read"),
                ("secrets".to_string(), "read-write"),
            ]
        );
    }

    #[test]
    fn verbs_per_resource_in_rule_order() {
        let rules = [
            rule(&[""], &["secrets", "configmaps"], &["get", "list"]),
            rule(&["cert-manager.io"], &["certificates"], &["get"]),
            rule(&[""], &["secrets"], &["list", "create"]),
        ];
        let refs: Vec<&PolicyRule> = rules.iter().collect();
        let got: Vec<(String, String)> = verbs_by_resource(&refs)
            .into_iter()
            .map(|e| (e.resource, e.verbs.join(", ")))
            .collect();
        let want = [
            ("secrets", "get, list, create"),
            ("configmaps", "get, list"),
            ("certificates.cert-manager.io", "get"),
        ];
        assert_eq!(got, want.map(|(r, v)| (r.to_string(), v.to_string())));
    }
}
