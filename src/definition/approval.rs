//! The approval summary: what an organization admin approves before a plugin installs.
//!
//! Fundament definitions state their needs in `spec.permissions.capabilities`
//! (`internet_access`, ...); the marketplace format adds `spec.requirements`. Both count,
//! so every consumer (catalog columns and filters, pages, the JSON API, the TUF `custom`
//! summary, the worker's install plans) reads [`Approval`], never one of the two alone.

use serde::Serialize;

use super::{Located, Requirements, Spec};

/// A need that only an admin's approval allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    InternetAccess,
    KubeSystemDeployment,
    Privileged,
}

/// `spec.permissions.capabilities` names that Fundament treats as a need for approval.
/// Names are matched exactly, as Fundament writes them; any other capability name is
/// shown but needs no approval. A new name is one line here.
pub const APPROVAL_CAPABILITIES: &[(&str, Need)] = &[
    ("internet_access", Need::InternetAccess),
    ("kube_system_deployment", Need::KubeSystemDeployment),
    ("privileged", Need::Privileged),
];

impl Need {
    pub const ALL: [Need; 3] = [
        Need::InternetAccess,
        Need::KubeSystemDeployment,
        Need::Privileged,
    ];

    /// The `spec.requirements` field that states the same need.
    pub fn field(self) -> &'static str {
        match self {
            Need::InternetAccess => "internetAccess",
            Need::KubeSystemDeployment => "kubeSystemDeployment",
            Need::Privileged => "privileged",
        }
    }

    fn written(self, r: &Requirements) -> Option<&Located<bool>> {
        match self {
            Need::InternetAccess => r.internet_access.as_ref(),
            Need::KubeSystemDeployment => r.kube_system_deployment.as_ref(),
            Need::Privileged => r.privileged.as_ref(),
        }
    }

    /// The `spec.permissions.capabilities` entry (index, name) that declares this need.
    fn declared(self, spec: &Spec) -> Option<(usize, &Located<String>)> {
        spec.permissions
            .capabilities
            .iter()
            .enumerate()
            .find(|(_, c)| {
                APPROVAL_CAPABILITIES
                    .iter()
                    .any(|(name, need)| *need == self && c.as_str() == *name)
            })
    }
}

/// What an admin approves before install: a need counts when `spec.requirements` sets it
/// to `true` or `spec.permissions.capabilities` declares it (see [`APPROVAL_CAPABILITIES`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Approval {
    pub internet_access: bool,
    pub kube_system_deployment: bool,
    pub privileged: bool,
    /// What the cluster must offer (`spec.requirements.capabilities`, e.g. `storageClass`).
    pub capabilities: Vec<String>,
}

impl Approval {
    pub fn of(spec: &Spec) -> Approval {
        let needs = |need: Need| {
            need.written(&spec.requirements).is_some_and(|b| **b) || need.declared(spec).is_some()
        };
        Approval {
            internet_access: needs(Need::InternetAccess),
            kube_system_deployment: needs(Need::KubeSystemDeployment),
            privileged: needs(Need::Privileged),
            capabilities: spec
                .requirements
                .capabilities
                .iter()
                .map(|c| c.to_string())
                .collect(),
        }
    }

    pub fn needs(&self, need: Need) -> bool {
        match need {
            Need::InternetAccess => self.internet_access,
            Need::KubeSystemDeployment => self.kube_system_deployment,
            Need::Privileged => self.privileged,
        }
    }
}

/// One `spec.requirements` field written `false` while a capability declares that need.
pub(super) struct Contradiction<'a> {
    pub path: String,
    pub at: &'a Located<bool>,
    pub message: String,
}

/// Every explicit `false` that a declared capability contradicts. Refused rather than
/// resolved either way: the admin would approve one reading while the author meant the
/// other.
pub(super) fn contradictions(spec: &Spec) -> Vec<Contradiction<'_>> {
    Need::ALL
        .into_iter()
        .filter_map(|need| {
            let at = need.written(&spec.requirements).filter(|b| !***b)?;
            let (i, cap) = need.declared(spec)?;
            Some(Contradiction {
                path: format!("spec.requirements.{}", need.field()),
                at,
                message: format!(
                    "is false, but spec.permissions.capabilities[{i}] (line {}) declares `{}`; remove one of them",
                    cap.line,
                    cap.as_str()
                ),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::Definition;

    const IMAGE: &str =
        "ghcr.io/x/y@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn definition(spec: &str) -> String {
        format!(
            "apiVersion: fundament.io/v1\nkind: PluginDefinition\nmetadata: {{ name: demo, version: v1.0.0 }}\nspec:\n{spec}  image: {IMAGE}\n"
        )
    }

    fn approval(spec: &str) -> Approval {
        Definition::parse(definition(spec).as_bytes())
            .unwrap_or_else(|e| panic!("{e}"))
            .approval()
    }

    #[test]
    fn every_mapped_capability_needs_its_approval() {
        for (name, need) in APPROVAL_CAPABILITIES {
            let a = approval(&format!(
                "  permissions:\n    capabilities: [manage_secrets, {name}]\n"
            ));
            for other in Need::ALL {
                assert_eq!(a.needs(other), other == *need, "{name}: {a:?}");
            }
        }
    }

    #[test]
    fn other_capability_names_need_no_approval() {
        // Matched exactly: near misses are free-form names like any other.
        let a = approval(
            "  permissions:\n    capabilities: [manage_secrets, host_access, Internet_Access, internet-access]\n",
        );
        assert_eq!(a, Approval::default());
    }

    #[test]
    fn requirements_alone_still_count() {
        let a = approval(
            "  requirements:\n    internetAccess: true\n    privileged: true\n    capabilities: [storageClass]\n",
        );
        assert!(a.internet_access && a.privileged && !a.kube_system_deployment);
        assert_eq!(a.capabilities, ["storageClass"]);
    }

    #[test]
    fn capability_and_agreeing_requirement_are_accepted() {
        let a = approval(
            "  permissions:\n    capabilities: [internet_access]\n  requirements:\n    internetAccess: true\n    privileged: false\n",
        );
        assert!(a.internet_access && !a.privileged);
    }

    #[test]
    fn explicit_false_contradicting_a_capability_is_refused_where_written() {
        for (name, need) in APPROVAL_CAPABILITIES {
            let yaml = definition(&format!(
                "  permissions:\n    capabilities: [manage_secrets, {name}]\n  requirements:\n    {}: false\n",
                need.field()
            ));
            let err = Definition::parse(yaml.as_bytes()).unwrap_err();
            assert_eq!(err.problems.len(), 1, "{err}");
            let p = &err.problems[0];
            assert_eq!(p.path, format!("spec.requirements.{}", need.field()));
            assert_eq!(
                (p.line, p.column),
                (Some(8), Some(7 + need.field().len() as u64))
            );
            assert_eq!(
                p.message,
                format!(
                    "is false, but spec.permissions.capabilities[1] (line 6) declares `{name}`; remove one of them"
                )
            );
        }
    }

    #[test]
    fn unwritten_requirements_serialize_as_false() {
        let def = Definition::parse(
            definition("  permissions:\n    capabilities: [internet_access]\n").as_bytes(),
        )
        .unwrap();
        let json = serde_json::to_value(&def.manifest.spec.requirements).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "internetAccess": false, "kubeSystemDeployment": false, "privileged": false,
                "capabilities": []
            })
        );
    }
}
