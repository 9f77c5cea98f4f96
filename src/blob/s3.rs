//! Blobs in an S3-compatible object store (AWS S3, Ceph RGW, Garage, MinIO) through the
//! `object_store` crate: `PREFIX/sha256/<hex>` for each stored blob, so several
//! replicas share one store.
//!
//! **Nothing is visible under a digest until every byte was checked.** A blob that fits
//! in one part ([`PART`]) is held in memory, hashed, and sent with one `PutObject`,
//! which S3 makes visible whole or not at all. A larger one goes up as a multipart
//! upload, part by part while it streams in (at most [`PARTS_IN_FLIGHT`] parts in
//! memory), and the upload is completed only after the stream ended and its bytes hashed
//! to the digest and counted to the size; on any mismatch, error or cancellation it is
//! aborted. An upload whose process died is never completed, so it is never visible:
//! the store keeps its parts until the bucket's lifecycle rule
//! (`AbortIncompleteMultipartUpload`) or the operator removes them (the README says
//! how). `object_store` cannot list multipart uploads, so [`BlobStore::abandoned`] has
//! nothing to report here.
//!
//! Reads stream (`GetObject`, ranged when asked); presigned `GET` URLs let `/v2/`
//! redirect clients to the store (`serve --blob-redirect`).
//!
//! Credentials come only from the standard AWS sources: `AWS_ACCESS_KEY_ID` /
//! `AWS_SECRET_ACCESS_KEY` (/ `AWS_SESSION_TOKEN`), a web identity token file
//! (`AWS_WEB_IDENTITY_TOKEN_FILE`, as Kubernetes service accounts mount it), the
//! shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`,
//! profile `AWS_PROFILE` or `default`), or the instance metadata service. Never a
//! command-line flag, and never in a log: `S3BlobStore`'s `Debug` and `Display` show
//! the bucket and endpoint only.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::signer::Signer;
use object_store::{
    ClientOptions, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayloadMut, RetryConfig,
    WriteMultipart,
};
use sha2::Digest as _;

use super::fs::MAX_UNSIZED_BYTES;
use super::{Abandoned, Blob, BlobError, BlobStore, ByteStream, Digest, Listed};

/// Bytes per multipart part, and the largest blob sent with one `PutObject`. S3 wants
/// parts of at least 5 MiB (all but the last); 8 MiB keeps a 200 MiB layer at 25 parts.
const PART: usize = 8 * 1024 * 1024;
/// Parts uploading at once: the network stays busy while the next part fills, and
/// memory holds at most this many parts plus the one filling.
const PARTS_IN_FLIGHT: usize = 2;

/// Where the blobs are and how to reach the store; credentials are not here (see the
/// module's documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    pub bucket: String,
    /// Key prefix without leading or trailing `/`; may be empty.
    pub prefix: String,
    /// `https://…` or `http://…` of an S3-compatible service; AWS's own when `None`.
    pub endpoint: Option<String>,
    /// The region requests are signed for (`AWS_REGION` when `None`).
    pub region: Option<String>,
    /// `BUCKET` as the first path segment (`http://host/BUCKET/key`), as Garage,
    /// MinIO and most self-hosted stores want, instead of a `BUCKET.host` name.
    pub path_style: bool,
}

impl S3Location {
    /// Parses `s3://BUCKET[/PREFIX]`.
    pub fn parse(url: &str) -> Result<S3Location, String> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| format!("`{url}` is not an s3://BUCKET/PREFIX location"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        // S3's bucket naming rules (3-63 of a-z, 0-9, '.', '-'; no leading or trailing
        // punctuation): anything else would only fail later, at the first request.
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
            && bucket.starts_with(|c: char| c.is_ascii_alphanumeric())
            && bucket.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !valid_bucket {
            return Err(format!(
                "`{bucket}` is not a bucket name (3 to 63 characters of a-z, 0-9, `.` and `-`)"
            ));
        }
        let prefix = prefix.trim_matches('/');
        if prefix
            .split('/')
            .any(|s| s.is_empty() && !prefix.is_empty())
            || prefix.split('/').any(|s| s == "." || s == "..")
            || prefix.chars().any(|c| c.is_control())
        {
            return Err(format!(
                "`{prefix}` is not a key prefix (no empty, `.` or `..` segments)"
            ));
        }
        Ok(S3Location {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
            endpoint: None,
            region: None,
            path_style: false,
        })
    }
}

impl std::fmt::Display for S3Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}", self.bucket)?;
        if !self.prefix.is_empty() {
            write!(f, "/{}", self.prefix)?;
        }
        if let Some(e) = &self.endpoint {
            write!(f, " at {e}")?;
        }
        Ok(())
    }
}

pub struct S3BlobStore {
    store: Arc<AmazonS3>,
    /// `PREFIX/sha256`, under which every blob is named by its hex digest.
    blobs: ObjectPath,
    location: S3Location,
}

impl std::fmt::Debug for S3BlobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The location only: the client holds credentials.
        f.debug_struct("S3BlobStore")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl S3BlobStore {
    /// A client for `location` with credentials from the standard AWS sources. Makes no
    /// request: [`S3BlobStore::check`] does.
    pub fn open(location: &S3Location) -> Result<S3BlobStore, BlobError> {
        Self::build(location, None)
    }

    /// A client for `location` signing with the access key `key_id` and `secret`, for
    /// programs embedding the library (and tests); the command line never takes keys.
    pub fn with_access_key(
        location: &S3Location,
        key_id: &str,
        secret: &str,
    ) -> Result<S3BlobStore, BlobError> {
        Self::build(
            location,
            Some(Credentials {
                access_key_id: key_id.to_owned(),
                secret_access_key: secret.to_owned(),
                session_token: None,
            }),
        )
    }

    fn build(location: &S3Location, keys: Option<Credentials>) -> Result<S3BlobStore, BlobError> {
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(&location.bucket);
        let keys = match keys {
            Some(keys) => Some(keys),
            None if std::env::var_os("AWS_ACCESS_KEY_ID").is_none()
                && std::env::var_os("AWS_WEB_IDENTITY_TOKEN_FILE").is_none() =>
            {
                credentials_file().map_err(BlobError::storage("reading AWS credentials"))?
            }
            None => None,
        };
        if let Some(found) = keys {
            builder = builder
                .with_access_key_id(found.access_key_id)
                .with_secret_access_key(found.secret_access_key);
            if let Some(token) = found.session_token {
                builder = builder.with_token(token);
            }
        }
        if let Some(endpoint) = &location.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(region) = &location.region {
            builder = builder.with_region(region);
        }
        if location.path_style {
            builder = builder.with_virtual_hosted_style_request(false);
        }
        // A whole-request timeout would cut a large layer streaming to a slow client; a
        // read that stalls for a minute is what fails instead.
        let plain_http = location
            .endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("http://"));
        let client = ClientOptions::new()
            .with_allow_http(plain_http)
            .with_timeout_disabled()
            .with_connect_timeout(Duration::from_secs(5))
            .with_read_timeout(Duration::from_secs(60));
        let retry = RetryConfig {
            max_retries: 4,
            retry_timeout: Duration::from_secs(30),
            ..RetryConfig::default()
        };
        let store = builder
            .with_client_options(client)
            .with_retry(retry)
            .build()
            .map_err(|e| {
                BlobError::storage("configuring the S3 client")(std::io::Error::other(e))
            })?;
        let blobs = if location.prefix.is_empty() {
            ObjectPath::from("sha256")
        } else {
            ObjectPath::from(format!("{}/sha256", location.prefix))
        };
        Ok(S3BlobStore {
            store: Arc::new(store),
            blobs,
            location: location.clone(),
        })
    }

    /// One request that needs the bucket and read access, so a wrong endpoint, region,
    /// bucket or credentials stop the start with the store's own words.
    pub async fn check(&self) -> Result<(), BlobError> {
        let mut listing = self.store.list(Some(&self.blobs));
        match listing.next().await {
            None | Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(storage("reaching the bucket", e)),
        }
    }

    fn path(&self, digest: &Digest) -> ObjectPath {
        self.blobs.clone().join(digest.hex())
    }
}

fn storage(doing: &'static str, e: object_store::Error) -> BlobError {
    BlobError::Storage {
        doing,
        error: std::io::Error::other(e),
    }
}

impl BlobStore for S3BlobStore {
    fn put(
        &self,
        digest: &Digest,
        size: Option<u64>,
        body: ByteStream,
    ) -> BoxFuture<'_, Result<u64, BlobError>> {
        let digest = digest.clone();
        Box::pin(async move {
            if let Some(n) = self.stat(&digest).await? {
                return Ok(n);
            }
            put(&self.store, self.path(&digest), &digest, size, body).await
        })
    }

    fn stat(&self, digest: &Digest) -> BoxFuture<'_, Result<Option<u64>, BlobError>> {
        let path = self.path(digest);
        Box::pin(async move { self.stat_path(&path).await })
    }

    fn open(
        &self,
        digest: &Digest,
        range: Option<Range<u64>>,
    ) -> BoxFuture<'_, Result<Option<Blob>, BlobError>> {
        let path = self.path(digest);
        let digest = digest.clone();
        Box::pin(async move {
            let bad_range = |r: &Range<u64>, size: u64| BlobError::BadRange {
                digest: digest.clone(),
                start: r.start,
                end: r.end,
                size,
            };
            // S3 refuses an empty range: an empty part needs only the blob's size.
            if let Some(r) = range.clone().filter(|r| r.start >= r.end) {
                let Some(size) = self.stat_path(&path).await? else {
                    return Ok(None);
                };
                if r.start > r.end || r.end > size {
                    return Err(bad_range(&r, size));
                }
                let body = Box::pin(futures_util::stream::empty());
                return Ok(Some(Blob {
                    size,
                    range: r,
                    body,
                }));
            }
            let options = GetOptions {
                range: range.clone().map(GetRange::Bounded),
                ..GetOptions::default()
            };
            let got = match self.store.get_opts(&path, options).await {
                Ok(got) => got,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(storage("opening", e)),
            };
            let size = got.meta.size;
            let range = match range {
                None => 0..size,
                // S3 shortens a range past the end; the store's contract refuses it.
                Some(r) if r.end > size || got.range != r => return Err(bad_range(&r, size)),
                Some(r) => r,
            };
            let body = got.into_stream().map_err(std::io::Error::other).boxed();
            Ok(Some(Blob { size, range, body }))
        })
    }

    fn delete(&self, digest: &Digest) -> BoxFuture<'_, Result<bool, BlobError>> {
        let path = self.path(digest);
        Box::pin(async move {
            // S3's DeleteObject succeeds whether or not the key exists.
            if self.stat_path(&path).await?.is_none() {
                return Ok(false);
            }
            match self.store.delete(&path).await {
                Ok(()) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(storage("deleting", e)),
            }
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Listed>, BlobError>> {
        Box::pin(async move {
            let mut out = Vec::new();
            let mut listing = self.store.list(Some(&self.blobs));
            while let Some(meta) = listing.next().await {
                let meta = meta.map_err(|e| storage("listing", e))?;
                // Only `sha256/<hex>` names a blob; anything else under the prefix was
                // not written by this store.
                let Some(name) = meta.location.filename() else {
                    continue;
                };
                let Ok(digest) = format!("sha256:{name}").parse::<Digest>() else {
                    continue;
                };
                if meta.location != self.path(&digest) {
                    continue;
                }
                out.push(Listed {
                    digest,
                    size: meta.size,
                    written_at: meta.last_modified.timestamp(),
                });
            }
            Ok(out)
        })
    }

    fn abandoned(&self) -> BoxFuture<'_, Result<Vec<Abandoned>, BlobError>> {
        // Unfinished multipart uploads are invisible and `object_store` cannot list
        // them; the bucket's lifecycle rule removes them (module documentation).
        Box::pin(async { Ok(Vec::new()) })
    }

    fn remove_abandoned(&self, _which: &Abandoned) -> BoxFuture<'_, Result<bool, BlobError>> {
        Box::pin(async { Ok(false) })
    }

    fn presign(
        &self,
        digest: &Digest,
        valid_for: Duration,
    ) -> BoxFuture<'_, Result<Option<url::Url>, BlobError>> {
        let path = self.path(digest);
        Box::pin(async move {
            let url = self
                .store
                .signed_url(http::Method::GET, &path, valid_for)
                .await
                .map_err(|e| storage("presigning", e))?;
            Ok(Some(url))
        })
    }
}

impl S3BlobStore {
    async fn stat_path(&self, path: &ObjectPath) -> Result<Option<u64>, BlobError> {
        match self.store.head(path).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(storage("reading", e)),
        }
    }
}

/// Hashes and counts `body` while it goes up; visible under `path` only when it matched.
async fn put(
    store: &Arc<AmazonS3>,
    path: ObjectPath,
    digest: &Digest,
    size: Option<u64>,
    mut body: ByteStream,
) -> Result<u64, BlobError> {
    let limit = size.unwrap_or(MAX_UNSIZED_BYTES);
    let mut hasher = sha2::Sha256::new();
    let mut seen = 0u64;
    let mut first = PutPayloadMut::new();
    // Until the first part is full, nothing has been sent.
    let mut upload: Option<Upload> = None;
    let fed: Result<(), BlobError> = async {
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(BlobError::Source)?;
            seen += chunk.len() as u64;
            if seen > limit {
                return Err(BlobError::TooLarge {
                    digest: digest.clone(),
                    limit,
                });
            }
            hasher.update(&chunk);
            match &mut upload {
                Some(u) => u.put(chunk).await?,
                None => {
                    first.push(chunk);
                    if first.content_length() >= PART {
                        let started = store
                            .put_multipart(&path)
                            .await
                            .map_err(|e| storage("writing", e))?;
                        let mut u = Upload::new(path.clone(), started);
                        for piece in std::mem::take(&mut first).freeze() {
                            u.put(piece).await?;
                        }
                        upload = Some(u);
                    }
                }
            }
        }
        Ok(())
    }
    .await;
    let checked = fed.and_then(|()| {
        let actual = Digest::from_hash(&hasher.finalize());
        if actual != *digest {
            return Err(BlobError::DigestMismatch {
                expected: digest.clone(),
                actual,
            });
        }
        match size {
            Some(expected) if expected != seen => Err(BlobError::SizeMismatch {
                digest: digest.clone(),
                expected,
                actual: seen,
            }),
            _ => Ok(()),
        }
    });
    match (checked, upload) {
        (Ok(()), Some(u)) => u.complete().await?,
        (Ok(()), None) => {
            store
                .put(&path, first.freeze())
                .await
                .map_err(|e| storage("writing", e))?;
        }
        (Err(e), Some(u)) => {
            u.abort().await;
            return Err(e);
        }
        (Err(e), None) => return Err(e),
    }
    Ok(seen)
}

/// A multipart upload in progress. Dropped without [`Upload::complete`] (an error
/// above, or the caller cancelled), it is aborted in the background: never completed,
/// so never visible.
struct Upload {
    writer: Option<WriteMultipart>,
    path: ObjectPath,
}

impl Upload {
    fn new(path: ObjectPath, started: Box<dyn object_store::MultipartUpload>) -> Upload {
        Upload {
            writer: Some(WriteMultipart::new_with_chunk_size(started, PART)),
            path,
        }
    }

    async fn put(&mut self, chunk: bytes::Bytes) -> Result<(), BlobError> {
        let writer = self.writer.as_mut().expect("an upload in progress");
        writer
            .wait_for_capacity(PARTS_IN_FLIGHT)
            .await
            .map_err(|e| storage("writing", e))?;
        writer.put(chunk);
        Ok(())
    }

    async fn complete(mut self) -> Result<(), BlobError> {
        let writer = self.writer.take().expect("an upload in progress");
        writer.finish().await.map_err(|e| storage("writing", e))?;
        Ok(())
    }

    async fn abort(mut self) {
        if let Some(writer) = self.writer.take()
            && let Err(e) = writer.abort().await
        {
            tracing::warn!(error = %e, path = %self.path, "aborting an unfinished upload failed; the bucket's lifecycle rule removes it");
        }
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if let Some(writer) = self.writer.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let path = self.path.clone();
            runtime.spawn(async move {
                if let Err(e) = writer.abort().await {
                    tracing::warn!(error = %e, %path, "aborting a cancelled upload failed; the bucket's lifecycle rule removes it");
                }
            });
        }
    }
}

/// Access keys from the shared credentials file, for the profile `AWS_PROFILE` (else
/// `default`); `None` when there is no such file or profile.
fn credentials_file() -> std::io::Result<Option<Credentials>> {
    let path = match std::env::var_os("AWS_SHARED_CREDENTIALS_FILE") {
        Some(p) => std::path::PathBuf::from(p),
        None => match std::env::var_os("HOME") {
            Some(home) => std::path::Path::new(&home).join(".aws/credentials"),
            None => return Ok(None),
        },
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".to_owned());
    Ok(parse_credentials(&text, &profile))
}

struct Credentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
}

/// The INI format AWS's tools write: `[profile]` sections of `key = value` lines, `#`
/// and `;` comments.
fn parse_credentials(text: &str, profile: &str) -> Option<Credentials> {
    let mut section = None::<&str>;
    let (mut id, mut secret, mut token) = (None, None, None);
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.trim());
            continue;
        }
        if section != Some(profile) {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim().to_owned();
        match key.trim() {
            "aws_access_key_id" => id = Some(value),
            "aws_secret_access_key" => secret = Some(value),
            "aws_session_token" => token = Some(value),
            _ => {}
        }
    }
    Some(Credentials {
        access_key_id: id?,
        secret_access_key: secret?,
        session_token: token,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse_strictly() {
        let l = S3Location::parse("s3://blobs-1/marketplace/prod/").unwrap();
        assert_eq!(
            (l.bucket.as_str(), l.prefix.as_str()),
            ("blobs-1", "marketplace/prod")
        );
        assert_eq!(S3Location::parse("s3://blobs").unwrap().prefix, "");
        for bad in [
            "blobs",
            "s3://",
            "s3://Bl",
            "s3://UPPER/x",
            "s3://-x-/p",
            "s3://ok-bucket/a//b",
            "s3://ok-bucket/../x",
        ] {
            assert!(S3Location::parse(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(l.to_string(), "s3://blobs-1/marketplace/prod");
    }

    #[test]
    fn credentials_come_from_the_named_profile() {
        let text = "# comment\n[default]\naws_access_key_id = AKD\naws_secret_access_key=SD\n\n[ops]\naws_access_key_id=AKO\naws_secret_access_key = SO\naws_session_token = T\n";
        let d = parse_credentials(text, "default").unwrap();
        assert_eq!(
            (
                d.access_key_id.as_str(),
                d.secret_access_key.as_str(),
                d.session_token
            ),
            ("AKD", "SD", None)
        );
        let o = parse_credentials(text, "ops").unwrap();
        assert_eq!(o.session_token.as_deref(), Some("T"));
        assert!(parse_credentials(text, "missing").is_none());
        assert!(parse_credentials("[default]\naws_access_key_id=A\n", "default").is_none());
    }
}
