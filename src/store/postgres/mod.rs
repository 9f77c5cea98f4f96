//! The server's store on PostgreSQL (`serve --database postgres://…`): the schema of
//! `migrations/postgres`, the same tables as SQLite's but for search, which is a
//! `tsvector` column of `plugins` under GIN (`query.rs`).
//!
//! Every transaction that writes starts with [`begin_write`]: it takes one
//! transaction-scoped advisory lock, so writers queue as they do on SQLite (`BEGIN
//! IMMEDIATE`) whichever replica runs them, and a transaction that reads before it
//! writes (the hash already stored for a version, the newest metadata version) acts on
//! what no other writer can change before it commits. Readers never wait for it. The
//! signed index's versions therefore cannot fork: the unique `(role, version)` refuses
//! a second writer's copy of a version, and the lock orders the writers.

mod bulk;
mod mirror;
mod publishers;
mod query;
mod tuf;
mod write;

use std::sync::Arc;

use sqlx::postgres::PgConnectOptions;
use sqlx::{PgPool, Row};

use super::cache::CatalogCache;
use super::{
    Domain, Facets, LinkKind, POSTGRES_MIGRATIONS, PluginRecord, PluginRef, StoreError,
    VersionRecord, stored_definition,
};
use crate::db;
use crate::definition::Definition;
use crate::store::rows::{image_mirror, not_installable, plugin_ref, signers};

const GENERATION: &str = "SELECT generation FROM change_feed WHERE domain = $1";

/// The key of the writers' advisory lock: "marketplace" in ASCII, so other applications
/// sharing the database are unlikely to pick it.
const WRITE_LOCK: i64 = 0x6d61_726b_6574_706c;

/// A transaction that writes: it waits for the writers' lock first (released at commit
/// or rollback, or when the connection drops).
pub(crate) async fn begin_write(
    pool: &PgPool,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(WRITE_LOCK)
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// Tells readers of `domain` it changed: in the transaction that changes it.
async fn bump(tx: &mut sqlx::PgConnection, domain: Domain) -> Result<(), StoreError> {
    sqlx::query("UPDATE change_feed SET generation = generation + 1 WHERE domain = $1")
        .bind(domain.as_str())
        .execute(tx)
        .await?;
    Ok(())
}

/// The generation of `domain` as a transaction sees it.
async fn read_generation(tx: &mut sqlx::PgConnection, domain: Domain) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar(GENERATION)
        .bind(domain.as_str())
        .fetch_one(tx)
        .await?)
}

/// Writes a plugin's search document from the tokens queries are made of (see
/// `query.rs`), never from PostgreSQL's parser; weighted name A, title B, tags C,
/// description D. Also used by `db copy` for rows copied from SQLite.
pub(crate) async fn write_search_document(
    tx: &mut sqlx::PgConnection,
    plugin_id: i64,
    name: &str,
    display_name: &str,
    tags: &str,
    description: &str,
) -> Result<(), sqlx::Error> {
    let words = |text: &str| crate::store::search_tokens(&[text.to_owned()]);
    sqlx::query(
        "UPDATE plugins SET search_document =
            setweight(array_to_tsvector($2::text[]), 'A') || setweight(array_to_tsvector($3::text[]), 'B')
            || setweight(array_to_tsvector($4::text[]), 'C') || setweight(array_to_tsvector($5::text[]), 'D')
         WHERE id = $1",
    )
    .bind(plugin_id)
    .bind(words(name))
    .bind(words(display_name))
    .bind(words(tags))
    .bind(words(description))
    .execute(tx)
    .await?;
    Ok(())
}

/// A read-only transaction that sees one snapshot throughout, as a SQLite read
/// transaction does: a listing's generation, ranking and rows are read at one state
/// (PostgreSQL's default, READ COMMITTED, takes a new snapshot per statement).
pub(crate) async fn begin_read(
    pool: &PgPool,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
    pool.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await
}

crate::store::detail::detail_store!(PgStore);
crate::store::feed::feed_store!(PgStore);
crate::store::operators::operator_store!(PgStore);

crate::store::upstream::upstream_store!(PgStore, begin_write, bump, write, bulk, tuf);

crate::store::review::review_store!(PgStore, sqlx::PgConnection, begin_write, bump);

#[derive(Clone)]
pub(crate) struct PgStore {
    pool: PgPool,
}

impl PgStore {
    /// Connects (a pool of `connections`) and applies pending migrations.
    pub(crate) async fn open(
        options: &PgConnectOptions,
        connections: u32,
    ) -> Result<PgStore, StoreError> {
        let pool =
            db::postgres::open::<StoreError>(options, connections, &POSTGRES_MIGRATIONS).await?;
        Ok(PgStore { pool })
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
        // The database's clock decides, so replicas with skewed clocks agree; the
        // conditional upsert is one statement, so two takers cannot both win.
        let taken = sqlx::query(
            "INSERT INTO leases (name, holder, expires_at)
             VALUES ($1, $2, EXTRACT(EPOCH FROM clock_timestamp())::bigint + $3)
             ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
              WHERE leases.holder = EXCLUDED.holder
                 OR leases.expires_at <= EXTRACT(EPOCH FROM clock_timestamp())::bigint",
        )
        .bind(name)
        .bind(holder)
        .bind(seconds)
        .execute(&self.pool)
        .await?
        .rows_affected()
            == 1;
        Ok(taken)
    }

    pub(crate) async fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM leases WHERE name = $1 AND holder = $2")
            .bind(name)
            .bind(holder)
            .execute(&self.pool)
            .await?;
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
             WHERE pub.name = $1 AND p.name = $2",
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
             WHERE v.plugin_id = $1",
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
             WHERE v.plugin_id = $1 AND v.canonical = $2",
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
             WHERE pub.name = $1 AND p.name = $2 AND v.hash = $3",
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
             JOIN publishers pub ON pub.id = p.publisher_id WHERE pub.name = $1 ORDER BY v.id",
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
            "UPDATE plugin_versions SET signer_key_ids = $1 WHERE signer_key_ids = '' AND plugin_id IN
             (SELECT p.id FROM plugins p JOIN publishers pub ON pub.id = p.publisher_id WHERE pub.name = $2)",
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
             WHERE l.target = $1 AND l.kind = $2 AND p.latest_version IS NOT NULL
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
        let mut tx = begin_read(&self.pool).await?;
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
