//! Writing the catalog: inserting versions (alone, or with the signed metadata that
//! publishes them) and keeping each plugin's summary of its latest listed version.

use super::{SqliteStore, tuf};
use crate::definition::Definition;
use crate::store::{Domain, Inserted, LinkKind, StoreError, StoredMetadata, latest_listed};

impl SqliteStore {
    /// Stores a validated definition under `publisher`, creating publisher and plugin on
    /// first use. Storing the same bytes again is a no-op; other bytes under an existing
    /// version are refused, because published versions are immutable.
    pub(crate) async fn insert_version(
        &self,
        publisher: &str,
        def: &Definition,
        now: i64,
    ) -> Result<Inserted, StoreError> {
        let mut tx = crate::db::begin_write(&self.pool).await?;
        let inserted = insert_version_in(&mut tx, publisher, def, now).await?;
        tx.commit().await?;
        Ok(inserted)
    }

    /// Marks the publisher's versions with these hashes yanked and stores the signed
    /// metadata that says so, in one transaction. Yanked versions stay downloadable by
    /// hash; listings move to the newest version still listed.
    pub(crate) async fn yank(
        &self,
        publisher: &str,
        hashes: &[String],
        files: &[StoredMetadata],
        now: i64,
    ) -> Result<(), StoreError> {
        let mut tx = crate::db::begin_write(&self.pool).await?;
        yank_in(&mut tx, publisher, hashes, now).await?;
        tuf::put_metadata_in(&mut tx, files).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Stores published definitions together with the signed metadata that publishes
    /// them, in one transaction: all or nothing. A metadata version that already exists
    /// (a concurrent publish won) or a changed definition fails the whole commit.
    pub(crate) async fn publish(
        &self,
        publisher: &str,
        defs: &[Definition],
        signer_key_ids: &[String],
        files: &[StoredMetadata],
        now: i64,
    ) -> Result<(), StoreError> {
        let mut tx = crate::db::begin_write(&self.pool).await?;
        let signers = signer_key_ids.join(" ");
        for def in defs {
            publish_in(&mut tx, publisher, def, &signers, now).await?;
        }
        tuf::put_metadata_in(&mut tx, files).await?;
        tx.commit().await?;
        Ok(())
    }
}

impl SqliteStore {
    /// Recomputes the requirement flags of plugins a migration marked stale (the
    /// approval rule changed) from each one's latest listed definition, leaving
    /// `updated_at` alone: the plugin did not change, the reading of it did. Returns how
    /// many were recomputed. A definition that no longer parses keeps its flags and its
    /// mark, and is logged on every open until an operator removes it.
    pub(crate) async fn refresh_stale_approvals(&self) -> Result<usize, StoreError> {
        let ids: Vec<i64> =
            sqlx::query_scalar("SELECT id FROM plugins WHERE approval_stale = TRUE")
                .fetch_all(&self.pool)
                .await?;
        if ids.is_empty() {
            return Ok(0);
        }
        let mut tx = crate::db::begin_write(&self.pool).await?;
        let mut done = 0;
        for id in ids {
            let versions: Vec<(String, bool)> =
                sqlx::query_as("SELECT canonical, yanked FROM plugin_versions WHERE plugin_id = ?")
                    .bind(id)
                    .fetch_all(&mut *tx)
                    .await?;
            // Unlisted plugins show no flags; listing one again rewrites its summary.
            let approval = match latest_listed(&versions) {
                None => Default::default(),
                Some(latest) => {
                    let (hash, bytes): (String, Vec<u8>) = sqlx::query_as(
                        "SELECT hash, definition FROM plugin_versions WHERE plugin_id = ? AND canonical = ?",
                    )
                    .bind(id)
                    .bind(&latest)
                    .fetch_one(&mut *tx)
                    .await?;
                    match Definition::parse_published(&bytes) {
                        Ok(def) => def.approval(),
                        Err(e) => {
                            tracing::warn!(%hash, error = %e,
                                "stored definition no longer validates; its catalog requirement flags are left as they were");
                            continue;
                        }
                    }
                }
            };
            sqlx::query(
                "UPDATE plugins SET internet_access = ?, privileged = ?, kube_system = ?,
                 approval_stale = FALSE WHERE id = ?",
            )
            .bind(approval.internet_access)
            .bind(approval.privileged)
            .bind(approval.kube_system_deployment)
            .bind(id)
            .execute(&mut *tx)
            .await?;
            done += 1;
        }
        if done > 0 {
            super::bump(&mut tx, Domain::Catalog).await?;
        }
        tx.commit().await?;
        Ok(done)
    }

    /// Records, for each version stored before the column existed, whether Fundament can
    /// install it. Returns how many were checked. A definition that no longer parses
    /// stays unchecked and is logged on every open until an operator removes it.
    pub(crate) async fn check_installability(&self) -> Result<usize, StoreError> {
        let rows: Vec<(i64, String, Vec<u8>)> = sqlx::query_as(
            "SELECT id, hash, definition FROM plugin_versions WHERE not_installable IS NULL",
        )
        .fetch_all(&self.pool)
        .await?;
        if rows.is_empty() {
            return Ok(0);
        }
        let mut tx = crate::db::begin_write(&self.pool).await?;
        let mut done = 0;
        for (id, hash, bytes) in rows {
            let reason = match Definition::parse_published(&bytes) {
                Ok(def) => def.not_installable().unwrap_or_default(),
                Err(e) => {
                    tracing::warn!(%hash, error = %e,
                        "stored definition no longer validates; whether Fundament can install it is unknown");
                    continue;
                }
            };
            sqlx::query("UPDATE plugin_versions SET not_installable = ? WHERE id = ?")
                .bind(reason)
                .bind(id)
                .execute(&mut *tx)
                .await?;
            done += 1;
        }
        tx.commit().await?;
        Ok(done)
    }
}

/// Marks the publisher's versions with these hashes yanked and moves each plugin's
/// summary to its newest version still listed.
pub(super) async fn yank_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    publisher: &str,
    hashes: &[String],
    now: i64,
) -> Result<(), StoreError> {
    let mut plugins = Vec::new();
    for hash in hashes {
        let ids: Vec<i64> = sqlx::query_scalar(
                "UPDATE plugin_versions SET yanked_at = CASE WHEN yanked THEN yanked_at ELSE ? END, yanked = TRUE
                 WHERE hash = ? AND plugin_id IN
                 (SELECT p.id FROM plugins p JOIN publishers pub ON pub.id = p.publisher_id WHERE pub.name = ?)
                 RETURNING plugin_id",
            )
            .bind(now)
            .bind(hash)
            .bind(publisher)
            .fetch_all(&mut **tx)
            .await?;
        plugins.extend(ids);
    }
    plugins.sort_unstable();
    plugins.dedup();
    if !plugins.is_empty() {
        super::bump(tx, Domain::Catalog).await?;
    }
    for id in plugins {
        refresh_summary(tx, id, now).await?;
    }
    Ok(())
}
/// Stores a published definition with the key ids that signed it.
pub(super) async fn publish_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    publisher: &str,
    def: &Definition,
    signers: &str,
    now: i64,
) -> Result<Inserted, StoreError> {
    let inserted = insert_version_in(tx, publisher, def, now).await?;
    sqlx::query(
        "UPDATE plugin_versions SET signer_key_ids = ? WHERE hash = ? AND plugin_id IN
         (SELECT p.id FROM plugins p JOIN publishers pub ON pub.id = p.publisher_id WHERE pub.name = ?)",
    )
    .bind(signers)
    .bind(&def.hash)
    .bind(publisher)
    .execute(&mut **tx)
    .await?;
    Ok(inserted)
}

/// Re-derives a plugin's summary after its versions changed (a yank): the latest
/// listed version's fields, or no listing at all when every version is yanked.
async fn refresh_summary(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    plugin_id: i64,
    now: i64,
) -> Result<(), StoreError> {
    let versions: Vec<(String, bool)> =
        sqlx::query_as("SELECT canonical, yanked FROM plugin_versions WHERE plugin_id = ?")
            .bind(plugin_id)
            .fetch_all(&mut **tx)
            .await?;
    let Some(latest) = latest_listed(&versions) else {
        sqlx::query("UPDATE plugins SET latest_version = NULL, updated_at = ? WHERE id = ?")
            .bind(now)
            .bind(plugin_id)
            .execute(&mut **tx)
            .await?;
        for sql in [
            "DELETE FROM plugin_tags WHERE plugin_id = ?",
            "DELETE FROM plugin_links WHERE plugin_id = ?",
            "DELETE FROM plugin_search WHERE rowid = ?",
        ] {
            sqlx::query(sql).bind(plugin_id).execute(&mut **tx).await?;
        }
        return Ok(());
    };
    let (hash, bytes, extras): (String, Vec<u8>, Option<String>) = sqlx::query_as(
        "SELECT hash, definition, extras FROM plugin_versions WHERE plugin_id = ? AND canonical = ?",
    )
    .bind(plugin_id)
    .bind(&latest)
    .fetch_one(&mut **tx)
    .await?;
    let def = super::stored_definition(&bytes, &hash, extras)?;
    write_summary(tx, plugin_id, &def, now).await
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
    // The image is enqueued for mirroring in the same transaction: a published version
    // never lacks its mirror job, whichever process published it.
    let image_id = super::mirror::enqueue_in(tx, &def.image, now).await?;
    sqlx::query(
        "INSERT INTO plugin_versions (plugin_id, version, canonical, major, hash, definition, image, published_at, image_id, extras, not_installable)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(plugin_id)
    .bind(def.version_text())
    .bind(&canonical)
    .bind(i64::try_from(def.version.major).unwrap_or(i64::MAX))
    .bind(&def.hash)
    .bind(&def.bytes)
    .bind(def.image.to_string())
    .bind(now)
    .bind(image_id)
    .bind(serde_json::to_string(&def.extras).expect("extras serialize"))
    .bind(def.not_installable().unwrap_or_default())
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
    // A new version may create its publisher and plugin and change the listing.
    super::bump(tx, Domain::Catalog).await?;
    Ok(Inserted::New)
}

async fn write_summary(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    plugin_id: i64,
    def: &Definition,
    now: i64,
) -> Result<(), StoreError> {
    let tags: Vec<&str> = def.tags().collect();
    let approval = def.approval();
    sqlx::query(
        "UPDATE plugins SET latest_version = ?, display_name = ?, description = ?, tags = ?,
         internet_access = ?, privileged = ?, kube_system = ?, approval_stale = FALSE,
         updated_at = ? WHERE id = ?",
    )
    .bind(def.version_text())
    .bind(def.display_name())
    .bind(def.description())
    .bind(tags.join(" "))
    .bind(approval.internet_access)
    .bind(approval.privileged)
    .bind(approval.kube_system_deployment)
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
    let links = def
        .extras
        .dependencies
        .iter()
        .map(|d| (LinkKind::Dependency, d))
        .chain(
            def.extras
                .suggested_plugins
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
