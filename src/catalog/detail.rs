//! Everything a plugin page or the detail API shows about one plugin, assembled from the
//! store and the latest listed definition.

use serde::Serialize;

use super::CatalogError;
use super::rbac::{self, Access};
use crate::definition::{Approval, Definition, MenuEntry, PolicyRule, install_namespace};
use crate::store::{ImageMirror, LinkKind, PluginRef, Store, VersionRecord};

#[derive(Debug, Clone, Serialize)]
pub struct VersionInfo {
    pub version: String,
    pub hash: String,
    pub image: String,
    pub published_at: i64,
    pub yanked: bool,
    /// Key ids of the publisher keys that signed this version.
    pub signers: Vec<String>,
    /// The mirror of its image (`/v2/` serves it once `mirrored`).
    pub mirror: Option<ImageMirror>,
}

impl From<&VersionRecord> for VersionInfo {
    fn from(v: &VersionRecord) -> Self {
        VersionInfo {
            version: v.version.clone(),
            hash: v.hash.clone(),
            image: v.image.clone(),
            published_at: v.published_at,
            yanked: v.yanked,
            signers: v.signer_key_ids.clone(),
            mirror: v.mirror.clone(),
        }
    }
}

/// Versions of one major, which share an install namespace and an upgrade path.
#[derive(Debug, Clone, Serialize)]
pub struct MajorGroup {
    pub major: u64,
    pub namespace: String,
    pub versions: Vec<VersionInfo>,
}

/// A dependency or suggestion by name, resolved to catalog plugins when present.
#[derive(Debug, Clone, Serialize)]
pub struct Link {
    pub name: String,
    /// Plugins with that name; empty when the catalog has none (shown as missing).
    pub found: Vec<PluginRefView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PluginRefView {
    pub publisher: String,
    pub name: String,
    pub display_name: String,
}

impl From<PluginRef> for PluginRefView {
    fn from(p: PluginRef) -> Self {
        PluginRefView {
            publisher: p.publisher,
            name: p.name,
            display_name: p.display_name,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PluginDetail {
    pub publisher: String,
    pub name: String,
    pub latest: VersionInfo,
    pub namespace: String,
    /// The operator suspended the publisher: the signed index no longer vouches for the
    /// plugin and workers stop offering it; the page stays reachable and says so.
    pub suspended: bool,
    pub created_at: i64,
    pub updated_at: i64,
    #[serde(skip)]
    pub definition: Definition,
    pub access: Vec<Access>,
    pub dependencies: Vec<Link>,
    pub suggested_plugins: Vec<Link>,
    pub required_by: Vec<PluginRefView>,
    pub suggested_by: Vec<PluginRefView>,
    pub versions: Vec<MajorGroup>,
    /// What an admin approves before installing the latest version: `spec.requirements`
    /// together with what `spec.permissions.capabilities` implies. `manifest` shows the
    /// requirements as written.
    pub requirements: Approval,
    /// The latest definition's fields, as JSON, for machines.
    pub manifest: serde_json::Value,
}

impl PluginDetail {
    pub fn organization_menu(&self) -> &[MenuEntry] {
        &self.definition.manifest.spec.menu.organization
    }
    pub fn project_menu(&self) -> &[MenuEntry] {
        &self.definition.manifest.spec.menu.project
    }
}

pub async fn plugin_detail(
    store: &Store,
    publisher: &str,
    name: &str,
) -> Result<PluginDetail, CatalogError> {
    let not_found = || CatalogError::NotFound(format!("plugin {publisher}/{name}"));
    let plugin = store.plugin(publisher, name).await?.ok_or_else(not_found)?;
    let latest_version = plugin.latest_version.as_deref().ok_or_else(not_found)?;
    let (latest, definition) = store
        .definition(plugin.id, latest_version)
        .await?
        .ok_or_else(not_found)?;
    let versions = store.versions(plugin.id).await?;

    let spec = &definition.manifest.spec;
    let dep_names: Vec<&str> = spec
        .dependencies
        .iter()
        .chain(&spec.suggested_plugins)
        .map(|d| d.as_str())
        .collect();
    let known = store.plugins_named(&dep_names).await?;
    let resolve = |names: &[crate::definition::Located<String>]| -> Vec<Link> {
        names
            .iter()
            .map(|n| {
                // Prefer the same publisher, then any other that has the name.
                let mut found: Vec<PluginRefView> = known
                    .iter()
                    .filter(|k| k.name == **n)
                    .cloned()
                    .map(PluginRefView::from)
                    .collect();
                found.sort_by_key(|f| f.publisher != publisher);
                Link {
                    name: n.to_string(),
                    found,
                }
            })
            .collect()
    };
    let rules: Vec<&PolicyRule> = spec.permissions.rbac.iter().map(|r| &r.value).collect();

    Ok(PluginDetail {
        namespace: install_namespace(name, latest.major),
        access: rbac::summarize(&rules),
        dependencies: resolve(&spec.dependencies),
        suggested_plugins: resolve(&spec.suggested_plugins),
        required_by: store
            .linking_to(name, LinkKind::Dependency)
            .await?
            .into_iter()
            .map(Into::into)
            .collect(),
        suggested_by: store
            .linking_to(name, LinkKind::Suggestion)
            .await?
            .into_iter()
            .map(Into::into)
            .collect(),
        versions: group_by_major(name, &versions),
        requirements: definition.approval(),
        manifest: serde_json::to_value(&definition.manifest).unwrap_or(serde_json::Value::Null),
        latest: VersionInfo::from(&latest),
        publisher: plugin.publisher,
        name: plugin.name,
        suspended: plugin.suspended,
        created_at: plugin.created_at,
        updated_at: plugin.updated_at,
        definition,
    })
}

/// Newest major first; versions within a major newest first (the store's order).
fn group_by_major(name: &str, versions: &[VersionRecord]) -> Vec<MajorGroup> {
    let mut groups: Vec<MajorGroup> = Vec::new();
    for v in versions {
        match groups.last_mut() {
            Some(g) if g.major == v.major => g.versions.push(v.into()),
            _ => groups.push(MajorGroup {
                major: v.major,
                namespace: install_namespace(name, v.major),
                versions: vec![v.into()],
            }),
        }
    }
    groups
}
