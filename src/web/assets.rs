//! Static files (CSS, icons), embedded in the binary so a deployment is one file.

use std::borrow::Cow;

use rust_embed::RustEmbed;

#[derive(RustEmbed)]
#[folder = "static/"]
struct Static;

/// One embedded file, ready to serve.
pub struct Asset {
    pub data: Cow<'static, [u8]>,
    pub mime: &'static str,
    /// A strong validator: the first 16 bytes of the file's sha256, quoted.
    pub etag: String,
}

/// The embedded file at `path`, if there is one.
pub fn get(path: &str) -> Option<Asset> {
    let file = Static::get(path)?;
    let mime = match path.rsplit('.').next() {
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("js") => "text/javascript; charset=utf-8",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        _ => "application/octet-stream",
    };
    let etag = format!("\"{}\"", hex::encode(&file.metadata.sha256_hash()[..16]));
    Some(Asset {
        data: file.data,
        mime,
        etag,
    })
}
