//! `registry.v1.PublicationService` on the server: a publisher manages its plugin
//! listings and uploads versions for review, under
//! `/registry.v1.PublicationService/`, with its own bearer token. The organization of
//! the contract is the publisher (`organization_id` is `ids::publisher`).
//!
//! Layering: HTTP only; the rules and the answers' content come from `review`.

use std::sync::Arc;

use buffa::EnumValue;
use connectrpc::{ConnectError, RequestContext, ServiceRequest, ServiceResult};

use super::{caller, maybe_timestamp, review_refused, submission_status, timestamp};
use crate::api::AppState;
use crate::api::auth::Role;
use crate::ids;
use crate::proto::marketplace::v1 as shared;
use crate::proto::registry::v1 as pb;
use crate::proto::registry::v1::PublicationServiceExt;
use crate::review::{self, Action, Actor, Feature, Link, Listing, ListingFields, Visibility};

/// The routes to merge into the server's application. A request carries at most one
/// manifest (1 MiB, a third more as JSON's base64), so the surface keeps Connect's
/// general limits.
pub fn router(state: &AppState) -> axum::Router<AppState> {
    let service = Arc::new(Publication {
        state: state.clone(),
    });
    super::mount(
        "/registry.v1.PublicationService/{method}",
        service.register(connectrpc::Router::new()),
        super::LIMITS,
    )
}

struct Publication {
    state: AppState,
}

impl Publication {
    async fn publisher(&self, ctx: &RequestContext) -> Result<String, ConnectError> {
        caller(&self.state, ctx, Role::Publisher).await
    }
}

fn visibility(v: EnumValue<pb::PluginVisibility>) -> Visibility {
    use pb::PluginVisibility as V;
    match v {
        EnumValue::Known(V::PLUGIN_VISIBILITY_UNSPECIFIED) => Visibility::Unspecified,
        EnumValue::Known(V::PLUGIN_VISIBILITY_PUBLIC) => Visibility::Public,
        EnumValue::Known(V::PLUGIN_VISIBILITY_RESTRICTED) => Visibility::Restricted,
        EnumValue::Unknown(n) => Visibility::Unknown(n),
    }
}

/// A listing as the contract's `Plugin`.
pub(super) fn plugin(l: Listing) -> pb::Plugin {
    let r = l.row;
    pb::Plugin {
        latest_published_version_id: l
            .latest_published
            .map(|v| ids::version(&r.publisher, &r.name, &v))
            .unwrap_or_default(),
        organization_id: ids::publisher(&r.publisher),
        documentation_links: r
            .documentation_links
            .into_iter()
            .map(|l| shared::DocumentationLink {
                id: l.id,
                title: l.title,
                url_name: l.url_name,
                url: l.url,
                ..Default::default()
            })
            .collect(),
        features: r
            .features
            .into_iter()
            .map(|(title, body)| shared::FeatureBlock {
                title,
                body,
                ..Default::default()
            })
            .collect(),
        // Only public plugins exist yet (restricted ones are refused).
        visibility: EnumValue::Known(pb::PluginVisibility::PLUGIN_VISIBILITY_PUBLIC),
        allowed_organization_ids: Vec::new(),
        created: timestamp(r.created_at),
        updated: timestamp(r.updated_at),
        id: r.id,
        name: r.name,
        display_name: r.display_name,
        description_short: r.description_short,
        description: r.description,
        image: r.image,
        category_ids: r.category_ids,
        tags: r.tags,
        author_name: r.author_name,
        author_url: r.author_url,
        repository_url: r.repository_url,
        license: r.license,
        ..Default::default()
    }
}

fn version(v: review::VersionView) -> pb::PluginVersion {
    let status = v.status();
    let r = v.row;
    pb::PluginVersion {
        status: submission_status(status),
        created: timestamp(r.created_at),
        submitted: maybe_timestamp(r.submitted_at),
        published: maybe_timestamp(r.published_at),
        review_feedback: r.feedback,
        id: r.id,
        plugin_id: r.listing_id,
        version: r.version,
        image: r.image,
        definition_hash: r.hash,
        release_notes: r.release_notes,
        ..Default::default()
    }
}

fn reviewed(row: crate::store::ReviewVersionRow) -> pb::PluginVersion {
    version(review::VersionView {
        row,
        reviewed: true,
    })
}

fn links(items: Vec<shared::DocumentationLink>) -> Vec<Link> {
    items
        .into_iter()
        .map(|l| Link {
            id: l.id,
            title: l.title,
            url_name: l.url_name,
            url: l.url,
        })
        .collect()
}

fn features(items: Vec<shared::FeatureBlock>) -> Vec<Feature> {
    items
        .into_iter()
        .map(|f| Feature {
            title: f.title,
            body: f.body,
        })
        .collect()
}

#[allow(refining_impl_trait)]
impl pb::PublicationService for Publication {
    async fn list_plugins(
        &self,
        ctx: RequestContext,
        _request: ServiceRequest<'_, pb::ListPluginsRequest>,
    ) -> ServiceResult<pb::ListPluginsResponse> {
        let me = Actor::Publisher(self.publisher(&ctx).await?);
        let listings = review::listings(&self.state.store, &me)
            .await
            .map_err(review_refused)?;
        connectrpc::Response::ok(pb::ListPluginsResponse {
            plugins: listings.into_iter().map(plugin).collect(),
            ..Default::default()
        })
    }

    async fn get_plugin(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::GetPluginRequest>,
    ) -> ServiceResult<pb::GetPluginResponse> {
        let me = Actor::Publisher(self.publisher(&ctx).await?);
        let l = review::listing(&self.state.store, &me, request.plugin_id)
            .await
            .map_err(review_refused)?;
        connectrpc::Response::ok(pb::GetPluginResponse {
            plugin: plugin(l).into(),
            ..Default::default()
        })
    }

    async fn create_plugin(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::CreatePluginRequest>,
    ) -> ServiceResult<pb::CreatePluginResponse> {
        let me = self.publisher(&ctx).await?;
        let r = request.to_owned_message();
        let fields = ListingFields {
            display_name: r.display_name,
            description_short: r.description_short,
            description: r.description,
            category_ids: r.category_ids,
            tags: r.tags,
            image: r.image,
            repository_url: r.repository_url,
            license: r.license,
            author_name: String::new(),
            author_url: String::new(),
            documentation_links: Vec::new(),
            features: Vec::new(),
            visibility: visibility(r.visibility),
            allowed_organization_ids: Vec::new(),
        };
        let l = review::create_listing(
            &self.state.store,
            &self.state.curation.get(),
            &me,
            &r.name,
            fields,
            crate::clock::now(),
        )
        .await
        .map_err(review_refused)?;
        tracing::info!(publisher = %me, plugin = %l.row.name, "listing created");
        connectrpc::Response::ok(pb::CreatePluginResponse {
            plugin: plugin(l).into(),
            ..Default::default()
        })
    }

    async fn update_plugin(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::UpdatePluginRequest>,
    ) -> ServiceResult<pb::UpdatePluginResponse> {
        let me = self.publisher(&ctx).await?;
        let r = request.to_owned_message();
        let fields = ListingFields {
            display_name: r.display_name,
            description_short: r.description_short,
            description: r.description,
            category_ids: r.category_ids,
            tags: r.tags,
            image: r.image,
            repository_url: r.repository_url,
            license: r.license,
            author_name: r.author_name,
            author_url: r.author_url,
            documentation_links: links(r.documentation_links),
            features: features(r.features),
            visibility: visibility(r.visibility),
            allowed_organization_ids: r.allowed_organization_ids,
        };
        let l = review::update_listing(
            &self.state.store,
            &self.state.curation.get(),
            &me,
            &r.plugin_id,
            fields,
            crate::clock::now(),
        )
        .await
        .map_err(review_refused)?;
        tracing::info!(publisher = %me, plugin = %l.row.name, "listing updated");
        connectrpc::Response::ok(pb::UpdatePluginResponse {
            plugin: plugin(l).into(),
            ..Default::default()
        })
    }

    async fn delete_plugin(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::DeletePluginRequest>,
    ) -> ServiceResult<pb::DeletePluginResponse> {
        let me = self.publisher(&ctx).await?;
        review::delete_listing(&self.state.store, &me, request.plugin_id)
            .await
            .map_err(review_refused)?;
        tracing::info!(publisher = %me, plugin_id = %request.plugin_id, "listing deleted");
        connectrpc::Response::ok(pb::DeletePluginResponse::default())
    }

    async fn list_plugin_versions(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::ListPluginVersionsRequest>,
    ) -> ServiceResult<pb::ListPluginVersionsResponse> {
        let me = Actor::Publisher(self.publisher(&ctx).await?);
        let versions = review::versions(&self.state.store, &me, request.plugin_id)
            .await
            .map_err(review_refused)?;
        connectrpc::Response::ok(pb::ListPluginVersionsResponse {
            versions: versions.into_iter().map(version).collect(),
            ..Default::default()
        })
    }

    async fn get_plugin_version(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::GetPluginVersionRequest>,
    ) -> ServiceResult<pb::GetPluginVersionResponse> {
        let me = Actor::Publisher(self.publisher(&ctx).await?);
        let v = review::version(&self.state.store, &me, request.plugin_version_id)
            .await
            .map_err(review_refused)?;
        connectrpc::Response::ok(pb::GetPluginVersionResponse {
            version: version(v).into(),
            ..Default::default()
        })
    }

    async fn create_plugin_version(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::CreatePluginVersionRequest>,
    ) -> ServiceResult<pb::CreatePluginVersionResponse> {
        let me = self.publisher(&ctx).await?;
        let row = review::upload(
            &self.state.store,
            &me,
            request.plugin_id,
            request.version,
            request.manifest,
            request.release_notes,
            crate::clock::now(),
        )
        .await
        .map_err(review_refused)?;
        tracing::info!(publisher = %me, plugin = %row.name, version = %row.version, hash = %row.hash, "version uploaded for review");
        connectrpc::Response::ok(pb::CreatePluginVersionResponse {
            version: reviewed(row).into(),
            ..Default::default()
        })
    }

    async fn submit_plugin_version(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::SubmitPluginVersionRequest>,
    ) -> ServiceResult<pb::SubmitPluginVersionResponse> {
        let row = self
            .act(&ctx, request.plugin_version_id, Action::Submit)
            .await?;
        connectrpc::Response::ok(pb::SubmitPluginVersionResponse {
            version: reviewed(row).into(),
            ..Default::default()
        })
    }

    async fn withdraw_plugin_version(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::WithdrawPluginVersionRequest>,
    ) -> ServiceResult<pb::WithdrawPluginVersionResponse> {
        let row = self
            .act(&ctx, request.plugin_version_id, Action::Withdraw)
            .await?;
        connectrpc::Response::ok(pb::WithdrawPluginVersionResponse {
            version: reviewed(row).into(),
            ..Default::default()
        })
    }

    async fn list_categories(
        &self,
        ctx: RequestContext,
        _request: ServiceRequest<'_, pb::ListCategoriesRequest>,
    ) -> ServiceResult<pb::ListCategoriesResponse> {
        self.publisher(&ctx).await?;
        connectrpc::Response::ok(pb::ListCategoriesResponse {
            categories: categories(&self.state),
            ..Default::default()
        })
    }
}

impl Publication {
    async fn act(
        &self,
        ctx: &RequestContext,
        id: &str,
        action: Action,
    ) -> Result<crate::store::ReviewVersionRow, ConnectError> {
        let me = Actor::Publisher(self.publisher(ctx).await?);
        let row = review::act(
            &self.state.store,
            &me,
            id,
            action,
            None,
            crate::clock::now(),
        )
        .await
        .map_err(review_refused)?;
        tracing::info!(publisher = %row.publisher, plugin = %row.name, version = %row.version, status = %row.status, "version {:?}", action);
        Ok(row)
    }
}

/// The operator's categories (the curation), as every service lists them.
pub(super) fn categories(state: &AppState) -> Vec<shared::Category> {
    state
        .curation
        .get()
        .categories()
        .iter()
        .map(|c| shared::Category {
            id: c.id.clone(),
            name: c.name.clone(),
            ..Default::default()
        })
        .collect()
}
