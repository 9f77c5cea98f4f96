//! `catalog.v1.CatalogService` on the server (`marketplace serve`): Fundament's public
//! marketplace catalog, anonymous and read-only, under `/catalog.v1.CatalogService/`.
//! Plugins, versions and publishers are what the catalog pages list; categories,
//! featured plugins and labels come from the operator's curation
//! ([`AppState::curation`]); ids are the stable UUIDs of [`crate::ids`].
//!
//! Layering: HTTP only; the answers come from `catalog::public` and `catalog::curation`.

use std::sync::Arc;
use std::time::Duration;

use buffa::EnumValue;
use connectrpc::{ConnectError, RequestContext, ServiceRequest, ServiceResult};

use super::{short, timestamp, to_connect};
use crate::api::AppState;
use crate::api::layers::Limits;
use crate::catalog::CatalogError;
use crate::catalog::curation::Label;
use crate::catalog::listing::{ListingView, or};
use crate::catalog::public::{self, Details, Entry, Filter, Order};
use crate::definition::Located;
use crate::ids;
use crate::proto::catalog::v1 as pb;
use crate::proto::catalog::v1::CatalogServiceExt;
use crate::proto::marketplace::v1 as shared;

/// Requests are a few short strings (a query of at most 200 characters, an id).
pub const LIMITS: Limits = Limits {
    body_bytes: 64 * 1024,
    timeout: Duration::from_secs(30),
};

/// Listings cut `description` to this many characters for `description_short`.
const SHORT_DESCRIPTION: usize = 160;

/// The routes to merge into the server's application.
pub fn router(state: &AppState) -> axum::Router<AppState> {
    let service = Arc::new(Catalog {
        state: state.clone(),
    });
    super::mount(
        "/catalog.v1.CatalogService/{method}",
        service.register(connectrpc::Router::new()),
        LIMITS,
    )
}

struct Catalog {
    state: AppState,
}

impl Catalog {
    async fn listings(
        &self,
    ) -> Result<Arc<std::collections::HashMap<String, ListingView>>, ConnectError> {
        self.state
            .listings
            .current(&self.state.store)
            .await
            .map_err(|e| to_connect(e.into()))
    }
}

fn refused(e: CatalogError) -> ConnectError {
    to_connect(e.into())
}

fn order(sort: EnumValue<pb::PluginSort>) -> Result<Order, ConnectError> {
    use pb::PluginSort as S;
    match sort {
        EnumValue::Known(S::PLUGIN_SORT_UNSPECIFIED | S::PLUGIN_SORT_FEATURED) => {
            Ok(Order::Featured)
        }
        EnumValue::Known(S::PLUGIN_SORT_NAME) => Ok(Order::Name),
        EnumValue::Known(S::PLUGIN_SORT_RECENTLY_ADDED) => Ok(Order::RecentlyAdded),
        EnumValue::Unknown(n) => Err(ConnectError::invalid_argument(format!(
            "sort: {n} is not a PluginSort (0 to 3)"
        ))),
    }
}

fn label(l: Label) -> EnumValue<pb::PluginLabel> {
    EnumValue::Known(match l {
        Label::Core => pb::PluginLabel::PLUGIN_LABEL_CORE,
        Label::Rijksoverheid => pb::PluginLabel::PLUGIN_LABEL_RIJKSOVERHEID,
        Label::Support9To17 => pb::PluginLabel::PLUGIN_LABEL_SUPPORT_9_TO_17,
    })
}

/// A plugin as listings show it: where its publisher's listing sets a field, that
/// field; the definition's otherwise.
fn summary(e: &Entry, listing: Option<&ListingView>) -> pb::PluginSummary {
    let p = &e.plugin;
    let l = |f: fn(&ListingView) -> &str| listing.map(f).unwrap_or_default();
    let description_short = match (l(|l| &l.description_short), l(|l| &l.description)) {
        ("", "") => short(&p.description, SHORT_DESCRIPTION),
        ("", long) => short(long, SHORT_DESCRIPTION),
        (set, _) => set.to_owned(),
    };
    // The operator's curation first, then the publisher's own choice of its categories.
    let mut category_ids = e.curated.category_ids.clone();
    for id in listing
        .map(|l| l.category_ids.as_slice())
        .unwrap_or_default()
    {
        if !category_ids.contains(id) {
            category_ids.push(id.clone());
        }
    }
    pb::PluginSummary {
        id: ids::plugin(&p.publisher, &p.name),
        name: p.name.clone(),
        display_name: or(l(|l| &l.display_name), &p.display_name).to_owned(),
        description_short,
        // The publishing organization is the publisher.
        organization_id: ids::publisher(&p.publisher),
        // Listing artwork: only a listing has any (definitions name an icon of the
        // console's set, not an image).
        image: l(|l| &l.image).to_owned(),
        category_ids,
        tags: match listing {
            Some(l) if !l.tags.is_empty() => l.tags.clone(),
            _ => p.tags.clone(),
        },
        labels: e.curated.labels.iter().copied().map(label).collect(),
        latest_version_id: ids::version(&p.publisher, &p.name, &p.latest_version),
        featured: e.curated.featured,
        published: timestamp(p.first_published_at),
        ..Default::default()
    }
}

/// The definition's links, in the order a reader looks for them.
const LINKS: [(&str, &str); 3] = [
    ("homepage", "Homepage"),
    ("documentation", "Documentation"),
    ("repository", "Source repository"),
];

fn details(d: Details, listing: Option<&ListingView>) -> pb::PluginDetails {
    let s = summary(&d.entry, listing);
    let meta = &d.definition.manifest.metadata;
    let text = |v: &Option<Located<String>>| v.as_ref().map(|v| v.value.clone());
    let url = |kind: &str| match kind {
        "homepage" => text(&meta.urls.homepage),
        "documentation" => text(&meta.urls.documentation),
        _ => text(&meta.urls.repository),
    };
    let documentation_links = LINKS
        .into_iter()
        .filter_map(|(kind, title)| {
            url(kind).map(|url| shared::DocumentationLink {
                id: ids::link(&s.id, kind),
                title: title.to_owned(),
                url_name: kind.to_owned(),
                url,
                ..Default::default()
            })
        })
        .collect();
    let listed = |f: fn(&ListingView) -> &str, fallback: Option<String>| match listing.map(f) {
        Some(set) if !set.is_empty() => set.to_owned(),
        _ => fallback.unwrap_or_default(),
    };
    let documentation_links = match listing {
        Some(l) if !l.documentation_links.is_empty() => l
            .documentation_links
            .iter()
            .map(|link| shared::DocumentationLink {
                id: link.id.clone(),
                title: link.title.clone(),
                url_name: link.url_name.clone(),
                url: link.url.clone(),
                ..Default::default()
            })
            .collect(),
        _ => documentation_links,
    };
    let features = listing
        .map(|l| {
            l.features
                .iter()
                .map(|f| shared::FeatureBlock {
                    title: f.title.clone(),
                    body: f.body.clone(),
                    ..Default::default()
                })
                .collect()
        })
        .unwrap_or_default();
    pb::PluginDetails {
        description: listed(
            |l| &l.description,
            Some(d.definition.description().to_owned()),
        ),
        author_name: listed(|l| &l.author_name, text(&meta.author)),
        author_url: listed(|l| &l.author_url, url("homepage")),
        repository_url: listed(|l| &l.repository_url, url("repository")),
        license: listed(|l| &l.license, text(&meta.license)),
        capabilities: d
            .definition
            .manifest
            .spec
            .permissions
            .capabilities
            .iter()
            .map(|c| c.value.clone())
            .collect(),
        permissions: d
            .permissions
            .into_iter()
            .map(|p| shared::PluginPermission {
                resource: p.resource,
                access: p.verbs.join(", "),
                ..Default::default()
            })
            .collect(),
        // Only a listing has feature blocks.
        features,
        documentation_links,
        id: s.id,
        name: s.name,
        display_name: s.display_name,
        description_short: s.description_short,
        organization_id: s.organization_id,
        image: s.image,
        category_ids: s.category_ids,
        tags: s.tags,
        labels: s.labels,
        latest_version_id: s.latest_version_id,
        featured: s.featured,
        published: s.published,
        ..Default::default()
    }
}

// The methods return their concrete messages where the trait allows any encodable
// body; that refinement is what connectrpc's own examples do.
#[allow(refining_impl_trait)]
impl pb::CatalogService for Catalog {
    async fn list_plugins(
        &self,
        _ctx: RequestContext,
        request: ServiceRequest<'_, pb::ListPluginsRequest>,
    ) -> ServiceResult<pb::ListPluginsResponse> {
        let filter = Filter {
            query: request.query.to_owned(),
            category_id: request.category_id.to_owned(),
            featured_only: request.featured_only,
            order: order(request.sort)?,
        };
        let entries = public::list(&self.state.store, &self.state.curation.get(), &filter)
            .await
            .map_err(refused)?;
        let listings = self.listings().await?;
        connectrpc::Response::ok(pb::ListPluginsResponse {
            plugins: entries
                .iter()
                .map(|e| {
                    summary(
                        e,
                        listings.get(&ids::plugin(&e.plugin.publisher, &e.plugin.name)),
                    )
                })
                .collect(),
            ..Default::default()
        })
    }

    async fn get_plugin(
        &self,
        _ctx: RequestContext,
        request: ServiceRequest<'_, pb::GetPluginRequest>,
    ) -> ServiceResult<pb::GetPluginResponse> {
        // One read of the generation for both parts of the answer: on PostgreSQL each
        // read is a round trip, and both parts are cached at it.
        let store = &self.state.store;
        let generation = store
            .catalog_generation()
            .await
            .map_err(|e| refused(e.into()))?;
        let d = public::details(
            store,
            &self.state.curation.get(),
            generation,
            request.plugin_id,
        )
        .await
        .map_err(refused)?;
        let listings = self
            .state
            .listings
            .at(store, generation)
            .await
            .map_err(|e| to_connect(e.into()))?;
        let listing = listings.get(&ids::plugin(
            &d.entry.plugin.publisher,
            &d.entry.plugin.name,
        ));
        connectrpc::Response::ok(pb::GetPluginResponse {
            plugin: details(d, listing).into(),
            ..Default::default()
        })
    }

    async fn list_plugin_versions(
        &self,
        _ctx: RequestContext,
        request: ServiceRequest<'_, pb::ListPluginVersionsRequest>,
    ) -> ServiceResult<pb::ListPluginVersionsResponse> {
        let (p, versions) = public::versions(&self.state.store, request.plugin_id)
            .await
            .map_err(refused)?;
        connectrpc::Response::ok(pb::ListPluginVersionsResponse {
            versions: versions
                .into_iter()
                .map(|v| pb::PublishedVersion {
                    id: ids::version(&p.publisher, &p.name, &v.version),
                    published: timestamp(v.published_at),
                    definition_hash: v.hash,
                    version: v.version,
                    // Definitions carry no release notes.
                    release_notes: String::new(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
    }

    async fn list_categories(
        &self,
        _ctx: RequestContext,
        _request: ServiceRequest<'_, pb::ListCategoriesRequest>,
    ) -> ServiceResult<pb::ListCategoriesResponse> {
        connectrpc::Response::ok(pb::ListCategoriesResponse {
            categories: self
                .state
                .curation
                .get()
                .categories()
                .iter()
                .map(|c| shared::Category {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
    }

    async fn list_publishers(
        &self,
        _ctx: RequestContext,
        _request: ServiceRequest<'_, pb::ListPublishersRequest>,
    ) -> ServiceResult<pb::ListPublishersResponse> {
        let names = public::publishers(&self.state.store)
            .await
            .map_err(refused)?;
        connectrpc::Response::ok(pb::ListPublishersResponse {
            publishers: names
                .into_iter()
                .map(|name| shared::Publisher {
                    id: ids::publisher(&name),
                    // Publishers have no display name of their own yet.
                    display_name: name.clone(),
                    name,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
    }
}
