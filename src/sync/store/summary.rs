//! A definition's summary as `sync.db` keeps it (`source_definitions.summary`,
//! `sideloads.summary`): JSON in this module's own format. [`Summary`] is what views
//! hold and the local API's offers serialize; the two are converted field by field, so
//! a field stored for the worker's own use never reaches an answer, and a change to the
//! answers never changes how rows already written are read.

use serde::{Deserialize, Serialize};

use crate::definition::Definition;
use crate::sync::view::{RequirementsSummary, Summary};

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    display_name: String,
    description: String,
    requirements: StoredRequirements,
    dependencies: Vec<String>,
    /// Absent from summaries stored before it was added (the sync migration 0006
    /// recomputes those).
    #[serde(default)]
    suggested_plugins: Vec<String>,
    image: String,
    /// Absent from summaries stored before it was added (the sync migration 0005
    /// recomputes those).
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    version_as_written: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    not_installable: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredRequirements {
    internet_access: bool,
    kube_system_deployment: bool,
    privileged: bool,
    capabilities: Vec<String>,
}

/// The JSON stored for `def`'s summary.
pub fn summary_json(def: &Definition) -> String {
    let s = Summary::of(def);
    let r = s.requirements;
    let stored = Stored {
        display_name: s.display_name,
        description: s.description,
        requirements: StoredRequirements {
            internet_access: r.internet_access,
            kube_system_deployment: r.kube_system_deployment,
            privileged: r.privileged,
            capabilities: r.capabilities,
        },
        dependencies: s.dependencies,
        suggested_plugins: s.suggested_plugins,
        image: s.image,
        tags: s.tags,
        version_as_written: s.version_as_written,
        not_installable: s.not_installable,
    };
    serde_json::to_string(&stored).expect("a summary always serializes")
}

/// A stored summary, read back.
pub fn read_summary(json: &str) -> Result<Summary, serde_json::Error> {
    let s: Stored = serde_json::from_str(json)?;
    let r = s.requirements;
    Ok(Summary {
        display_name: s.display_name,
        description: s.description,
        requirements: RequirementsSummary {
            internet_access: r.internet_access,
            kube_system_deployment: r.kube_system_deployment,
            privileged: r.privileged,
            capabilities: r.capabilities,
        },
        dependencies: s.dependencies,
        suggested_plugins: s.suggested_plugins,
        image: s.image,
        tags: s.tags,
        version_as_written: s.version_as_written,
        not_installable: s.not_installable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_stored_before_later_fields_read_with_them_empty() {
        // As sync migrations before 0005 left them: no tags, suggestions or spelling.
        let old = r#"{"displayName":"Cert Manager","description":"TLS","requirements":{"internetAccess":true,"kubeSystemDeployment":false,"privileged":false,"capabilities":[]},"dependencies":["gateway"],"image":"ghcr.io/a/b@sha256:00"}"#;
        let s = read_summary(old).unwrap();
        assert_eq!(s.display_name, "Cert Manager");
        assert!(s.requirements.internet_access);
        assert_eq!(s.dependencies, ["gateway"]);
        assert!(s.tags.is_empty() && s.suggested_plugins.is_empty());
        assert_eq!(
            (s.version_as_written.as_str(), s.not_installable),
            ("", None)
        );
    }

    #[test]
    fn a_stored_summary_reads_back_as_it_was_made() {
        for def in crate::catalog::builtin::definitions().unwrap() {
            let json = summary_json(&def);
            assert_eq!(read_summary(&json).unwrap(), Summary::of(&def), "{json}");
            assert!(!json.contains("notInstallable"), "{json}");
        }
    }
}
