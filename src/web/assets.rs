//! Static files (CSS, icons), embedded in the binary so a deployment is one file.

use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use rust_embed::RustEmbed;

use crate::http::HttpError;

#[derive(RustEmbed)]
#[folder = "static/"]
struct Static;

pub async fn serve(Path(path): Path<String>) -> Response {
    let Some(file) = Static::get(&path) else {
        return super::PageError(HttpError::not_found(format!("no static file {path}")))
            .into_response();
    };
    let mime = match path.rsplit('.').next() {
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("js") => "text/javascript; charset=utf-8",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        _ => "application/octet-stream",
    };
    let etag = format!("\"{}\"", hex::encode(&file.metadata.sha256_hash()[..16]));
    (
        [
            (header::CONTENT_TYPE, mime.to_owned()),
            (header::ETAG, etag),
            (header::CACHE_CONTROL, "public, max-age=3600".to_owned()),
        ],
        file.data,
    )
        .into_response()
}
