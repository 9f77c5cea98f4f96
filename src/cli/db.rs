//! `marketplace db copy --from URL --to URL`: moves an installation between databases
//! (SQLite to PostgreSQL, or back), the server's or a sync worker's.

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::db::Database;
use crate::db::copy::{self, Kind};
use crate::store::Store;
use crate::sync::SyncStore;

#[derive(Debug, Args)]
pub struct DbArgs {
    #[command(subcommand)]
    command: DbCommand,
}

#[derive(Debug, Subcommand)]
enum DbCommand {
    /// Copy every row of one database into a new, empty one: published definitions,
    /// yanks, signed metadata history, publishers and tokens, mirror jobs and mirrored
    /// content records (or a sync worker's whole state). A target that holds anything
    /// is refused. The source is read in one snapshot: what is written to it after the
    /// copy starts is not copied, so stop the servers (or workers) using it first.
    Copy {
        /// The database to copy: `sqlite:PATH` or `postgres://…`.
        #[arg(long, value_parser = Database::parse)]
        from: Database,
        /// The new database: `sqlite:PATH` (created) or `postgres://…` (must exist,
        /// empty).
        #[arg(long, value_parser = Database::parse)]
        to: Database,
    },
}

pub fn run(args: DbArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async move {
        match args.command {
            DbCommand::Copy { from, to } => copy_database(&from, &to).await,
        }
    })
}

async fn copy_database(from: &Database, to: &Database) -> anyhow::Result<()> {
    if let Database::Sqlite(path) = from
        && !path.exists()
    {
        anyhow::bail!("--from: no database at {}", path.display());
    }
    let kind = copy::kind_of(from)
        .await
        .with_context(|| format!("reading {from}"))?;
    // Each side at this binary's schema, by the store that owns it.
    match kind {
        Kind::Server => {
            Store::connect(from, 1)
                .await
                .with_context(|| format!("opening {from}"))?
                .close()
                .await;
            Store::connect(to, 1)
                .await
                .with_context(|| format!("opening {to}"))?
                .close()
                .await;
        }
        Kind::Worker => {
            SyncStore::connect(from, 1)
                .await
                .with_context(|| format!("opening {from}"))?
                .close()
                .await;
            SyncStore::connect(to, 1)
                .await
                .with_context(|| format!("opening {to}"))?
                .close()
                .await;
        }
    }
    let done = copy::copy(from, to, kind)
        .await
        .with_context(|| format!("copying {from} to {to}"))?;
    let rows: u64 = done.tables.iter().map(|(_, n)| n).sum();
    for (table, n) in &done.tables {
        println!("{table}: {n}");
    }
    println!("copied the {kind} database {from} to {to}: {rows} rows");
    Ok(())
}
