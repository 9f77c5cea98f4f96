//! A store on each backend, for the conformance suites (`tests/store.rs`,
//! `tests/sync_store.rs`): a SQLite file in a temporary directory, or a fresh database on
//! the PostgreSQL server the binary's tests share (`common::pg`), kept alive as long as
//! the store. `conformance!` runs each listed body once per backend.

use std::future::Future;
use std::sync::Arc;

use marketplace::db::Database;
use marketplace::store::Store;
use marketplace::sync::SyncStore;

/// A store a suite runs against.
pub trait Open: Sized {
    /// Its SQLite file's name.
    const FILE: &'static str;
    fn open(db: &Database) -> impl Future<Output = Self>;
}

impl Open for Store {
    const FILE: &'static str = "marketplace.db";
    async fn open(db: &Database) -> Store {
        Store::connect(db, 4).await.unwrap()
    }
}

impl Open for SyncStore {
    const FILE: &'static str = "sync.db";
    async fn open(db: &Database) -> SyncStore {
        SyncStore::connect(db, 4).await.unwrap()
    }
}

/// A store on one backend, with what keeps its database alive.
pub struct Backend<S> {
    pub store: S,
    pub db: Database,
    _keep: Keep,
}

enum Keep {
    Dir(#[allow(dead_code)] tempfile::TempDir),
    Postgres(#[allow(dead_code)] Arc<super::pg::Postgres>),
}

impl<S: Open> Backend<S> {
    pub async fn sqlite() -> Backend<S> {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::Sqlite(dir.path().join(S::FILE));
        Backend {
            store: S::open(&db).await,
            db,
            _keep: Keep::Dir(dir),
        }
    }

    pub async fn postgres() -> Backend<S> {
        let pg = super::pg::shared();
        let db = Database::parse(&pg.fresh().await).unwrap();
        Backend {
            store: S::open(&db).await,
            db,
            _keep: Keep::Postgres(pg),
        }
    }

    /// A second store on the same database, as another process would open it.
    pub async fn another(&self) -> S {
        S::open(&self.db).await
    }
}

/// Each body (`async fn NAME(b: Backend)`, with `Backend` the suite's alias of
/// [`Backend`]), once per backend.
#[allow(unused_macros)] // used by the two conformance suites only
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name(super::Backend::sqlite().await).await
            })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name(super::Backend::postgres().await).await
            })*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use conformance;
