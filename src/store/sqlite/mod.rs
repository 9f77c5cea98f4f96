//! The server's store on SQLite: one file (`DATA_DIR/marketplace.db` unless
//! `--database` names another), WAL, `synchronous=NORMAL`, a 16 MiB page cache per
//! connection. Every transaction that writes starts with `BEGIN IMMEDIATE`
//! ([`db::begin_write`]). Search is an FTS5 table.

mod bulk;
mod mirror;
mod publishers;
mod query;
mod tuf;
mod write;

use std::path::Path;
use std::sync::Arc;

use sqlx::sqlite::SqliteSynchronous;
use sqlx::{Row, SqlitePool};

use super::cache::CatalogCache;
use super::{
    Domain, Facets, LinkKind, MIGRATIONS, PluginRecord, PluginRef, StoreError, VersionRecord,
    stored_definition,
};
use crate::db;
use crate::definition::Definition;
use crate::store::rows::{image_mirror, not_installable, plugin_ref, signers};

const GENERATION: &str = "SELECT generation FROM change_feed WHERE domain = ?";

/// Tells readers of `domain` it changed: in the transaction that changes it.
async fn bump(tx: &mut sqlx::SqliteConnection, domain: Domain) -> Result<(), StoreError> {
    sqlx::query("UPDATE change_feed SET generation = generation + 1 WHERE domain = ?")
        .bind(domain.as_str())
        .execute(tx)
        .await?;
    Ok(())
}

/// The generation of `domain` as a transaction sees it.
async fn read_generation(
    tx: &mut sqlx::SqliteConnection,
    domain: Domain,
) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar(GENERATION)
        .bind(domain.as_str())
        .fetch_one(tx)
        .await?)
}

crate::store::detail::detail_store!(SqliteStore);
crate::store::feed::feed_store!(SqliteStore);
crate::store::operators::operator_store!(SqliteStore);

crate::store::upstream::upstream_store!(
    SqliteStore,
    crate::db::begin_write,
    bump,
    write,
    bulk,
    tuf
);

crate::store::review::review_store!(
    SqliteStore,
    sqlx::SqliteConnection,
    crate::db::begin_write,
    bump
);

#[derive(Clone)]
pub(crate) struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file and applies pending migrations.
    pub(crate) async fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let options = db::file_options(path)
            .synchronous(SqliteSynchronous::Normal)
            // 16 MiB page cache per connection keeps the catalog tables and search index
            // in memory at 10,000 plugins (SQLite's default is 2 MiB).
            .pragma("cache_size", "-16384");
        let pool = db::open_file::<StoreError>(options, &MIGRATIONS).await?;
        Ok(SqliteStore { pool })
    }

    /// A private in-memory database, for tests.
    pub(crate) async fn open_in_memory() -> Result<SqliteStore, StoreError> {
        let pool = db::open_memory::<StoreError>(&MIGRATIONS).await?;
        Ok(SqliteStore { pool })
    }

    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }

    /// The generation of `domain` in the change feed.
    pub(crate) async fn generation(&self, domain: Domain) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(GENERATION)
            .bind(domain.as_str())
            .fetch_one(&self.pool)
            .await?)
    }

    pub(crate) async fn take_lease(
        &self,
        name: &str,
        holder: &str,
        seconds: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = crate::db::begin_write(&self.pool).await?;
        let taken = sqlx::query(
            "INSERT INTO leases (name, holder, expires_at) VALUES (?1, ?2, unixepoch() + ?3)
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
              WHERE leases.holder = excluded.holder OR leases.expires_at <= unixepoch()",
        )
        .bind(name)
        .bind(holder)
        .bind(seconds)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        tx.commit().await?;
        Ok(taken)
    }

    pub(crate) async fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        let mut tx = crate::db::begin_write(&self.pool).await?;
        sqlx::query("DELETE FROM leases WHERE name = ? AND holder = ?")
            .bind(name)
            .bind(holder)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub(crate) async fn plugin(
        &self,
        publisher: &str,
        name: &str,
    ) -> Result<Option<PluginRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT p.id, p.name, p.latest_version, p.created_at, p.updated_at, pub.name AS publisher,
                    pub.suspended_at IS NOT NULL AS suspended, pub.origin
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
            origin: r.get("origin"),
        }))
    }

    /// Every version of a plugin, newest first (semantic version order).
    pub(crate) async fn versions(&self, plugin_id: i64) -> Result<Vec<VersionRecord>, StoreError> {
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
    pub(crate) async fn definition(
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
    pub(crate) async fn definition_by_hash(
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
    pub(crate) async fn publisher_definitions(
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
    pub(crate) async fn record_signers(
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
    pub(crate) async fn plugins_named(&self, names: &[&str]) -> Result<Vec<PluginRef>, StoreError> {
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
    pub(crate) async fn linking_to(
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
    pub(crate) async fn facets_in(&self, cache: &CatalogCache) -> Result<Arc<Facets>, StoreError> {
        let generation = self.generation(Domain::Catalog).await?;
        if let Some(facets) = cache.facets(generation) {
            return Ok(facets);
        }
        let mut tx = self.pool.begin().await?;
        let generation = read_generation(&mut tx, Domain::Catalog).await?;
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
        cache.put_facets(generation, facets.clone());
        Ok(facets)
    }
}
