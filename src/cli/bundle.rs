//! `marketplace bundle create|import`: carrying a marketplace's signed index and images
//! into a site with no network.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct BundleArgs {
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
    keys: super::storage::KeysDirArgs,
    #[command(subcommand)]
    command: BundleCommand,
}

#[derive(Debug, Subcommand)]
enum BundleCommand {
    /// Write this marketplace's signed index (every root, the current metadata, the
    /// selected publishers' definitions) and the selected plugins' mirrored images (an
    /// OCI image layout: every platform, cosign signatures, referrers) into one tar file
    Create {
        /// The file to write (through OUT.partial, renamed when complete).
        out: PathBuf,
        /// `PUBLISHER/PLUGIN` patterns, `*` for any run of characters, comma-separated.
        /// A publisher comes with all its definitions (its signature covers them);
        /// only selected plugins' images are written.
        #[arg(long, default_value = "*")]
        plugins: String,
        /// An earlier bundle, already imported where this one goes: what it held is
        /// left out (only its table of contents is read).
        #[arg(long)]
        since: Option<PathBuf>,
        /// Only this platform of each image (`OS/ARCH` or `OS/ARCH/VARIANT`, e.g.
        /// linux/amd64); repeat for several. Default: every platform.
        #[arg(long = "platform", value_parser = platform)]
        platforms: Vec<String>,
    },
    /// Verify a bundle as an online upstream is verified (from the root this
    /// marketplace follows it with; an older bundle than the last imported is refused)
    /// and apply it as one round of following it, images included. A bundle that does
    /// not verify changes nothing
    Import {
        file: PathBuf,
        /// The marketplace the bundle comes from, as its publishers are shown to come
        /// from (the URL it is known by; nothing is fetched from it).
        #[arg(long, env = "MARKETPLACE_UPSTREAM")]
        upstream: String,
        /// Its root.json, obtained out of band: the only key material trusted for it
        /// until an import verifies a newer root.
        #[arg(long, env = "MARKETPLACE_UPSTREAM_ROOT")]
        upstream_root: PathBuf,
        /// Which of its plugins to follow (as `serve --upstream-plugins`).
        #[arg(long, env = "MARKETPLACE_UPSTREAM_PLUGINS")]
        upstream_plugins: Option<String>,
        /// The oldest bundle accepted: its metadata is checked as of when it was made,
        /// so it cannot be older than this.
        #[arg(long, default_value = "30d", value_parser = super::repo::parse_duration)]
        max_age: std::time::Duration,
    },
}

fn platform(text: &str) -> Result<String, String> {
    crate::registry::manifest::check_platform(text).map(|()| text.to_owned())
}

pub fn run(args: BundleArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async move {
        let store = args.database.open(&args.data_dir).await?;
        let blobs = args.blobs.open(&args.data_dir).await?;
        let now = crate::clock::now();
        let result = match args.command {
            BundleCommand::Create {
                out,
                plugins,
                since,
                platforms,
            } => {
                let filter = crate::upstream::Filter::parse(&plugins)?;
                let since = since
                    .map(|p| {
                        crate::bundle::read_toc(&p)
                            .with_context(|| format!("reading --since {}", p.display()))
                    })
                    .transpose()?;
                let selection = crate::bundle::Selection {
                    plugins: &filter,
                    platforms: &platforms,
                    since: since.as_ref(),
                };
                let created = crate::bundle::create(&store, blobs, selection, &out, now)
                    .await
                    .with_context(|| format!("writing {}", out.display()))?;
                let toc = &created.toc;
                let written = toc.targets.iter().filter(|t| t.included).count();
                println!(
                    "wrote {}: {} bytes; snapshot v{}, {} definitions ({} new), {} images, {} blobs ({} bytes)",
                    out.display(),
                    created.bytes,
                    toc.snapshot_version,
                    toc.targets.len(),
                    written,
                    toc.images.len(),
                    toc.blobs_included,
                    toc.bytes_included
                );
                for missing in &created.not_mirrored {
                    println!("warning: not mirrored here, left out: {missing}");
                }
                Ok(())
            }
            BundleCommand::Import {
                file,
                upstream,
                upstream_root,
                upstream_plugins,
                max_age,
            } => {
                let keys_dir = args.keys.dir(&args.data_dir);
                let keys = crate::trust::server::state::OnlineKeys::load(&keys_dir)?
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "no online keys in {}; run `marketplace repo init` first (or give --keys-dir)",
                            keys_dir.display()
                        )
                    })?;
                let signer = crate::trust::server::state::Signer::new(keys, Default::default());
                let filter = match &upstream_plugins {
                    Some(text) => crate::upstream::Filter::parse(text)?,
                    None => crate::upstream::Filter::all(),
                };
                let root = std::fs::read(&upstream_root).with_context(|| {
                    format!("reading --upstream-root {}", upstream_root.display())
                })?;
                let upstream = crate::upstream::Upstream::new(&upstream, root, filter)?;
                std::fs::create_dir_all(&args.data_dir)
                    .with_context(|| format!("creating {}", args.data_dir.display()))?;
                let imported = crate::bundle::import(
                    &store,
                    &signer,
                    blobs,
                    &upstream,
                    crate::bundle::Incoming {
                        path: &file,
                        scratch: &args.data_dir,
                        max_age,
                    },
                    now,
                )
                .await
                .with_context(|| format!("importing {}", file.display()))?;
                let r = &imported.report;
                let followed = r.with(crate::upstream::Status::Followed);
                let added: usize = r.publishers.iter().map(|p| p.added).sum();
                println!(
                    "imported {}: upstream snapshot v{}, {} publishers followed ({}), {added} new definitions, {} images mirrored",
                    file.display(),
                    r.upstream_snapshot,
                    followed.len(),
                    followed.join(", "),
                    imported.mirrored
                );
                for p in &r.publishers {
                    if let Some(reason) = &p.reason {
                        println!("{}: {}: {reason}", p.name, p.status);
                    }
                }
                for f in &imported.failed {
                    println!("warning: image not mirrored: {f}");
                }
                if imported.failed.is_empty() {
                    Ok(())
                } else {
                    Err(anyhow::anyhow!(
                        "{} image(s) of the bundle could not be mirrored",
                        imported.failed.len()
                    ))
                }
            }
        };
        store.close().await;
        result
    })
}
