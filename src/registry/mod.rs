//! The marketplace's OCI registry, as a domain: which mirrored images exist, the
//! manifests, blobs and tags each serves, and the rules for serving them (only images
//! a published definition references). Knows nothing of HTTP (`api::registry` is the
//! `/v2/` surface) and keeps bytes in a `blob::BlobStore`.

pub mod manifest;

pub use manifest::{Descriptor, Manifest, ManifestError};
