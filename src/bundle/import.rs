//! `marketplace bundle import`: a bundle applied as one round of following its
//! marketplace, then its images mirrored from it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::open::{BlobSink, Scratch, extract};
use super::{BundleError, Toc};
use crate::blob::BlobStore;
use crate::mirror::{Mirror, Settings, Upstreams};
use crate::store::Store;
use crate::trust::server::state::Signer;
use crate::upstream::{Mode, Report, Upstream};

/// What an import did.
#[derive(Debug)]
pub struct Imported {
    pub toc: Toc,
    pub report: Report,
    /// Images mirrored from the bundle, and those that failed (with why).
    pub mirrored: usize,
    pub failed: Vec<String>,
}

/// A bundle file to import, and how.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'a> {
    pub path: &'a Path,
    /// Where it is extracted (the data directory: the same disk as the blob store).
    pub scratch: &'a Path,
    /// The oldest bundle accepted.
    pub max_age: Duration,
}

/// Imports a bundle for `upstream` (the marketplace it was made on, as this one is
/// configured to follow it: its name and root). Refused before
/// anything changes: a bundle older than `max_age` or from the future, one that breaks
/// the bundle's rules, a blob whose bytes are not its digest, metadata that does not
/// verify from what this marketplace trusts (an older bundle than the last imported is
/// a rollback), and any publisher's roles or definitions that do not verify.
pub async fn import(
    store: &Store,
    signer: &Signer,
    blobs: Arc<dyn BlobStore>,
    upstream: &Upstream,
    incoming: Incoming<'_>,
    now: i64,
) -> Result<Imported, BundleError> {
    let Incoming {
        path,
        scratch,
        max_age,
    } = incoming;
    let dir = Scratch::new(scratch)?;
    let toc = {
        let (path, dir) = (path.to_owned(), dir.0.clone());
        let sink = BlobSink {
            handle: tokio::runtime::Handle::current(),
            blobs: blobs.clone(),
        };
        tokio::task::spawn_blocking(move || extract(&path, &dir, Some(&sink)))
            .await
            .map_err(|e| BundleError::Io(format!("reading the bundle: {e}")))??
    };
    // Expiry is checked as of the bundle's making: its timestamp may well have run
    // out on its way in. Its age is bounded instead.
    if toc.created_at > now + 300 {
        return Err(BundleError::Invalid(format!(
            "it says it was made at {}, in the future",
            crate::clock::rfc3339(toc.created_at)
        )));
    }
    if now - toc.created_at > max_age.as_secs() as i64 {
        return Err(BundleError::Invalid(format!(
            "it was made {} ago, more than --max-age {} allows",
            crate::clock::human_duration(now - toc.created_at),
            crate::clock::human_duration(max_age.as_secs() as i64)
        )));
    }
    let loopback = super::serve::start(dir.0.clone(), toc.clone(), blobs.clone()).await?;
    let fetcher = crate::trust::client::Fetcher::new(Duration::from_secs(60))
        .map_err(|e| BundleError::Io(format!("an HTTP client: {e}")))?;
    let source = upstream.fetched_from(loopback.url.clone());
    let mode = Mode {
        verify_at: toc.created_at,
        strict: true,
    };
    let report = crate::upstream::follow_with(store, signer, &fetcher, &source, mode, now).await?;

    // The images, through the same puller as any mirror job, from the bundle alone.
    let settings = Settings {
        jobs: 2,
        ..Default::default()
    };
    let mirror = Mirror::new(store.clone(), blobs, Upstreams::none(), settings)
        .via_marketplace(&loopback.url)
        .only_platforms(toc.platforms.clone());
    let wanted: std::collections::HashSet<String> = toc
        .images
        .iter()
        .map(|i| format!("{}/{}@{}", i.host, i.repository, i.digest))
        .collect();
    let mut mirrored = 0;
    loop {
        let pass = mirror.pass().await?;
        mirrored += pass.mirrored;
        if pass.mirrored + pass.failed == 0 {
            break;
        }
    }
    let mut failed = Vec::new();
    for s in store.mirror_statuses().await? {
        let image = format!("{}/{}@{}", s.host, s.repository, s.digest);
        if wanted.contains(&image) && s.status != "mirrored" {
            failed.push(format!(
                "{image}: {}",
                s.last_error_detail.or(s.last_error).unwrap_or(s.status)
            ));
        }
    }
    drop(loopback);
    Ok(Imported {
        toc,
        report,
        mirrored,
        failed,
    })
}
