//! `marketplace reviewer add|list|revoke`: the marketplace's reviewers, who approve,
//! request changes to or reject versions submitted for review
//! (`admin.v1.ReviewService`, `marketplace review`). A reviewer's token is printed
//! once and kept as its sha256; it cannot publish, and a publisher's cannot review.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};

/// Reviewer tokens: `mkr_` and 64 hex digits (publishers' are `mkt_`).
const TOKEN_PREFIX: &str = "mkr_";

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
        let store = args.database.open(&args.data_dir).await?;
        let now = crate::clock::now();
        match args.command {
            ReviewerCommand::Add { name } => {
                if !crate::definition::is_dns_label(&name) {
                    bail!(
                        "reviewer name `{name}` must be a DNS-1123 label (lowercase letters, digits, `-`; at most 63)"
                    );
                }
                let token = crate::token::generate(TOKEN_PREFIX);
                store
                    .add_reviewer(&name, &crate::token::hash(&token), now)
                    .await?;
                println!("reviewer {name} added; its token (shown only now):");
                println!("{token}");
            }
            ReviewerCommand::List => {
                let reviewers = store.reviewers().await?;
                if reviewers.is_empty() {
                    println!("no reviewers; add one with `marketplace reviewer add NAME`");
                }
                for r in reviewers {
                    let state = match r.revoked_at {
                        Some(at) => format!("revoked {}", crate::clock::rfc3339(at)),
                        None => "active".to_owned(),
                    };
                    println!(
                        "{}\t{state}\tsince {}",
                        r.name,
                        crate::clock::rfc3339(r.created_at)
                    );
                }
            }
            ReviewerCommand::Revoke { name } => {
                if !store.revoke_reviewer(&name, now).await? {
                    bail!("no active reviewer `{name}`");
                }
                println!("reviewer {name} revoked");
            }
        }
        Ok(())
    })
}
