//! `marketplace mirror status|retry|verify|gc`: the image mirror from the operator's
//! side, on the data directory (beside a running `serve` or not).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::admin::Operator;
use crate::admin::mirror::{self, Images};
use crate::blob::BlobStore;
use crate::store::Store;

#[derive(Debug, Args)]
pub struct MirrorArgs {
    #[arg(
        long,
        env = "MARKETPLACE_DATA_DIR",
        default_value = "./data",
        global = true
    )]
    data_dir: PathBuf,
    #[command(flatten)]
    database: super::database::DatabaseArgs,
    #[command(flatten)]
    blobs: super::storage::BlobArgs,
    #[command(flatten)]
    server: super::remote::ServerArgs,
    #[command(subcommand)]
    command: MirrorCommand,
}

#[derive(Debug, Subcommand)]
enum MirrorCommand {
    /// Every pinned image: pending, mirroring, mirrored (with its size) or failed (with
    /// the reason and the next attempt).
    Status {
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Make failed images due now (all, or those whose `HOST/PATH@DIGEST` contains
    /// FILTER); a running server takes them within seconds.
    Retry { filter: Option<String> },
    /// Re-hash every stored blob and report corrupt or missing ones; exits 1 if any.
    Verify {
        /// Remove corrupt blobs and queue every image that records a corrupt or missing
        /// one for a new mirror (it is not served until mirrored again).
        #[arg(long)]
        repair: bool,
    },
    /// Mirror every due image now, in the foreground (pending, failed and due, or held
    /// by a server that died), until none is left; with a progress line on a terminal.
    /// Exits 1 if any failed. Runs beside a serving server safely.
    Run {
        /// Upstream registries, as for `serve --upstreams`.
        #[arg(long, env = "MARKETPLACE_UPSTREAMS")]
        upstreams: Option<PathBuf>,
        /// Images mirrored at once.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
        jobs: u16,
        #[command(flatten)]
        deadlines: DeadlineArgs,
    },
    /// Remove blobs no mirrored image records, and the temporary files of downloads
    /// whose process died (killed mid-transfer). Dry run unless `--delete`.
    Gc {
        /// Remove them (otherwise only list them).
        #[arg(long)]
        delete: bool,
        /// Spare blobs written more recently than this: a mirror in progress writes
        /// its blobs before it records them.
        #[arg(long, default_value = "24h", value_parser = super::repo::parse_duration)]
        min_age: std::time::Duration,
    },
}

/// How long mirror transfers may take; shared by `serve` and `mirror run`.
#[derive(clap::Args, Debug, Clone, Copy)]
pub(super) struct DeadlineArgs {
    /// The slowest transfer accepted, per second (`100KiB`, `2MiB`, or bytes): a
    /// blob's deadline is `--mirror-grace` plus its declared size at this rate, after
    /// which its job fails with `timed out` and frees its slot.
    #[arg(long, env = "MARKETPLACE_MIRROR_MIN_RATE", default_value = "256KiB", value_parser = parse_rate)]
    mirror_min_rate: u64,
    /// Added to every transfer's deadline (connecting, tokens, the first byte); a
    /// manifest or token must arrive within it plus 4 MiB at the minimum rate.
    #[arg(long, env = "MARKETPLACE_MIRROR_GRACE", default_value = "30s", value_parser = super::repo::parse_duration)]
    mirror_grace: std::time::Duration,
    /// The deadline of one image, every manifest and blob of it.
    #[arg(long, env = "MARKETPLACE_MIRROR_JOB_TIMEOUT", default_value = "4h", value_parser = super::repo::parse_duration)]
    mirror_job_timeout: std::time::Duration,
}

impl DeadlineArgs {
    pub(super) fn deadlines(&self) -> crate::mirror::Deadlines {
        crate::mirror::Deadlines {
            min_rate: self.mirror_min_rate,
            grace: self.mirror_grace,
            job: self.mirror_job_timeout,
        }
    }
}

/// `100KiB`, `2MiB`, `1GiB` or a number of bytes: at least one byte.
fn parse_rate(s: &str) -> Result<u64, String> {
    let (number, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let bad = || format!("`{s}` is not a rate like 100KiB, 2MiB or 65536 (bytes per second)");
    let n: u64 = number.parse().map_err(|_| bad())?;
    let scale: u64 = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return Err(bad()),
    };
    match n.checked_mul(scale) {
        Some(0) | None => Err(bad()),
        Some(rate) => Ok(rate),
    }
}

/// Removes what downloads killed mid-transfer left in the blob store (see
/// `BlobStore::abandoned`: never a download still running, here or in another process
/// on the data directory). `serve` and `mirror run` do it as they start, so a kill
/// costs disk only until the next start. Returns the files and bytes removed.
pub(super) async fn remove_abandoned_writes(blobs: &dyn BlobStore) -> anyhow::Result<(usize, u64)> {
    let mut removed = (0, 0);
    for a in blobs
        .abandoned()
        .await
        .context("listing unfinished blob downloads")?
    {
        if blobs
            .remove_abandoned(&a)
            .await
            .context("removing an unfinished blob download")?
        {
            removed.0 += 1;
            removed.1 += a.size;
        }
    }
    Ok(removed)
}

/// The upstreams file given with `--upstreams`, or anonymous HTTPS for every host.
pub(super) fn load_upstreams(
    path: Option<&std::path::Path>,
) -> anyhow::Result<crate::mirror::Upstreams> {
    match path {
        Some(path) => crate::mirror::Upstreams::load(path).context("reading --upstreams"),
        None => Ok(crate::mirror::Upstreams::default()),
    }
}

pub fn run(args: MirrorArgs) -> anyhow::Result<bool> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async move {
        if let Some(remote) = args.server.remote()? {
            return remotely(&remote, args.command).await;
        }
        let store = args.database.open(&args.data_dir).await?;
        let blobs = args.blobs.open(&args.data_dir).await?;
        let ok = match args.command {
            MirrorCommand::Status { json } => status(&mirror::status(&store).await?, json),
            MirrorCommand::Retry { filter } => {
                let done = mirror::retry(
                    &store,
                    &Operator::local(),
                    &mirror::RetryRequest { filter },
                    crate::clock::now(),
                )
                .await?;
                retried(&done)
            }
            MirrorCommand::Verify { repair } => verify(&store, &*blobs, repair).await?,
            MirrorCommand::Run {
                upstreams,
                jobs,
                deadlines,
            } => {
                let (files, bytes) = remove_abandoned_writes(&*blobs).await?;
                if files > 0 {
                    println!(
                        "removed {files} unfinished download(s) of a process that died ({bytes} bytes)"
                    );
                }
                run_now(
                    &store,
                    blobs.clone(),
                    upstreams.as_deref(),
                    jobs,
                    deadlines.deadlines(),
                )
                .await?
            }
            MirrorCommand::Gc { delete, min_age } => gc(&store, &*blobs, delete, min_age).await?,
        };
        store.close().await;
        Ok(ok)
    })
}

/// `status` and `retry` through the admin API; the others run where the store and the
/// blob store are (they read and write blobs).
async fn remotely(remote: &super::remote::Remote, command: MirrorCommand) -> anyhow::Result<bool> {
    match command {
        MirrorCommand::Status { json } => Ok(status(&remote.get("mirror").await?, json)),
        MirrorCommand::Retry { filter } => {
            let request = mirror::RetryRequest { filter };
            let done = remote
                .call(reqwest::Method::POST, "mirror/retry", Some(&request))
                .await?;
            Ok(retried(&done))
        }
        _ => anyhow::bail!(
            "only `mirror status` and `mirror retry` act through --server; verify, run and gc read and write blobs, so they run beside the database and the blob store (give --database and --blob-store instead)"
        ),
    }
}

fn retried(done: &mirror::Retried) -> bool {
    println!("{} failed image(s) due now", done.retried);
    true
}

/// Prints every pinned image (`images`, from the store or the admin API).
fn status(images: &Images, json: bool) -> bool {
    if json {
        // Through `json!`, whose objects sort their keys: the output always had them in
        // that order.
        println!("{}", serde_json::json!({ "images": images.images }));
        return true;
    }
    let now = crate::clock::now();
    for i in &images.images {
        let detail = match i.status.as_str() {
            "mirrored" => format!("{} bytes", i.size.unwrap_or(0)),
            "failed" => format!(
                "attempt {} failed, next in {}: {}",
                i.attempts,
                crate::clock::human_duration((i.next_attempt_at.unwrap_or(now) - now).max(0)),
                i.last_error_detail
                    .as_deref()
                    .or(i.last_error.as_deref())
                    .unwrap_or("")
            ),
            _ => String::new(),
        };
        println!(
            "{:<9} {}/{}@{}  {detail}",
            i.status, i.host, i.repository, i.digest
        );
    }
    let summary: Vec<String> = ["pending", "mirroring", "mirrored", "failed"]
        .iter()
        .map(|s| (s, images.images.iter().filter(|i| i.status == *s).count()))
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| format!("{n} {s}"))
        .collect();
    println!(
        "{} image(s){}{}",
        images.images.len(),
        if summary.is_empty() { "" } else { ": " },
        summary.join(", ")
    );
    true
}

/// A progress line on a terminal, rewritten in place; nothing when piped.
struct Progress {
    on: bool,
}

impl Progress {
    fn show(&self, text: &str) {
        if self.on {
            eprint!("\r\x1b[2K{text}");
            let _ = std::io::stderr().flush();
        }
    }

    fn done(&self) {
        if self.on {
            eprint!("\r\x1b[2K");
        }
    }
}

async fn verify(store: &Store, blobs: &dyn BlobStore, repair: bool) -> anyhow::Result<bool> {
    let listed = blobs.list().await?;
    let total: u64 = listed.iter().map(|b| b.size).sum();
    let progress = Progress {
        on: std::io::stderr().is_terminal(),
    };
    let (mut done, mut corrupt) = (0u64, Vec::new());
    for (i, b) in listed.iter().enumerate() {
        progress.show(&format!(
            "verifying {}/{} blobs, {} of {} MiB",
            i + 1,
            listed.len(),
            done >> 20,
            total >> 20
        ));
        if crate::blob::verify(blobs, &b.digest).await? == Some(false) {
            corrupt.push(b.digest.clone());
        }
        done += b.size;
    }
    progress.done();
    let stored: std::collections::HashSet<&str> =
        listed.iter().map(|b| b.digest.as_str()).collect();
    let mut missing: Vec<String> = store
        .referenced_digests()
        .await?
        .into_iter()
        .filter(|d| !stored.contains(d.as_str()))
        .collect();
    missing.sort();
    for d in &corrupt {
        println!("corrupt  {d}: its bytes no longer hash to its digest");
    }
    for d in &missing {
        println!("missing  {d}: recorded for a mirrored image but not stored");
    }
    println!(
        "{} blob(s), {} bytes verified: {} corrupt, {} missing",
        listed.len(),
        total,
        corrupt.len(),
        missing.len()
    );
    if corrupt.is_empty() && missing.is_empty() {
        return Ok(true);
    }
    if !repair {
        println!(
            "`marketplace mirror verify --repair` removes them and mirrors their images again"
        );
        return Ok(false);
    }
    for d in &corrupt {
        blobs.delete(d).await?;
    }
    let damaged: Vec<String> = corrupt
        .iter()
        .map(|d| d.to_string())
        .chain(missing)
        .collect();
    let n = store
        .remirror_images_with(&damaged, crate::clock::now())
        .await?;
    println!(
        "removed {} corrupt blob(s); {n} image(s) queued to be mirrored again",
        corrupt.len()
    );
    Ok(false)
}

async fn run_now(
    store: &Store,
    blobs: Arc<dyn BlobStore>,
    upstreams: Option<&std::path::Path>,
    jobs: u16,
    deadlines: crate::mirror::Deadlines,
) -> anyhow::Result<bool> {
    let upstreams = load_upstreams(upstreams)?;
    store.enqueue_unlinked_images(crate::clock::now()).await?;
    let settings = crate::mirror::Settings {
        jobs: usize::from(jobs),
        deadlines,
        ..Default::default()
    };
    let mirror = crate::mirror::Mirror::new(store.clone(), blobs, upstreams, settings);
    let progress = Progress {
        on: std::io::stderr().is_terminal(),
    };
    let started = std::time::Instant::now();
    let mut total = crate::mirror::Pass::default();
    loop {
        let pass = mirror.pass();
        tokio::pin!(pass);
        let done = loop {
            tokio::select! {
                done = &mut pass => break done?,
                () = tokio::time::sleep(std::time::Duration::from_millis(250)) => {
                    let mib = mirror.received() as f64 / 1_048_576.0;
                    let secs = started.elapsed().as_secs_f64().max(0.001);
                    progress.show(&format!(
                        "mirroring: {} done, {mib:.1} MiB received, {:.1} MiB/s",
                        total.mirrored + total.failed,
                        mib / secs
                    ));
                }
            }
        };
        if done.mirrored + done.failed == 0 {
            break;
        }
        total.mirrored += done.mirrored;
        total.failed += done.failed;
    }
    progress.done();
    for i in store.mirror_statuses().await? {
        if i.status == "failed" {
            println!(
                "failed    {}/{}@{}: {}",
                i.host,
                i.repository,
                i.digest,
                i.last_error_detail
                    .as_deref()
                    .or(i.last_error.as_deref())
                    .unwrap_or("")
            );
        }
    }
    println!(
        "{} image(s) mirrored, {} failed; {:.1} MiB received in {:.1} s",
        total.mirrored,
        total.failed,
        mirror.received() as f64 / 1_048_576.0,
        started.elapsed().as_secs_f64()
    );
    Ok(total.failed == 0)
}

async fn gc(
    store: &Store,
    blobs: &dyn BlobStore,
    delete: bool,
    min_age: std::time::Duration,
) -> anyhow::Result<bool> {
    let before = crate::clock::now() - min_age.as_secs() as i64;
    let unreferenced = crate::mirror::collectable(store, blobs, before).await?;
    let bytes: u64 = unreferenced.iter().map(|b| b.size).sum();
    for b in &unreferenced {
        if delete {
            blobs.delete(&b.digest).await?;
            println!("removed  {} ({} bytes)", b.digest, b.size);
        } else {
            println!("unreferenced  {} ({} bytes)", b.digest, b.size);
        }
    }
    // Spared by no age: a download still running holds its file locked and is never
    // listed, and one whose process died will never be finished.
    let abandoned = blobs.abandoned().await?;
    let mut tmp_bytes = 0;
    let mut tmp_files = 0;
    for a in &abandoned {
        if !delete {
            println!(
                "unfinished  tmp/{} ({} bytes): a download whose process died",
                a.name, a.size
            );
        } else if blobs.remove_abandoned(a).await? {
            println!("removed  tmp/{} ({} bytes)", a.name, a.size);
        } else {
            continue;
        }
        tmp_files += 1;
        tmp_bytes += a.size;
    }
    let verb = if delete {
        "removed"
    } else {
        "would be removed (dry run; --delete removes them)"
    };
    println!(
        "{} blob(s) and {tmp_files} unfinished download(s), {} bytes {verb}",
        unreferenced.len(),
        bytes + tmp_bytes
    );
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::parse_rate;

    #[test]
    fn rates_read_as_written() {
        assert_eq!(parse_rate("256KiB"), Ok(256 * 1024));
        assert_eq!(parse_rate("2MiB"), Ok(2 << 20));
        assert_eq!(parse_rate("65536"), Ok(65536));
        assert_eq!(parse_rate("1B"), Ok(1));
        for bad in ["0", "0KiB", "fast", "10kb", "", "-1", "99999999999GiB"] {
            let err = parse_rate(bad).unwrap_err();
            assert!(err.contains("is not a rate"), "{bad}: {err}");
        }
    }
}
