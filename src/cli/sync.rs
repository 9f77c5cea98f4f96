//! `marketplace sync --config sync.yaml [--once]`: the sync worker.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::sync::{Config, SourceConfig, SyncStore, sync_source};

#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The worker's configuration (data directory, local API address, sources).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Run one round for every source and exit; non-zero if any source failed.
    #[arg(long)]
    once: bool,
}

pub fn run(args: SyncArgs) -> anyhow::Result<bool> {
    let config = Config::load(&args.config)?;
    tokio::runtime::Runtime::new()
        .context("starting the async runtime")?
        .block_on(async move {
            std::fs::create_dir_all(&config.data_dir)
                .with_context(|| format!("creating {}", config.data_dir.display()))?;
            let store = SyncStore::open(&config.data_dir.join("sync.db")).await?;
            if config.sources.is_empty() {
                println!("no sources configured: the built-in definitions alone are offered");
            }
            let ok = if args.once {
                once(&store, &config).await
            } else {
                forever(store.clone(), config).await;
                true
            };
            store.close().await;
            Ok(ok)
        })
}

/// One round per source, one after another; whether all succeeded.
async fn once(store: &SyncStore, config: &Config) -> bool {
    let mut ok = true;
    for source in &config.sources {
        ok &= report(store, source, config).await.is_ok();
    }
    ok
}

async fn report(
    store: &SyncStore,
    source: &SourceConfig,
    config: &Config,
) -> Result<(), crate::sync::RoundError> {
    match sync_source(store, source, &config.data_dir, crate::clock::now()).await {
        Ok(done) => {
            println!(
                "{}: {} definitions ({} downloaded), snapshot v{}, timestamp v{}",
                source.name,
                done.definitions,
                done.downloaded,
                done.trusted.snapshot,
                done.trusted.timestamp
            );
            Ok(())
        }
        Err(e) => {
            eprintln!("{}: failed ({}): {}", source.name, e.reason, e.message);
            Err(e)
        }
    }
}

/// Each source on its own schedule until interrupted: its interval after a good
/// round; after failures, exponential backoff with jitter, never longer than the
/// interval, so a flapping source neither hammers nor stalls.
async fn forever(store: SyncStore, config: Config) {
    let mut tasks = tokio::task::JoinSet::new();
    for source in config.sources.clone() {
        let (store, config) = (store.clone(), config.clone());
        tasks.spawn(async move {
            let mut failures = 0u32;
            loop {
                let wait = match report(&store, &source, &config).await {
                    Ok(()) => {
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
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { while tasks.join_next().await.is_some() {} std::future::pending::<()>().await } => {}
    }
}

/// 5 s doubling per consecutive failure, capped at `interval`, then scaled by a random
/// factor in [0.5, 1) so many workers do not retry in step.
fn backoff(failures: u32, interval: Duration) -> Duration {
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
