//! `organization.v1.PluginService` on the worker, one per organization under
//! `/orgs/{org}`, so Fundament's `ORGANIZATION_API_URL=http://worker:8081/orgs/acme`
//! makes the worker its definition source.
//!
//! Everything comes from the same merged view and precedence rules as the JSON local
//! API (`sync::Worker::view`), less what Fundament cannot install: a version published
//! in the older definition design is left out (the JSON API and `/status` list it with
//! the reason), and a plugin with no other version is not listed. Access:
//! - `GetPluginDefinition` is what Fundament's plugin controller calls, without a token.
//!   `fundament.anonymousDefinitions` in `sync.yaml` says what it returns to an anonymous
//!   caller (`offered`, the default: anything the organization is offered; `public`:
//!   not the organization's sideloads; `none`: nothing). A presented token must be valid
//!   for the organization whatever the setting.
//! - The other reads need the organization's token or the reader token.
//! - `PutPluginDefinition` needs the organization's token: it is a sideload.
//!
//! Layering: HTTP only; everything else is `sync::Worker`.

use std::borrow::Cow;
use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use connectrpc::{ConnectError, ConnectRpcService, RequestContext, ServiceRequest, ServiceResult};

use super::{definition, short, to_connect};
use crate::api::error::{ErrorCode, HttpError};
use crate::api::worker::{authorize, version_param};
use crate::definition::{Definition, MAX_DEFINITION_BYTES, is_dns_label};
use crate::ids;
use crate::proto::organization::v1 as pb;
use crate::proto::organization::v1::PluginServiceExt;
use crate::sync::config::AnonymousDefinitions;
use crate::sync::sideload::{OnConflict, check_org};
use crate::sync::view::{Offer, OrgView, Plugin, Trust};
use crate::sync::worker::Worker;

/// Listings cut `description` to this many characters for `description_short`.
const SHORT_DESCRIPTION: usize = 160;

/// The organization a request is for, put in the request's extensions by [`dispatch`].
#[derive(Debug, Clone)]
struct Org(String);

/// The routes to mount in the worker's router.
pub fn router(worker: Arc<Worker>) -> axum::Router {
    let connect = super::service(
        Arc::new(OrgPlugins { worker }).register(connectrpc::Router::new()),
        super::LIMITS,
    );
    axum::Router::new()
        .route(
            "/orgs/{org}/organization.v1.PluginService/{method}",
            axum::routing::any(dispatch),
        )
        .with_state(connect)
}

/// Checks the organization, hands it to the service, and strips the `/orgs/{org}`
/// prefix the Connect router does not know about.
async fn dispatch(
    State(connect): State<ConnectRpcService>,
    Path((org, method)): Path<(String, String)>,
    mut req: Request,
) -> Response {
    if let Err(e) = check_org(&org) {
        return ConnectError::invalid_argument(e.to_string()).into_response();
    }
    let Ok(uri) = format!("/organization.v1.PluginService/{method}").parse::<Uri>() else {
        return ConnectError::not_found("no such method").into_response();
    };
    *req.uri_mut() = uri;
    req.extensions_mut().insert(Org(org));
    match tower::ServiceExt::oneshot(connect, req).await {
        Ok(res) => res.into_response(),
        Err(never) => match never {},
    }
}

struct OrgPlugins {
    worker: Arc<Worker>,
}

fn org(ctx: &RequestContext) -> Result<&str, ConnectError> {
    ctx.extensions()
        .get::<Org>()
        .map(|o| o.0.as_str())
        .ok_or_else(|| {
            ConnectError::internal("request reached the service without its organization")
        })
}

impl OrgPlugins {
    /// The organization's view for a caller whose token may read it.
    async fn read(&self, ctx: &RequestContext) -> Result<OrgView, ConnectError> {
        let org = org(ctx)?;
        authorize(&self.worker, ctx.headers(), org, false)
            .await
            .map_err(to_connect)?;
        self.worker
            .view(org)
            .await
            .map_err(|e| to_connect(e.into()))
    }

    /// The plugin `plugin_id` names in `view`, as Fundament is offered it.
    fn find<'v>(view: &'v OrgView, plugin_id: &str) -> Result<Cow<'v, Plugin>, ConnectError> {
        let id = ids::parse("plugin_id", plugin_id).map_err(ConnectError::invalid_argument)?;
        view.by_id(&id).and_then(installable).ok_or_else(|| {
            ConnectError::not_found(format!(
                "no plugin {id} is offered to organization {}",
                view.org
            ))
        })
    }
}

/// `p` with only the versions Fundament can install; `None` when it has none.
fn installable(p: &Plugin) -> Option<Cow<'_, Plugin>> {
    let ok = |o: &Offer| o.summary.not_installable.is_none();
    if p.versions.values().all(ok) {
        return Some(Cow::Borrowed(p));
    }
    let versions: std::collections::BTreeMap<_, _> = p
        .versions
        .iter()
        .filter(|(_, o)| ok(o))
        .map(|(v, o)| (v.clone(), o.clone()))
        .collect();
    (!versions.is_empty()).then(|| {
        Cow::Owned(Plugin {
            name: p.name.clone(),
            publisher: p.publisher.clone(),
            origin: p.origin,
            versions,
        })
    })
}

/// The version a listing pins: the newest installable one, if any.
fn pin(p: &Plugin) -> (String, String) {
    p.latest()
        .map(|o| (written(o), o.hash.clone()))
        .unwrap_or_default()
}

/// The version as its definition spells it (`v1.19.3`), which Fundament compares.
fn written(o: &Offer) -> String {
    if o.summary.version_as_written.is_empty() {
        o.version.to_string()
    } else {
        o.summary.version_as_written.clone()
    }
}

/// The offer a listing describes: the pinned one, else the newest (all yanked).
fn shown(p: &Plugin) -> Option<&Offer> {
    p.latest().or_else(|| p.versions.values().next_back())
}

fn tags(o: Option<&Offer>) -> Vec<pb::Tag> {
    o.map(|o| {
        o.summary
            .tags
            .iter()
            .map(|t| pb::Tag {
                id: ids::tag(t),
                name: t.clone(),
                ..Default::default()
            })
            .collect()
    })
    .unwrap_or_default()
}

fn summary(p: &Plugin) -> pb::PluginSummary {
    let offer = shown(p);
    let s = offer.map(|o| o.summary.as_ref());
    let (plugin_version, definition_hash) = pin(p);
    pb::PluginSummary {
        id: ids::org_plugin(&p.name),
        name: p.name.clone(),
        display_name: s.map(|s| s.display_name.clone()).unwrap_or_default(),
        description: s.map(|s| s.description.clone()).unwrap_or_default(),
        description_short: s
            .map(|s| short(&s.description, SHORT_DESCRIPTION))
            .unwrap_or_default(),
        tags: tags(offer),
        categories: Vec::new(),
        image: s.map(|s| s.image.clone()).unwrap_or_default(),
        plugin_version,
        definition_hash,
        ..Default::default()
    }
}

// The methods return their concrete messages where the trait allows any encodable
// body; that refinement is what connectrpc's own examples do.
#[allow(refining_impl_trait)]
impl pb::PluginService for OrgPlugins {
    async fn list_plugins(
        &self,
        ctx: RequestContext,
        _request: ServiceRequest<'_, pb::ListPluginsRequest>,
    ) -> ServiceResult<pb::ListPluginsResponse> {
        let view = self.read(&ctx).await?;
        connectrpc::Response::ok(pb::ListPluginsResponse {
            plugins: view
                .plugins()
                .filter_map(installable)
                .map(|p| summary(&p))
                .collect(),
            ..Default::default()
        })
    }

    async fn get_plugin_detail(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::GetPluginDetailRequest>,
    ) -> ServiceResult<pb::GetPluginDetailResponse> {
        let view = self.read(&ctx).await?;
        let p = &*Self::find(&view, request.plugin_id)?;
        let s = summary(p);
        // Author and links are not in the view's summaries: read the shown definition.
        let def = match shown(p) {
            Some(o) => self
                .worker
                .offer_bytes(&view.org, &p.name, o)
                .await
                .map_err(|e| to_connect(e.into()))?
                .map(|(bytes, _)| parsed(&bytes))
                .transpose()?,
            None => None,
        };
        let meta = def.as_ref().map(|d| &d.manifest.metadata);
        let url = |kind: &str| -> String {
            let Some(m) = meta else { return String::new() };
            let v = match kind {
                "homepage" => &m.urls.homepage,
                "documentation" => &m.urls.documentation,
                _ => &m.urls.repository,
            };
            v.as_ref().map(|u| u.value.clone()).unwrap_or_default()
        };
        let documentation_links = [
            ("homepage", "Homepage"),
            ("documentation", "Documentation"),
            ("repository", "Source repository"),
        ]
        .into_iter()
        .filter(|(kind, _)| !url(kind).is_empty())
        .map(|(kind, title)| pb::DocumentationLink {
            id: ids::link(&s.id, kind),
            title: title.to_owned(),
            url_name: kind.to_owned(),
            url: url(kind),
            ..Default::default()
        })
        .collect();
        let detail = pb::PluginDetail {
            author: pb::Author {
                name: meta
                    .and_then(|m| m.author.as_ref())
                    .map(|a| a.value.clone())
                    .unwrap_or_default(),
                url: url("homepage"),
                ..Default::default()
            }
            .into(),
            repository_url: url("repository"),
            documentation_links,
            id: s.id,
            name: s.name,
            display_name: s.display_name,
            description: s.description,
            description_short: s.description_short,
            tags: s.tags,
            categories: s.categories,
            plugin_version: s.plugin_version,
            definition_hash: s.definition_hash,
            ..Default::default()
        };
        connectrpc::Response::ok(pb::GetPluginDetailResponse {
            plugin: detail.into(),
            ..Default::default()
        })
    }

    async fn list_presets(
        &self,
        ctx: RequestContext,
        _request: ServiceRequest<'_, pb::ListPresetsRequest>,
    ) -> ServiceResult<pb::ListPresetsResponse> {
        let view = self.read(&ctx).await?;
        // A preset lists only what this organization is offered; one left empty is
        // not shown, as the console could install none of it.
        let presets = self
            .worker
            .config()
            .fundament
            .presets
            .iter()
            .filter_map(|preset| {
                let plugin_ids: Vec<String> = preset
                    .plugins
                    .iter()
                    .filter(|name| view.plugin(name).and_then(installable).is_some())
                    .map(|name| ids::org_plugin(name))
                    .collect();
                (!plugin_ids.is_empty()).then(|| pb::Preset {
                    id: ids::preset(&preset.name),
                    name: preset.name.clone(),
                    description: preset.description.clone(),
                    plugin_ids,
                    ..Default::default()
                })
            })
            .collect();
        connectrpc::Response::ok(pb::ListPresetsResponse {
            presets,
            ..Default::default()
        })
    }

    async fn list_plugin_definitions(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::ListPluginDefinitionsRequest>,
    ) -> ServiceResult<pb::ListPluginDefinitionsResponse> {
        let view = self.read(&ctx).await?;
        let p = &*Self::find(&view, request.plugin_id)?;
        connectrpc::Response::ok(pb::ListPluginDefinitionsResponse {
            definitions: p
                .versions
                .values()
                .rev()
                .filter(|o| !o.yanked)
                .map(|o| pb::PluginDefinitionVersion {
                    version: written(o),
                    hash: o.hash.clone(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
    }

    async fn put_plugin_definition(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::PutPluginDefinitionRequest>,
    ) -> ServiceResult<pb::PutPluginDefinitionResponse> {
        let org = org(&ctx)?;
        let token_id = authorize(&self.worker, ctx.headers(), org, true)
            .await
            .map_err(to_connect)?;
        if request.manifest.is_empty() {
            return Err(ConnectError::invalid_argument("manifest: empty"));
        }
        if request.manifest.len() > MAX_DEFINITION_BYTES {
            return Err(ConnectError::invalid_argument(format!(
                "manifest: larger than {MAX_DEFINITION_BYTES} bytes"
            )));
        }
        let def = Definition::parse(request.manifest).map_err(|e| {
            to_connect(
                HttpError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    ErrorCode::InvalidDefinition,
                    format!("manifest: {e}"),
                )
                .with_details(serde_json::json!({ "problems": e.problems })),
            )
        })?;
        let plugin_id = ids::org_plugin(def.name());
        if !request.plugin_id.is_empty() && request.plugin_id != plugin_id {
            return Err(ConnectError::invalid_argument(format!(
                "plugin_id: `{}` is not the id of plugin {} ({plugin_id})",
                request.plugin_id.chars().take(80).collect::<String>(),
                def.name()
            )));
        }
        if !request.plugin_version.is_empty()
            && version_param("plugin_version", request.plugin_version).map_err(to_connect)?
                != def.version
        {
            return Err(ConnectError::invalid_argument(format!(
                "plugin_version: `{}` is not the manifest's version {}",
                request.plugin_version.chars().take(80).collect::<String>(),
                def.version_text()
            )));
        }
        let on_conflict = if request.replace {
            OnConflict::Replace
        } else {
            OnConflict::Refuse
        };
        let def = self
            .worker
            .sideload_definition(org, def, &token_id, on_conflict)
            .await
            .map_err(|e| to_connect(e.into()))?
            .0;
        let version = def.version.to_string();
        connectrpc::Response::ok(pb::PutPluginDefinitionResponse {
            id: ids::definition(org, def.name(), &version, &def.hash),
            plugin_id,
            plugin_version: def.version_text().to_owned(),
            hash: def.hash,
            ..Default::default()
        })
    }

    async fn get_plugin_definition(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::GetPluginDefinitionRequest>,
    ) -> ServiceResult<pb::GetPluginDefinitionResponse> {
        let org = org(&ctx)?;
        let anonymous = !ctx.headers().contains_key(header::AUTHORIZATION);
        let mode = self.worker.config().fundament.anonymous_definitions;
        if anonymous && mode == AnonymousDefinitions::None {
            return Err(ConnectError::unauthenticated(
                "this worker requires a token (fundament.anonymousDefinitions: none)",
            ));
        }
        if !anonymous {
            authorize(&self.worker, ctx.headers(), org, false)
                .await
                .map_err(to_connect)?;
        }
        let name = request.plugin_name;
        if !is_dns_label(name) {
            return Err(ConnectError::invalid_argument(format!(
                "plugin_name: `{}` is not a plugin name (DNS-1123 label)",
                name.chars().take(80).collect::<String>()
            )));
        }
        let version =
            version_param("plugin_version", request.plugin_version).map_err(to_connect)?;
        let not_offered = || {
            ConnectError::not_found(format!(
                "plugin {name} {} is not offered to organization {org}",
                request.plugin_version
            ))
        };
        let view = self
            .worker
            .view(org)
            .await
            .map_err(|e| to_connect(e.into()))?;
        let offer = view
            .plugin(name)
            .and_then(|p| p.versions.get(&version))
            .ok_or_else(not_offered)?;
        if let Some(fields) = &offer.summary.not_installable {
            return Err(ConnectError::not_found(format!(
                "plugin {name} {} is published in the marketplace's older definition design, which Fundament cannot install ({fields}); it is not offered through this contract",
                request.plugin_version
            )));
        }
        let (bytes, trust) = self
            .worker
            .offer_bytes(org, name, offer)
            .await
            .map_err(|e| to_connect(e.into()))?
            .ok_or_else(not_offered)?;
        if anonymous
            && mode == AnonymousDefinitions::Public
            && matches!(trust, Trust::Sideloaded { .. })
        {
            return Err(ConnectError::unauthenticated(
                "a sideloaded definition needs the organization's token (fundament.anonymousDefinitions: public)",
            ));
        }
        let def = parsed(&bytes)?;
        connectrpc::Response::ok(pb::GetPluginDefinitionResponse {
            hash: def.hash.clone(),
            definition: definition::to_proto(&def).into(),
            manifest: bytes,
            ..Default::default()
        })
    }
}

/// Stored definitions were validated on the way in (and only installable ones reach
/// here); one that no longer parses is our fault, not the caller's.
fn parsed(bytes: &[u8]) -> Result<Definition, ConnectError> {
    Definition::parse(bytes).map_err(|e| {
        tracing::error!(error = %e, "a stored definition no longer validates");
        ConnectError::internal("a stored definition no longer validates")
    })
}
