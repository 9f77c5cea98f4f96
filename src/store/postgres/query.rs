//! Catalog listing on PostgreSQL: search, filters and sort in one SQL statement that
//! ranks every match, kept in the catalog cache (see `store::cache`) as on SQLite.
//!
//! Search runs on `plugins.search_document`, a `tsvector` under GIN that the store
//! writes from the same tokens as the query ([`crate::store::search_tokens`], applied to
//! name, title, description and tags, weighted A, B, D, C), never through PostgreSQL's
//! text parser: a query token then matches exactly the words SQLite's FTS5 table
//! (unicode61, diacritics removed) lets it match. Each token is a prefix lexeme
//! (`'cert':*`) and every one must match. Relevance puts an exact name first, then
//! `ts_rank` with the name weighted highest (FTS5 uses bm25; the order among equally
//! exact matches may differ).

use std::sync::Arc;

use sqlx::{Postgres, QueryBuilder, Row};

use super::{PgStore, read_generation};
use crate::store::cache::{CachedPage, CatalogCache, Entry, Key};
use crate::store::{Domain, ListedPlugin, Page, PluginQuery, PluginSummary, Sort, StoreError};

/// What a query's search words ask of the index.
enum Search {
    /// No words: every plugin.
    All,
    /// The `tsquery` every match must satisfy.
    Match(String),
    /// Words without letters or digits can match nothing.
    Nothing,
}

impl Search {
    fn of(q: &PluginQuery) -> Search {
        if q.terms.is_empty() {
            return Search::All;
        }
        match search_expression(&q.terms) {
            Some(expr) => Search::Match(expr),
            None => Search::Nothing,
        }
    }

    fn expression(&self) -> Option<&str> {
        match self {
            Search::Match(expr) => Some(expr),
            Search::All | Search::Nothing => None,
        }
    }
}

impl PgStore {
    /// One page of a catalog listing with the number of matches. Served from the catalog
    /// cache when this exact query was answered at the current generation; otherwise the
    /// missing parts (every match's id in order, then the page's rows) are read in one
    /// transaction and kept.
    pub(crate) async fn list_page(
        &self,
        q: &PluginQuery,
        cache: &CatalogCache,
    ) -> Result<Page<PluginSummary>, StoreError> {
        let search = Search::of(q);
        if let Search::Nothing = search {
            return Ok(Page {
                items: Vec::new(),
                total: 0,
            });
        }

        let page_key = Key::Page(q.clone());
        let generation = self.generation(Domain::Catalog).await?;
        if let Some(Entry::Page(page)) = cache.get(generation, &page_key) {
            return Ok(Page {
                items: page.items.clone(),
                total: page.total,
            });
        }

        // One read transaction, so what is kept was all read at the generation it is
        // kept under (a write may have landed since the read above).
        let mut tx = super::begin_read(&self.pool).await?;
        let generation = read_generation(&mut tx, Domain::Catalog).await?;
        let ranked = self.ranked(&mut tx, cache, generation, q, &search).await?;
        let per_page = q.per_page as usize;
        let start = (q.page.saturating_sub(1) as usize)
            .saturating_mul(per_page)
            .min(ranked.len());
        let end = start.saturating_add(per_page).min(ranked.len());
        let items = summaries(&mut tx, &ranked[start..end]).await?;
        tx.commit().await?;

        let page = Arc::new(CachedPage {
            items,
            total: ranked.len() as i64,
        });
        cache.put(generation, page_key, Entry::Page(page.clone()));
        Ok(Page {
            items: page.items.clone(),
            total: page.total,
        })
    }

    /// Every plugin `q` matches, in its listing order (its page fields are ignored): the
    /// ranking is the one pages use, from the same cache; the rows are read each time.
    pub(crate) async fn listed(
        &self,
        q: &PluginQuery,
        cache: &CatalogCache,
    ) -> Result<Vec<ListedPlugin>, StoreError> {
        let search = Search::of(q);
        if let Search::Nothing = search {
            return Ok(Vec::new());
        }
        let mut tx = super::begin_read(&self.pool).await?;
        let generation = read_generation(&mut tx, Domain::Catalog).await?;
        let ranked = self.ranked(&mut tx, cache, generation, q, &search).await?;
        let listed = listed_rows(&mut tx, &ranked).await?;
        tx.commit().await?;
        Ok(listed)
    }

    /// One plugin if listings show it.
    pub(crate) async fn listed_plugin(
        &self,
        publisher: &str,
        name: &str,
    ) -> Result<Option<ListedPlugin>, StoreError> {
        let mut tx = super::begin_read(&self.pool).await?;
        let id: Option<i64> = sqlx::query_scalar(
            "SELECT p.id FROM plugins p JOIN publishers pub ON pub.id = p.publisher_id
             WHERE pub.name = $1 AND p.name = $2 AND p.latest_version IS NOT NULL
               AND pub.suspended_at IS NULL",
        )
        .bind(publisher)
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
        let listed = match id {
            Some(id) => listed_rows(&mut tx, &[id]).await?.pop(),
            None => None,
        };
        tx.commit().await?;
        Ok(listed)
    }

    /// Publisher and name of every plugin listings show, by publisher then name: what
    /// ids computed from names are looked up in.
    pub(crate) async fn listed_names(&self) -> Result<Vec<(String, String)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT pub.name, p.name FROM plugins p JOIN publishers pub ON pub.id = p.publisher_id
             WHERE p.latest_version IS NOT NULL AND pub.suspended_at IS NULL
             ORDER BY pub.name, p.name",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// The id of every match of `q` in listing order, kept per generation.
    async fn ranked(
        &self,
        tx: &mut sqlx::Transaction<'_, Postgres>,
        cache: &CatalogCache,
        generation: i64,
        q: &PluginQuery,
        search: &Search,
    ) -> Result<Arc<[i64]>, StoreError> {
        let key = Key::ranked(q);
        if let Some(Entry::Ranked(ids)) = cache.get(generation, &key) {
            return Ok(ids);
        }
        let ids: Arc<[i64]> = ranked_ids(tx, q, search.expression()).await?.into();
        cache.put(generation, key, Entry::Ranked(ids.clone()));
        Ok(ids)
    }
}

/// The id of every plugin the query matches, in listing order.
async fn ranked_ids(
    tx: &mut sqlx::Transaction<'_, Postgres>,
    q: &PluginQuery,
    search: Option<&str>,
) -> Result<Vec<i64>, StoreError> {
    let mut select = QueryBuilder::<Postgres>::new("SELECT p.id FROM plugins p");
    push_from(&mut select, q, search);
    select.push(" ORDER BY ");
    match (q.sort, search) {
        (Sort::Updated, _) => {
            select.push("p.updated_at DESC, ");
        }
        (Sort::Relevance, Some(expr)) => {
            // An exact name first, then ts_rank with the name weighted highest (the
            // weights are FTS5's bm25 weights, scaled: description 1, tags 3, title 5,
            // name 10).
            select
                .push("(p.name = ")
                .push_bind(q.terms.join("-"))
                .push(") DESC, ");
            select
                .push("ts_rank('{0.1, 0.3, 0.5, 1.0}', p.search_document, ")
                .push_bind(expr.to_owned())
                .push("::tsquery) DESC, ");
        }
        (Sort::Relevance | Sort::Name, _) => {}
    }
    // C collation: the byte order SQLite's BINARY collation sorts by.
    select.push(r#"p.name COLLATE "C", pub.name COLLATE "C""#);
    Ok(select.build_query_scalar().fetch_all(&mut **tx).await?)
}

/// The listed plugins with these ids, in the same order.
async fn summaries(
    tx: &mut sqlx::Transaction<'_, Postgres>,
    ids: &[i64],
) -> Result<Vec<PluginSummary>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = sqlx::query(
        "SELECT pub.name AS publisher, p.name, p.display_name, p.description, p.latest_version, p.tags,
                p.internet_access, p.privileged, p.kube_system, p.updated_at
         FROM unnest($1::bigint[]) WITH ORDINALITY AS j(id, n) JOIN plugins p ON p.id = j.id
           JOIN publishers pub ON pub.id = p.publisher_id
         WHERE p.latest_version IS NOT NULL ORDER BY j.n",
    )
    .bind(ids)
    .fetch_all(&mut **tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| PluginSummary {
            publisher: r.get("publisher"),
            name: r.get("name"),
            display_name: r.get("display_name"),
            description: r.get("description"),
            latest_version: r.get("latest_version"),
            tags: space_separated(&r.get::<String, _>("tags")),
            internet_access: r.get("internet_access"),
            privileged: r.get("privileged"),
            kube_system_deployment: r.get("kube_system"),
            updated_at: r.get("updated_at"),
        })
        .collect())
}

/// The listed plugins with these ids, in the same order.
async fn listed_rows(
    tx: &mut sqlx::Transaction<'_, Postgres>,
    ids: &[i64],
) -> Result<Vec<ListedPlugin>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = sqlx::query(
        "SELECT p.id, pub.name AS publisher, p.name, p.display_name, p.description,
                p.latest_version, p.tags,
                (SELECT MIN(v.published_at) FROM plugin_versions v
                  WHERE v.plugin_id = p.id AND v.yanked = FALSE) AS first_published_at
         FROM unnest($1::bigint[]) WITH ORDINALITY AS j(id, n) JOIN plugins p ON p.id = j.id
           JOIN publishers pub ON pub.id = p.publisher_id
         WHERE p.latest_version IS NOT NULL ORDER BY j.n",
    )
    .bind(ids)
    .fetch_all(&mut **tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| ListedPlugin {
            id: r.get("id"),
            publisher: r.get("publisher"),
            name: r.get("name"),
            display_name: r.get("display_name"),
            description: r.get("description"),
            latest_version: r.get("latest_version"),
            tags: space_separated(&r.get::<String, _>("tags")),
            // A listed plugin has a listed version, so the minimum is never NULL.
            first_published_at: r
                .get::<Option<i64>, _>("first_published_at")
                .unwrap_or_default(),
        })
        .collect())
}

fn space_separated(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_owned).collect()
}

/// Joins and conditions of a listing query.
fn push_from(qb: &mut QueryBuilder<Postgres>, q: &PluginQuery, search: Option<&str>) {
    qb.push(" JOIN publishers pub ON pub.id = p.publisher_id");
    // A suspended publisher's plugins leave every listing (the signed index no longer
    // vouches for them); their pages stay reachable by address and say so.
    qb.push(" WHERE p.latest_version IS NOT NULL AND pub.suspended_at IS NULL");
    if let Some(expr) = search {
        qb.push(" AND p.search_document @@ ")
            .push_bind(expr.to_owned())
            .push("::tsquery");
    }
    if let Some(tag) = &q.tag {
        qb.push(" AND EXISTS (SELECT 1 FROM plugin_tags t WHERE t.plugin_id = p.id AND t.tag = ")
            .push_bind(tag.clone())
            .push(")");
    }
    if let Some(publisher) = &q.publisher {
        qb.push(" AND pub.name = ").push_bind(publisher.clone());
    }
    if q.no_internet {
        qb.push(" AND p.internet_access = FALSE");
    }
    if q.not_privileged {
        qb.push(" AND p.privileged = FALSE");
    }
    if q.no_kube_system {
        qb.push(" AND p.kube_system = FALSE");
    }
}

/// The `tsquery` for search words: every word must match, each as a prefix of a word
/// (`cert` finds `cert-manager` and `certificates`). Input never reaches tsquery syntax:
/// tokens hold letters and digits only, and each is quoted. `None` when no token is
/// left.
pub(super) fn search_expression(terms: &[String]) -> Option<String> {
    let tokens: Vec<String> = crate::store::search_tokens(terms)
        .into_iter()
        .map(|t| format!("'{t}':*"))
        .collect();
    (!tokens.is_empty()).then(|| tokens.join(" & "))
}

#[cfg(test)]
mod tests {
    use super::search_expression;

    #[test]
    fn search_words_become_quoted_prefix_lexemes() {
        let terms = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            search_expression(&terms(&["cert-manager", "TLS"])).as_deref(),
            Some("'cert':* & 'manager':* & 'tls':*")
        );
        // tsquery operators and quotes are not passed through.
        assert_eq!(
            search_expression(&terms(&["a'|!b", "(x:*"])).as_deref(),
            Some("'a':* & 'b':* & 'x':*")
        );
        assert_eq!(search_expression(&terms(&["%", "--"])), None);
    }
}
