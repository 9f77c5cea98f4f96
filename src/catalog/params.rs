//! Catalog query parameters, shared by the pages and the JSON API so both accept the
//! same URLs. Unknown or malformed parameters are refused, naming the parameter.

use serde::Deserialize;

use super::CatalogError;
use crate::store::{PluginQuery, Sort};

pub const MAX_PER_PAGE: u32 = 100;
const MAX_QUERY_CHARS: usize = 200;
const MAX_TERMS: usize = 8;

/// Parameters as they arrive in the query string.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogParams {
    pub q: Option<String>,
    pub tag: Option<String>,
    pub publisher: Option<String>,
    pub no_internet: Option<String>,
    pub not_privileged: Option<String>,
    pub no_kube_system: Option<String>,
    pub sort: Option<String>,
    pub page: Option<String>,
    pub per_page: Option<String>,
}

impl CatalogParams {
    pub fn to_query(&self) -> Result<PluginQuery, CatalogError> {
        Ok(PluginQuery {
            terms: search_terms(self.q.as_deref().unwrap_or("")).map_err(|e| bad("q", e))?,
            tag: non_empty(&self.tag),
            publisher: non_empty(&self.publisher),
            no_internet: flag("no_internet", &self.no_internet)?,
            not_privileged: flag("not_privileged", &self.not_privileged)?,
            no_kube_system: flag("no_kube_system", &self.no_kube_system)?,
            sort: match self.sort.as_deref().unwrap_or("") {
                "" | "relevance" => Sort::Relevance,
                "name" => Sort::Name,
                "updated" => Sort::Updated,
                other => {
                    return Err(bad(
                        "sort",
                        format!("`{other}` is not one of relevance, name, updated"),
                    ));
                }
            },
            page: number("page", &self.page, 1, 1, 100_000)?,
            per_page: number("per_page", &self.per_page, 24, 1, MAX_PER_PAGE)?,
        })
    }
}

/// Search text as the words a listing matches (lowercased), or why it is refused. Pages,
/// the JSON API and Fundament's catalog contract search alike.
pub fn search_terms(text: &str) -> Result<Vec<String>, String> {
    let text = text.trim();
    if text.chars().count() > MAX_QUERY_CHARS {
        return Err(format!(
            "search text is limited to {MAX_QUERY_CHARS} characters"
        ));
    }
    let terms: Vec<String> = text.split_whitespace().map(str::to_lowercase).collect();
    if terms.len() > MAX_TERMS {
        return Err(format!("at most {MAX_TERMS} search words"));
    }
    Ok(terms)
}

fn bad(parameter: &'static str, reason: String) -> CatalogError {
    CatalogError::BadParameter { parameter, reason }
}

fn non_empty(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// HTML checkboxes send `on`; machines send `true`/`false`.
fn flag(name: &'static str, v: &Option<String>) -> Result<bool, CatalogError> {
    match v.as_deref() {
        None | Some("" | "false" | "0" | "off") => Ok(false),
        Some("true" | "1" | "on") => Ok(true),
        Some(other) => Err(bad(
            name,
            format!("`{other}` is not a boolean (true or false)"),
        )),
    }
}

fn number(
    name: &'static str,
    v: &Option<String>,
    default: u32,
    min: u32,
    max: u32,
) -> Result<u32, CatalogError> {
    match v.as_deref().map(str::trim) {
        None | Some("") => Ok(default),
        Some(s) => match s.parse::<u32>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(bad(
                name,
                format!("`{s}` must be a whole number from {min} to {max}"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_html_form_values() {
        let p = CatalogParams {
            q: Some("  Cert  TLS ".into()),
            no_internet: Some("on".into()),
            sort: Some("updated".into()),
            page: Some("2".into()),
            ..Default::default()
        };
        let q = p.to_query().unwrap();
        assert_eq!(q.terms, ["cert", "tls"]);
        assert!(q.no_internet && !q.not_privileged);
        assert_eq!((q.sort, q.page, q.per_page), (Sort::Updated, 2, 24));
    }

    #[test]
    fn refuses_bad_values_naming_the_parameter() {
        for (p, name) in [
            (
                CatalogParams {
                    page: Some("0".into()),
                    ..Default::default()
                },
                "page",
            ),
            (
                CatalogParams {
                    per_page: Some("101".into()),
                    ..Default::default()
                },
                "per_page",
            ),
            (
                CatalogParams {
                    sort: Some("random".into()),
                    ..Default::default()
                },
                "sort",
            ),
            (
                CatalogParams {
                    no_internet: Some("maybe".into()),
                    ..Default::default()
                },
                "no_internet",
            ),
            (
                CatalogParams {
                    q: Some("x".repeat(201)),
                    ..Default::default()
                },
                "q",
            ),
        ] {
            match p.to_query() {
                Err(CatalogError::BadParameter { parameter, .. }) => assert_eq!(parameter, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}
