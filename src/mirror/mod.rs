//! The image mirror: a background task of `serve` that works through the mirror jobs a
//! publish enqueues (one per pinned image, kept in the database, so they survive
//! restarts), pulls each image from its upstream (`client`, under the rules of
//! `egress`) into the blob store and records what it consists of, after which `/v2/`
//! serves it.
//!
//! A job is leased while it runs and the lease renewed; a worker that dies (SIGKILL,
//! power loss) leaves a lease that runs out, and the next worker takes the job again.
//! Blobs already stored are not fetched again, so a retried job resumes where the last
//! one stopped, blob by blob. A failed job waits (30 s doubling up to an hour, with
//! jitter) before the next attempt; `marketplace mirror retry` makes it due at once.
//!
//! A failure is recorded twice: in our words for pages and the public API
//! ([`MirrorError::public`]), and in full for the operator (`mirror status`, logs),
//! where upstream text is cut and escaped. Every blob has a deadline from its size and
//! a minimum rate, and every job one of its own ([`Deadlines`]).
//!
//! Layering: calls `store`, `blob`, `registry` (the manifest model); knows nothing of
//! HTTP serving.

pub mod client;
pub mod egress;
mod pull;
pub mod signature;
pub mod upstreams;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::blob::{BlobError, BlobStore};
use crate::registry::ManifestError;
use crate::store::{MirrorJob, Store, StoreError};
use client::FetchError;
pub use upstreams::{OtherHosts, Upstream, Upstreams, UpstreamsError};

/// A failed mirror job. `what` names the image (the host, repository and digest a
/// definition pins: public already). `Display` is the operator's account, which may
/// quote the upstream (cut and escaped); [`MirrorError::public`] is what pages and the
/// public API show, in our words only.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error("{what}: not found upstream")]
    NotFound { what: String },
    #[error("{what}: {error}")]
    Fetch { what: String, error: FetchError },
    #[error("{what}: {error}")]
    Manifest { what: String, error: ManifestError },
    #[error("{what}: {error}")]
    Blob { what: String, error: BlobError },
    /// `detail` is in our words (sizes, digests), never the upstream's.
    #[error("{what}: {detail}")]
    Invalid { what: String, detail: String },
    /// The publisher registered cosign keys and no signature by one vouches for the image.
    #[error("{what}: {detail}")]
    Signature {
        what: String,
        public: String,
        detail: String,
    },
    #[error("{what}: timed out after {:.1} s ({reason})", .after.as_secs_f64())]
    Timeout {
        what: String,
        after: Duration,
        reason: &'static str,
    },
    #[error("{host}: cannot configure a client: {message}")]
    Config { host: String, message: String },
    #[error("{0}")]
    Store(#[from] StoreError),
}

impl MirrorError {
    /// What failed, for anyone to read: our words, no upstream text.
    pub fn public(&self) -> String {
        match self {
            MirrorError::NotFound { .. } | MirrorError::Invalid { .. } => self.to_string(),
            MirrorError::Fetch { what, error } => format!("{what}: {}", error.public()),
            MirrorError::Manifest { what, error } => match error {
                ManifestError::TooLarge { .. } => format!("{what}: manifest too large"),
                _ => format!("{what}: the upstream's manifest is not valid"),
            },
            MirrorError::Blob { what, error } => match error {
                BlobError::DigestMismatch { .. } => {
                    format!("{what}: the upstream sent other bytes than the digest names")
                }
                BlobError::TooLarge { .. } | BlobError::SizeMismatch { .. } => {
                    format!("{what}: the upstream sent another size than the manifest lists")
                }
                BlobError::Source(_) => format!("{what}: the transfer from the upstream failed"),
                BlobError::Storage { .. } | BlobError::BadRange { .. } => {
                    format!("{what}: could not be stored")
                }
            },
            MirrorError::Signature { what, public, .. } => format!("{what}: {public}"),
            MirrorError::Timeout { what, .. } => format!("{what}: timed out"),
            MirrorError::Config { host, .. } => format!("{host}: the upstream is misconfigured"),
            MirrorError::Store(_) => "the mirror's database failed".into(),
        }
    }
}

/// How long transfers may take. A blob's deadline grows with its declared size, so a
/// large layer over a slow link still arrives while a trickling upstream cannot hold
/// a slot for ever; the job as a whole has its own.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    /// The slowest transfer accepted, bytes per second.
    pub min_rate: u64,
    /// Added to every deadline: connecting, tokens, a registry's first byte.
    pub grace: Duration,
    /// One image, every piece of it.
    pub job: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            // 2 Mbit/s: a 1 GiB layer gets 68 minutes.
            min_rate: 256 * 1024,
            grace: Duration::from_secs(30),
            job: Duration::from_secs(4 * 3600),
        }
    }
}

impl Deadlines {
    /// A blob of `size` bytes: the grace plus the size at the minimum rate.
    pub fn blob(&self, size: u64) -> Duration {
        self.grace + Duration::from_secs_f64(size as f64 / self.min_rate.max(1) as f64)
    }

    /// A manifest, index or token: read whole, at most the manifest cap.
    pub fn request(&self) -> Duration {
        self.blob(crate::registry::manifest::MAX_MANIFEST_BYTES)
    }
}

/// How hard the mirror works.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Images mirrored at once.
    pub jobs: usize,
    /// Blob downloads in flight per image.
    pub parallel_blobs: usize,
    /// How long a claimed job is ours without renewal.
    pub lease: Duration,
    /// How often the queue is looked at when idle.
    pub poll: Duration,
    pub deadlines: Deadlines,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            jobs: 2,
            parallel_blobs: 4,
            lease: Duration::from_secs(300),
            poll: Duration::from_secs(2),
            deadlines: Deadlines::default(),
        }
    }
}

/// What one pass over the due jobs did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pass {
    pub mirrored: usize,
    pub failed: usize,
}

pub struct Mirror {
    store: Store,
    blobs: Arc<dyn BlobStore>,
    upstreams: Upstreams,
    settings: Settings,
    /// The hosts the operator named, which alone may be on non-public addresses.
    named: Arc<egress::Named>,
    /// One client per upstream host: it keeps that host's connections and tokens.
    clients: Mutex<HashMap<String, Arc<client::Client>>>,
    /// Jobs claimed and not yet finished, given back on shutdown.
    held: Mutex<std::collections::HashSet<i64>>,
    /// Blob bytes received since this mirror was made.
    received: Arc<std::sync::atomic::AtomicU64>,
    /// The upstream marketplace a server follows: every image is pulled from its
    /// `/v2/` first, then from the image's own registry.
    marketplace: Option<Upstream>,
    /// The platforms of an index to pull; empty: all (a bundle may carry fewer).
    platforms: Vec<String>,
}

impl Mirror {
    pub fn new(
        store: Store,
        blobs: Arc<dyn BlobStore>,
        upstreams: Upstreams,
        settings: Settings,
    ) -> Mirror {
        Mirror {
            store,
            blobs,
            named: Arc::new(upstreams.named()),
            upstreams,
            settings,
            clients: Mutex::new(HashMap::new()),
            held: Mutex::new(Default::default()),
            received: Default::default(),
            marketplace: None,
            platforms: Vec::new(),
        }
    }

    /// Pulls only these platforms of an index (`OS/ARCH[/VARIANT]`): a bundle made with
    /// `--platform` carries no others.
    pub fn only_platforms(mut self, platforms: Vec<String>) -> Mirror {
        self.platforms = platforms;
        self
    }

    /// Pulls every image from the `/v2/` of the marketplace at `url` first (the upstream
    /// a server follows: it mirrored them already), and from the image's own registry
    /// (as the upstreams file says) when the marketplace does not have it. The
    /// upstreams file's entry for the marketplace's host, if any, sets its TLS and
    /// credentials; otherwise it is anonymous, over plain HTTP for an `http` URL.
    pub fn via_marketplace(mut self, url: &url::Url) -> Mirror {
        let Some(host) = url.host_str() else {
            return self;
        };
        let authority = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        let upstream = self
            .upstreams
            .get(&authority)
            .cloned()
            .unwrap_or_else(|| Upstream::marketplace(&authority, url.scheme() == "http"));
        self.named = Arc::new(self.upstreams.named_with(Some(&authority)));
        self.marketplace = Some(upstream);
        self
    }

    /// Blob bytes received so far (layers and configs; manifests are small).
    pub fn received(&self) -> u64 {
        self.received.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Runs until `shutdown` resolves, keeping up to `Settings::jobs` jobs going. Jobs in
    /// progress at shutdown are given back, due at once.
    pub async fn run(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        self.work(shutdown).await;
        let held: Vec<i64> = self.held.lock().expect("lock").drain().collect();
        if !held.is_empty() {
            match self
                .store
                .release_mirror_jobs(&held, crate::clock::now())
                .await
            {
                Ok(()) => tracing::info!(jobs = held.len(), "unfinished mirror jobs given back"),
                Err(e) => {
                    tracing::warn!(error = %e, "unfinished mirror jobs keep their lease until it runs out")
                }
            }
        }
    }

    /// Keeps up to `Settings::jobs` jobs running: claims as many as there are free
    /// slots, and again as soon as one finishes or the queue is looked at again, so a
    /// long transfer never holds up an image published after it.
    async fn work(self: &Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut running = tokio::task::JoinSet::new();
        loop {
            let free = self.settings.jobs.saturating_sub(running.len());
            if free > 0 {
                match self.claim(free).await {
                    Ok(jobs) => {
                        for job in jobs {
                            let me = self.clone();
                            running.spawn(async move { me.finish(&job).await });
                        }
                    }
                    Err(e) => tracing::error!(error = %e, "mirror queue unavailable"),
                }
            }
            tokio::select! {
                Some(done) = running.join_next(), if !running.is_empty() => match done {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => tracing::error!(error = %e, "recording a mirror job failed"),
                    // Its job keeps its lease until it runs out, then is taken again.
                    Err(e) => tracing::error!(error = %e, "a mirror job panicked"),
                },
                () = tokio::time::sleep(self.settings.poll) => {}
                () = &mut shutdown => {
                    // Their jobs stay in `held` and are given back by `run`.
                    running.abort_all();
                    return;
                }
            }
        }
    }

    /// Claims up to `n` due jobs, holding them until they finish.
    async fn claim(&self, n: usize) -> Result<Vec<MirrorJob>, StoreError> {
        let now = crate::clock::now();
        let lease = self.settings.lease.as_secs() as i64;
        let jobs = self
            .store
            .claim_mirror_jobs(
                now,
                now + lease,
                n as i64,
                // Through the marketplace every image may be found.
                match self.marketplace {
                    Some(_) => None,
                    None => self.upstreams.allowed_hosts(),
                }
                .as_deref(),
            )
            .await?;
        self.held
            .lock()
            .expect("lock")
            .extend(jobs.iter().map(|j| j.id));
        Ok(jobs)
    }

    /// Runs a claimed job to its end and lets go of it. True when mirrored.
    async fn finish(&self, job: &MirrorJob) -> Result<bool, StoreError> {
        let outcome = self.job(job).await;
        self.held.lock().expect("lock").remove(&job.id);
        outcome
    }

    /// Claims the due jobs (up to `Settings::jobs`) and runs them to their end: one
    /// batch, for `marketplace mirror run`.
    pub async fn pass(&self) -> Result<Pass, StoreError> {
        let jobs = self.claim(self.settings.jobs).await?;
        let outcomes = futures_util::future::join_all(jobs.iter().map(|j| self.finish(j))).await;
        let mut pass = Pass::default();
        for outcome in outcomes {
            match outcome? {
                true => pass.mirrored += 1,
                false => pass.failed += 1,
            }
        }
        Ok(pass)
    }

    /// One job: pulled and recorded, or its failure recorded with the next attempt.
    /// True when mirrored.
    async fn job(&self, job: &MirrorJob) -> Result<bool, StoreError> {
        let started = std::time::Instant::now();
        let image = format!("{}/{}@{}", job.host, job.repository, job.digest);
        tracing::info!(%image, attempt = job.attempts + 1, "mirroring");
        let deadline = self.settings.deadlines.job;
        let work = async {
            tokio::time::timeout(deadline, self.pull(job))
                .await
                .unwrap_or_else(|_| {
                    Err(MirrorError::Timeout {
                        what: image.clone(),
                        after: deadline,
                        reason: "the job's deadline",
                    })
                })
        };
        let renew = async {
            let every = self.settings.lease / 3;
            loop {
                tokio::time::sleep(every).await;
                let until = crate::clock::now() + self.settings.lease.as_secs() as i64;
                if let Err(e) = self.store.renew_mirror_lease(job.id, until).await {
                    tracing::warn!(%image, error = %e, "could not renew the mirror lease");
                }
            }
        };
        let result = tokio::select! {
            r = work => r,
            () = renew => unreachable!("renewal never ends"),
        };
        let now = crate::clock::now();
        match result {
            Ok(pulled) => {
                self.store
                    .record_mirrored(
                        job.id,
                        &pulled.content,
                        &pulled.tags,
                        pulled.verified_by.as_deref(),
                        now,
                    )
                    .await?;
                let bytes: u64 = pulled.content.iter().map(|c| c.size).sum();
                tracing::info!(
                    %image,
                    pieces = pulled.content.len(),
                    bytes,
                    seconds = started.elapsed().as_secs_f64(),
                    "mirrored"
                );
                Ok(true)
            }
            Err(MirrorError::Store(e)) => Err(e),
            Err(e) => {
                let next = now + backoff(job.attempts);
                let detail = e.to_string();
                tracing::warn!(%image, error = %detail, next_attempt_in = next - now, "mirror failed");
                self.store
                    .record_mirror_failure(job.id, &e.public(), &detail, next, now)
                    .await?;
                Ok(false)
            }
        }
    }

    /// Pulls the image: from the upstream marketplace first when there is one, then
    /// from its own registry unless the upstreams file skips that host.
    async fn pull(&self, job: &MirrorJob) -> Result<pull::Pulled, MirrorError> {
        let keys = self.cosign_keys(job).await?;
        let home_allowed = self
            .upstreams
            .allowed_hosts()
            .is_none_or(|hosts| hosts.contains(&job.host));
        if let Some(marketplace) = &self.marketplace {
            // The marketplace's direct name: the host first, a port as `_PORT`.
            let repository = format!("{}/{}", job.host.replace(':', "_"), job.repository);
            let first = self.pull_from(marketplace, &repository, job, &keys).await;
            match first {
                Ok(pulled) => return Ok(pulled),
                Err(e @ MirrorError::Store(_)) => return Err(e),
                Err(e) if !home_allowed => return Err(e),
                Err(e) => {
                    tracing::info!(image = %format!("{}/{}@{}", job.host, job.repository, job.digest), error = %e, "not from the upstream marketplace; trying the image's registry");
                }
            }
        }
        let upstream = self
            .upstreams
            .get(&job.host)
            .cloned()
            .unwrap_or_else(|| Upstream::default_for(&job.host));
        self.pull_from(&upstream, &job.repository, job, &keys).await
    }

    /// The cosign keys one of which must have signed the image. Keys were checked when
    /// registered; one that no longer parses counts as absent from the policy but is
    /// reported, so the image is not served unverified by it.
    async fn cosign_keys(&self, job: &MirrorJob) -> Result<Vec<signature::CosignKey>, MirrorError> {
        let mut keys = Vec::new();
        for (id, pem) in self.store.cosign_keys_for_image(job.id).await? {
            let key = signature::CosignKey::parse(&pem).map_err(|why| MirrorError::Signature {
                what: format!("cosign key {id}"),
                public: why.clone(),
                detail: why,
            })?;
            keys.push(key);
        }
        Ok(keys)
    }

    async fn pull_from(
        &self,
        upstream: &Upstream,
        repository: &str,
        job: &MirrorJob,
        keys: &[signature::CosignKey],
    ) -> Result<pull::Pulled, MirrorError> {
        let client = self.client(upstream)?;
        pull::Puller {
            received: &self.received,
            keys,
            from: upstream.pull_from(),
            repository,
            client: &client,
            deadlines: self.settings.deadlines,
            blobs: &*self.blobs,
            job,
            parallel: self.settings.parallel_blobs,
            platforms: &self.platforms,
        }
        .pull()
        .await
    }

    fn client(&self, upstream: &Upstream) -> Result<Arc<client::Client>, MirrorError> {
        let mut clients = self
            .clients
            .lock()
            .expect("the client cache lock is never poisoned");
        if let Some(c) = clients.get(&upstream.host) {
            return Ok(c.clone());
        }
        let client = upstream
            .client(self.named.clone(), self.settings.deadlines.request())
            .map_err(|message| MirrorError::Config {
                host: upstream.host.clone(),
                message,
            })?;
        let client = Arc::new(client);
        clients.insert(upstream.host.clone(), client.clone());
        Ok(client)
    }
}

/// Blobs no mirrored image records and written before `written_before` (Unix seconds):
/// what `mirror gc` removes. Recent blobs are spared because a mirror in progress
/// writes its blobs before it records them.
pub async fn collectable(
    store: &Store,
    blobs: &dyn BlobStore,
    written_before: i64,
) -> Result<Vec<crate::blob::Listed>, MirrorError> {
    let referenced = store.referenced_digests().await?;
    let listed = blobs.list().await.map_err(|error| MirrorError::Blob {
        what: "listing the blob store".into(),
        error,
    })?;
    Ok(listed
        .into_iter()
        .filter(|b| !referenced.contains(b.digest.as_str()) && b.written_at < written_before)
        .collect())
}

/// Seconds until the next attempt after `attempts` earlier failures: 30 s doubling up
/// to an hour, with ±20% jitter so many failed jobs do not return all at once.
fn backoff(attempts: i64) -> i64 {
    let base = 30i64.saturating_mul(1 << attempts.clamp(0, 7)).min(3600);
    let jitter = (base / 5).max(1);
    let r = u64::from_str_radix(&crate::token::random_hex(4), 16).unwrap_or(0) as i64;
    base - jitter + r % (2 * jitter + 1)
}

#[cfg(test)]
mod tests {
    use super::backoff;

    #[test]
    fn backoff_doubles_to_an_hour_with_jitter() {
        for _ in 0..50 {
            let first = backoff(0);
            assert!((24..=36).contains(&first), "{first}");
            let third = backoff(2);
            assert!((96..=144).contains(&third), "{third}");
            let late = backoff(30);
            assert!((2880..=4320).contains(&late), "{late}");
        }
    }
}
