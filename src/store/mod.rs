//! The catalog database (SQLite through sqlx). Stores hold data and enforce its
//! invariants (immutability of published versions); they never call HTTP handlers or
//! know about pages.

mod publishers;
mod query;
mod tuf;

use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

use crate::definition::Definition;

pub use publishers::PublisherRecord;
pub use query::{Page, PluginQuery, PluginSummary, Sort, search_expression};
pub use tuf::StoredMetadata;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    // The cause is part of the message and deliberately not also a `source()`, so an
    // error chain prints it once.
    #[error("database error: {0}")]
    Database(sqlx::Error),
    #[error("database migration failed: {0}")]
    Migrate(sqlx::migrate::MigrateError),
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

/// How long cached facets may lag a write made by another process (a second replica);
/// this process's own writes clear the cache at once.
const FACETS_TTL: Duration = Duration::from_secs(30);

type CachedFacets = (Instant, Arc<Facets>);

#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
    /// Facets change only on publish but are shown on every catalog page.
    facets: Arc<Mutex<Option<CachedFacets>>>,
}

impl Store {
    /// Opens (creating if needed) the database file and applies pending migrations.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5))
            // 16 MiB page cache per connection keeps the catalog tables and search index
            // in memory at 10,000 plugins (SQLite's default is 2 MiB).
            .pragma("cache_size", "-16384");
        Self::connect(options, 4).await
    }

    /// A private in-memory database, for tests.
    pub async fn open_in_memory() -> Result<Store, StoreError> {
        let options = SqliteConnectOptions::from_str("sqlite::memory:")?.foreign_keys(true);
        // One connection: every connection to :memory: would be its own database.
        Self::connect(options, 1).await
    }

    async fn connect(options: SqliteConnectOptions, max: u32) -> Result<Store, StoreError> {
        let pool = SqlitePoolOptions::new()
            .max_connections(max)
            .connect_with(options)
            .await?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        Ok(Store {
            pool,
            facets: Arc::default(),
        })
    }

    /// Cheap round trip, for readiness checks.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Stores a validated definition under `publisher`, creating publisher and plugin on
    /// first use. Storing the same bytes again is a no-op; other bytes under an existing
    /// version are refused, because published versions are immutable.
    pub async fn insert_version(
        &self,
        publisher: &str,
        def: &Definition,
        now: i64,
    ) -> Result<Inserted, StoreError> {
        let mut tx = self.pool.begin().await?;
        let inserted = insert_version_in(&mut tx, publisher, def, now).await?;
        tx.commit().await?;
        if inserted == Inserted::New {
            *self.facets.lock().expect("facets lock") = None;
        }
        Ok(inserted)
    }

    /// Stores a published definition together with the signed metadata that publishes
    /// it, in one transaction: both or neither. A metadata version that already exists
    /// (a concurrent publish won) or a changed definition fails the whole commit.
    pub async fn publish(
        &self,
        publisher: &str,
        def: &Definition,
        signer_key_ids: &[String],
        files: &[StoredMetadata],
        now: i64,
    ) -> Result<Inserted, StoreError> {
        let mut tx = self.pool.begin().await?;
        let inserted = insert_version_in(&mut tx, publisher, def, now).await?;
        sqlx::query(
            "UPDATE plugin_versions SET signer_key_ids = ? WHERE hash = ? AND plugin_id IN
             (SELECT p.id FROM plugins p JOIN publishers pub ON pub.id = p.publisher_id WHERE pub.name = ?)",
        )
        .bind(signer_key_ids.join(" "))
        .bind(&def.hash)
        .bind(publisher)
        .execute(&mut *tx)
        .await?;
        tuf::put_metadata_in(&mut tx, files).await?;
        tx.commit().await?;
        *self.facets.lock().expect("facets lock") = None;
        Ok(inserted)
    }

    pub async fn plugin(
        &self,
        publisher: &str,
        name: &str,
    ) -> Result<Option<PluginRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT p.id, p.name, p.latest_version, p.created_at, p.updated_at, pub.name AS publisher
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
        }))
    }

    /// Every version of a plugin, newest first (semantic version order).
    pub async fn versions(&self, plugin_id: i64) -> Result<Vec<VersionRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT version, canonical, major, hash, image, published_at, yanked
             FROM plugin_versions WHERE plugin_id = ?",
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
            "SELECT version, major, hash, image, published_at, yanked, definition
             FROM plugin_versions WHERE plugin_id = ? AND canonical = ?",
        )
        .bind(plugin_id)
        .bind(parsed.to_string())
        .fetch_optional(&self.pool)
        .await?;
        let Some(r) = row else { return Ok(None) };
        let bytes: Vec<u8> = r.get("definition");
        let hash: String = r.get("hash");
        let def = Definition::parse(&bytes).map_err(|e| StoreError::Corrupt(hash.clone(), e))?;
        let record = VersionRecord {
            version: r.get("version"),
            version_parsed: parsed,
            major: r.get::<i64, _>("major").try_into().unwrap_or(0),
            hash,
            image: r.get("image"),
            published_at: r.get("published_at"),
            yanked: r.get("yanked"),
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
            "SELECT v.definition, v.hash, v.yanked FROM plugin_versions v JOIN plugins p ON p.id = v.plugin_id
             JOIN publishers pub ON pub.id = p.publisher_id WHERE pub.name = ? ORDER BY v.id",
        )
        .bind(publisher)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                let bytes: Vec<u8> = r.get("definition");
                let def =
                    Definition::parse(&bytes).map_err(|e| StoreError::Corrupt(r.get("hash"), e))?;
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
    /// publishers, cached; see [`FACETS_TTL`].
    pub async fn facets(&self) -> Result<Arc<Facets>, StoreError> {
        if let Some((_, facets)) = self
            .facets
            .lock()
            .expect("facets lock")
            .as_ref()
            .filter(|(at, _)| at.elapsed() < FACETS_TTL)
        {
            return Ok(facets.clone());
        }
        // plugin_tags only holds rows for listed plugins, so no join is needed.
        let tags = sqlx::query_as(
            "SELECT tag, COUNT(*) AS n FROM plugin_tags GROUP BY tag ORDER BY n DESC, tag LIMIT 50",
        )
        .fetch_all(&self.pool)
        .await?;
        let publishers = sqlx::query_scalar("SELECT name FROM publishers ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        let facets = Arc::new(Facets { tags, publishers });
        *self.facets.lock().expect("facets lock") = Some((Instant::now(), facets.clone()));
        Ok(facets)
    }

    pub(crate) fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

async fn insert_version_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    publisher: &str,
    def: &Definition,
    now: i64,
) -> Result<Inserted, StoreError> {
    sqlx::query(
        "INSERT INTO publishers (name, created_at) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
    )
    .bind(publisher)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    let publisher_id: i64 = sqlx::query_scalar("SELECT id FROM publishers WHERE name = ?")
        .bind(publisher)
        .fetch_one(&mut **tx)
        .await?;
    sqlx::query(
        "INSERT INTO plugins (publisher_id, name, created_at, updated_at) VALUES (?, ?, ?, ?)
         ON CONFLICT (publisher_id, name) DO NOTHING",
    )
    .bind(publisher_id)
    .bind(def.name())
    .bind(now)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    let plugin_id: i64 =
        sqlx::query_scalar("SELECT id FROM plugins WHERE publisher_id = ? AND name = ?")
            .bind(publisher_id)
            .bind(def.name())
            .fetch_one(&mut **tx)
            .await?;

    let canonical = def.version.to_string();
    let existing: Option<String> = sqlx::query_scalar(
        "SELECT hash FROM plugin_versions WHERE plugin_id = ? AND canonical = ?",
    )
    .bind(plugin_id)
    .bind(&canonical)
    .fetch_optional(&mut **tx)
    .await?;
    if let Some(existing) = existing {
        if existing == def.hash {
            return Ok(Inserted::Unchanged);
        }
        return Err(StoreError::VersionExists {
            publisher: publisher.to_owned(),
            name: def.name().to_owned(),
            version: def.version_text().to_owned(),
            existing,
        });
    }
    sqlx::query(
        "INSERT INTO plugin_versions (plugin_id, version, canonical, major, hash, definition, image, published_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(plugin_id)
    .bind(def.version_text())
    .bind(&canonical)
    .bind(i64::try_from(def.version.major).unwrap_or(i64::MAX))
    .bind(&def.hash)
    .bind(&def.bytes)
    .bind(def.image.to_string())
    .bind(now)
    .execute(&mut **tx)
    .await?;

    let versions: Vec<(String, bool)> =
        sqlx::query_as("SELECT canonical, yanked FROM plugin_versions WHERE plugin_id = ?")
            .bind(plugin_id)
            .fetch_all(&mut **tx)
            .await?;
    if latest_listed(&versions).as_deref() == Some(canonical.as_str()) {
        write_summary(tx, plugin_id, def, now).await?;
    }
    Ok(Inserted::New)
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

fn plugin_ref(r: sqlx::sqlite::SqliteRow) -> PluginRef {
    PluginRef {
        publisher: r.get("publisher"),
        name: r.get("name"),
        display_name: r.get("display_name"),
    }
}

/// The version a catalog lists: the highest non-yanked stable version, or the highest
/// non-yanked pre-release when there is no stable one.
fn latest_listed(versions: &[(String, bool)]) -> Option<String> {
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

async fn write_summary(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    plugin_id: i64,
    def: &Definition,
    now: i64,
) -> Result<(), StoreError> {
    let tags: Vec<&str> = def.tags().collect();
    let req = def.requirements();
    sqlx::query(
        "UPDATE plugins SET latest_version = ?, display_name = ?, description = ?, tags = ?,
         internet_access = ?, privileged = ?, kube_system = ?, updated_at = ? WHERE id = ?",
    )
    .bind(def.version_text())
    .bind(def.display_name())
    .bind(def.description())
    .bind(tags.join(" "))
    .bind(req.internet_access)
    .bind(req.privileged)
    .bind(req.kube_system_deployment)
    .bind(now)
    .bind(plugin_id)
    .execute(&mut **tx)
    .await?;
    sqlx::query("DELETE FROM plugin_search WHERE rowid = ?")
        .bind(plugin_id)
        .execute(&mut **tx)
        .await?;
    sqlx::query(
        "INSERT INTO plugin_search (rowid, name, display_name, description, tags) VALUES (?, ?, ?, ?, ?)",
    )
    .bind(plugin_id)
    .bind(def.name())
    .bind(def.display_name())
    .bind(def.description())
    .bind(tags.join(" "))
    .execute(&mut **tx)
    .await?;
    sqlx::query("DELETE FROM plugin_tags WHERE plugin_id = ?")
        .bind(plugin_id)
        .execute(&mut **tx)
        .await?;
    for tag in &tags {
        sqlx::query("INSERT INTO plugin_tags (plugin_id, tag) VALUES (?, ?)")
            .bind(plugin_id)
            .bind(*tag)
            .execute(&mut **tx)
            .await?;
    }
    sqlx::query("DELETE FROM plugin_links WHERE plugin_id = ?")
        .bind(plugin_id)
        .execute(&mut **tx)
        .await?;
    let spec = &def.manifest.spec;
    let links = spec
        .dependencies
        .iter()
        .map(|d| (LinkKind::Dependency, d))
        .chain(
            spec.suggested_plugins
                .iter()
                .map(|s| (LinkKind::Suggestion, s)),
        );
    for (kind, target) in links {
        sqlx::query("INSERT INTO plugin_links (plugin_id, kind, target) VALUES (?, ?, ?)")
            .bind(plugin_id)
            .bind(kind.as_str())
            .bind(target.as_str())
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
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
