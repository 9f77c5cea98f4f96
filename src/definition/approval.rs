//! The approval summary: what an organization admin approves before a plugin installs.
//!
//! Definitions state their needs in `spec.permissions.capabilities`, as Fundament reads
//! them; every consumer (catalog columns and filters, pages, the JSON API, the TUF
//! `custom` summary, the worker's install plans) reads [`Approval`], never the list.

use serde::Serialize;

use super::Spec;

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

    /// Whether `spec` declares this need: in `permissions.capabilities`, or (only on a
    /// definition of the older design, published before it was retired) as a
    /// `requirements` flag set to `true`, so that such a definition never shows less
    /// than it asked for.
    fn declared(self, spec: &Spec) -> bool {
        let capability = spec.permissions.capabilities.iter().any(|c| {
            APPROVAL_CAPABILITIES
                .iter()
                .any(|(name, need)| *need == self && c.as_str() == *name)
        });
        let legacy = spec.requirements.as_ref().is_some_and(|r| {
            let flag = match self {
                Need::InternetAccess => &r.internet_access,
                Need::KubeSystemDeployment => &r.kube_system_deployment,
                Need::Privileged => &r.privileged,
            };
            flag.as_ref().is_some_and(|b| b.value)
        });
        capability || legacy
    }
}

/// What an admin approves before install (see [`APPROVAL_CAPABILITIES`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Approval {
    pub internet_access: bool,
    pub kube_system_deployment: bool,
    pub privileged: bool,
}

impl Approval {
    pub fn of(spec: &Spec) -> Approval {
        Approval {
            internet_access: Need::InternetAccess.declared(spec),
            kube_system_deployment: Need::KubeSystemDeployment.declared(spec),
            privileged: Need::Privileged.declared(spec),
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
    fn a_published_definition_of_the_older_design_keeps_its_requirement_flags() {
        // Refused as new input, but a version published with `requirements` still shows
        // what it asked an admin to approve.
        let yaml = definition("  requirements:\n    internetAccess: true\n    privileged: false\n");
        assert!(Definition::parse(yaml.as_bytes()).is_err());
        let def = Definition::parse_published(yaml.as_bytes()).unwrap();
        let a = def.approval();
        assert!(a.internet_access && !a.privileged && !a.kube_system_deployment);
    }
}
