//! Bundles: a connected marketplace's signed index and images in one tar file, for a
//! site with no network at all (`marketplace bundle create`, `marketplace bundle
//! import`).
//!
//! A bundle holds `bundle.json` (the table of contents, [`Toc`]), the TUF tree as
//! `/tuf/` serves it (`tuf/metadata/`: every root version and the current timestamp,
//! snapshot, targets and publisher roles; `tuf/targets/`: the definitions) and an OCI
//! image layout (`oci/`: `oci-layout`, `index.json`, `blobs/sha256/`) with every
//! selected image, its platforms, cosign signatures and referrers. It is written and
//! read as a stream: a blob is never held in memory whole.
//!
//! Importing trusts nothing in the bundle: the importing marketplace serves the
//! extracted files to itself on loopback and follows them exactly as it follows an
//! online upstream (`upstream::follow`, from the root it was configured with, with the
//! rollback protection of the last import), then mirrors the images from there through
//! the same puller that checks every digest. Before any of it, every blob of the
//! layout is hashed on its way into the blob store, so a tampered bundle changes
//! nothing (a blob is stored only when it is its digest; none is served before an
//! image records it).
//!
//! Layering: calls `upstream` (the round), `mirror` (pulling images), `trust`,
//! `store`, `blob`; serves HTTP only to itself on loopback.

mod create;
mod import;
mod open;
mod serve;

use serde::{Deserialize, Serialize};

pub use create::{Created, Selection, create};
pub use import::{Imported, Incoming, import};
pub use open::read_toc;

/// The table of contents' format version.
pub const FORMAT: u32 = 1;
/// The table of contents' name, the bundle's first entry.
pub const TOC: &str = "bundle.json";

/// What a bundle holds, written as `bundle.json`, its first entry. Informative only:
/// importing verifies the TUF tree and every digest itself.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Toc {
    pub format: u32,
    /// When it was written (Unix seconds): the time its metadata is checked at on
    /// import, within `--max-age`.
    pub created_at: i64,
    /// The plugins selected (`--plugins`), `*` for all.
    pub plugins: String,
    /// The platforms of each image index it carries (`--platform`); empty: all.
    #[serde(default)]
    pub platforms: Vec<String>,
    /// The versions of the signed index it carries.
    pub root_version: u64,
    pub timestamp_version: u64,
    pub snapshot_version: u64,
    /// Files under `tuf/metadata/`.
    pub metadata: Vec<String>,
    /// Every target of the publishers it carries: `PUBLISHER/NAME/VERSION.yaml`, its
    /// hash and whether its bytes are in this bundle (not when an earlier bundle
    /// named by `--since` had them).
    pub targets: Vec<TocTarget>,
    /// The images of the selected plugins, with what each consists of.
    pub images: Vec<TocImage>,
    /// Every blob digest an importer has once it imported this bundle (and those
    /// `--since` built on): what a later `--since` leaves out.
    pub blobs: Vec<String>,
    /// Blobs in this bundle's `oci/blobs/`.
    pub blobs_included: usize,
    /// Bytes of those blobs.
    pub bytes_included: u64,
    /// The bundle `--since` built on: its time and snapshot version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Since>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TocTarget {
    pub name: String,
    /// `sha256:<hex>`.
    pub hash: String,
    pub included: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TocImage {
    /// `host[:port]`, as the mirror names it (`docker.io`).
    pub host: String,
    pub repository: String,
    pub digest: String,
    /// Plugins pinning it: `PUBLISHER/NAME`.
    pub plugins: Vec<String>,
    /// Every manifest and blob, as the mirror recorded them.
    pub content: Vec<TocContent>,
    /// cosign's tags (`sha256-<hex>.sig`, `.att`): tag and digest.
    pub tags: Vec<(String, String)>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TocContent {
    pub digest: String,
    pub manifest: bool,
    pub media_type: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Since {
    pub created_at: i64,
    pub snapshot_version: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("{0}")]
    Io(String),
    /// The file is not a bundle, or breaks its rules (paths, sizes, entry kinds).
    #[error("not a valid bundle: {0}")]
    Invalid(String),
    /// Bytes that are not what their digest names.
    #[error("tampered: {0}")]
    Tampered(String),
    #[error("the bundle's metadata did not verify: {0}")]
    Upstream(#[from] crate::upstream::UpstreamError),
    #[error("the signed index is not initialized; run `marketplace repo init`")]
    NotInitialized,
    #[error(transparent)]
    Trust(#[from] crate::trust::TrustError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Blob(#[from] crate::blob::BlobError),
}

impl BundleError {
    fn io(doing: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> BundleError {
        move |e| BundleError::Io(format!("{doing}: {e}"))
    }
}
