//! `marketplace curation reload --server URL`: the replica that answers reads its
//! `serve --curation FILE` again (categories, featured plugins, labels of
//! `catalog.v1`). Each replica reads its own copy of the file, so behind a balancer
//! call it once per replica, or restart them.

use anyhow::Context;
use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct CurationArgs {
    #[command(flatten)]
    server: super::remote::ServerArgs,
    #[command(subcommand)]
    command: CurationCommand,
}

#[derive(Debug, Subcommand)]
enum CurationCommand {
    /// Read the curation file again on the server (needs --server and an operator token).
    Reload,
}

pub fn run(args: CurationArgs) -> anyhow::Result<()> {
    let CurationCommand::Reload = args.command;
    let remote = args.server.remote()?.context(
        "`curation reload` acts on a running server: give --server URL (and MARKETPLACE_OPERATOR_TOKEN)",
    )?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let done: crate::catalog::curation::Reloaded =
        runtime.block_on(remote.call::<(), _>(reqwest::Method::POST, "curation/reload", None))?;
    println!(
        "curation reloaded from {}: {} categories, {} featured plugins",
        done.file, done.categories, done.featured
    );
    Ok(())
}
