//! Publishers' listings (written through `registry.v1.PublicationService`) as the
//! catalog's surfaces show them: where a listing sets a field, pages, the JSON API and
//! `catalog.v1` show it instead of what the definition says. Only plugins with a
//! published version are shown anywhere public, so a listing alone shows nothing.
//!
//! [`Listings`] keeps every listing in memory per generation of the change feed's
//! `catalog` domain (each listing write bumps it), so a catalog page or a `catalog.v1`
//! listing of thousands of plugins decorates them without a query per plugin.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::store::{ListingRow, Store, StoreError};

/// A listing as the JSON API shows it (`listing` of a plugin's detail).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ListingView {
    pub display_name: String,
    pub description_short: String,
    pub description: String,
    pub category_ids: Vec<String>,
    pub tags: Vec<String>,
    /// Artwork URL.
    pub image: String,
    pub repository_url: String,
    pub license: String,
    pub author_name: String,
    pub author_url: String,
    pub documentation_links: Vec<DocumentationLink>,
    pub features: Vec<FeatureBlock>,
    pub updated_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct DocumentationLink {
    pub id: String,
    pub title: String,
    pub url_name: String,
    pub url: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FeatureBlock {
    pub title: String,
    pub body: String,
}

impl From<&ListingRow> for ListingView {
    fn from(r: &ListingRow) -> Self {
        ListingView {
            display_name: r.display_name.clone(),
            description_short: r.description_short.clone(),
            description: r.description.clone(),
            category_ids: r.category_ids.clone(),
            tags: r.tags.clone(),
            image: r.image.clone(),
            repository_url: r.repository_url.clone(),
            license: r.license.clone(),
            author_name: r.author_name.clone(),
            author_url: r.author_url.clone(),
            documentation_links: r
                .documentation_links
                .iter()
                .map(|l| DocumentationLink {
                    id: l.id.clone(),
                    title: l.title.clone(),
                    url_name: l.url_name.clone(),
                    url: l.url.clone(),
                })
                .collect(),
            features: r
                .features
                .iter()
                .map(|(title, body)| FeatureBlock {
                    title: title.clone(),
                    body: body.clone(),
                })
                .collect(),
            updated_at: r.updated_at,
        }
    }
}

/// `listed` when it is set, `fallback` otherwise.
pub fn or<'a>(listed: &'a str, fallback: &'a str) -> &'a str {
    if listed.is_empty() { fallback } else { listed }
}

/// Listings by plugin id.
pub type ByPlugin = Arc<HashMap<String, ListingView>>;

/// Every listing by plugin id, kept per generation of the catalog.
#[derive(Default)]
pub struct Listings {
    cached: Mutex<Option<(i64, ByPlugin)>>,
}

impl Listings {
    /// The listings as of now: one read of the generation when they are cached at it.
    pub async fn current(&self, store: &Store) -> Result<ByPlugin, StoreError> {
        self.at(store, store.catalog_generation().await?).await
    }

    /// The listings as of `generation` (from [`Store::catalog_generation`]), for a
    /// request that has read it already: no statement when they are cached at it.
    pub async fn at(&self, store: &Store, generation: i64) -> Result<ByPlugin, StoreError> {
        if let Some((at, map)) = self.cached.lock().expect("not poisoned").as_ref()
            && *at == generation
        {
            return Ok(map.clone());
        }
        let map: HashMap<String, ListingView> = store
            .listings(None)
            .await?
            .iter()
            .map(|r| (r.id.clone(), ListingView::from(r)))
            .collect();
        let map = Arc::new(map);
        *self.cached.lock().expect("not poisoned") = Some((generation, map.clone()));
        Ok(map)
    }
}
