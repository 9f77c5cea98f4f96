//! The OpenAPI 3.1 description of the worker's local API, served at `/openapi.json`:
//! generated from the handlers' own types like the server's (`api::openapi`), with the
//! same error shape attached to every operation.
//!
//! Layering: HTTP only; describes the other handlers, calls nothing.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api::openapi::ErrorResponses;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Fundament Plugin Marketplace: sync worker",
        description = "The sync worker's local API: what each organization may install, merged from the built-in definitions, the marketplaces it follows and the organization's sideloads. Fundament's own contract (organization.v1, Connect, under /orgs/{org}/) and /metrics are not in this document.",
    ),
    paths(
        super::status,
        super::plugins,
        super::plugin,
        super::upgrades,
        super::definition,
        super::install_plan,
        super::sideloads::list_sideloads,
        super::sideloads::add_sideload,
        super::sideloads::get_sideload,
        super::sideloads::delete_version,
        super::sideloads::delete_name,
    ),
    components(schemas(crate::api::error::Body)),
    modifiers(&OrgToken, &ErrorResponses),
    tags(
        (name = "status", description = "The sources and how their last rounds went"),
        (name = "plugins", description = "What an organization may install (its token, or a reader token)"),
        (name = "sideloads", description = "An organization's own definitions (its token)"),
    )
)]
struct WorkerDoc;

/// The bearer token the organization operations name.
struct OrgToken;

impl Modify for OrgToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let mut http = Http::new(HttpAuthScheme::Bearer);
        http.description = Some(
            "An organization's token, or a reader token for what is offered (`marketplace sync token create --org ORG | --reader`)"
                .to_owned(),
        );
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme("org_token", SecurityScheme::Http(http));
    }
}

/// The document, as served.
pub fn document() -> &'static str {
    static JSON: LazyLock<String> = LazyLock::new(|| {
        WorkerDoc::openapi()
            .to_pretty_json()
            .expect("the description serializes")
    });
    &JSON
}

pub(super) async fn serve() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], document())
}
