//! Plugins new to the store written with multi-row statements (a cold round of
//! following an upstream: thousands of plugins in one transaction). The rows are those
//! `write::insert_version_in` writes one by one: the plugin with its summary and search
//! document, tags and links, its images enqueued for mirroring, its versions.

use std::collections::{BTreeSet, HashMap};

use sqlx::{Postgres, QueryBuilder};

use crate::store::upstream::{BULK_ROWS, NewPlugin};
use crate::store::{Domain, LinkKind, StoreError};

type Tx<'t> = sqlx::Transaction<'t, Postgres>;

pub(super) async fn insert_new_plugins(
    tx: &mut Tx<'_>,
    plugins: &[NewPlugin<'_>],
    now: i64,
) -> Result<(), StoreError> {
    if plugins.is_empty() {
        return Ok(());
    }
    let mut publishers: HashMap<&str, i64> = HashMap::new();
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
    for chunk in plugins.chunks(BULK_ROWS) {
        let mut q = QueryBuilder::<Postgres>::new(
            "INSERT INTO plugins (publisher_id, name, created_at, updated_at, latest_version,
             display_name, description, tags, internet_access, privileged, kube_system, approval_stale,
             search_document) ",
        );
        q.push_values(chunk, |mut b, p| {
            let d = p.latest;
            let a = d.approval();
            b.push_bind(publishers[p.publisher])
                .push_bind(p.name)
                .push_bind(now)
                .push_bind(now)
                .push_bind(d.version_text())
                .push_bind(d.display_name())
                .push_bind(d.description())
                .push_bind(d.tags().collect::<Vec<_>>().join(" "))
                .push_bind(a.internet_access)
                .push_bind(a.privileged)
                .push_bind(a.kube_system_deployment)
                .push_bind(false);
            // The search document as `write_search_document` writes it, weighted name A,
            // title B, tags C, description D.
            let words = |text: &str| crate::store::search_tokens(&[text.to_owned()]);
            b.push("setweight(array_to_tsvector(")
                .push_bind_unseparated(words(p.name))
                .push_unseparated("::text[]), 'A') || setweight(array_to_tsvector(")
                .push_bind_unseparated(words(d.display_name()))
                .push_unseparated("::text[]), 'B') || setweight(array_to_tsvector(")
                .push_bind_unseparated(words(&d.tags().collect::<Vec<_>>().join(" ")))
                .push_unseparated("::text[]), 'C') || setweight(array_to_tsvector(")
                .push_bind_unseparated(words(d.description()))
                .push_unseparated("::text[]), 'D')");
        });
        q.push(" RETURNING id, publisher_id, name");
        let rows: Vec<(i64, i64, String)> = q.build_query_as().fetch_all(&mut **tx).await?;
        let ids: HashMap<(i64, &str), i64> = rows
            .iter()
            .map(|(id, publisher, name)| ((*publisher, name.as_str()), *id))
            .collect();
        let id_of = |p: &NewPlugin<'_>| ids[&(publishers[p.publisher], p.name)];

        let tags: Vec<(i64, &str)> = chunk
            .iter()
            .flat_map(|p| p.latest.tags().map(move |t| (id_of(p), t)))
            .collect();
        for part in tags.chunks(BULK_ROWS) {
            let mut q = QueryBuilder::<Postgres>::new("INSERT INTO plugin_tags (plugin_id, tag) ");
            q.push_values(part, |mut b, (id, tag)| {
                b.push_bind(*id).push_bind(*tag);
            });
            q.push(" ON CONFLICT DO NOTHING");
            q.build().execute(&mut **tx).await?;
        }
        let links: Vec<(i64, LinkKind, &str)> = chunk
            .iter()
            .flat_map(|p| {
                let e = &p.latest.extras;
                let id = id_of(p);
                e.dependencies
                    .iter()
                    .map(move |d| (id, LinkKind::Dependency, d.as_str()))
                    .chain(
                        e.suggested_plugins
                            .iter()
                            .map(move |s| (id, LinkKind::Suggestion, s.as_str())),
                    )
            })
            .collect();
        for part in links.chunks(BULK_ROWS) {
            let mut q = QueryBuilder::<Postgres>::new(
                "INSERT INTO plugin_links (plugin_id, kind, target) ",
            );
            q.push_values(part, |mut b, (id, kind, target)| {
                b.push_bind(*id).push_bind(kind.as_str()).push_bind(*target);
            });
            q.push(" ON CONFLICT DO NOTHING");
            q.build().execute(&mut **tx).await?;
        }

        // Every image enqueued for mirroring in the same transaction, as one by one.
        let images: BTreeSet<(String, String, String)> = chunk
            .iter()
            .flat_map(|p| &p.versions)
            .map(|(d, _)| {
                let (host, repository) = d.image.upstream();
                (host, repository, d.image.digest.clone())
            })
            .collect();
        let images: Vec<_> = images.into_iter().collect();
        let mut image_ids: HashMap<(String, String, String), i64> = HashMap::new();
        for part in images.chunks(BULK_ROWS) {
            let mut q = QueryBuilder::<Postgres>::new(
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
            let mut q = QueryBuilder::<Postgres>::new(
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
        for part in versions.chunks(BULK_ROWS) {
            let mut q = QueryBuilder::<Postgres>::new(
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
    super::bump(tx, Domain::Catalog).await?;
    Ok(())
}
