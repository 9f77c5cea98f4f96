//! The `marketplace` command line. Each subcommand is a thin layer over the library;
//! this is the only place (with background tasks) that uses `anyhow`.

mod bundle;
mod curation;
mod database;
mod db;
mod follow;
mod keys;
mod mirror;
mod operator;
mod publish;
mod publisher;
mod remote;
mod repo;
mod resign;
mod review;
mod reviewer;
mod serve;
mod storage;
mod sync;
mod validate;
mod yank;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "marketplace",
    version,
    about = "Fundament plugin marketplace: catalog server and definition tools"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the catalog web pages, JSON API and health endpoints.
    Serve(Box<serve::ServeArgs>),
    /// Check plugin definition files (or folders of them) and report every problem.
    Validate(validate::ValidateArgs),
    /// Manage ed25519 signing keys for the signed index.
    Keys(keys::KeysArgs),
    /// Manage the signed index (TUF repository).
    Repo(repo::RepoArgs),
    /// Manage publishers: their keys and API tokens.
    Publisher(publisher::PublisherArgs),
    /// Sign a definition with the publisher's key and publish it to a marketplace.
    Publish(publish::PublishArgs),
    /// Send a definition for review (its listing is created if needed)
    ///
    /// The version is uploaded as a draft and submitted; once a reviewer approved it,
    /// `publish --approved` signs and publishes it.
    Submit(review::SubmitArgs),
    /// Review submitted versions: list, show, approve, request changes, reject
    ///
    /// `show` says what a version asks for that the newest published one did not. Needs
    /// a reviewer's token (`marketplace reviewer add`).
    Review(review::ReviewArgs),
    /// Manage the marketplace's reviewers and their tokens
    Reviewer(reviewer::ReviewerArgs),
    /// Operators' tokens for the admin API (`--server` on the commands that change the
    /// server's state)
    Operator(operator::OperatorArgs),
    /// The catalog's curation on a running server (`reload` reads its file again)
    Curation(curation::CurationArgs),
    /// Yank a published version: it stays downloadable by hash but leaves listings and
    /// is never offered as an upgrade.
    Yank(yank::YankArgs),
    /// Re-sign the publisher's current targets as the next role version: renews its
    /// expiry, and moves it onto new keys after `publisher rotate-key`.
    Resign(resign::ResignArgs),
    /// The image mirror: status of every pinned image, retry, verify stored blobs,
    /// collect unreferenced ones.
    Mirror(mirror::MirrorArgs),
    /// Sync worker: pull and verify the signed index of the configured marketplaces.
    Sync(sync::SyncArgs),
    /// Databases: copy an installation into a new one (SQLite to PostgreSQL, or back).
    Db(db::DbArgs),
    /// Bundles for sites with no network: the signed index and images in one file,
    /// created on a connected marketplace and imported on an air-gapped one.
    Bundle(bundle::BundleArgs),
}

pub fn run() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve(_) | Command::Sync(_)) {
        end_quietly_on_a_closed_pipe();
    }
    match cli.command {
        Command::Serve(args) => report(serve::run(*args)),
        Command::Validate(args) => validate::run(args),
        Command::Keys(args) => report(keys::run(args)),
        Command::Repo(args) => report(repo::run(args)),
        Command::Publisher(args) => report(publisher::run(args)),
        Command::Publish(args) => report(publish::run(args)),
        Command::Submit(args) => report(review::submit(args)),
        Command::Review(args) => report(review::review(args)),
        Command::Reviewer(args) => report(reviewer::run(args)),
        Command::Operator(args) => report(operator::run(args)),
        Command::Curation(args) => report(curation::run(args)),
        Command::Yank(args) => report(yank::run(args)),
        Command::Resign(args) => report(resign::run(args)),
        Command::Db(args) => report(db::run(args)),
        Command::Bundle(args) => report(bundle::run(args)),
        Command::Mirror(args) => match mirror::run(args) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => report(Err(e)),
        },
        Command::Sync(args) => match sync::run(args) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => report(Err(e)),
        },
    }
}

/// A command whose output is cut short (`marketplace mirror status | head`) ends as
/// Unix tools do, by SIGPIPE, instead of panicking on its next `println!` (Rust ignores
/// SIGPIPE by default, so a closed stdout is an error every print turns into a panic).
/// Not for `serve` and `sync`: long-running processes keep the default and see EPIPE as
/// an error where they write (network writes never raise SIGPIPE in Rust either way).
fn end_quietly_on_a_closed_pipe() {
    // SAFETY: called once at start, before any thread exists; it only restores the
    // signal's default disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
