//! `--database` and `--database-connections`: where every command that opens the
//! server's store finds it. Without `--database`, the SQLite file in the data directory.

use std::path::Path;

use anyhow::Context;
use clap::Args;

use crate::db::Database;
use crate::server;
use crate::store::Store;

#[derive(Debug, Clone, Args)]
pub(super) struct DatabaseArgs {
    /// The server's database: `sqlite:PATH`, or `postgres://USER@HOST:PORT/DATABASE`
    /// (`?sslmode=verify-full`; the password from `PGPASSWORD` or `~/.pgpass`).
    /// Default: `DATA_DIR/marketplace.db`.
    #[arg(
        long = "database",
        env = "MARKETPLACE_DATABASE_URL",
        hide_env_values = true,
        value_parser = Database::parse,
        global = true
    )]
    database: Option<Database>,
    /// Connections of a PostgreSQL pool.
    #[arg(
        long,
        env = "MARKETPLACE_DATABASE_CONNECTIONS",
        default_value_t = crate::db::postgres::DEFAULT_CONNECTIONS,
        value_parser = clap::value_parser!(u32).range(1..=crate::db::postgres::MAX_CONNECTIONS as i64),
        global = true
    )]
    database_connections: u32,
}

impl DatabaseArgs {
    /// The database these arguments name, for `data_dir` (prepared: created if missing,
    /// private), which keeps the signing keys and blobs whichever database runs.
    fn database(&self, data_dir: &Path) -> anyhow::Result<Database> {
        let file = server::prepare_data_dir(data_dir)
            .with_context(|| format!("preparing data directory {}", data_dir.display()))?;
        Ok(self.database.clone().unwrap_or(Database::Sqlite(file)))
    }

    /// The database these arguments name, as logs show it (no password); nothing is
    /// created.
    pub(super) fn shown(&self, data_dir: &Path) -> String {
        match &self.database {
            Some(db) => db.to_string(),
            None => Database::Sqlite(data_dir.join(server::DATABASE_FILE)).to_string(),
        }
    }

    /// Opens the store, creating an empty database when there is none.
    pub(super) async fn open(&self, data_dir: &Path) -> anyhow::Result<Store> {
        let db = self.database(data_dir)?;
        let store = Store::connect(&db, self.database_connections)
            .await
            .with_context(|| format!("opening database {db}"))?;
        // Shown without its password (`Database`'s Display).
        tracing::info!(database = %db, "database opened");
        Ok(store)
    }

    /// Opens the store of an initialized marketplace; never creates a SQLite file (nor
    /// the data directory).
    pub(super) async fn open_existing(&self, data_dir: &Path) -> anyhow::Result<Store> {
        let db = match &self.database {
            Some(db) => db.clone(),
            None => {
                let file = data_dir.join(server::DATABASE_FILE);
                if !file.exists() {
                    anyhow::bail!("no marketplace database in {}", data_dir.display());
                }
                Database::Sqlite(file)
            }
        };
        if let Database::Sqlite(path) = &db
            && !path.exists()
        {
            anyhow::bail!("no marketplace database at {}", path.display());
        }
        Store::connect(&db, self.database_connections)
            .await
            .with_context(|| format!("opening database {db}"))
    }
}
