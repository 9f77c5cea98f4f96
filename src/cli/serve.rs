//! `marketplace serve`

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::catalog::{Curation, builtin};
use crate::server;
use crate::store::Store;
use crate::trust::server::accept;
use crate::trust::server::state::{self, OnlineKeys, Signer};
use crate::trust::verify::RoleLifetimes;

/// How often the server checks whether metadata needs re-signing; far shorter than the
/// shortest lifetime (one minute), so nothing expires between checks.
const REFRESH_EVERY: std::time::Duration = std::time::Duration::from_secs(20);
/// How often publisher role expiries are looked at for the log (seconds).
const EXPIRY_SCAN_EVERY: i64 = 3600;
/// The lease that makes one server of those sharing a database do the periodic
/// re-signing; held for [`SIGNING_LEASE_SECONDS`] and renewed every [`REFRESH_EVERY`],
/// so a holder that dies is replaced within about a minute (metadata is re-signed at
/// half its lifetime, hours ahead of expiry).
const SIGNING_LEASE: &str = "re-signing";
const SIGNING_LEASE_SECONDS: i64 = 60;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, env = "MARKETPLACE_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Directory for the database and blobs; created on first start.
    #[arg(long, env = "MARKETPLACE_DATA_DIR", default_value = "./data")]
    data_dir: PathBuf,
    #[command(flatten)]
    database: super::database::DatabaseArgs,
    #[command(flatten)]
    keys: super::storage::KeysDirArgs,
    #[command(flatten)]
    blobs: super::storage::BlobArgs,
    /// Answer `/v2/` blob downloads with a redirect (307) to a short-lived presigned
    /// URL of the S3 store instead of streaming them through this server (clients then
    /// need to reach the store). Needs an `s3://` `--blob-store`.
    #[arg(long, env = "MARKETPLACE_BLOB_REDIRECT", value_parser = clap::builder::BoolishValueParser::new())]
    blob_redirect: bool,
    /// Log format: `text` for people, `json` for log collectors.
    #[arg(long, env = "MARKETPLACE_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// Shortest remaining lifetime a publisher's uploaded role may have: a role about to
    /// expire would soon make every client refuse that publisher's plugins.
    #[arg(long, env = "MARKETPLACE_MIN_ROLE_LIFETIME", default_value = "7d", value_parser = super::repo::parse_duration)]
    min_role_lifetime: std::time::Duration,
    /// Longest lifetime a publisher's uploaded role may have: bounds how long a role
    /// signed with a since-compromised key stays valid without the operator.
    #[arg(long, env = "MARKETPLACE_MAX_ROLE_LIFETIME", default_value = "730d", value_parser = super::repo::parse_duration)]
    max_role_lifetime: std::time::Duration,
    /// Behind a reverse proxy: take the client address for rate limits from the
    /// rightmost `X-Forwarded-For` entry (the one the proxy appended). Without a proxy
    /// that sets it, clients could choose their own address.
    #[arg(long, env = "MARKETPLACE_TRUST_FORWARDED_FOR", value_parser = clap::builder::BoolishValueParser::new())]
    trust_forwarded_for: bool,
    /// Memory (MiB) for immutable `/tuf/` files (metadata by version, targets by hash,
    /// with gzip copies) kept to serve them without a database query; the least
    /// recently used leave first. A 10,000-definition index takes about 25 MiB.
    #[arg(long, env = "MARKETPLACE_TUF_CACHE_MIB", default_value_t = crate::trust::files::DEFAULT_CACHE_BYTES >> 20)]
    tuf_cache_mib: usize,
    /// Mirror every published definition's image into the data directory and serve it
    /// under `/v2/`; `off` serves only what earlier runs mirrored.
    #[arg(long, env = "MARKETPLACE_MIRROR", default_value = "on", value_parser = ["on", "off"])]
    mirror: String,
    /// Upstream registries: per host, plain HTTP or a CA bundle, and credentials; and
    /// whether hosts not listed are mirrored (see the README).
    #[arg(long, env = "MARKETPLACE_UPSTREAMS")]
    upstreams: Option<PathBuf>,
    /// Images mirrored at once.
    #[arg(long, env = "MARKETPLACE_MIRROR_JOBS", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    mirror_jobs: u16,
    /// How long a mirror job stays claimed by a server that stopped renewing it (one
    /// that died) before another takes it over.
    #[arg(long, env = "MARKETPLACE_MIRROR_LEASE", default_value = "5m", value_parser = super::repo::parse_duration)]
    mirror_lease: std::time::Duration,
    #[command(flatten)]
    mirror_deadlines: super::mirror::DeadlineArgs,
    /// Restrict `/v2/` to clients with a token: a file of tokens, one per line (blank
    /// lines and `#` comments ignored). Pulls are anonymous without it.
    #[arg(long, env = "MARKETPLACE_REGISTRY_TOKEN_FILE")]
    registry_token_file: Option<PathBuf>,
    /// Categories, featured plugins and labels of Fundament's catalog contract
    /// (`catalog.v1.CatalogService`), as YAML (see the README); read at start. Without
    /// it, a default compiled in sorts the built-ins into categories.
    #[arg(long, env = "MARKETPLACE_CURATION")]
    curation: Option<PathBuf>,
    /// `required`: a new version enters the signed index only once a reviewer approved
    /// its exact bytes (`marketplace submit`, `marketplace review`); yanks, re-signs
    /// and the built-in definitions are not reviewed. `off`: publishers' signed
    /// uploads are published as they come.
    #[arg(long, env = "MARKETPLACE_REVIEW", value_enum, default_value_t = ReviewArg::Off)]
    review: ReviewArg,
    #[command(flatten)]
    upstream: UpstreamArgs,
}

/// Following an upstream marketplace.
#[derive(Debug, Args)]
struct UpstreamArgs {
    /// Follow the marketplace at this URL: its publishers' signed roles, definitions,
    /// yanks and suspensions are served here under this server's root, next to the
    /// publishers registered here (see "Internal and air-gapped marketplaces").
    #[arg(long, env = "MARKETPLACE_UPSTREAM", requires = "upstream_root")]
    upstream: Option<String>,
    /// The upstream's root.json, obtained out of band: the only key material trusted
    /// for it (its later roots are followed from there).
    #[arg(long, env = "MARKETPLACE_UPSTREAM_ROOT", requires = "upstream")]
    upstream_root: Option<PathBuf>,
    /// Which upstream plugins to follow: `PUBLISHER/PLUGIN` patterns, `*` for any run of
    /// characters, comma-separated (`acme/*,beta/gateway`). A publisher comes whole
    /// (its signature covers all it lists); only selected plugins' images are mirrored.
    #[arg(long, env = "MARKETPLACE_UPSTREAM_PLUGINS", requires = "upstream")]
    upstream_plugins: Option<String>,
    /// How often the upstream is followed.
    #[arg(long, env = "MARKETPLACE_UPSTREAM_INTERVAL", default_value = "5m", value_parser = super::repo::parse_duration)]
    upstream_interval: std::time::Duration,
}

impl UpstreamArgs {
    /// The upstream to follow, its files read and checked; `None` without `--upstream`.
    fn load(&self) -> anyhow::Result<Option<crate::upstream::Upstream>> {
        let (Some(url), Some(root)) = (&self.upstream, &self.upstream_root) else {
            return Ok(None);
        };
        let filter = match &self.upstream_plugins {
            Some(text) => crate::upstream::Filter::parse(text)?,
            None => crate::upstream::Filter::all(),
        };
        let bytes = std::fs::read(root)
            .with_context(|| format!("reading --upstream-root {}", root.display()))?;
        Ok(Some(crate::upstream::Upstream::new(url, bytes, filter)?))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ReviewArg {
    Off,
    Required,
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    init_tracing(&args.log_format);
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(serve(args))
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    if args.blob_redirect && !args.blobs.is_s3() {
        anyhow::bail!(
            "--blob-redirect needs an s3:// --blob-store (files on disk have no URL to redirect to)"
        );
    }
    // Before anything is opened: a bad file stops the start with its error.
    let curation = match &args.curation {
        Some(path) => {
            std::sync::Arc::new(Curation::load(path).context("loading the curation (--curation)")?)
        }
        None => Curation::builtin(),
    };
    let upstream = args.upstream.load()?;
    let store = args.database.open(&args.data_dir).await?;
    let report = builtin::load(&store, crate::clock::now())
        .await
        .context("loading the built-in catalog")?;
    tracing::info!(
        added = report.added,
        unchanged = report.unchanged,
        conflicting = report.conflicting,
        "built-in catalog loaded"
    );

    if args.min_role_lifetime >= args.max_role_lifetime {
        anyhow::bail!(
            "--min-role-lifetime ({}) must be shorter than --max-role-lifetime ({})",
            crate::clock::human_duration(args.min_role_lifetime.as_secs() as i64),
            crate::clock::human_duration(args.max_role_lifetime.as_secs() as i64)
        );
    }
    let lifetimes = RoleLifetimes {
        min: args.min_role_lifetime,
        max: args.max_role_lifetime,
    };
    let keys_dir = args.keys.dir(&args.data_dir);
    // This process among the servers sharing the database, for leases.
    let holder = format!("{}-{}", std::process::id(), crate::token::random_hex(6));
    let signer = match OnlineKeys::load(&keys_dir).with_context(|| {
        format!(
            "loading the signed index's online keys from {}",
            keys_dir.display()
        )
    })? {
        Some(keys) => {
            let signer = std::sync::Arc::new(Signer::new(keys, lifetimes));
            let done = accept::maintain_builtins(&store, &signer, crate::clock::now())
                .await
                .context("signing the built-in definitions into the index")?;
            if done.added > 0 {
                tracing::info!(
                    added = done.added,
                    "signed new built-in definitions into the index"
                );
            }
            tokio::spawn(keep_index_fresh(
                store.clone(),
                signer.clone(),
                holder.clone(),
            ));
            if let Some(upstream) = upstream.clone() {
                tokio::spawn(super::follow::run(
                    store.clone(),
                    signer.clone(),
                    upstream,
                    args.upstream.upstream_interval,
                    holder.clone(),
                ));
            }
            Some(signer)
        }
        None if upstream.is_some() => {
            anyhow::bail!(
                "--upstream needs this marketplace's own signed index to serve the upstream's publishers under: run `marketplace repo init` first"
            );
        }
        None => {
            tracing::warn!(
                "the signed index is not initialized; run `marketplace repo init` to serve /tuf/ and accept publishes"
            );
            None
        }
    };

    let registry = open_registry(&args, &store, upstream.as_ref()).await?;

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr()?;
    // One line on stdout, so scripts and tests started with port 0 learn the address.
    println!("marketplace listening on http://{addr}");
    tracing::info!(%addr, data_dir = %args.data_dir.display(), review = ?args.review, "serving");
    let mut state = crate::AppState::new(store.clone(), signer);
    state.trust_forwarded_for = args.trust_forwarded_for;
    state.files = std::sync::Arc::new(crate::trust::files::Files::new(
        store.clone(),
        args.tuf_cache_mib.saturating_mul(1 << 20),
    ));
    state.registry = Some(registry.0);
    state.upstream = upstream.as_ref().map(|u| u.key().to_owned());
    state.curation = std::sync::Arc::new(crate::catalog::curation::LiveCuration::new(
        args.curation.clone(),
        curation,
    ));
    state.review = match args.review {
        ReviewArg::Off => crate::review::ReviewMode::Off,
        ReviewArg::Required => crate::review::ReviewMode::Required,
    };
    if let Some(path) = &args.registry_token_file {
        state.pull_tokens = Some(std::sync::Arc::new(read_pull_tokens(path)?));
    }
    let stop_mirror = std::sync::Arc::new(tokio::sync::Notify::new());
    let mirror = registry.1.map(|m| {
        let stop = stop_mirror.clone();
        tokio::spawn(m.run(async move { stop.notified().await }))
    });
    server::serve(listener, crate::app(state))
        .await
        .context("serving HTTP")?;
    if let Some(task) = mirror {
        // The mirror gives back the jobs it holds, so the next start resumes them at once.
        stop_mirror.notify_one();
        let _ = task.await;
    }
    // Another server takes the re-signing over at once rather than when the lease ends.
    if let Err(e) = store.release_lease(SIGNING_LEASE, &holder).await {
        tracing::warn!(error = %e, "giving back the re-signing lease failed; another server takes it when it runs out");
    }
    store.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// Pull tokens, one per line, kept only as their sha256.
fn read_pull_tokens(path: &std::path::Path) -> anyhow::Result<std::collections::HashSet<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --registry-token-file {}", path.display()))?;
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    if lines.is_empty() {
        anyhow::bail!("--registry-token-file {} holds no token", path.display());
    }
    if let Some(short) = lines.iter().find(|l| l.len() < 16) {
        anyhow::bail!(
            "--registry-token-file {}: a token of {} characters is too easy to guess; use at least 16 (e.g. `openssl rand -hex 32`)",
            path.display(),
            short.len()
        );
    }
    tracing::info!(tokens = lines.len(), "/v2/ needs a pull token");
    Ok(lines.into_iter().map(crate::token::hash).collect())
}

/// The blob store and registry under the data directory, and the mirror unless it is
/// off (pulling through the upstream marketplace's `/v2/` first when following one).
/// Images of versions stored before mirroring existed are enqueued first.
async fn open_registry(
    args: &ServeArgs,
    store: &Store,
    upstream: Option<&crate::upstream::Upstream>,
) -> anyhow::Result<(
    crate::registry::Registry,
    Option<std::sync::Arc<crate::mirror::Mirror>>,
)> {
    let blobs = args.blobs.open(&args.data_dir).await?;
    let (files, bytes) = super::mirror::remove_abandoned_writes(&*blobs).await?;
    if files > 0 {
        tracing::info!(
            files,
            bytes,
            "removed unfinished blob downloads of a process that died"
        );
    }
    let linked = store
        .enqueue_unlinked_images(crate::clock::now())
        .await
        .context("enqueueing images of earlier versions")?;
    if linked > 0 {
        tracing::info!(
            versions = linked,
            "enqueued the images of earlier versions for mirroring"
        );
    }
    let mut registry = crate::registry::Registry::new(store.clone(), blobs.clone());
    if args.blob_redirect {
        registry = registry.redirecting(crate::registry::REDIRECT_VALID_FOR);
    }
    if args.mirror == "off" {
        tracing::info!("mirroring is off; /v2/ serves what was mirrored before");
        return Ok((registry, None));
    }
    let upstreams = super::mirror::load_upstreams(args.upstreams.as_deref())?;
    let settings = crate::mirror::Settings {
        jobs: usize::from(args.mirror_jobs),
        lease: args.mirror_lease.max(std::time::Duration::from_secs(3)),
        deadlines: args.mirror_deadlines.deadlines(),
        ..Default::default()
    };
    let mut mirror = crate::mirror::Mirror::new(store.clone(), blobs, upstreams, settings);
    if let Some(u) = upstream {
        mirror = mirror.via_marketplace(&u.url);
    }
    Ok((registry, Some(std::sync::Arc::new(mirror))))
}

/// The serving loop's background task: every [`REFRESH_EVERY`], re-signs the server's
/// roles past half their lifetime (targets, snapshot, timestamp, the built-in
/// publisher's) and, hourly, warns about publisher roles close to expiry. Failures are logged
/// here, where they are handled, and retried on the next tick.
///
/// Of several servers on one database only the holder of the [`SIGNING_LEASE`] does
/// this, so replicas do not race to re-sign the same roles. (A race would be wasteful,
/// not unsafe: the database refuses a second file under a version that exists, and the
/// loser's re-sign is dropped.)
async fn keep_index_fresh(store: Store, signer: std::sync::Arc<Signer>, holder: String) {
    let mut tick = tokio::time::interval(REFRESH_EVERY);
    let mut warned = crate::trust::expiry::Warnings::default();
    let mut last_expiry_scan: Option<i64> = None;
    let mut holding = false;
    loop {
        tick.tick().await;
        match store
            .take_lease(SIGNING_LEASE, &holder, SIGNING_LEASE_SECONDS)
            .await
        {
            Ok(true) if !holding => {
                holding = true;
                tracing::info!(%holder, "this server now keeps the signed index fresh (re-signing lease taken)");
            }
            Ok(true) => {}
            Ok(false) => {
                if holding {
                    tracing::info!("another server took the re-signing lease");
                }
                holding = false;
                continue;
            }
            Err(e) => {
                tracing::error!(error = %e, "taking the re-signing lease failed; retrying next tick");
                continue;
            }
        }
        let now = crate::clock::now();
        let guard = signer.lock.lock().await;
        let builtins = accept::maintain_builtins(&store, &signer, now).await;
        let result = state::refresh(&store, &signer.keys, now).await;
        drop(guard);
        match builtins {
            Ok(done) if done.renewed => {
                tracing::info!("re-signed the built-in publisher's roles before expiry")
            }
            Ok(done) if done.added > 0 => tracing::info!(
                added = done.added,
                "signed new built-in definitions into the index"
            ),
            Ok(_) => {}
            Err(e) => {
                tracing::error!(error = %e, "re-signing the built-in roles failed; retrying next tick")
            }
        }
        match result {
            Ok(r) if r == state::Refreshed::default() => {}
            Ok(r) => {
                tracing::info!(targets = ?r.targets, snapshot = ?r.snapshot, timestamp = ?r.timestamp, "re-signed metadata before expiry")
            }
            Err(e) => tracing::error!(error = %e, "re-signing metadata failed; retrying next tick"),
        }
        // Warnings are repeated daily and look a month ahead: an hourly look is plenty,
        // and spares a read of every publisher's role on each tick.
        if last_expiry_scan.is_none_or(|t| now - t >= EXPIRY_SCAN_EVERY) {
            last_expiry_scan = Some(now);
            match crate::trust::server::state::publisher_roles(&store).await {
                Ok(roles) => {
                    warned.log(&roles, now);
                }
                Err(e) => tracing::error!(error = %e, "reading publisher role expiries failed"),
            }
        }
    }
}

pub(super) fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MARKETPLACE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}
