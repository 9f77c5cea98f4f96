//! `marketplace repo init`

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::catalog::builtin;
use crate::trust::SigningKey;
use crate::trust::metadata::Lifetimes;
use crate::trust::server::repo::{self, InitParams};

#[derive(Debug, Args)]
pub struct RepoArgs {
    #[command(subcommand)]
    command: RepoCommand,
}

#[derive(Debug, Subcommand)]
enum RepoCommand {
    /// Create the signed index (TUF repository) in the data directory.
    ///
    /// The root keys sign root.json here and are not stored: keep them offline. The
    /// targets, snapshot and timestamp keys and the built-in `fundament` publisher's key
    /// are generated into DATA_DIR/keys/ (mode 0600) for the server to use.
    Init(InitArgs),
    /// Replace the root keys: signs N+1.root.json with the current and the new root keys.
    ///
    /// Clients holding root N verify N+1 with the keys they trust, then trust the new
    /// keys. Bring the root keys out of offline storage only for this.
    RotateRoot(RotateArgs),
    /// Write the current signed index (every root, the current metadata, every target)
    /// as static files under DIR, laid out as `/tuf/` is served.
    ///
    /// Serve DIR as `/tuf/` from any web server (or carry it into an air-gapped site) and
    /// point sync workers at the URL above it. Exporting again into the same folder
    /// writes only what changed; timestamp.json is written last.
    Export(ExportArgs),
}

#[derive(Debug, Args)]
struct ExportArgs {
    #[arg(long, env = "MARKETPLACE_DATA_DIR", default_value = "./data")]
    data_dir: PathBuf,
    #[command(flatten)]
    database: super::database::DatabaseArgs,
    /// The folder to write (created if missing); it plays the part of `/tuf/`.
    dir: PathBuf,
}

#[derive(Debug, Args)]
struct RotateArgs {
    #[arg(long, env = "MARKETPLACE_DATA_DIR", default_value = "./data")]
    data_dir: PathBuf,
    #[command(flatten)]
    database: super::database::DatabaseArgs,
    /// A current root private key; give at least the current threshold of them.
    #[arg(long = "old-root-key", value_name = "FILE", required = true)]
    old_root_keys: Vec<PathBuf>,
    /// A new root private key; repeat for several (may repeat an old key to keep it).
    #[arg(long = "new-root-key", value_name = "FILE", required = true)]
    new_root_keys: Vec<PathBuf>,
    /// Root signatures clients require from now on; defaults to all new keys.
    #[arg(long)]
    root_threshold: Option<u64>,
    /// Lifetime of the new root.json; defaults to the current root's.
    #[arg(long, value_parser = parse_lifetime)]
    root_expires: Option<Duration>,
}

#[derive(Debug, Args)]
struct InitArgs {
    #[arg(long, env = "MARKETPLACE_DATA_DIR", default_value = "./data")]
    data_dir: PathBuf,
    #[command(flatten)]
    database: super::database::DatabaseArgs,
    /// Where the online keys are written (or, if present, read): `DATA_DIR/keys` by
    /// default; copy them into the Secret the replicas mount as `--keys-dir`.
    #[command(flatten)]
    keys: super::storage::KeysDirArgs,
    /// A root private key (PKCS#8); repeat for several. All of them sign root.json.
    #[arg(long = "root-key", value_name = "FILE", required = true)]
    root_keys: Vec<PathBuf>,
    /// Root signatures a client requires; defaults to all given root keys.
    #[arg(long)]
    root_threshold: Option<u64>,
    /// Lifetime of root.json (e.g. 365d).
    #[arg(long, default_value = "365d", value_parser = parse_lifetime)]
    root_expires: Duration,
    /// Lifetime of targets.json.
    #[arg(long, default_value = "365d", value_parser = parse_lifetime)]
    targets_expires: Duration,
    /// Lifetime of each publisher's role metadata.
    #[arg(long, default_value = "365d", value_parser = parse_lifetime)]
    publisher_expires: Duration,
    /// Lifetime of snapshot.json.
    #[arg(long, default_value = "7d", value_parser = parse_lifetime)]
    snapshot_expires: Duration,
    /// Lifetime of timestamp.json; the server re-signs it before it expires.
    #[arg(long, default_value = "1d", value_parser = parse_lifetime)]
    timestamp_expires: Duration,
}

/// `90s`, `30m`, `12h`, `7d`: whole seconds, at least one minute.
pub(super) fn parse_lifetime(s: &str) -> Result<Duration, String> {
    let secs = parse_duration(s)
        .map_err(|_| format!("`{s}` is not a lifetime like 7d, 12h, 30m or 90s"))?
        .as_secs();
    if !(60..=10 * 365 * 86_400).contains(&secs) {
        return Err(format!("`{s}` must be between 1 minute and 10 years"));
    }
    Ok(Duration::from_secs(secs))
}

/// `0s`, `90s`, `30m`, `12h`, `7d`: a whole number of seconds, minutes, hours or days.
pub(super) fn parse_duration(s: &str) -> Result<Duration, String> {
    let (number, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let bad = || format!("`{s}` is not a duration like 90s, 30m, 12h or 7d");
    let n: u64 = number.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "d" => n.saturating_mul(86_400),
        _ => return Err(bad()),
    };
    Ok(Duration::from_secs(secs))
}

pub fn run(args: RepoArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    match args.command {
        RepoCommand::Init(a) => runtime.block_on(init(a)),
        RepoCommand::RotateRoot(a) => runtime.block_on(rotate(a)),
        RepoCommand::Export(a) => runtime.block_on(export(a)),
    }
}

async fn export(a: ExportArgs) -> anyhow::Result<()> {
    let store = a.database.open_existing(&a.data_dir).await?;
    let result = crate::trust::server::export::export(&store, &a.dir).await;
    store.close().await;
    let done = result?;
    println!(
        "exported the signed index (timestamp v{}) to {}: {} metadata and {} target files written ({} bytes), {} unchanged",
        done.timestamp_version,
        a.dir.display(),
        done.metadata_files,
        done.target_files,
        done.bytes_written,
        done.unchanged
    );
    println!(
        "serve {} as /tuf/ and give sync workers the URL above it",
        a.dir.display()
    );
    Ok(())
}

async fn init(a: InitArgs) -> anyhow::Result<()> {
    let root_keys = a
        .root_keys
        .iter()
        .map(|p| SigningKey::load(p))
        .collect::<Result<Vec<_>, _>>()?;
    let store = a.database.open(&a.data_dir).await?;
    let now = crate::clock::now();
    builtin::load(&store, now)
        .await
        .context("loading the built-in catalog")?;
    let params = InitParams {
        root_threshold: a.root_threshold.unwrap_or(root_keys.len() as u64),
        root_keys,
        lifetimes: Lifetimes {
            root: a.root_expires,
            targets: a.targets_expires,
            publisher: a.publisher_expires,
            snapshot: a.snapshot_expires,
            timestamp: a.timestamp_expires,
        },
    };
    let keys_dir = a.keys.dir(&a.data_dir);
    let report = repo::init(&store, &keys_dir, params, now).await?;
    store.close().await;
    println!("signed index created in {}", a.database.shown(&a.data_dir));
    for id in &report.root_key_ids {
        println!("  root key      {id}  (offline: not stored)");
    }
    for (name, id) in &report.online_key_ids {
        println!("  {name:<13} {id}  ({}/{name}.pem)", keys_dir.display());
    }
    println!(
        "  {} built-in definitions signed as publisher `{}`",
        report.builtin_targets,
        crate::definition::BUILTIN_PUBLISHER
    );
    println!(
        "clients bootstrap from http(s)://HOST/tuf/metadata/1.root.json, fetched once over a trusted channel"
    );
    Ok(())
}

async fn rotate(a: RotateArgs) -> anyhow::Result<()> {
    let load = |paths: &[PathBuf]| {
        paths
            .iter()
            .map(|p| SigningKey::load(p))
            .collect::<Result<Vec<_>, _>>()
    };
    let old = load(&a.old_root_keys)?;
    let new = load(&a.new_root_keys)?;
    let store = a.database.open_existing(&a.data_dir).await?;
    let threshold = a.root_threshold.unwrap_or(new.len() as u64);
    let result = repo::rotate_root(
        &store,
        &old,
        &new,
        threshold,
        a.root_expires,
        crate::clock::now(),
    )
    .await;
    store.close().await;
    let version = result?;
    println!("root version {version} signed by the current and the new root keys");
    for k in &new {
        println!("  root key {}", k.public().key_id());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{parse_duration, parse_lifetime};

    #[test]
    fn lifetimes() {
        assert_eq!(parse_lifetime("7d").unwrap().as_secs(), 7 * 86_400);
        assert_eq!(parse_lifetime("12h").unwrap().as_secs(), 12 * 3600);
        assert_eq!(parse_lifetime("90s").unwrap().as_secs(), 90);
        for bad in ["", "7", "d", "7w", "-1d", "30s", "99999d"] {
            assert!(parse_lifetime(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_duration("0s").unwrap().as_secs(), 0);
        assert_eq!(parse_duration("30s").unwrap().as_secs(), 30);
        for bad in ["", "0", "s", "1.5s", "-1s", "2w"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
