//! The catalog database. Stores hold data and enforce its invariants (immutability of
//! published versions); they never call HTTP handlers or know about pages.
//!
//! [`Store`] is what the rest of the server holds: the storage interface
//! ([`backend`]'s traits, one SQL implementation per backend under `sqlite/`), the
//! catalog cache in front of listings, and the signal that tells metadata readers to
//! look again.

mod backend;
mod bulk;
mod cache;
mod changes;
mod detail;
mod feed;
mod mirror;
mod operators;
mod postgres;
mod publishers;
mod query;
mod review;
mod rows;
mod sqlite;
mod tuf;
mod upstream;

use std::path::Path;
use std::sync::Arc;

use sqlx::migrate::Migrator;

use crate::db::{self, Database};
use crate::definition::Definition;

use backend::{Backend, Catalog, ChangeFeed, Maintenance, Publishers, SignedIndex, Upstreams};
use postgres::PgStore;
pub(crate) use postgres::write_search_document;
use sqlite::SqliteStore;

pub use cache::{CacheUsage, DEFAULT_BUDGET as DEFAULT_CACHE_BUDGET};
pub use changes::Stamp;
pub use feed::{FeedScope, FeedVersion};
pub use mirror::{Content, ContentKind, MirrorJob, MirrorStatus, Referrer, ServedManifest};
pub use operators::OperatorRow;
pub use publishers::PublisherRecord;
pub use query::{
    ListedDetail, ListedPlugin, Page, PluginQuery, PluginSummary, Sort, search_tokens,
};
pub use review::{
    LinkRow, ListingRow, ReviewDecision, ReviewEventRow, ReviewVersionRow, ReviewerRow, Transition,
    Transitioned, Upload,
};
pub use tuf::StoredMetadata;
pub use upstream::{FollowedPublisher, MirroredImage, UpstreamRound, UpstreamRow};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    // The cause is part of the message and deliberately not also a `source()`, so an
    // error chain prints it once.
    #[error("database error: {0}")]
    Database(sqlx::Error),
    #[error("database migration failed: {0}")]
    Migrate(sqlx::migrate::MigrateError),
    #[error("{0}")]
    TooNew(#[from] db::SchemaTooNew),
    #[error(
        "{publisher}/{name} version {version} is already published with hash {existing}; published versions are immutable"
    )]
    VersionExists {
        publisher: String,
        name: String,
        version: String,
        existing: String,
    },
    #[error("publisher `{0}` already exists")]
    PublisherExists(String),
    #[error("reviewer `{0}` already exists; revoke it first to give it a new token")]
    ReviewerExists(String),
    #[error("operator {0} exists with an active token; revoke it first")]
    OperatorExists(String),
    #[error("no publisher `{0}` with keys is registered")]
    NoSuchPublisher(String),
    #[error("metadata {role} version {version} already exists")]
    MetadataExists { role: String, version: u64 },
    #[error("stored definition {0} no longer parses: {1}")]
    Corrupt(String, crate::definition::InvalidDefinition),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Database(e)
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        StoreError::Migrate(e)
    }
}

/// A part of the store that readers keep copies of, with a generation every write to it
/// bumps in its own transaction (the change feed, table `change_feed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Domain {
    /// What listings and facets read: plugins, publishers' names and suspension, tags,
    /// the search index.
    Catalog,
    /// Signed TUF metadata.
    Metadata,
}

impl Domain {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Domain::Catalog => "catalog",
            Domain::Metadata => "metadata",
        }
    }
}

/// What [`Store::insert_version`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    New,
    /// The same bytes were already stored under this version: nothing changed.
    Unchanged,
}

#[derive(Debug, Clone)]
pub struct PluginRecord {
    pub id: i64,
    pub publisher: String,
    pub name: String,
    pub latest_version: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    /// Its publisher is suspended by the operator.
    pub suspended: bool,
    /// The upstream marketplace its publisher is followed from; `None` when the
    /// publisher is registered here.
    pub origin: Option<String>,
}

#[derive(Debug, Clone)]
pub struct VersionRecord {
    pub version: String,
    pub version_parsed: semver::Version,
    pub major: u64,
    pub hash: String,
    pub image: String,
    pub published_at: i64,
    pub yanked: bool,
    /// TUF key ids of the publisher keys that signed it; empty for a built-in loaded
    /// before the signed index was initialized.
    pub signer_key_ids: Vec<String>,
    /// Where the mirror of its image stands; `None` before the server enqueued it.
    pub mirror: Option<ImageMirror>,
    /// Why Fundament cannot install it (fields of the older design); `None` when it can.
    pub not_installable: Option<String>,
}

/// A version's image in the mirror, as the store reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageMirror {
    /// `pending`, `mirroring`, `mirrored` or `failed`.
    pub status: String,
    /// Bytes of every manifest and blob, once mirrored.
    pub size: Option<i64>,
    /// Why the last attempt failed.
    pub error: Option<String>,
    /// When a failed mirror is tried again (Unix seconds).
    pub next_attempt_at: Option<i64>,
    /// The cosign key (id) whose signature of the image verified, when the publisher
    /// registered keys.
    pub verified_by: Option<String>,
}

/// A stored version's definition with the extras stored beside it: published bytes are
/// read with [`Definition::parse_published`] (a version of the older design stays
/// readable), and `extras` is `None` for a version stored before extras existed.
pub(crate) fn stored_definition(
    bytes: &[u8],
    hash: &str,
    extras: Option<String>,
) -> Result<Definition, StoreError> {
    let corrupt = |e| StoreError::Corrupt(hash.to_owned(), e);
    let def = Definition::parse_published(bytes).map_err(corrupt)?;
    let Some(json) = extras else { return Ok(def) };
    let extras = serde_json::from_str(&json).map_err(|e| {
        corrupt(crate::definition::InvalidDefinition::one(
            crate::definition::Problem::at("extras", None, e.to_string()),
        ))
    })?;
    def.with_extras(extras).map_err(corrupt)
}

/// A plugin found by name, for resolving dependencies.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PluginRef {
    pub publisher: String,
    pub name: String,
    pub display_name: String,
}

/// Tags (with counts) and publishers, for the catalog's filter controls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facets {
    pub tags: Vec<(String, i64)>,
    pub publishers: Vec<String>,
}

/// The server's schema on SQLite: every `.sql` file directly in `migrations/` (the
/// macro does not descend into `migrations/sync` and the other folders there).
pub static MIGRATIONS: Migrator = sqlx::migrate!("./migrations");

/// The same schema on PostgreSQL, version for version (a baseline at 0009, then one
/// migration per change with the SQLite side's number); `tests/schema_parity.rs` holds
/// the two schemas equal.
pub static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/postgres");

#[derive(Clone)]
pub struct Store {
    db: Backend,
    /// Listings and facets per generation of the catalog tables; see [`cache`].
    cache: Arc<cache::CatalogCache>,
}

impl Store {
    /// Opens (creating if needed) the database file and applies pending migrations.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        Self::with(Backend::Sqlite(SqliteStore::open(path).await?)).await
    }

    /// Opens the database `db` names (creating a SQLite file if missing) and applies
    /// pending migrations; `connections` sizes a PostgreSQL pool.
    pub async fn connect(db: &Database, connections: u32) -> Result<Store, StoreError> {
        match db {
            Database::Sqlite(path) => Store::open(path).await,
            Database::Postgres(options) => {
                Self::with(Backend::Postgres(
                    PgStore::open(options, connections).await?,
                ))
                .await
            }
        }
    }

    /// A private in-memory database, for tests.
    pub async fn open_in_memory() -> Result<Store, StoreError> {
        Self::with(Backend::Sqlite(SqliteStore::open_in_memory().await?)).await
    }

    async fn with(db: Backend) -> Result<Store, StoreError> {
        let store = Store {
            db,
            cache: Arc::new(cache::CatalogCache::new(cache::DEFAULT_BUDGET)),
        };
        let refreshed = store.db.refresh_stale_approvals().await?;
        if refreshed > 0 {
            tracing::info!(plugins = refreshed, "recomputed catalog requirement flags");
        }
        let checked = store.db.check_installability().await?;
        if checked > 0 {
            tracing::info!(
                versions = checked,
                "checked which stored versions Fundament can install"
            );
        }
        Ok(store)
    }

    /// The same store with an empty catalog cache bounded to `bytes` (approximate heap
    /// bytes of keys and values) instead of [`DEFAULT_CACHE_BUDGET`].
    pub fn with_cache_budget(self, bytes: usize) -> Store {
        Store {
            cache: Arc::new(cache::CatalogCache::new(bytes)),
            ..self
        }
    }

    /// How full the catalog cache is.
    pub fn cache_usage(&self) -> CacheUsage {
        self.cache.usage()
    }

    pub async fn close(&self) {
        match &self.db {
            Backend::Sqlite(s) => s.close().await,
            Backend::Postgres(s) => s.close().await,
        }
    }

    /// One page of a catalog listing with the number of matches. Served from the catalog
    /// cache when this exact query was answered at the current generation; otherwise the
    /// missing parts (every match's id in order, then the page's rows) are read in one
    /// transaction and kept.
    pub async fn list_plugins(&self, q: &PluginQuery) -> Result<Page<PluginSummary>, StoreError> {
        self.db.list_page(q, &self.cache).await
    }

    /// A page of a catalog listing and the facets beside it, as the catalog's web page
    /// shows them: one read of the generation when both are cached at it (each alone
    /// reads it, a round trip on PostgreSQL), else each as [`Store::list_plugins`] and
    /// [`Store::facets`] answer it.
    pub async fn list_plugins_with_facets(
        &self,
        q: &PluginQuery,
    ) -> Result<(Page<PluginSummary>, Arc<Facets>), StoreError> {
        let generation = self.db.generation(Domain::Catalog).await?;
        if let Some(cache::Entry::Page(page)) =
            self.cache.get(generation, &cache::Key::Page(q.clone()))
            && let Some(facets) = self.cache.facets(generation)
        {
            let page = Page {
                items: page.items.clone(),
                total: page.total,
            };
            return Ok((page, facets));
        }
        Ok((self.list_plugins(q).await?, self.facets().await?))
    }

    /// Every plugin `q` matches, in its listing order (its page fields are ignored): the
    /// ranking is the one pages use, from the same cache; the rows are read each time.
    pub async fn listed_plugins(&self, q: &PluginQuery) -> Result<Vec<ListedPlugin>, StoreError> {
        self.db.listed(q, &self.cache).await
    }

    /// The catalog's generation: what [`Store::listed_detail`] and the listings kept
    /// beside the catalog are read at, so one request reads it once.
    pub async fn catalog_generation(&self) -> Result<i64, StoreError> {
        self.db.generation(Domain::Catalog).await
    }

    /// Publisher and name of the listed plugin whose stable id (`ids::plugin`) is `id`:
    /// one map lookup, the map built once per generation of the catalog (ids are hashes
    /// of names, so a miss hashes every listed name once, not every request).
    pub async fn listed_by_id(&self, id: &str) -> Result<Option<(String, String)>, StoreError> {
        let generation = self.catalog_generation().await?;
        self.listed_by_id_at(generation, id).await
    }

    async fn listed_by_id_at(
        &self,
        generation: i64,
        id: &str,
    ) -> Result<Option<(String, String)>, StoreError> {
        if let Some(ids) = self.cache.listed_ids(generation) {
            return Ok(ids.get(id).cloned());
        }
        let ids: Arc<cache::ListedIds> = Arc::new(
            self.db
                .listed_names()
                .await?
                .into_iter()
                .map(|(p, n)| (crate::ids::plugin(&p, &n), (p, n)))
                .collect(),
        );
        // The names were read in their own statement: they belong to `generation` only
        // when no write to the catalog came between the two reads of it.
        if self.catalog_generation().await? == generation {
            self.cache.put_listed_ids(generation, ids.clone());
        }
        Ok(ids.get(id).cloned())
    }

    /// The listed plugin whose stable id is `id` with its latest listed definition, as of
    /// `generation` (from [`Store::catalog_generation`]). Kept per generation, so a plugin
    /// asked for again costs no statement; one not kept costs one statement and a parse
    /// of its definition.
    pub async fn listed_detail(
        &self,
        generation: i64,
        id: &str,
    ) -> Result<Option<Arc<ListedDetail>>, StoreError> {
        if let Some(detail) = self.cache.detail(generation, id) {
            return Ok(Some(detail));
        }
        let Some((publisher, name)) = self.listed_by_id_at(generation, id).await? else {
            return Ok(None);
        };
        let Some((plugin, stored)) = self.db.listed_detail(&publisher, &name).await? else {
            return Ok(None);
        };
        let definition = match stored {
            Some((hash, bytes, extras)) => stored_definition(&bytes, &hash, extras)?,
            // The latest version's row not found by its text: found by its version.
            None => match self
                .db
                .definition(plugin.id, &plugin.latest_version)
                .await?
            {
                Some((_, definition)) => definition,
                None => return Ok(None),
            },
        };
        let detail = Arc::new(ListedDetail {
            plugin,
            definition: Arc::new(definition),
        });
        // As with the id map: the row was read after the generation, so it is kept only
        // when the catalog did not change meanwhile.
        if self.catalog_generation().await? == generation {
            self.cache.put_detail(generation, id, detail.clone());
        }
        Ok(Some(detail))
    }

    /// Tags of listed plugins with their counts (most used first, at most 50) and the
    /// publishers that are not suspended; cached per generation like listings.
    pub async fn facets(&self) -> Result<Arc<Facets>, StoreError> {
        self.db.facets_in(&self.cache).await
    }

    /// Stores published definitions together with the signed metadata that publishes
    /// them, in one transaction: all or nothing. A metadata version that already exists
    /// (a concurrent publish won) or a changed definition fails the whole commit.
    pub async fn publish(
        &self,
        publisher: &str,
        defs: &[Definition],
        signer_key_ids: &[String],
        files: &[StoredMetadata],
        now: i64,
    ) -> Result<(), StoreError> {
        self.db
            .publish(publisher, defs, signer_key_ids, files, now)
            .await?;
        Ok(())
    }

    /// Marks the publisher's versions with these hashes yanked and stores the signed
    /// metadata that says so, in one transaction. Yanked versions stay downloadable by
    /// hash; listings move to the newest version still listed.
    pub async fn yank(
        &self,
        publisher: &str,
        hashes: &[String],
        files: &[StoredMetadata],
        now: i64,
    ) -> Result<(), StoreError> {
        self.db.yank(publisher, hashes, files, now).await?;
        Ok(())
    }

    /// Stores new metadata versions all together or not at all. A version that already
    /// exists is refused (`MetadataExists`), which is how two concurrent writers of the
    /// same role are told apart: one wins, the other must start again from fresh metadata.
    pub async fn put_metadata(&self, files: &[StoredMetadata]) -> Result<(), StoreError> {
        self.db.put_metadata(files).await?;
        Ok(())
    }

    /// Stores one round of following an upstream in one transaction; a metadata version
    /// that exists already fails it whole (`MetadataExists`).
    pub async fn follow_upstream(&self, round: &UpstreamRound) -> Result<(), StoreError> {
        self.db.follow_upstream(round).await?;
        Ok(())
    }

    /// Suspends a publisher: stores the signed metadata that removes its delegation and
    /// keeps the removed delegation (`delegation`, JSON) for [`Store::resume_publisher`],
    /// in one transaction.
    pub async fn suspend_publisher(
        &self,
        name: &str,
        delegation: &str,
        files: &[StoredMetadata],
        now: i64,
    ) -> Result<(), StoreError> {
        self.db
            .suspend_publisher(name, delegation, files, now)
            .await?;
        Ok(())
    }

    /// Resumes a suspended publisher with the metadata that restores its delegation.
    pub async fn resume_publisher(
        &self,
        name: &str,
        files: &[StoredMetadata],
    ) -> Result<(), StoreError> {
        self.db.resume_publisher(name, files).await?;
        Ok(())
    }

    /// A token that changes whenever signed metadata was committed, by this process or
    /// another one on the same database; see [`Stamp::unchanged_since`]. Take it before
    /// reading what it is to vouch for.
    pub async fn metadata_stamp(&self) -> Result<Stamp, StoreError> {
        Ok(Stamp {
            generation: self.db.generation(Domain::Metadata).await?,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    Dependency,
    Suggestion,
}

impl LinkKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LinkKind::Dependency => "dependency",
            LinkKind::Suggestion => "suggestion",
        }
    }
}

/// The version a catalog lists: the highest non-yanked stable version, or the highest
/// non-yanked pre-release when there is no stable one.
pub(crate) fn latest_listed(versions: &[(String, bool)]) -> Option<String> {
    let parsed = versions
        .iter()
        .filter(|(_, yanked)| !yanked)
        .filter_map(|(v, _)| semver::Version::parse(v).ok());
    let (stable, pre): (Vec<_>, Vec<_>) = parsed.partition(|v| v.pre.is_empty());
    stable
        .into_iter()
        .max()
        .or_else(|| pre.into_iter().max())
        .map(|v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::latest_listed;

    #[test]
    fn latest_prefers_stable_and_skips_yanked() {
        let v = |s: &str, y| (s.to_owned(), y);
        assert_eq!(
            latest_listed(&[v("1.0.0", false), v("1.10.0", false), v("1.9.0", false)]).as_deref(),
            Some("1.10.0")
        );
        assert_eq!(
            latest_listed(&[v("1.0.0", false), v("2.0.0-rc.1", false)]).as_deref(),
            Some("1.0.0")
        );
        assert_eq!(
            latest_listed(&[v("2.0.0-rc.1", false), v("2.0.0-rc.2", false)]).as_deref(),
            Some("2.0.0-rc.2")
        );
        assert_eq!(
            latest_listed(&[v("1.0.0", false), v("1.1.0", true)]).as_deref(),
            Some("1.0.0")
        );
        assert_eq!(latest_listed(&[v("1.1.0", true)]), None);
    }
}
