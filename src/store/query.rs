//! Catalog listing: search, filters, sort and paging in one SQL statement.

use serde::Serialize;
use sqlx::{QueryBuilder, Row, Sqlite};

use super::{Store, StoreError};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Sort {
    /// Name match first when searching, then by name.
    #[default]
    Relevance,
    Name,
    Updated,
}

/// A validated catalog query; [`crate::catalog`] builds it from request parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginQuery {
    /// Lowercased search words; a plugin matches when every word is a prefix of a word
    /// in its name, title, description or tags.
    pub terms: Vec<String>,
    pub tag: Option<String>,
    pub publisher: Option<String>,
    pub no_internet: bool,
    pub not_privileged: bool,
    pub no_kube_system: bool,
    pub sort: Sort,
    /// 1-based.
    pub page: u32,
    pub per_page: u32,
}

impl Default for PluginQuery {
    fn default() -> Self {
        PluginQuery {
            terms: Vec::new(),
            tag: None,
            publisher: None,
            no_internet: false,
            not_privileged: false,
            no_kube_system: false,
            sort: Sort::Relevance,
            page: 1,
            per_page: 24,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PluginSummary {
    pub publisher: String,
    pub name: String,
    pub display_name: String,
    pub description: String,
    pub latest_version: String,
    pub tags: Vec<String>,
    pub internet_access: bool,
    pub privileged: bool,
    pub kube_system_deployment: bool,
    pub updated_at: i64,
}

#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub total: i64,
}

impl Store {
    pub async fn list_plugins(&self, q: &PluginQuery) -> Result<Page<PluginSummary>, StoreError> {
        let search = if q.terms.is_empty() {
            None
        } else {
            match search_expression(&q.terms) {
                Some(expr) => Some(expr),
                // Words without letters or digits can match nothing.
                None => {
                    return Ok(Page {
                        items: Vec::new(),
                        total: 0,
                    });
                }
            }
        };

        let mut count = QueryBuilder::<Sqlite>::new("SELECT COUNT(*) FROM plugins p");
        push_from(&mut count, q, search.as_deref());
        let total: i64 = count.build_query_scalar().fetch_one(self.pool()).await?;
        if total == 0 {
            return Ok(Page {
                items: Vec::new(),
                total,
            });
        }

        let mut select = QueryBuilder::<Sqlite>::new(
            "SELECT pub.name AS publisher, p.name, p.display_name, p.description, p.latest_version, p.tags,
                    p.internet_access, p.privileged, p.kube_system, p.updated_at
             FROM plugins p",
        );
        push_from(&mut select, q, search.as_deref());
        select.push(" ORDER BY ");
        match q.sort {
            Sort::Updated => {
                select.push("p.updated_at DESC, ");
            }
            Sort::Relevance if search.is_some() => {
                // An exact name first, then bm25 with the name weighted highest.
                select
                    .push("(p.name = ")
                    .push_bind(q.terms.join("-"))
                    .push(") DESC, ");
                select.push("bm25(plugin_search, 10.0, 5.0, 1.0, 3.0), ");
            }
            Sort::Relevance | Sort::Name => {}
        }
        select
            .push("p.name, pub.name LIMIT ")
            .push_bind(i64::from(q.per_page));
        select
            .push(" OFFSET ")
            .push_bind(i64::from(q.page.saturating_sub(1)) * i64::from(q.per_page));
        let rows = select.build().fetch_all(self.pool()).await?;
        let items = rows
            .into_iter()
            .map(|r| PluginSummary {
                publisher: r.get("publisher"),
                name: r.get("name"),
                display_name: r.get("display_name"),
                description: r.get("description"),
                latest_version: r.get("latest_version"),
                tags: r
                    .get::<String, _>("tags")
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect(),
                internet_access: r.get("internet_access"),
                privileged: r.get("privileged"),
                kube_system_deployment: r.get("kube_system"),
                updated_at: r.get("updated_at"),
            })
            .collect();
        Ok(Page { items, total })
    }
}

/// Joins and conditions shared by the count and the page query.
fn push_from(qb: &mut QueryBuilder<Sqlite>, q: &PluginQuery, search: Option<&str>) {
    qb.push(" JOIN publishers pub ON pub.id = p.publisher_id");
    if let Some(expr) = search {
        qb.push(" JOIN plugin_search ON plugin_search.rowid = p.id AND plugin_search MATCH ")
            .push_bind(expr.to_owned());
    }
    // A suspended publisher's plugins leave every listing (the signed index no longer
    // vouches for them); their pages stay reachable by address and say so.
    qb.push(" WHERE p.latest_version IS NOT NULL AND pub.suspended_at IS NULL");
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

/// The FTS5 query for search words: every word must match, each as a token prefix
/// (`cert` finds `cert-manager` and `certificates`). Input never reaches FTS5 syntax:
/// words are split into letter/digit tokens and each is quoted. `None` when no token is
/// left.
fn search_expression(terms: &[String]) -> Option<String> {
    let tokens: Vec<String> = terms
        .iter()
        .flat_map(|t| t.split(|c: char| !c.is_alphanumeric()))
        .filter(|t| !t.is_empty())
        .map(|t| format!("\"{}\"*", t.to_lowercase()))
        .collect();
    (!tokens.is_empty()).then(|| tokens.join(" "))
}

#[cfg(test)]
mod tests {
    use super::search_expression;

    #[test]
    fn search_words_become_quoted_prefix_tokens() {
        let terms = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            search_expression(&terms(&["cert-manager", "TLS"])).as_deref(),
            Some("\"cert\"* \"manager\"* \"tls\"*")
        );
        // FTS5 operators and quotes are not passed through.
        assert_eq!(
            search_expression(&terms(&["a\"OR", "NEAR(x"])).as_deref(),
            Some("\"a\"* \"or\"* \"near\"* \"x\"*")
        );
        assert_eq!(search_expression(&terms(&["%", "--"])), None);
    }
}
