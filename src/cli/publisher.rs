//! `marketplace publisher add|list|new-token|revoke-token`

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::server;
use crate::store::Store;
use crate::trust::PublicKey;
use crate::trust::publishers::{self, new_token, token_hash};

#[derive(Debug, Args)]
pub struct PublisherArgs {
    #[arg(
        long,
        env = "MARKETPLACE_DATA_DIR",
        default_value = "./data",
        global = true
    )]
    data_dir: PathBuf,
    #[command(subcommand)]
    command: PublisherCommand,
}

#[derive(Debug, Subcommand)]
enum PublisherCommand {
    /// Register a publisher with its public key(s) and print its first API token.
    ///
    /// The publisher signs its own definitions; `NAME/*/*` is delegated to these keys in
    /// the signed index with the publisher's first publish.
    Add {
        name: String,
        /// Ed25519 public key: 64 hex digits or a .pub file; repeat for several.
        #[arg(long = "key", value_name = "PUBKEY", required = true)]
        keys: Vec<String>,
        /// Signatures required on the publisher's metadata; defaults to 1.
        #[arg(long, default_value_t = 1)]
        threshold: u64,
    },
    /// List publishers with their key ids, threshold and active tokens.
    List,
    /// Issue an additional API token for a publisher (printed once).
    NewToken { name: String },
    /// Revoke every API token of a publisher.
    RevokeToken { name: String },
}

pub fn run(args: PublisherArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let db = server::prepare_data_dir(&args.data_dir)
            .with_context(|| format!("preparing data directory {}", args.data_dir.display()))?;
        let store = Store::open(&db)
            .await
            .with_context(|| format!("opening database {}", db.display()))?;
        let result = command(&store, args.command).await;
        store.close().await;
        result
    })
}

async fn command(store: &Store, command: PublisherCommand) -> anyhow::Result<()> {
    let now = crate::clock::now();
    match command {
        PublisherCommand::Add {
            name,
            keys,
            threshold,
        } => {
            let keys = keys
                .iter()
                .map(|k| PublicKey::parse(k))
                .collect::<Result<Vec<_>, _>>()?;
            let token = publishers::add(store, &name, &keys, threshold, now).await?;
            println!(
                "publisher {name} added ({threshold} of {} key(s))",
                keys.len()
            );
            for k in &keys {
                println!("  key id {}", k.key_id());
            }
            println!("API token (shown once; the server keeps only its hash):");
            println!("{token}");
        }
        PublisherCommand::List => {
            let list = store.publisher_list().await?;
            if list.is_empty() {
                println!("no publishers");
            }
            for p in list {
                let ids: Vec<String> = p
                    .public_keys
                    .iter()
                    .map(|k| {
                        PublicKey::parse(k)
                            .map(|k| k.key_id())
                            .unwrap_or_else(|_| "<invalid key>".into())
                    })
                    .collect();
                println!(
                    "{}\tthreshold {}\ttokens {}\tkeys {}",
                    p.name,
                    p.threshold,
                    p.active_tokens,
                    ids.join(",")
                );
            }
        }
        PublisherCommand::NewToken { name } => {
            let token = new_token();
            store.add_token(&name, &token_hash(&token), now).await?;
            println!("API token for {name} (shown once):");
            println!("{token}");
        }
        PublisherCommand::RevokeToken { name } => {
            let n = store.revoke_tokens(&name, now).await?;
            println!("revoked {n} token(s) of {name}");
        }
    }
    Ok(())
}
