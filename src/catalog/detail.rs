//! Everything a plugin page or the detail API shows about one plugin, assembled from the
//! store and the latest listed definition. Its types are what the detail and versions
//! APIs answer; the store's rows convert into them.

use serde::Serialize;

use super::CatalogError;
use super::rbac::{self, Access};
use crate::definition::{Approval, Definition, MenuEntry, PolicyRule, install_namespace};
use crate::store::{ImageMirror, LinkKind, PluginRef, Store, VersionRecord};

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct VersionInfo {
    pub version: String,
    pub hash: String,
    pub image: String,
    pub published_at: i64,
    pub yanked: bool,
    /// Key ids of the publisher keys that signed this version.
    pub signers: Vec<String>,
    /// The mirror of its image (`/v2/` serves it once `mirrored`); `None` until the
    /// server enqueued it.
    pub mirror: Option<MirrorInfo>,
    /// Why Fundament cannot install this version (fields of the older design it
    /// carries); absent when it can.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_installable: Option<String>,
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
            mirror: v.mirror.as_ref().map(MirrorInfo::from),
            not_installable: v.not_installable.clone(),
        }
    }
}

/// A version's image in the mirror, as pages and the API show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct MirrorInfo {
    /// `pending`, `mirroring`, `mirrored` or `failed`.
    pub status: String,
    /// Bytes of every manifest and blob, once mirrored.
    pub size: Option<i64>,
    /// Why the last attempt failed, in our words.
    pub error: Option<String>,
    /// When a failed mirror is tried again (Unix seconds).
    pub next_attempt_at: Option<i64>,
    /// The cosign key (id) whose signature of the image verified, when the publisher
    /// registered keys.
    pub verified_by: Option<String>,
}

impl From<&ImageMirror> for MirrorInfo {
    fn from(m: &ImageMirror) -> Self {
        MirrorInfo {
            status: m.status.clone(),
            size: m.size,
            error: m.error.clone(),
            next_attempt_at: m.next_attempt_at,
            verified_by: m.verified_by.clone(),
        }
    }
}

/// Versions of one major: an upgrade path (upgrades stay within one major).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct MajorGroup {
    pub major: u64,
    pub versions: Vec<VersionInfo>,
}

/// A dependency or suggestion by name, resolved to catalog plugins when present.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Link {
    pub name: String,
    /// Plugins with that name; empty when the catalog has none (shown as missing).
    pub found: Vec<PluginRefView>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
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

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PluginDetail {
    pub publisher: String,
    pub name: String,
    pub latest: VersionInfo,
    /// Where Fundament installs it: `plugin-<name>`.
    pub namespace: String,
    /// The operator suspended the publisher: the signed index no longer vouches for the
    /// plugin and workers stop offering it; the page stays reachable and says so.
    pub suspended: bool,
    /// The upstream marketplace its publisher is followed from (`serve --upstream`):
    /// its roles are signed by the publisher there and served here unchanged. `null`
    /// for a publisher registered here.
    pub origin: Option<String>,
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
    /// What an admin approves before installing the latest version, from
    /// `spec.permissions.capabilities`.
    pub requirements: Approval,
    /// What the cluster must offer (the publisher's companion document).
    pub cluster_capabilities: Vec<String>,
    /// The latest definition's fields, as JSON, for machines.
    pub manifest: serde_json::Value,
    /// The publisher's listing, where it wrote one: shown instead of the definition's
    /// names, texts and links where it sets them.
    pub listing: Option<super::ListingView>,
    /// What the latest version asks for that the release before it (the newest lower
    /// version not yanked) did not; `None` for a plugin's only version. The JSON API
    /// answers this for any two versions (`…/versions/{v}/changes?from=`).
    #[serde(skip)]
    pub since_previous: Option<super::changes::Changes>,
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
    let extras = &definition.extras;
    let dep_names: Vec<&str> = extras
        .dependencies
        .iter()
        .chain(&extras.suggested_plugins)
        .map(String::as_str)
        .collect();
    let known = store.plugins_named(&dep_names).await?;
    let resolve = |names: &[String]| -> Vec<Link> {
        names
            .iter()
            .map(|n| {
                // Prefer the same publisher, then any other that has the name.
                let mut found: Vec<PluginRefView> = known
                    .iter()
                    .filter(|k| &k.name == n)
                    .cloned()
                    .map(PluginRefView::from)
                    .collect();
                found.sort_by_key(|f| f.publisher != publisher);
                Link {
                    name: n.clone(),
                    found,
                }
            })
            .collect()
    };
    let rules: Vec<&PolicyRule> = spec.permissions.rbac.iter().map(|r| &r.value).collect();

    let previous = versions
        .iter()
        .find(|v| !v.yanked && v.version_parsed < latest.version_parsed);
    let since_previous = match previous {
        Some(v) => store
            .definition(plugin.id, &v.version)
            .await?
            .map(|(_, old)| super::changes::between(&old, &definition)),
        None => None,
    };
    let listing = store
        .listing(&crate::ids::plugin(publisher, name))
        .await?
        .as_ref()
        .map(super::ListingView::from);
    Ok(PluginDetail {
        listing,
        since_previous,
        namespace: install_namespace(name),
        access: rbac::summarize(&rules),
        dependencies: resolve(&extras.dependencies),
        suggested_plugins: resolve(&extras.suggested_plugins),
        cluster_capabilities: extras.cluster_capabilities.clone(),
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
        versions: group_by_major(&versions),
        requirements: definition.approval(),
        manifest: serde_json::to_value(&definition.manifest).unwrap_or(serde_json::Value::Null),
        latest: VersionInfo::from(&latest),
        publisher: plugin.publisher,
        name: plugin.name,
        suspended: plugin.suspended,
        origin: plugin.origin,
        created_at: plugin.created_at,
        updated_at: plugin.updated_at,
        definition,
    })
}

/// Newest major first; versions within a major newest first (the store's order).
fn group_by_major(versions: &[VersionRecord]) -> Vec<MajorGroup> {
    let mut groups: Vec<MajorGroup> = Vec::new();
    for v in versions {
        match groups.last_mut() {
            Some(g) if g.major == v.major => g.versions.push(v.into()),
            _ => groups.push(MajorGroup {
                major: v.major,
                versions: vec![v.into()],
            }),
        }
    }
    groups
}
