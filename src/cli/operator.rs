//! `marketplace operator token create NAME | list | revoke NAME`: tokens for the admin
//! API (`/api/v1/admin/...`, and every `--server` command). Made on the server's
//! database only: a token is what gives access to the admin API, so none is made
//! through it.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::admin::operators;

#[derive(Debug, Args)]
pub struct OperatorArgs {
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
    command: OperatorCommand,
}

#[derive(Debug, Subcommand)]
enum OperatorCommand {
    /// Operators' tokens for the admin API.
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Create an operator's token (printed once, kept as its sha256); NAME is who the
    /// server's log names for every admin action done with it. A revoked operator gets
    /// a new token.
    Create { name: String },
    /// List operators: active or revoked, since when.
    List,
    /// Revoke an operator's token.
    Revoke { name: String },
}

pub fn run(args: OperatorArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let store = args.database.open(&args.data_dir).await?;
        let now = crate::clock::now();
        let OperatorCommand::Token(command) = args.command;
        let result: anyhow::Result<()> = async {
            match command {
                TokenCommand::Create { name } => {
                    let token = operators::create(&store, &name, now).await?;
                    eprintln!("operator {name}: its token for the admin API (shown only now):");
                    println!("{token}");
                }
                TokenCommand::List => {
                    let list = operators::list(&store).await?;
                    if list.is_empty() {
                        println!(
                            "no operators; create a token with `marketplace operator token create NAME`"
                        );
                    }
                    for o in list {
                        println!(
                            "{}",
                            super::reviewer::token_holder(&o.name, o.created_at, o.revoked_at)
                        );
                    }
                }
                TokenCommand::Revoke { name } => {
                    operators::revoke(&store, &name, now).await?;
                    println!("operator {name} revoked");
                }
            }
            Ok(())
        }
        .await;
        store.close().await;
        result
    })
}
