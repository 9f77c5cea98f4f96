//! Plugins new to the store written with multi-row statements (a cold round of
//! following an upstream: thousands of plugins in one transaction). The rows are those
//! `write::insert_version_in` writes one by one: the plugin with its summary, its search
//! entry, tags and links, its images enqueued for mirroring, its versions. The SQL is one
//! text on both backends (`$N` parameters; `QueryBuilder` numbers its own), so one macro
//! writes both; only the plugin rows with their search entry (SQLite's FTS5 table,
//! PostgreSQL's search document) are each backend's own (`$plugins`).

/// `insert_new_plugins` for the backend `$db`, with `$plugins` writing one chunk's plugin
/// rows and search entries and returning their ids by (publisher id, name).
macro_rules! bulk_store {
    ($db:ty, $plugins:path) => {
        pub(super) async fn insert_new_plugins(
            tx: &mut sqlx::Transaction<'_, $db>,
            plugins: &[crate::store::upstream::NewPlugin<'_>],
            now: i64,
        ) -> Result<(), crate::store::StoreError> {
            if plugins.is_empty() {
                return Ok(());
            }
            let mut publishers: std::collections::HashMap<&str, i64> = std::collections::HashMap::new();
            for p in plugins {
                if !publishers.contains_key(p.publisher) {
                    sqlx::query(
                        "INSERT INTO publishers (name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                    )
                    .bind(p.publisher)
                    .bind(now)
                    .execute(&mut **tx)
                    .await?;
                    let id: i64 = sqlx::query_scalar("SELECT id FROM publishers WHERE name = $1")
                        .bind(p.publisher)
                        .fetch_one(&mut **tx)
                        .await?;
                    publishers.insert(p.publisher, id);
                }
            }
            for chunk in plugins.chunks(crate::store::upstream::BULK_ROWS) {
                let ids = $plugins(tx, chunk, &publishers, now).await?;
                let id_of = |p: &crate::store::upstream::NewPlugin<'_>| ids[&(publishers[p.publisher], p.name.to_owned())];

                let tags: Vec<(i64, &str)> = chunk
                    .iter()
                    .flat_map(|p| p.latest.tags().map(move |t| (id_of(p), t)))
                    .collect();
                for part in tags.chunks(crate::store::upstream::BULK_ROWS) {
                    let mut q = sqlx::QueryBuilder::<$db>::new("INSERT INTO plugin_tags (plugin_id, tag) ");
                    q.push_values(part, |mut b, (id, tag)| {
                        b.push_bind(*id).push_bind(*tag);
                    });
                    q.push(" ON CONFLICT DO NOTHING");
                    q.build().execute(&mut **tx).await?;
                }
                let links: Vec<(i64, crate::store::LinkKind, &str)> = chunk
                    .iter()
                    .flat_map(|p| {
                        let e = &p.latest.extras;
                        let id = id_of(p);
                        e.dependencies
                            .iter()
                            .map(move |d| (id, crate::store::LinkKind::Dependency, d.as_str()))
                            .chain(
                                e.suggested_plugins
                                    .iter()
                                    .map(move |s| (id, crate::store::LinkKind::Suggestion, s.as_str())),
                            )
                    })
                    .collect();
                for part in links.chunks(crate::store::upstream::BULK_ROWS) {
                    let mut q =
                        sqlx::QueryBuilder::<$db>::new("INSERT INTO plugin_links (plugin_id, kind, target) ");
                    q.push_values(part, |mut b, (id, kind, target)| {
                        b.push_bind(*id).push_bind(kind.as_str()).push_bind(*target);
                    });
                    q.push(" ON CONFLICT DO NOTHING");
                    q.build().execute(&mut **tx).await?;
                }

                // Every image enqueued for mirroring in the same transaction, as one by one.
                let images: std::collections::BTreeSet<(String, String, String)> = chunk
                    .iter()
                    .flat_map(|p| &p.versions)
                    .map(|(d, _)| {
                        let (host, repository) = d.image.upstream();
                        (host, repository, d.image.digest.clone())
                    })
                    .collect();
                let images: Vec<_> = images.into_iter().collect();
                let mut image_ids: std::collections::HashMap<(String, String, String), i64> = std::collections::HashMap::new();
                for part in images.chunks(crate::store::upstream::BULK_ROWS) {
                    let mut q = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO mirror_images (host, repository, digest, created_at, updated_at) ",
                    );
                    q.push_values(part, |mut b, (host, repository, digest)| {
                        b.push_bind(host)
                            .push_bind(repository)
                            .push_bind(digest)
                            .push_bind(now)
                            .push_bind(now);
                    });
                    q.push(" ON CONFLICT (host, repository, digest) DO NOTHING");
                    q.build().execute(&mut **tx).await?;
                    let mut q = sqlx::QueryBuilder::<$db>::new(
                        "SELECT id, host, repository, digest FROM mirror_images WHERE digest IN (",
                    );
                    let mut list = q.separated(", ");
                    for (_, _, digest) in part {
                        list.push_bind(digest);
                    }
                    q.push(")");
                    let found: Vec<(i64, String, String, String)> =
                        q.build_query_as().fetch_all(&mut **tx).await?;
                    for (id, host, repository, digest) in found {
                        image_ids.insert((host, repository, digest), id);
                    }
                }

                let versions: Vec<(i64, &crate::definition::Definition, &str)> = chunk
                    .iter()
                    .flat_map(|p| p.versions.iter().map(move |(d, s)| (id_of(p), *d, *s)))
                    .collect();
                for part in versions.chunks(crate::store::upstream::BULK_ROWS) {
                    let mut q = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO plugin_versions (plugin_id, version, canonical, major, hash, definition,
                         image, published_at, image_id, extras, not_installable, signer_key_ids) ",
                    );
                    q.push_values(part, |mut b, (id, d, signers)| {
                        let (host, repository) = d.image.upstream();
                        let image = image_ids
                            .get(&(host, repository, d.image.digest.clone()))
                            .copied();
                        b.push_bind(*id)
                            .push_bind(d.version_text())
                            .push_bind(d.version.to_string())
                            .push_bind(i64::try_from(d.version.major).unwrap_or(i64::MAX))
                            .push_bind(&d.hash)
                            .push_bind(&d.bytes)
                            .push_bind(d.image.to_string())
                            .push_bind(now)
                            .push_bind(image)
                            .push_bind(serde_json::to_string(&d.extras).expect("extras serialize"))
                            .push_bind(d.not_installable().unwrap_or_default())
                            .push_bind(*signers);
                    });
                    q.build().execute(&mut **tx).await?;
                }
            }
            super::bump(tx, crate::store::Domain::Catalog).await?;
            Ok(())
        }
    };
}

/// The columns of a new plugin row [`plugin_row!`] binds.
macro_rules! plugin_columns {
    () => {
        "publisher_id, name, created_at, updated_at, latest_version, display_name, description, \
         tags, internet_access, privileged, kube_system, approval_stale"
    };
}

/// Binds a new plugin's row ([`plugin_columns!`]) with the summary of its latest
/// version, as `write::write_summary` writes it.
macro_rules! plugin_row {
    ($b:expr, $p:expr, $publishers:expr, $now:expr) => {{
        let d = $p.latest;
        let a = d.approval();
        $b.push_bind($publishers[$p.publisher])
            .push_bind($p.name)
            .push_bind($now)
            .push_bind($now)
            .push_bind(d.version_text())
            .push_bind(d.display_name())
            .push_bind(d.description())
            .push_bind(d.tags().collect::<Vec<_>>().join(" "))
            .push_bind(a.internet_access)
            .push_bind(a.privileged)
            .push_bind(a.kube_system_deployment)
            .push_bind(false);
    }};
}

pub(crate) use {bulk_store, plugin_columns, plugin_row};
