//! The OpenAPI 3.1 description of the server's JSON API, generated from the handlers'
//! own types (`utoipa`) and served at `/api/v1/openapi.json`. Every operation answers a
//! refusal or failure in the one error shape (`ErrorBody`), which the description
//! attaches to each as `4XX` and `5XX`. Checked by `openapi-spec-validator` and fuzzed
//! by `schemathesis` against the real binary (`tests/openapi.rs`).
//!
//! Layering: HTTP only; describes the other surfaces, calls nothing.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use super::AppState;
use super::error::HttpError;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Fundament Plugin Marketplace",
        description = "The marketplace server's JSON API: the catalog, publishing, review, the upstream followed, and the admin API for operators. Fundament's own Connect contracts (catalog.v1, registry.v1, admin.v1), the signed index (/tuf/), the OCI registry (/v2/), pages, feeds and /metrics are described by their own specifications and are not in this document.",
    ),
    paths(
        super::catalog::list,
        super::catalog::detail,
        super::catalog::versions,
        super::catalog::raw_definition,
        super::catalog::changes,
        super::publishing::publishers,
        super::publishing::whoami,
        super::publishing::current_role,
        super::publishing::resign,
        super::publishing::publish,
        super::publishing::yank,
        super::publishing::approved,
        super::review::list,
        super::review::show,
        super::upstream::status,
        super::admin::me,
        super::admin::list_publishers,
        super::admin::add_publisher,
        super::admin::suspend,
        super::admin::resume,
        super::admin::rotate_key,
        super::admin::cosign_keys,
        super::admin::new_token,
        super::admin::revoke_tokens,
        super::admin::list_reviewers,
        super::admin::add_reviewer,
        super::admin::revoke_reviewer,
        super::admin::mirror_status,
        super::admin::mirror_retry,
        super::admin::reload_curation,
        super::admin::signed_index,
        super::ops::healthz,
        super::ops::readyz,
    ),
    components(schemas(super::error::Body)),
    modifiers(&SecuritySchemes, &ErrorResponses),
    tags(
        (name = "catalog", description = "Published plugins, as the catalog lists them"),
        (name = "publishing", description = "Publishing signed definitions (a publisher's token: `marketplace publisher add`, `publisher token`)"),
        (name = "review", description = "Reviewing submissions (a reviewer's token: `marketplace reviewer add`); decisions are `admin.v1.ReviewService`"),
        (name = "upstream", description = "The upstream marketplace this one follows (`serve --upstream`)"),
        (name = "admin", description = "Operating the marketplace (an operator's token: `marketplace operator token create`)"),
        (name = "ops", description = "Probes"),
    )
)]
struct ServerDoc;

/// The bearer tokens the operations name.
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for (name, what) in [
            ("operator_token", "An operator's token (`mko_…`)"),
            ("publisher_token", "A publisher's token (`mkt_…`)"),
            ("reviewer_token", "A reviewer's token (`mkr_…`)"),
        ] {
            let mut http = Http::new(HttpAuthScheme::Bearer);
            http.description = Some(what.to_owned());
            components.add_security_scheme(name, SecurityScheme::Http(http));
        }
    }
}

/// The error shape as `4XX` and `5XX` of every operation that does not name its own.
pub(super) struct ErrorResponses;

impl Modify for ErrorResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let response = ResponseBuilder::new()
            .description("Refused or failed: `{\"error\": {\"code\", \"message\", \"details\"?}}`")
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build();
        openapi
            .components
            .get_or_insert_with(Default::default)
            .responses
            .insert("Error".to_owned(), response.into());
        let error = RefOr::Ref(Ref::from_response_name("Error"));
        for item in openapi.paths.paths.values_mut() {
            for op in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                for range in ["4XX", "5XX"] {
                    op.responses
                        .responses
                        .entry(range.to_owned())
                        .or_insert_with(|| error.clone());
                }
            }
        }
    }
}

/// The document, as served.
pub fn document() -> &'static str {
    static JSON: LazyLock<String> = LazyLock::new(|| {
        ServerDoc::openapi()
            .to_pretty_json()
            .expect("the description serializes")
    });
    &JSON
}

pub fn router() -> axum::Router<AppState> {
    let routes = axum::Router::new().route(
        "/api/v1/openapi.json",
        get(|| async { ([(header::CONTENT_TYPE, "application/json")], document()) }),
    );
    super::catalog::LIMITS.apply(routes, HttpError::into_response)
}
