//! What a catalog listing asks (search words, filters, sort, page) and what it answers.
//! Each backend ranks and reads them its own way (`sqlite/query.rs`: FTS5;
//! `postgres/query.rs`: `tsvector`), with the same rules: every word must match as a
//! prefix of a word of the name, title, description or tags; an exact name first, then
//! relevance with the name weighted highest; operators in input never reach the query
//! language ([`search_tokens`]).

use std::sync::Arc;

use crate::definition::Definition;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Sort {
    /// Name match first when searching, then by name.
    #[default]
    Relevance,
    Name,
    Updated,
}

/// A validated catalog query; [`crate::catalog`] builds it from request parameters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
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

/// A listed plugin as a page of a listing holds it.
#[derive(Debug, Clone)]
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

/// A listed plugin (a version not yanked, its publisher not suspended) with what
/// Fundament's catalog contract shows of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedPlugin {
    /// The row id, for [`Store::versions`] and [`Store::definition`].
    pub id: i64,
    pub publisher: String,
    pub name: String,
    pub display_name: String,
    pub description: String,
    /// The latest listed version as written (`v1.19.3`).
    pub latest_version: String,
    pub tags: Vec<String>,
    /// When its oldest version still listed was published (Unix seconds).
    pub first_published_at: i64,
}

/// A listed plugin with its latest listed definition: what catalog.v1 `GetPlugin`
/// answers from, kept per generation of the catalog by [`Store::listed_detail`](super::Store::listed_detail).
#[derive(Debug)]
pub struct ListedDetail {
    pub plugin: ListedPlugin,
    pub definition: Arc<Definition>,
}

/// The tokens every match must have a word starting with: the search words split into
/// runs of letters and digits, lowercased, diacritics removed (`cert-manager Über` →
/// `cert`, `manager`, `uber`), as SQLite's FTS5 table (unicode61, `remove_diacritics 2`)
/// reads text; PostgreSQL's search documents are written from the same tokens. Whatever
/// else the input holds (quotes, operators, punctuation) is a separator, so it never
/// reaches a backend's query language. Empty when no token is left: such a search
/// matches nothing.
pub fn search_tokens(terms: &[String]) -> Vec<String> {
    use unicode_normalization::UnicodeNormalization;
    use unicode_normalization::char::is_combining_mark;
    terms
        .iter()
        .flat_map(|t| t.split(|c: char| !c.is_alphanumeric()))
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.nfd()
                .filter(|c| !is_combining_mark(*c))
                .flat_map(char::to_lowercase)
                .collect::<String>()
        })
        .filter(|t| !t.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::search_tokens;

    #[test]
    fn words_split_fold_case_and_lose_diacritics() {
        let terms = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            search_tokens(&terms(&["Cert-Manager", "Über*", "\"résumé\""])),
            ["cert", "manager", "uber", "resume"]
        );
        assert!(search_tokens(&terms(&["--", "*"])).is_empty());
    }
}
