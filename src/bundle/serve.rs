//! An extracted bundle served to this process on loopback, as a marketplace serves its
//! `/tuf/` and `/v2/`: so importing runs the very client code that follows an online
//! upstream and mirrors from it (`upstream::follow`, the mirror's puller), with all
//! their checks. Read-only; what the layout lacks (a `--since` bundle leaves out what
//! an earlier one brought) is answered from this marketplace's blob store.

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{Toc, TocContent, TocImage};
use crate::blob::{BlobStore, Digest};

struct Served {
    dir: PathBuf,
    toc: Toc,
    blobs: Arc<dyn BlobStore>,
}

/// A running loopback server; stopped when dropped.
pub(super) struct Loopback {
    pub url: url::Url,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Loopback {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(super) async fn start(
    dir: PathBuf,
    toc: Toc,
    blobs: Arc<dyn BlobStore>,
) -> Result<Loopback, super::BundleError> {
    let served = Arc::new(Served { dir, toc, blobs });
    let app = axum::Router::new()
        .route("/tuf/metadata/{file}", get(metadata))
        .route("/tuf/targets/{*path}", get(target))
        .route("/v2/", get(|| async { axum::Json(serde_json::json!({})) }))
        .route("/v2/{*rest}", get(registry))
        .with_state(served);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(super::BundleError::io("listening on loopback"))?;
    let addr = listener
        .local_addr()
        .map_err(super::BundleError::io("listening on loopback"))?;
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(Loopback {
        url: url::Url::parse(&format!("http://{addr}/")).expect("a loopback URL"),
        task,
    })
}

fn not_found() -> Response {
    StatusCode::NOT_FOUND.into_response()
}

async fn file(path: PathBuf, content_type: &str) -> Response {
    match tokio::fs::read(&path).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, content_type.to_owned())], bytes).into_response(),
        Err(_) => not_found(),
    }
}

async fn metadata(State(s): State<Arc<Served>>, UrlPath(file_name): UrlPath<String>) -> Response {
    if file_name.contains('/') || file_name.starts_with('.') {
        return not_found();
    }
    file(
        s.dir.join("tuf/metadata").join(file_name),
        "application/json",
    )
    .await
}

async fn target(State(s): State<Arc<Served>>, UrlPath(path): UrlPath<String>) -> Response {
    if path
        .split('/')
        .any(|p| p.is_empty() || p == "." || p == "..")
    {
        return not_found();
    }
    file(s.dir.join("tuf/targets").join(path), "application/yaml").await
}

/// A blob or manifest: from the layout, else from this marketplace's blob store.
async fn blob(s: &Served, c: &TocContent) -> Response {
    let Ok(digest) = c.digest.parse::<Digest>() else {
        return not_found();
    };
    let headers = [
        (header::CONTENT_TYPE, c.media_type.clone()),
        (header::CONTENT_LENGTH, c.size.to_string()),
        (
            header::HeaderName::from_static("docker-content-digest"),
            c.digest.clone(),
        ),
    ];
    let path = s.dir.join("oci/blobs/sha256").join(digest.hex());
    if let Ok(f) = tokio::fs::File::open(&path).await {
        let stream = futures_util::stream::unfold(f, |mut f| async move {
            use tokio::io::AsyncReadExt;
            let mut buf = vec![0u8; 256 * 1024];
            match f.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok::<_, std::io::Error>(bytes::Bytes::from(buf)), f))
                }
                Err(e) => Some((Err(e), f)),
            }
        });
        return (headers, Body::from_stream(stream)).into_response();
    }
    match s.blobs.open(&digest, None).await {
        Ok(Some(b)) => (headers, Body::from_stream(b.body)).into_response(),
        _ => not_found(),
    }
}

/// `/v2/HOST/REPOSITORY/{manifests/REF, blobs/DIGEST, referrers/DIGEST, tags/list}`,
/// the direct names the mirror pulls through a marketplace with.
async fn registry(State(s): State<Arc<Served>>, UrlPath(rest): UrlPath<String>) -> Response {
    let split = ["/manifests/", "/blobs/", "/referrers/"]
        .iter()
        .find_map(|k| rest.rsplit_once(k).map(|(n, r)| (n, *k, r)));
    let (name, kind, reference) = match split {
        Some(found) => found,
        None => match rest.strip_suffix("/tags/list") {
            Some(name) => (name, "/tags/list", ""),
            None => return not_found(),
        },
    };
    let Some((host, repository)) = name.split_once('/') else {
        return not_found();
    };
    let host = host.replace('_', ":");
    let images: Vec<&TocImage> = s
        .toc
        .images
        .iter()
        .filter(|i| i.host == host && i.repository == repository)
        .collect();
    if images.is_empty() {
        return not_found();
    }
    let content = |digest: &str, manifest: bool| {
        images
            .iter()
            .flat_map(|i| &i.content)
            .find(|c| c.digest == digest && (c.manifest || !manifest))
    };
    match kind {
        "/manifests/" => {
            let digest = if reference.starts_with("sha256:") {
                Some(reference.to_owned())
            } else {
                images
                    .iter()
                    .flat_map(|i| &i.tags)
                    .find(|(t, _)| t == reference)
                    .map(|(_, d)| d.clone())
            };
            match digest.as_deref().and_then(|d| content(d, true)) {
                Some(c) => blob(&s, c).await,
                None => not_found(),
            }
        }
        "/blobs/" => match content(reference, false) {
            Some(c) => blob(&s, c).await,
            None => not_found(),
        },
        "/referrers/" => {
            let listed: Vec<serde_json::Value> = images
                .iter()
                .flat_map(|i| &i.content)
                .filter(|c| c.manifest && c.subject.as_deref() == Some(reference))
                .map(|c| {
                    let mut d = serde_json::json!({
                        "mediaType": c.media_type, "digest": c.digest, "size": c.size,
                    });
                    if let Some(t) = &c.artifact_type {
                        d["artifactType"] = t.clone().into();
                    }
                    if let Some(a) = c
                        .annotations
                        .as_deref()
                        .and_then(|a| serde_json::from_str::<serde_json::Value>(a).ok())
                    {
                        d["annotations"] = a;
                    }
                    d
                })
                .collect();
            (
                [(header::CONTENT_TYPE, crate::registry::manifest::OCI_INDEX)],
                axum::Json(serde_json::json!({
                    "schemaVersion": 2,
                    "mediaType": crate::registry::manifest::OCI_INDEX,
                    "manifests": listed,
                })),
            )
                .into_response()
        }
        _ => {
            let mut tags: Vec<&String> = images
                .iter()
                .flat_map(|i| &i.tags)
                .map(|(t, _)| t)
                .collect();
            tags.sort();
            tags.dedup();
            axum::Json(serde_json::json!({ "name": name, "tags": tags })).into_response()
        }
    }
}
