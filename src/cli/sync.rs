//! `marketplace sync`: the sync worker (rounds and its local API), and the local API's
//! tokens. A thin layer over `sync::Worker`.

use crate::sync::store::Tokens as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::api;
use crate::sync::{Config, RoundError, Scope, SyncStore, Synced, Worker};

#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The worker's configuration (data directory, local API address, sources).
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "MARKETPLACE_SYNC_CONFIG",
        default_value = "sync.yaml"
    )]
    config: PathBuf,
    /// Run one round for every source and exit; non-zero if any source failed.
    #[arg(long)]
    once: bool,
    /// Serve the local API without running rounds (when rounds run elsewhere, e.g.
    /// `--once` from a scheduled job).
    #[arg(long, conflicts_with = "once")]
    api_only: bool,
    /// Log format: `text` for people, `json` for log collectors.
    #[arg(long, env = "MARKETPLACE_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    #[command(subcommand)]
    command: Option<SyncCommand>,
}

#[derive(Debug, Subcommand)]
enum SyncCommand {
    /// Bearer tokens of the local API.
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Create a token (printed once, stored hashed).
    Create {
        /// The organization it acts for: read its view, add and remove its sideloads.
        #[arg(long, required_unless_present = "reader", conflicts_with = "reader")]
        org: Option<String>,
        /// A token that reads every organization's view and writes nothing (for
        /// Fundament's own service).
        #[arg(long)]
        reader: bool,
    },
    /// List tokens (ids and scopes, never the tokens).
    List,
    /// Revoke a token by id.
    Revoke { id: String },
}

pub fn run(args: SyncArgs) -> anyhow::Result<bool> {
    let config = Config::load(&args.config)?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    // The password never shows: `Database` displays without it.
    let database = config.database.to_string();
    if let Some(SyncCommand::Token(command)) = args.command {
        runtime
            .block_on(token(command, &config))
            .with_context(|| format!("the worker's database {database}"))?;
        return Ok(true);
    }
    if !args.once {
        super::serve::init_tracing(&args.log_format);
    }
    runtime.block_on(async move {
        let worker = Arc::new(
            Worker::open(config)
                .await
                .with_context(|| format!("opening the worker's database {database}"))?,
        );
        tracing::info!(%database, "worker state opened");
        if worker.config().sources.is_empty() {
            println!("no sources configured: the built-in definitions alone are offered");
        }
        let ok = if args.once {
            let mut ok = true;
            for (name, outcome) in worker.sync_all().await {
                report(&name, &outcome);
                ok &= outcome.is_ok();
            }
            ok
        } else {
            serve(worker.clone(), !args.api_only).await?;
            true
        };
        worker.store().close().await;
        Ok(ok)
    })
}

/// The local API until SIGINT or SIGTERM, with every source's rounds beside it.
async fn serve(worker: Arc<Worker>, rounds: bool) -> anyhow::Result<()> {
    let listen = worker.config().listen.clone();
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    let addr = listener.local_addr()?;
    // Scripts and tests read this line to find a port chosen by the system.
    println!("local API listening on http://{addr}");
    use std::io::Write;
    std::io::stdout().flush()?;
    let app = api::worker::router(worker.clone());
    if rounds {
        let run = worker.run(std::future::pending(), report);
        tokio::select! {
            served = crate::server::serve(listener, app) => served?,
            () = run => {}
        }
    } else {
        crate::server::serve(listener, app).await?;
    }
    Ok(())
}

fn report(source: &str, outcome: &Result<Synced, RoundError>) {
    if let Ok(done) = outcome {
        for f in &done.failing {
            eprintln!(
                "{source}: publisher {} failing ({}) since {}; its last good definitions stay: {}",
                f.publisher,
                f.reason,
                jiff::Timestamp::from_second(f.since)
                    .map_or_else(|_| f.since.to_string(), |t| t.to_string()),
                f.message
            );
        }
    }
    match outcome {
        Ok(done) if done.unchanged => println!(
            "{source}: {} definitions, unchanged (timestamp v{})",
            done.definitions, done.trusted.timestamp
        ),
        Ok(done) => println!(
            "{source}: {} definitions ({} downloaded), snapshot v{}, timestamp v{}",
            done.definitions, done.downloaded, done.trusted.snapshot, done.trusted.timestamp
        ),
        Err(e) => eprintln!("{source}: failed ({}): {}", e.reason, e.message),
    }
}

async fn token(command: TokenCommand, config: &Config) -> anyhow::Result<()> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating {}", config.data_dir.display()))?;
    let store = SyncStore::connect(&config.database, config.database_connections).await?;
    let now = crate::clock::now();
    match command {
        TokenCommand::Create { org, reader: _ } => {
            let scope = org.map_or(Scope::Reader, Scope::Org);
            let (id, token) = store.create_token(&scope, now).await?;
            let what = match &scope {
                Scope::Org(org) => format!("organization {org}"),
                Scope::Reader => "reading every organization".to_owned(),
            };
            eprintln!("token {id} for {what}; it is shown only this once:");
            println!("{token}");
        }
        TokenCommand::List => {
            for t in store.tokens().await? {
                let scope = t.org.map_or("reader".to_owned(), |o| format!("org {o}"));
                let state = if t.revoked_at.is_some() {
                    "revoked"
                } else {
                    "active"
                };
                println!("{}  {scope}  {state}", t.id);
            }
        }
        TokenCommand::Revoke { id } => {
            if !store.revoke_token(&id, now).await? {
                anyhow::bail!("no active token with id {id}");
            }
            println!("token {id} revoked");
        }
    }
    store.close().await;
    Ok(())
}
