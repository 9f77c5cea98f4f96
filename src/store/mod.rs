//! The catalog database (SQLite through sqlx). Stores hold data and enforce its
//! invariants (immutability of published versions); they never call HTTP handlers or
//! know about pages.

mod cache;
mod changes;
mod mirror;
mod publishers;
mod query;
mod tuf;
mod write;

use std::path::Path;
use std::sync::Arc;

use sqlx::migrate::Migrator;
use sqlx::sqlite::SqliteSynchronous;
use sqlx::{Row, SqlitePool};

use crate::db;
use crate::definition::Definition;

pub use cache::{CacheUsage, DEFAULT_BUDGET as DEFAULT_CACHE_BUDGET};
pub use changes::{SETTLE as METADATA_STAMP_SETTLE, Stamp};
pub use mirror::{Content, ContentKind, MirrorJob, MirrorStatus, Referrer, ServedManifest};
pub use publishers::PublisherRecord;
pub use query::{ListedPlugin, Page, PluginQuery, PluginSummary, Sort};
pub use tuf::StoredMetadata;

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

fn image_mirror(r: &sqlx::sqlite::SqliteRow) -> Option<ImageMirror> {
    let status: Option<String> = r.get("mirror_status");
    status.map(|status| ImageMirror {
        next_attempt_at: (status == "failed").then(|| r.get("mirror_next")),
        error: if status == "failed" {
            r.get("mirror_error")
        } else {
            None
        },
        size: r.get("mirror_size"),
        verified_by: r.get("mirror_signature_key"),
        status,
    })
}

fn not_installable(r: &sqlx::sqlite::SqliteRow) -> Option<String> {
    r.get::<Option<String>, _>("not_installable")
        .filter(|s| !s.is_empty())
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
#[derive(Debug, Clone)]
pub struct PluginRef {
    pub publisher: String,
    pub name: String,
    pub display_name: String,
}

/// Tags (with counts) and publishers, for the catalog's filter controls.
#[derive(Debug, Clone, Default)]
pub struct Facets {
    pub tags: Vec<(String, i64)>,
    pub publishers: Vec<String>,
}

/// The server's schema on SQLite: every `.sql` file directly in `migrations/` (the
/// macro does not descend into `migrations/sync` and the other folders there).
pub static MIGRATIONS: Migrator = sqlx::migrate!("./migrations");

/// The same schema on PostgreSQL, version for version (a baseline at 0009, then one
/// migration per change with the SQLite side's number). No store runs on it yet (issue
/// 21); `tests/schema_parity.rs` holds the two schemas equal.
pub static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/postgres");

#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
    /// Listings and facets per generation of the catalog tables; see [`cache`].
    cache: Arc<cache::CatalogCache>,
    /// Tells readers that keep metadata in memory when to read it again.
    changes: Arc<changes::Changes>,
}

impl Store {
    /// Opens (creating if needed) the database file and applies pending migrations.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        let options = db::file_options(path)
            .synchronous(SqliteSynchronous::Normal)
            // 16 MiB page cache per connection keeps the catalog tables and search index
            // in memory at 10,000 plugins (SQLite's default is 2 MiB).
            .pragma("cache_size", "-16384");
        Self::with_pool(
            db::open_file::<StoreError>(options, &MIGRATIONS).await?,
            Some(path),
        )
        .await
    }

    /// A private in-memory database, for tests.
    pub async fn open_in_memory() -> Result<Store, StoreError> {
        Self::with_pool(db::open_memory::<StoreError>(&MIGRATIONS).await?, None).await
    }

    async fn with_pool(pool: SqlitePool, path: Option<&Path>) -> Result<Store, StoreError> {
        let store = Store {
            pool,
            cache: Arc::new(cache::CatalogCache::new(cache::DEFAULT_BUDGET)),
            // The path SQLite writes the log beside (it follows symbolic links).
            changes: Arc::new(changes::Changes::new(
                path.map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned()))
                    .as_deref(),
            )),
        };
        let refreshed = store.refresh_stale_approvals().await?;
        if refreshed > 0 {
            tracing::info!(plugins = refreshed, "recomputed catalog requirement flags");
        }
        let checked = store.check_installability().await?;
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

    /// Cheap round trip, for readiness checks.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    pub async fn plugin(
        &self,
        publisher: &str,
        name: &str,
    ) -> Result<Option<PluginRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT p.id, p.name, p.latest_version, p.created_at, p.updated_at, pub.name AS publisher,
                    pub.suspended_at IS NOT NULL AS suspended
             FROM plugins p JOIN publishers pub ON pub.id = p.publisher_id
             WHERE pub.name = ? AND p.name = ?",
        )
        .bind(publisher)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| PluginRecord {
            id: r.get("id"),
            publisher: r.get("publisher"),
            name: r.get("name"),
            latest_version: r.get("latest_version"),
            created_at: r.get("created_at"),
            updated_at: r.get("updated_at"),
            suspended: r.get("suspended"),
        }))
    }

    /// Every version of a plugin, newest first (semantic version order).
    pub async fn versions(&self, plugin_id: i64) -> Result<Vec<VersionRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT v.version, v.canonical, v.major, v.hash, v.image, v.published_at, v.yanked,
                    v.signer_key_ids, v.not_installable, m.status AS mirror_status, m.size AS mirror_size,
                    m.last_error AS mirror_error, m.next_attempt_at AS mirror_next,
                    m.signature_key AS mirror_signature_key
             FROM plugin_versions v LEFT JOIN mirror_images m ON m.id = v.image_id
             WHERE v.plugin_id = ?",
        )
        .bind(plugin_id)
        .fetch_all(&self.pool)
        .await?;
        let mut versions: Vec<VersionRecord> = rows
            .into_iter()
            .map(|r| {
                let canonical: String = r.get("canonical");
                VersionRecord {
                    version: r.get("version"),
                    version_parsed: semver::Version::parse(&canonical)
                        .unwrap_or_else(|_| semver::Version::new(0, 0, 0)),
                    major: r.get::<i64, _>("major").try_into().unwrap_or(0),
                    hash: r.get("hash"),
                    image: r.get("image"),
                    published_at: r.get("published_at"),
                    yanked: r.get("yanked"),
                    signer_key_ids: signers(&r),
                    mirror: image_mirror(&r),
                    not_installable: not_installable(&r),
                }
            })
            .collect();
        versions.sort_by(|a, b| b.version_parsed.cmp(&a.version_parsed));
        Ok(versions)
    }

    /// The stored definition of one version; `version` may be written with or without `v`.
    pub async fn definition(
        &self,
        plugin_id: i64,
        version: &str,
    ) -> Result<Option<(VersionRecord, Definition)>, StoreError> {
        let Ok(parsed) = crate::definition::parse_version(version) else {
            return Ok(None);
        };
        let row = sqlx::query(
            "SELECT v.version, v.major, v.hash, v.image, v.published_at, v.yanked, v.definition,
                    v.extras, v.signer_key_ids, v.not_installable, m.status AS mirror_status, m.size AS mirror_size,
                    m.last_error AS mirror_error, m.next_attempt_at AS mirror_next,
                    m.signature_key AS mirror_signature_key
             FROM plugin_versions v LEFT JOIN mirror_images m ON m.id = v.image_id
             WHERE v.plugin_id = ? AND v.canonical = ?",
        )
        .bind(plugin_id)
        .bind(parsed.to_string())
        .fetch_optional(&self.pool)
        .await?;
        let Some(r) = row else { return Ok(None) };
        let hash: String = r.get("hash");
        let def = stored_definition(&r.get::<Vec<u8>, _>("definition"), &hash, r.get("extras"))?;
        let record = VersionRecord {
            version: r.get("version"),
            version_parsed: parsed,
            major: r.get::<i64, _>("major").try_into().unwrap_or(0),
            hash,
            image: r.get("image"),
            published_at: r.get("published_at"),
            yanked: r.get("yanked"),
            signer_key_ids: signers(&r),
            mirror: image_mirror(&r),
            not_installable: not_installable(&r),
        };
        Ok(Some((record, def)))
    }

    /// The bytes of a stored version by its hash, yanked or not: a pinned hash stays
    /// downloadable.
    pub async fn definition_by_hash(
        &self,
        publisher: &str,
        name: &str,
        hash: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT v.definition FROM plugin_versions v JOIN plugins p ON p.id = v.plugin_id
             JOIN publishers pub ON pub.id = p.publisher_id
             WHERE pub.name = ? AND p.name = ? AND v.hash = ?",
        )
        .bind(publisher)
        .bind(name)
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Every stored version of a publisher's plugins with its yanked flag, oldest first.
    pub async fn publisher_definitions(
        &self,
        publisher: &str,
    ) -> Result<Vec<(Definition, bool)>, StoreError> {
        let rows = sqlx::query(
            "SELECT v.definition, v.hash, v.extras, v.yanked FROM plugin_versions v JOIN plugins p ON p.id = v.plugin_id
             JOIN publishers pub ON pub.id = p.publisher_id WHERE pub.name = ? ORDER BY v.id",
        )
        .bind(publisher)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                let def = stored_definition(
                    &r.get::<Vec<u8>, _>("definition"),
                    &r.get::<String, _>("hash"),
                    r.get("extras"),
                )?;
                Ok((def, r.get("yanked")))
            })
            .collect()
    }

    /// Records which publisher key ids signed the publisher's versions that have none yet.
    pub async fn record_signers(
        &self,
        publisher: &str,
        key_ids: &[String],
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE plugin_versions SET signer_key_ids = ? WHERE signer_key_ids = '' AND plugin_id IN
             (SELECT p.id FROM plugins p JOIN publishers pub ON pub.id = p.publisher_id WHERE pub.name = ?)",
        )
        .bind(key_ids.join(" "))
        .bind(publisher)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Listed plugins with any of these names, for resolving dependency links.
    pub async fn plugins_named(&self, names: &[&str]) -> Result<Vec<PluginRef>, StoreError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut qb = sqlx::QueryBuilder::new(
            "SELECT pub.name AS publisher, p.name, p.display_name FROM plugins p
             JOIN publishers pub ON pub.id = p.publisher_id
             WHERE p.latest_version IS NOT NULL AND p.name IN (",
        );
        let mut sep = qb.separated(", ");
        for name in names {
            sep.push_bind(*name);
        }
        qb.push(") ORDER BY pub.name");
        let rows = qb.build().fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(plugin_ref).collect())
    }

    /// Listed plugins whose latest version depends on (`kind` = dependency) or suggests a
    /// plugin called `name`.
    pub async fn linking_to(
        &self,
        name: &str,
        kind: LinkKind,
    ) -> Result<Vec<PluginRef>, StoreError> {
        let rows = sqlx::query(
            "SELECT pub.name AS publisher, p.name, p.display_name FROM plugin_links l
             JOIN plugins p ON p.id = l.plugin_id JOIN publishers pub ON pub.id = p.publisher_id
             WHERE l.target = ? AND l.kind = ? AND p.latest_version IS NOT NULL
             ORDER BY p.name, pub.name",
        )
        .bind(name)
        .bind(kind.as_str())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(plugin_ref).collect())
    }

    /// Tags of listed plugins with their counts (most used first, at most 50) and the
    /// publishers that are not suspended; cached per generation like listings.
    pub async fn facets(&self) -> Result<Arc<Facets>, StoreError> {
        let generation = self.generation().await?;
        if let Some(facets) = self.cache.facets(generation) {
            return Ok(facets);
        }
        let mut tx = self.pool.begin().await?;
        let generation = query::read_generation(&mut tx).await?;
        // plugin_tags only holds rows for listed plugins; suspended publishers' are left out.
        let tags = sqlx::query_as(
            "SELECT t.tag, COUNT(*) AS n FROM plugin_tags t
               JOIN plugins p ON p.id = t.plugin_id JOIN publishers pub ON pub.id = p.publisher_id
             WHERE pub.suspended_at IS NULL GROUP BY t.tag ORDER BY n DESC, t.tag LIMIT 50",
        )
        .fetch_all(&mut *tx)
        .await?;
        let publishers = sqlx::query_scalar(
            "SELECT name FROM publishers WHERE suspended_at IS NULL ORDER BY name",
        )
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let facets = Arc::new(Facets { tags, publishers });
        self.cache.put_facets(generation, facets.clone());
        Ok(facets)
    }

    pub(crate) fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// A cheap token (no query) that changes whenever signed metadata may have been
    /// committed, by this process or another one on the same database file; see
    /// [`Stamp::unchanged_since`]. Take it before reading what it is to vouch for.
    pub fn metadata_stamp(&self) -> Stamp {
        self.changes.stamp()
    }

    /// After every commit that stored metadata.
    fn metadata_committed(&self) {
        self.changes.committed();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    Dependency,
    Suggestion,
}

impl LinkKind {
    fn as_str(self) -> &'static str {
        match self {
            LinkKind::Dependency => "dependency",
            LinkKind::Suggestion => "suggestion",
        }
    }
}

fn signers(r: &sqlx::sqlite::SqliteRow) -> Vec<String> {
    r.get::<String, _>("signer_key_ids")
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn plugin_ref(r: sqlx::sqlite::SqliteRow) -> PluginRef {
    PluginRef {
        publisher: r.get("publisher"),
        name: r.get("name"),
        display_name: r.get("display_name"),
    }
}
