//! `--keys-dir` and `--blob-store`: where the online signing keys and the mirrored
//! images are, for every command that signs or touches blobs. Both default to the data
//! directory; replicas take the keys from a mounted Secret and the blobs from a bucket.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use crate::blob::{BlobStore, FsBlobStore, S3BlobStore, S3Location};

#[derive(Debug, Clone, Args)]
pub(super) struct KeysDirArgs {
    /// The online signing keys (`targets.pem`, `snapshot.pem`, `timestamp.pem`,
    /// `fundament.pem`): a directory such as a Kubernetes Secret mounted read-only,
    /// the same on every replica. Default: `DATA_DIR/keys`. Keys never live in the
    /// database.
    #[arg(long, env = "MARKETPLACE_KEYS_DIR", global = true)]
    keys_dir: Option<PathBuf>,
}

impl KeysDirArgs {
    pub(super) fn dir(&self, data_dir: &Path) -> PathBuf {
        self.keys_dir
            .clone()
            .unwrap_or_else(|| crate::trust::server::repo::keys_dir(data_dir))
    }
}

/// Where blobs go, as given.
#[derive(Debug, Clone)]
enum BlobPlace {
    Dir(PathBuf),
    S3(S3Location),
}

fn parse_blob_place(s: &str) -> Result<BlobPlace, String> {
    if s.starts_with("s3://") {
        return S3Location::parse(s).map(BlobPlace::S3);
    }
    if s.contains("://") {
        return Err(format!(
            "`{s}`: a blob store is a directory or s3://BUCKET/PREFIX"
        ));
    }
    if s.is_empty() {
        return Err("the blob store is empty".into());
    }
    Ok(BlobPlace::Dir(PathBuf::from(s)))
}

/// An S3 endpoint: http(s), a host, nothing secret.
fn parse_endpoint(s: &str) -> Result<String, String> {
    let url = url::Url::parse(s).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("`{}` is not http(s)://HOST[:PORT]", url.scheme()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        // Never echo it: it may hold a secret.
        return Err(
            "the endpoint holds credentials; give them in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a credentials file) instead".into(),
        );
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("the endpoint takes no query or fragment".into());
    }
    Ok(s.trim_end_matches('/').to_owned())
}

#[derive(Debug, Clone, Args)]
pub(super) struct BlobArgs {
    /// Where mirrored image content is kept: a directory, or `s3://BUCKET/PREFIX` in an
    /// S3-compatible store shared by replicas (credentials from the standard AWS
    /// environment variables or files, never a flag). Default: `DATA_DIR/blobs`.
    #[arg(long, env = "MARKETPLACE_BLOB_STORE", value_parser = parse_blob_place, global = true)]
    blob_store: Option<BlobPlace>,
    /// The S3-compatible service's URL (`https://s3.example.net`, `http://garage:3900`);
    /// AWS S3 itself when absent (`AWS_ENDPOINT` is read too).
    // Checked in `open`, not by clap: clap's refusal would echo a value that may hold
    // a secret.
    #[arg(
        long,
        env = "MARKETPLACE_BLOB_ENDPOINT",
        hide_env_values = true,
        global = true
    )]
    blob_endpoint: Option<String>,
    /// The region requests are signed for; it must be the store's (`AWS_REGION` when
    /// absent; Garage's default is `garage`).
    #[arg(long, env = "MARKETPLACE_BLOB_REGION", global = true)]
    blob_region: Option<String>,
    /// Path-style requests (`ENDPOINT/BUCKET/KEY`), as Garage, MinIO and most
    /// self-hosted stores want, instead of `BUCKET.ENDPOINT/KEY`.
    #[arg(long, env = "MARKETPLACE_BLOB_PATH_STYLE", value_parser = clap::builder::BoolishValueParser::new(), global = true)]
    blob_path_style: bool,
}

impl BlobArgs {
    /// Opens the blob store these arguments name; an S3 store is reached once, so a
    /// wrong bucket, endpoint, region or credentials stop the command here.
    pub(super) async fn open(&self, data_dir: &Path) -> anyhow::Result<Arc<dyn BlobStore>> {
        let place = match &self.blob_store {
            Some(place) => place.clone(),
            None => BlobPlace::Dir(data_dir.join("blobs")),
        };
        match place {
            BlobPlace::Dir(root) => {
                if self.blob_endpoint.is_some()
                    || self.blob_region.is_some()
                    || self.blob_path_style
                {
                    anyhow::bail!(
                        "--blob-endpoint, --blob-region and --blob-path-style apply to an s3:// --blob-store only"
                    );
                }
                let store = FsBlobStore::open(&root)
                    .with_context(|| format!("opening the blob store {}", root.display()))?;
                Ok(Arc::new(store))
            }
            BlobPlace::S3(mut location) => {
                location.endpoint = match &self.blob_endpoint {
                    Some(e) => Some(
                        parse_endpoint(e)
                            .map_err(|why| anyhow::anyhow!("--blob-endpoint: {why}"))?,
                    ),
                    None => None,
                };
                location.region = self.blob_region.clone();
                location.path_style = self.blob_path_style;
                let store = S3BlobStore::open(&location)
                    .with_context(|| format!("opening the blob store {location}"))?;
                store
                    .check()
                    .await
                    .with_context(|| format!("reaching the blob store {location}"))?;
                tracing::info!(blob_store = %location, "blob store opened");
                Ok(Arc::new(store))
            }
        }
    }

    /// Whether blobs live in an S3 store (which can hand out presigned URLs).
    pub(super) fn is_s3(&self) -> bool {
        matches!(self.blob_store, Some(BlobPlace::S3(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_places_and_endpoints_parse_strictly() {
        assert!(matches!(
            parse_blob_place("s3://bucket/p"),
            Ok(BlobPlace::S3(_))
        ));
        assert!(matches!(
            parse_blob_place("/var/blobs"),
            Ok(BlobPlace::Dir(_))
        ));
        assert!(parse_blob_place("gs://bucket").is_err());
        assert!(parse_blob_place("s3://B").is_err());
        assert_eq!(
            parse_endpoint("http://127.0.0.1:3900/").unwrap(),
            "http://127.0.0.1:3900"
        );
        let secret = parse_endpoint("https://AKIA:hunter2@s3.example.net").unwrap_err();
        assert!(!secret.contains("hunter2"), "{secret}");
        assert!(parse_endpoint("ftp://host").is_err());
        assert!(parse_endpoint("https://host/?x=1").is_err());
    }
}
