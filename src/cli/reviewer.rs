//! `marketplace reviewer add|list|revoke` (on the data directory, or `--server` through
//! the admin API): the marketplace's reviewers, who approve,
//! request changes to or reject versions submitted for review
//! (`admin.v1.ReviewService`, `marketplace review`). A reviewer's token is printed
//! once and kept as its sha256; it cannot publish, and a publisher's cannot review.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::admin::{Operator, reviewers};
use crate::store::Store;

#[derive(Debug, Args)]
pub struct ReviewerArgs {
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
    server: super::remote::ServerArgs,
    #[command(subcommand)]
    command: ReviewerCommand,
}

#[derive(Debug, Subcommand)]
enum ReviewerCommand {
    /// Add a reviewer and print its API token (shown once). A revoked reviewer gets a
    /// new token.
    Add { name: String },
    /// List reviewers: active or revoked, since when.
    List,
    /// Revoke a reviewer's token; its past decisions stay in the history.
    Revoke { name: String },
}

pub fn run(args: ReviewerArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        if let Some(remote) = args.server.remote()? {
            return command(None, Some(&remote), args.command).await;
        }
        let store = args.database.open(&args.data_dir).await?;
        let result = command(Some(&store), None, args.command).await;
        store.close().await;
        result
    })
}

/// On `store`, or through the admin API of `remote`.
async fn command(
    store: Option<&Store>,
    remote: Option<&super::remote::Remote>,
    command: ReviewerCommand,
) -> anyhow::Result<()> {
    use reqwest::Method;
    let now = crate::clock::now();
    let who = Operator::local();
    match command {
        ReviewerCommand::Add { name } => {
            let added: reviewers::AddedReviewer = match (store, remote) {
                (Some(store), _) => reviewers::add(store, &who, &name, now).await?,
                (None, Some(r)) => {
                    let body = reviewers::NewReviewer { name };
                    r.call(Method::POST, "reviewers", Some(&body)).await?
                }
                (None, None) => unreachable!("a store or a server"),
            };
            println!("reviewer {} added; its token (shown only now):", added.name);
            println!("{}", added.token);
        }
        ReviewerCommand::List => {
            let list = match (store, remote) {
                (Some(store), _) => reviewers::list(store).await?,
                (None, Some(r)) => r.get::<Items>("reviewers").await?.items,
                (None, None) => unreachable!("a store or a server"),
            };
            if list.is_empty() {
                println!("no reviewers; add one with `marketplace reviewer add NAME`");
            }
            for r in list {
                println!("{}", token_holder(&r.name, r.created_at, r.revoked_at));
            }
        }
        ReviewerCommand::Revoke { name } => {
            match (store, remote) {
                (Some(store), _) => reviewers::revoke(store, &who, &name, now).await?,
                (None, Some(r)) => {
                    r.call::<(), serde_json::Value>(
                        Method::DELETE,
                        &format!("reviewers/{name}"),
                        None,
                    )
                    .await?;
                }
                (None, None) => unreachable!("a store or a server"),
            }
            println!("reviewer {name} revoked");
        }
    }
    Ok(())
}

#[derive(serde::Deserialize)]
struct Items {
    items: Vec<reviewers::ReviewerStatus>,
}

/// A reviewer or operator as their lists print one: name, active or when revoked, and
/// since when.
pub(super) fn token_holder(name: &str, created_at: i64, revoked_at: Option<i64>) -> String {
    let state = match revoked_at {
        Some(at) => format!("revoked {}", crate::clock::rfc3339(at)),
        None => "active".to_owned(),
    };
    format!(
        "{name}\t{state}\tsince {}",
        crate::clock::rfc3339(created_at)
    )
}
