//! The public catalog as Fundament's catalog contract presents it: the plugins the pages
//! list (a version not yanked, the publisher not suspended), each with its curation,
//! found by the stable ids of [`crate::ids`], searched as the pages search.
//!
//! Layering: calls `store` and `curation`; knows nothing of HTTP or Connect.

use std::cmp::Reverse;
use std::sync::Arc;

use super::curation::{Curated, Curation};
use super::rbac::{self, ResourceVerbs};
use super::{CatalogError, search_terms};
use crate::definition::{Definition, PolicyRule};
use crate::ids;
use crate::store::{ListedPlugin, PluginQuery, Sort, Store, VersionRecord};

/// How a listing is ordered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    /// Featured plugins first, each part by name.
    #[default]
    Featured,
    Name,
    /// Newest first by when the first listed version was published, then by name.
    RecentlyAdded,
}

/// A listing request as it arrives (text not yet checked).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Search words, matched as the pages match them; at most 200 characters.
    pub query: String,
    /// A category's id, or empty for every plugin.
    pub category_id: String,
    pub featured_only: bool,
    pub order: Order,
}

/// A listed plugin with its curation.
#[derive(Debug, Clone)]
pub struct Entry {
    pub plugin: ListedPlugin,
    pub curated: Curated,
}

impl Entry {
    fn new(curation: &Curation, plugin: ListedPlugin) -> Entry {
        let curated = curation.curate(&plugin.publisher, &plugin.name, &plugin.tags);
        Entry { plugin, curated }
    }
}

/// One plugin with its latest listed definition.
#[derive(Debug, Clone)]
pub struct Details {
    pub entry: Entry,
    /// Shared with the catalog cache, which keeps it per generation.
    pub definition: Arc<Definition>,
    /// `spec.permissions.rbac` per resource.
    pub permissions: Vec<ResourceVerbs>,
}

fn invalid(e: String) -> CatalogError {
    CatalogError::InvalidArgument(e)
}

/// Every listed plugin the filter matches, in its order.
pub async fn list(
    store: &Store,
    curation: &Curation,
    filter: &Filter,
) -> Result<Vec<Entry>, CatalogError> {
    let terms = search_terms(&filter.query).map_err(|e| invalid(format!("query: {e}")))?;
    let category = match filter.category_id.as_str() {
        "" => None,
        text => {
            let id = ids::parse("category_id", text).map_err(invalid)?;
            // A category this server does not have holds nothing.
            match curation.category(&id) {
                Some(c) => Some(c.id.clone()),
                None => return Ok(Vec::new()),
            }
        }
    };
    let query = PluginQuery {
        terms,
        sort: Sort::Name,
        ..PluginQuery::default()
    };
    let mut entries: Vec<Entry> = store
        .listed_plugins(&query)
        .await?
        .into_iter()
        .map(|p| Entry::new(curation, p))
        .filter(|e| !filter.featured_only || e.curated.featured)
        .filter(|e| {
            category
                .as_ref()
                .is_none_or(|c| e.curated.category_ids.contains(c))
        })
        .collect();
    // The store's order is by name; stable sorts keep it within equal keys.
    match filter.order {
        Order::Featured => entries.sort_by_key(|e| !e.curated.featured),
        Order::Name => {}
        Order::RecentlyAdded => entries.sort_by_key(|e| Reverse(e.plugin.first_published_at)),
    }
    Ok(entries)
}

/// The listed plugin `plugin_id` (a UUID from `ids::plugin`) names.
pub async fn find(store: &Store, plugin_id: &str) -> Result<ListedPlugin, CatalogError> {
    let id = ids::parse("plugin_id", plugin_id).map_err(invalid)?;
    let not_found = || CatalogError::NotFound(format!("plugin {id}"));
    let (publisher, name) = store.listed_by_id(&id).await?.ok_or_else(not_found)?;
    store
        .listed_plugin(&publisher, &name)
        .await?
        .ok_or_else(not_found)
}

/// A listed plugin with its curation and its latest listed definition, as of the
/// catalog's `generation` (from [`Store::catalog_generation`], which the caller reads
/// once for everything it answers from).
pub async fn details(
    store: &Store,
    curation: &Curation,
    generation: i64,
    plugin_id: &str,
) -> Result<Details, CatalogError> {
    let id = ids::parse("plugin_id", plugin_id).map_err(invalid)?;
    let detail = store
        .listed_detail(generation, &id)
        .await?
        .ok_or_else(|| CatalogError::NotFound(format!("plugin {id}")))?;
    let rules: Vec<&PolicyRule> = detail
        .definition
        .manifest
        .spec
        .permissions
        .rbac
        .iter()
        .map(|r| &r.value)
        .collect();
    Ok(Details {
        permissions: rbac::verbs_by_resource(&rules),
        entry: Entry::new(curation, detail.plugin.clone()),
        definition: detail.definition.clone(),
    })
}

/// A listed plugin and its versions not yanked, newest first (semantic version order).
pub async fn versions(
    store: &Store,
    plugin_id: &str,
) -> Result<(ListedPlugin, Vec<VersionRecord>), CatalogError> {
    let plugin = find(store, plugin_id).await?;
    let mut versions = store.versions(plugin.id).await?;
    versions.retain(|v| !v.yanked);
    Ok((plugin, versions))
}

/// Names of the publishers with a listed plugin (so none suspended), by name.
pub async fn publishers(store: &Store) -> Result<Vec<String>, CatalogError> {
    let mut names: Vec<String> = store
        .listed_names()
        .await?
        .into_iter()
        .map(|(publisher, _)| publisher)
        .collect();
    names.dedup();
    Ok(names)
}
