//! The sync worker as a library: what `marketplace sync` and its local API do, for a
//! host program to embed.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use marketplace::sync::{Config, Worker};
//!
//! let worker = Worker::open(Config::load("sync.yaml".as_ref())?).await?;
//! for (source, outcome) in worker.sync_all().await {
//!     println!("{source}: {outcome:?}");
//! }
//! let view = worker.view("acme").await?;
//! for plugin in view.plugins() {
//!     let latest = plugin.latest().map(|o| o.version.to_string());
//!     println!("{} {latest:?}", plugin.name);
//! }
//! let plan = worker.install_plan("acme", "cert-manager,gateway").await?;
//! assert!(plan.complete);
//! # Ok(()) }
//! ```

use super::store::{LastGood as _, Sideloads as _, Sources as _, Tokens as _};
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Serialize;

use super::config::{Config, SourceConfig};
use super::merge::{self, Row, SourceRows};
use super::plan::{self, Plan, PlanError};
use super::round::{self, Reason, RoundError, Synced};
use super::sideload::{Added, OnConflict, SideloadError, check_org};
use super::store::{SourceStatus, SyncStore, SyncStoreError};
use super::view::{BaseView, Offer, OrgView, Summary, Trust};
use crate::catalog::builtin::{self, BuiltinError};
use crate::definition::BUILTIN_PUBLISHER;
use crate::definition::{Definition, parse_version};
use crate::trust::client::Fetcher;

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("cannot create the data directory {0}: {1}")]
    DataDir(String, #[source] std::io::Error),
    #[error(transparent)]
    Store(#[from] SyncStoreError),
    #[error(transparent)]
    Builtin(#[from] BuiltinError),
    #[error("HTTP client: {0}")]
    Http(#[from] reqwest::Error),
}

/// An install plan could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanRequestError {
    #[error(transparent)]
    Org(#[from] SideloadError),
    #[error(transparent)]
    Plan(#[from] PlanError),
}

/// Every configured source and the size of the merged base view (the local API's
/// `/status` draws it with its own types).
#[derive(Debug, Clone)]
pub struct Status {
    pub sources: Vec<SourceReport>,
    pub builtins: usize,
    /// Plugin names in the base view (before sideloads).
    pub plugins: usize,
    pub clashes: usize,
    /// Versions in the base view that Fundament cannot install (published in the older
    /// definition design): offered to the JSON API, left out of `organization.v1`.
    pub not_installable: Vec<NotInstallable>,
}

/// A version Fundament cannot install, and why.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotInstallable {
    pub name: String,
    pub version: String,
    pub trust: Trust,
    /// The fields of the older design it carries.
    pub fields: String,
}

/// A configured source: its stored state and its settings.
#[derive(Debug, Clone)]
pub struct SourceReport {
    pub status: SourceStatus,
    pub priority: i64,
    pub interval_seconds: u64,
}

struct Cached {
    generation: i64,
    view: Arc<BaseView>,
}

pub struct Worker {
    config: Config,
    store: SyncStore,
    fetcher: Fetcher,
    builtins: Vec<Row>,
    builtin_defs: Vec<Definition>,
    cache: RwLock<Cached>,
    /// Serializes rebuilds so an older view never replaces a newer one.
    rebuilding: tokio::sync::Mutex<()>,
    /// Rounds by `source` and `outcome` (changed, unchanged, failed), for `/metrics`.
    rounds: crate::metrics::CounterVec,
}

impl Worker {
    /// Creates the data directory and database if missing, registers the configured
    /// sources and forgets those no longer configured.
    pub async fn open(config: Config) -> Result<Worker, WorkerError> {
        std::fs::create_dir_all(&config.data_dir)
            .map_err(|e| WorkerError::DataDir(config.data_dir.display().to_string(), e))?;
        let store = SyncStore::connect(&config.database, config.database_connections).await?;
        Worker::with_store(config, store).await
    }

    /// [`Worker::open`] over an already opened store.
    pub async fn with_store(config: Config, store: SyncStore) -> Result<Worker, WorkerError> {
        let names: Vec<&str> = config.sources.iter().map(|s| s.name.as_str()).collect();
        store.retain_sources(&names).await?;
        // Earlier versions kept tough's datastore in DATA_DIR/tuf/SOURCE/; the database
        // holds the trusted state now, so such folders are leftovers.
        for s in &config.sources {
            let _ = std::fs::remove_dir_all(config.data_dir.join("tuf").join(&s.name));
        }
        for s in &config.sources {
            store.add_source(&s.name, s.url.as_str()).await?;
        }
        let builtin_defs = builtin::definitions()?;
        let builtins = builtin_defs
            .iter()
            .map(|def| Row {
                publisher: BUILTIN_PUBLISHER.to_owned(),
                name: def.name().to_owned(),
                version: def.version.clone(),
                hash: def.hash.clone(),
                yanked: false,
                trust: Trust::Builtin,
                summary: Arc::new(Summary::of(def)),
            })
            .collect();
        let worker = Worker {
            // Each source sets its own deadline; this one is replaced per round.
            fetcher: Fetcher::new(Duration::from_secs(30))?,
            config,
            store,
            builtins,
            builtin_defs,
            cache: RwLock::new(Cached {
                generation: -1,
                view: Arc::default(),
            }),
            rebuilding: tokio::sync::Mutex::new(()),
            rounds: Default::default(),
        };
        // The merged view is built by the first request that needs it; `--once` and the
        // token commands never do.
        Ok(worker)
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn store(&self) -> &SyncStore {
        &self.store
    }

    /// One round for one source (see [`round::sync_source`]). Rounds of one source never
    /// overlap, even across processes sharing the data directory.
    pub async fn sync_source(&self, source: &SourceConfig) -> Result<Synced, RoundError> {
        let outcome = self.round(source).await;
        let counted = match &outcome {
            Ok(done) if done.unchanged => "unchanged",
            Ok(_) => "changed",
            Err(_) => "failed",
        };
        self.rounds.inc(&[&source.name, counted]);
        outcome
    }

    async fn round(&self, source: &SourceConfig) -> Result<Synced, RoundError> {
        let _lock = lock_source(&self.config.data_dir, &source.name)?;
        let done =
            round::sync_source(&self.store, &self.fetcher, source, crate::clock::now()).await?;
        // The merged view is rebuilt lazily, by the first request that needs it (or
        // right away by `run`, which serves requests): a one-shot round never pays.
        Ok(done)
    }

    /// Rounds run by this process, by source and outcome.
    pub fn rounds(&self) -> &crate::metrics::CounterVec {
        &self.rounds
    }

    /// How many definitions (versions) each organization with a live token is
    /// offered: the merged view with its sideloads, by organization.
    pub async fn offered(&self) -> Result<Vec<(String, usize)>, SideloadError> {
        let mut orgs: Vec<String> = self
            .store
            .tokens()
            .await?
            .into_iter()
            .filter(|t| t.revoked_at.is_none())
            .filter_map(|t| t.org)
            .collect();
        orgs.sort();
        orgs.dedup();
        let mut out = Vec::with_capacity(orgs.len());
        for org in orgs {
            let n = self.view(&org).await?.offered_versions();
            out.push((org, n));
        }
        Ok(out)
    }

    /// One round for every source, concurrently; a failing source never holds up the
    /// others.
    pub async fn sync_all(&self) -> Vec<(String, Result<Synced, RoundError>)> {
        let rounds = self
            .config
            .sources
            .iter()
            .map(|s| async move { (s.name.clone(), self.sync_source(s).await) });
        futures_util::future::join_all(rounds).await
    }

    /// Runs every source on its schedule until `shutdown` completes: its interval after
    /// a good round; after failures, exponential backoff with jitter, never longer than
    /// the interval. `report` sees each outcome.
    pub async fn run(
        self: Arc<Self>,
        shutdown: impl std::future::Future<Output = ()>,
        report: impl Fn(&str, &Result<Synced, RoundError>) + Send + Sync + 'static,
    ) {
        let report = Arc::new(report);
        let mut tasks = tokio::task::JoinSet::new();
        for source in self.config.sources.clone() {
            let (worker, report) = (self.clone(), report.clone());
            tasks.spawn(async move {
                let mut failures = 0u32;
                loop {
                    let outcome = worker.sync_source(&source).await;
                    report(&source.name, &outcome);
                    if matches!(&outcome, Ok(done) if !done.unchanged)
                        && let Err(e) = worker.base().await
                    {
                        tracing::error!(error = %e, "rebuilding the merged view");
                    }
                    let wait = match outcome {
                        Ok(_) => {
                            failures = 0;
                            source.interval
                        }
                        Err(_) => {
                            failures = failures.saturating_add(1);
                            backoff(failures, source.interval)
                        }
                    };
                    tokio::time::sleep(wait).await;
                }
            });
        }
        shutdown.await;
        tasks.abort_all();
    }

    /// The merged view of built-ins and sources, rebuilt when the database says a round
    /// (of this process or another) changed something.
    pub async fn base(&self) -> Result<Arc<BaseView>, SyncStoreError> {
        let generation = self.store.generation().await?;
        {
            let cached = self.cache.read().expect("view cache lock");
            if cached.generation == generation {
                return Ok(cached.view.clone());
            }
        }
        let _one = self.rebuilding.lock().await;
        let generation = self.store.generation().await?;
        if let Some(view) = {
            let cached = self.cache.read().expect("view cache lock");
            (cached.generation == generation).then(|| cached.view.clone())
        } {
            return Ok(view);
        }
        let rows = self.store.rows().await?;
        let view = Arc::new(merge::base(self.builtins.clone(), self.source_rows(rows)));
        *self.cache.write().expect("view cache lock") = Cached {
            generation,
            view: view.clone(),
        };
        Ok(view)
    }

    fn source_rows(&self, rows: Vec<super::store::StoredRow>) -> Vec<SourceRows> {
        let mut sources: Vec<SourceRows> = self
            .config
            .sources
            .iter()
            .map(|s| SourceRows {
                name: s.name.clone(),
                priority: s.priority,
                rows: Vec::new(),
            })
            .collect();
        for r in rows {
            let Some(source) = sources.iter_mut().find(|s| s.name == r.source) else {
                continue;
            };
            let summary = match (&r.summary, &r.definition) {
                (Some(json), _) => super::store::read_summary(json).ok(),
                (None, Some(bytes)) => super::store::stored_definition(bytes, &r.extras)
                    .ok()
                    .map(|d| Summary::of(&d)),
                (None, None) => None,
            };
            let (Some(summary), Ok(version)) = (summary, parse_version(&r.version)) else {
                tracing::warn!(source = %r.source, name = %r.name, version = %r.version,
                    "stored definition unreadable; left out of the view");
                continue;
            };
            source.rows.push(Row {
                trust: Trust::Marketplace {
                    source: r.source,
                    publisher: r.publisher.clone(),
                    key_ids: r.signer_key_ids.split(' ').map(str::to_owned).collect(),
                },
                publisher: r.publisher,
                name: r.name,
                version,
                hash: r.hash,
                yanked: r.yanked,
                summary: Arc::new(summary),
            });
        }
        sources
    }

    /// What `org` may install: the base view with its sideloads laid over it.
    pub async fn view(&self, org: &str) -> Result<OrgView, SideloadError> {
        check_org(org)?;
        let base = self.base().await?;
        let mut rows = Vec::new();
        for (name, version, hash, summary) in self.store.sideload_rows(org).await? {
            let (Ok(version), Ok(summary)) = (
                parse_version(&version),
                super::store::read_summary(&summary),
            ) else {
                continue;
            };
            rows.push(Row {
                publisher: String::new(),
                name,
                version,
                hash,
                yanked: false,
                trust: Trust::Sideloaded {
                    org: org.to_owned(),
                },
                summary: Arc::new(summary),
            });
        }
        Ok(merge::org_view(base, org, rows))
    }

    /// The exact bytes of one version `org` is offered (what Fundament installs), with
    /// who vouches for them; `None` when the view has no such version.
    pub async fn definition(
        &self,
        org: &str,
        name: &str,
        version: &semver::Version,
    ) -> Result<Option<(Vec<u8>, Trust)>, SideloadError> {
        let view = self.view(org).await?;
        let Some(offer) = view.plugin(name).and_then(|p| p.versions.get(version)) else {
            return Ok(None);
        };
        Ok(self.offer_bytes(&view.org, name, offer).await?)
    }

    /// The exact bytes of `offer`, one of the versions of `name` that `org`'s view holds
    /// (for a caller that already has the view); `None` when a round changed them since.
    pub async fn offer_bytes(
        &self,
        org: &str,
        name: &str,
        offer: &Offer,
    ) -> Result<Option<(Vec<u8>, Trust)>, SyncStoreError> {
        let version = &offer.version;
        let bytes = match &offer.trust {
            Trust::Builtin => self
                .builtin_defs
                .iter()
                .find(|d| d.name() == name && d.version == *version)
                .map(|d| d.bytes.clone()),
            Trust::Marketplace {
                source, publisher, ..
            } => {
                let target = format!("{publisher}/{name}/{version}.yaml");
                self.store.source_definition(source, &target).await?
            }
            Trust::Sideloaded { .. } => {
                self.store
                    .sideload_bytes(org, name, &version.to_string())
                    .await?
            }
        };
        // The view and the bytes come from separate reads; a round in between could
        // change them, so the bytes must still be the ones the view promised.
        Ok(bytes
            .filter(|b| crate::definition::definition_hash(b) == offer.hash)
            .map(|b| (b, offer.trust.clone())))
    }

    /// What each of `upgrades` (versions of `name` in `org`'s view) asks for that the
    /// installed `from` did not, in order; `None` where there is nothing to compare
    /// with (`from` is not among the versions offered) or a definition's bytes are gone.
    pub async fn upgrade_changes(
        &self,
        org: &str,
        plugin: &crate::sync::view::Plugin,
        from: &semver::Version,
        upgrades: &[&Offer],
    ) -> Result<Vec<Option<crate::catalog::changes::Changes>>, SyncStoreError> {
        let definition = |offer: &Offer, bytes: Vec<u8>| {
            // The dependencies a publisher signed beside the definition are in the
            // summary; the bytes alone do not carry them.
            Definition::parse_published(&bytes).ok().map(|mut d| {
                d.extras.dependencies = offer.summary.dependencies.clone();
                d
            })
        };
        let installed = match plugin.versions.get(from) {
            Some(offer) => self
                .offer_bytes(org, &plugin.name, offer)
                .await?
                .and_then(|(bytes, _)| definition(offer, bytes)),
            None => None,
        };
        let mut out = Vec::with_capacity(upgrades.len());
        for offer in upgrades {
            let Some(old) = &installed else {
                out.push(None);
                continue;
            };
            let new = self
                .offer_bytes(org, &plugin.name, offer)
                .await?
                .and_then(|(bytes, _)| definition(offer, bytes));
            out.push(new.map(|new| crate::catalog::changes::between(old, &new)));
        }
        Ok(out)
    }

    /// Validates `bytes` like `marketplace validate` (and `extras`, a companion
    /// document, like a publisher's) and stores them for `org`.
    pub async fn sideload(
        &self,
        org: &str,
        bytes: &[u8],
        extras: Option<&[u8]>,
        token_id: &str,
        on_conflict: OnConflict,
    ) -> Result<(Definition, Added), SideloadError> {
        check_org(org)?;
        let mut def = Definition::parse(bytes)?;
        if let Some(extras) = extras {
            def = def.with_companion(crate::definition::Extras::parse_document(extras)?)?;
        }
        self.sideload_definition(org, def, token_id, on_conflict)
            .await
    }

    /// Stores an already parsed definition for `org` (see [`Self::sideload`]).
    pub async fn sideload_definition(
        &self,
        org: &str,
        def: Definition,
        token_id: &str,
        on_conflict: OnConflict,
    ) -> Result<(Definition, Added), SideloadError> {
        check_org(org)?;
        let added = self
            .store
            .add_sideload(org, &def, token_id, crate::clock::now(), on_conflict)
            .await?;
        Ok((def, added))
    }

    /// The install plan for `plugins` (`a,b@1.2.3`) in `org`'s view.
    pub async fn install_plan(&self, org: &str, plugins: &str) -> Result<Plan, PlanRequestError> {
        let requests = plan::parse_requests(plugins)?;
        let view = self.view(org).await?;
        Ok(plan::install_plan(&view, &requests)?)
    }

    pub async fn status(&self) -> Result<Status, SyncStoreError> {
        let base = self.base().await?;
        let mut sources = Vec::new();
        for status in self.store.status().await? {
            if let Some(cfg) = self.config.sources.iter().find(|s| s.name == status.name) {
                sources.push(SourceReport {
                    priority: cfg.priority,
                    interval_seconds: cfg.interval.as_secs(),
                    status,
                });
            }
        }
        let not_installable = base
            .plugins
            .values()
            .flat_map(|p| p.versions.values().map(move |o| (p, o)))
            .filter_map(|(p, o)| {
                Some(NotInstallable {
                    name: p.name.clone(),
                    version: o.version.to_string(),
                    trust: o.trust.clone(),
                    fields: o.summary.not_installable.clone()?,
                })
            })
            .collect();
        Ok(Status {
            sources,
            builtins: self.builtins.len(),
            plugins: base.plugins.len(),
            clashes: base.clashes.len(),
            not_installable,
        })
    }
}

/// An exclusive lock on one source's round, released when dropped (or when the process
/// dies, so a killed worker never leaves it held).
fn lock_source(data_dir: &Path, source: &str) -> Result<std::fs::File, RoundError> {
    let local = |e: std::io::Error| RoundError {
        reason: Reason::Local,
        message: format!("locking the round of {source}: {e}"),
    };
    let dir = data_dir.join("tuf");
    std::fs::create_dir_all(&dir).map_err(local)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(format!("{source}.lock")))
        .map_err(local)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(RoundError {
            reason: Reason::Local,
            message: format!("another process is running a round of {source}"),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(local(e)),
    }
}

/// 5 s doubling per consecutive failure, capped at `interval`, then scaled by a random
/// factor in [0.5, 1) so many workers do not retry in step.
pub fn backoff(failures: u32, interval: Duration) -> Duration {
    let base = Duration::from_secs(5)
        .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
        .min(interval);
    let random = {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(failures);
        h.finish()
    };
    base.mul_f64(0.5 + (random % 1000) as f64 / 2000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let interval = Duration::from_secs(300);
        for failures in 1..40 {
            let d = backoff(failures, interval);
            let base = Duration::from_secs(5)
                .saturating_mul(1 << (failures - 1).min(16))
                .min(interval);
            assert!(d >= base / 2 && d < base, "{failures}: {d:?}");
        }
    }
}
