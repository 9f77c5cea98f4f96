//! `/orgs/{org}/sideloads…`: an organization's sideloaded definitions, changed only with
//! that organization's token (a reader token may not).
//!
//! Layering: HTTP only; storing and checking is `sync::Worker`'s.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::answers::{OrgSideloads, SideloadAdded, SideloadItem, sorted};
use super::{Shared, authorize, version_param};
use crate::api::error::{ErrorCode, HttpError};
use crate::api::layers::too_large;
use crate::definition::{MAX_DEFINITION_BYTES, MAX_EXTRAS_BYTES};
use crate::sync::sideload::{Added, OnConflict};
use crate::sync::store::Sideloads as _;
use crate::sync::worker::Worker;

/// The organization's sideloads, by name then version.
#[utoipa::path(
    get,
    path = "/orgs/{org}/sideloads",
    tag = "sideloads",
    params(("org" = String, Path, description = "The organization")),
    security(("org_token" = [])),
    responses((status = 200, description = "The organization's sideloads", body = OrgSideloads))
)]
pub(super) async fn list_sideloads(
    State(worker): Shared,
    Path(org): Path<String>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    authorize(&worker, &headers, &org, true).await?;
    let sideloads: Vec<SideloadItem> = worker
        .store()
        .sideloads(&org)
        .await?
        .into_iter()
        .map(SideloadItem::from)
        .collect();
    Ok(sorted(&OrgSideloads { org, sideloads }).into_response())
}

/// A sideload with its companion document: `{"definition": YAML, "extras": YAML}`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SideloadBody {
    /// The definition's YAML, exactly as it is to be stored.
    definition: String,
    /// The companion document (dependencies, suggestions, cluster capabilities), YAML.
    #[serde(default)]
    extras: Option<String>,
}

/// Sideloads a definition: the body is its YAML, or (as `application/json`) a
/// `SideloadBody`. 201 when new; 200 when the same bytes were there already.
#[utoipa::path(
    post,
    path = "/orgs/{org}/sideloads",
    tag = "sideloads",
    params(("org" = String, Path, description = "The organization")),
    request_body(content(
        (SideloadBody = "application/json"),
        (String = "application/yaml"),
    )),
    security(("org_token" = [])),
    responses(
        (status = 201, description = "Sideloaded", body = SideloadAdded),
        (status = 200, description = "Already sideloaded with the same bytes", body = SideloadAdded),
    )
)]
pub(super) async fn add_sideload(
    State(worker): Shared,
    Path(org): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, HttpError> {
    let token_id = authorize(&worker, &headers, &org, true).await?;
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    let (definition, extras) = if json {
        let parsed: SideloadBody = serde_json::from_slice(&body).map_err(|e| {
            HttpError::new(
                StatusCode::BAD_REQUEST,
                ErrorCode::BadRequest,
                format!("body: expected {{\"definition\": YAML, \"extras\": YAML}}: {e}"),
            )
        })?;
        (
            Bytes::from(parsed.definition),
            parsed.extras.map(Bytes::from),
        )
    } else {
        (body, None)
    };
    if definition.len() > MAX_DEFINITION_BYTES {
        return Err(too_large(MAX_DEFINITION_BYTES));
    }
    if extras.as_ref().is_some_and(|e| e.len() > MAX_EXTRAS_BYTES) {
        return Err(too_large(MAX_EXTRAS_BYTES));
    }
    let (def, added) = worker
        .sideload(
            &org,
            &definition,
            extras.as_deref(),
            &token_id,
            OnConflict::Refuse,
        )
        .await?;
    let status = match added {
        Added::New => StatusCode::CREATED,
        Added::Unchanged | Added::Replaced => StatusCode::OK,
    };
    let answer = SideloadAdded {
        name: def.name().to_owned(),
        version: def.version.to_string(),
        hash: def.hash.clone(),
        org,
    };
    Ok((status, sorted(&answer)).into_response())
}

/// One sideloaded version's definition, as stored.
#[utoipa::path(
    get,
    path = "/orgs/{org}/sideloads/{name}/{version}",
    tag = "sideloads",
    params(
        ("org" = String, Path, description = "The organization"),
        ("name" = String, Path, description = "The plugin's name"),
        ("version" = String, Path, description = "A semantic version, with or without `v`"),
    ),
    security(("org_token" = [])),
    responses((status = 200, description = "The definition", body = Object, content_type = "application/yaml"))
)]
pub(super) async fn get_sideload(
    State(worker): Shared,
    Path((org, name, version)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    authorize(&worker, &headers, &org, true).await?;
    let canonical = canonical(&version)?;
    let bytes = worker
        .store()
        .sideload_bytes(&org, &name, &canonical)
        .await?
        .ok_or_else(|| HttpError::not_found(format!("no sideload {name} {version} in {org}")))?;
    Ok(([(header::CONTENT_TYPE, "application/yaml")], bytes).into_response())
}

/// Removes one sideloaded version.
#[utoipa::path(
    delete,
    path = "/orgs/{org}/sideloads/{name}/{version}",
    tag = "sideloads",
    params(
        ("org" = String, Path, description = "The organization"),
        ("name" = String, Path, description = "The plugin's name"),
        ("version" = String, Path, description = "A semantic version, with or without `v`"),
    ),
    security(("org_token" = [])),
    responses((status = 204, description = "Removed"))
)]
pub(super) async fn delete_version(
    State(worker): Shared,
    Path((org, name, version)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    authorize(&worker, &headers, &org, true).await?;
    let canonical = canonical(&version)?;
    delete(&worker, &org, &name, Some(&canonical)).await
}

/// Removes every sideloaded version of a plugin.
#[utoipa::path(
    delete,
    path = "/orgs/{org}/sideloads/{name}",
    tag = "sideloads",
    params(
        ("org" = String, Path, description = "The organization"),
        ("name" = String, Path, description = "The plugin's name"),
    ),
    security(("org_token" = [])),
    responses((status = 204, description = "Removed"))
)]
pub(super) async fn delete_name(
    State(worker): Shared,
    Path((org, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    authorize(&worker, &headers, &org, true).await?;
    delete(&worker, &org, &name, None).await
}

async fn delete(
    worker: &Worker,
    org: &str,
    name: &str,
    version: Option<&str>,
) -> Result<Response, HttpError> {
    match worker.store().delete_sideloads(org, name, version).await? {
        0 => Err(HttpError::not_found(format!(
            "no sideload {name}{} in {org}",
            version.map(|v| format!(" {v}")).unwrap_or_default()
        ))),
        _ => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

fn canonical(version: &str) -> Result<String, HttpError> {
    version_param("version", version).map(|v| v.to_string())
}
