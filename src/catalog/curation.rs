//! The operator's curation of the public catalog as Fundament's catalog contract shows
//! it: categories, featured plugins and labels. They come from the server's
//! configuration (`serve --curation FILE`, else the default compiled in), never from
//! what a publisher writes into its definitions: a publisher could otherwise feature
//! itself or claim a government label. The one rule not in the file is `CORE`: every
//! built-in carries it, and nothing else may.
//!
//! Layering: pure rules over names; reads only its own file; knows nothing of the
//! store or of HTTP.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, LazyLock};

use serde::Deserialize;

use crate::definition::{BUILTIN_PUBLISHER, is_dns_label, yaml};
use crate::ids;

/// The largest curation file read.
pub const MAX_CURATION_BYTES: u64 = 1024 * 1024;

const DEFAULT: &str = include_str!("default-curation.yaml");

/// A label Fundament's console shows on a plugin (`catalog.v1.PluginLabel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Label {
    /// Ships with the marketplace (a built-in); never granted by configuration.
    Core,
    /// Approved for the Dutch central government.
    Rijksoverheid,
    /// Supported on working days from 9 to 17.
    Support9To17,
}

impl Label {
    /// How the curation file writes it (the contract's name without `PLUGIN_LABEL_`).
    pub fn name(self) -> &'static str {
        match self {
            Label::Core => "CORE",
            Label::Rijksoverheid => "RIJKSOVERHEID",
            Label::Support9To17 => "SUPPORT_9_TO_17",
        }
    }
}

/// Labels the file may grant.
const GRANTABLE: [Label; 2] = [Label::Rijksoverheid, Label::Support9To17];

#[derive(Debug, thiserror::Error)]
pub enum CurationError {
    #[error("cannot read {0}")]
    Read(String, #[source] std::io::Error),
    #[error("{0} is larger than {MAX_CURATION_BYTES} bytes")]
    TooLarge(String),
    #[error("{file}: {message}")]
    Invalid { file: String, message: String },
    #[error(
        "no curation file to reload: the server runs on the compiled-in default (start it with --curation FILE)"
    )]
    NoFile,
}

/// The curation being served, which a reload replaces (`POST
/// /api/v1/admin/curation/reload` reads its file again). Requests take the current one
/// with [`LiveCuration::get`], so each answers from one whole curation.
#[derive(Debug)]
pub struct LiveCuration {
    path: Option<std::path::PathBuf>,
    current: std::sync::RwLock<Arc<Curation>>,
}

/// What a reload loaded.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Reloaded {
    pub file: String,
    pub categories: usize,
    pub featured: usize,
}

impl LiveCuration {
    /// `curation`, read from `path` when it came from a file.
    pub fn new(path: Option<std::path::PathBuf>, curation: Arc<Curation>) -> LiveCuration {
        LiveCuration {
            path,
            current: std::sync::RwLock::new(curation),
        }
    }

    /// A curation that is not reloaded (tests, the compiled-in default).
    pub fn fixed(curation: Arc<Curation>) -> LiveCuration {
        LiveCuration::new(None, curation)
    }

    pub fn get(&self) -> Arc<Curation> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads the file again; a file that does not load leaves the current curation.
    pub fn reload(&self) -> Result<Reloaded, CurationError> {
        let path = self.path.as_ref().ok_or(CurationError::NoFile)?;
        let new = Arc::new(Curation::load(path)?);
        let done = Reloaded {
            file: path.display().to_string(),
            categories: new.categories.len(),
            featured: new.featured.len(),
        };
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = new;
        Ok(done)
    }
}

/// A category of the catalog, in the order `ListCategories` returns them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Category {
    /// `ids::category(name)`.
    pub id: String,
    pub name: String,
    /// `publisher/name` of plugins placed in it by name.
    plugins: HashSet<String>,
    /// A plugin whose latest listed version has one of these tags is in it too.
    tags: HashSet<String>,
}

impl Category {
    fn holds(&self, key: &str, tags: &[String]) -> bool {
        self.plugins.contains(key) || tags.iter().any(|t| self.tags.contains(t))
    }
}

/// What the curation says about one plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Curated {
    /// Ids of its categories, in the curation's order.
    pub category_ids: Vec<String>,
    pub featured: bool,
    /// Each once, in the contract's order (`CORE` first).
    pub labels: Vec<Label>,
}

/// The categories, featured plugins and labels of the catalog; loaded once at start.
#[derive(Debug, Clone, Default)]
pub struct Curation {
    categories: Vec<Category>,
    /// `publisher/name`.
    featured: HashSet<String>,
    publisher_labels: HashMap<String, Vec<Label>>,
    /// By `publisher/name`.
    plugin_labels: HashMap<String, Vec<Label>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCuration {
    #[serde(default)]
    categories: Vec<RawCategory>,
    #[serde(default)]
    featured: Vec<String>,
    #[serde(default)]
    labels: RawLabels,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCategory {
    name: String,
    #[serde(default)]
    plugins: Vec<String>,
    #[serde(default)]
    tags: Vec<String>,
}

// Ordered maps, so that of several mistakes the same one is reported on every start.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLabels {
    #[serde(default)]
    publishers: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    plugins: BTreeMap<String, Vec<String>>,
}

impl Curation {
    /// Reads and checks a curation file.
    pub fn load(path: &Path) -> Result<Curation, CurationError> {
        let file = path.display().to_string();
        let read_err = |e| CurationError::Read(file.clone(), e);
        if std::fs::metadata(path).map_err(read_err)?.len() > MAX_CURATION_BYTES {
            return Err(CurationError::TooLarge(file));
        }
        let text = std::fs::read_to_string(path).map_err(read_err)?;
        Curation::parse(&text).map_err(|message| CurationError::Invalid { file, message })
    }

    /// The curation compiled in (`src/catalog/default-curation.yaml`), used without
    /// `--curation`.
    pub fn builtin() -> Arc<Curation> {
        static BUILTIN: LazyLock<Arc<Curation>> = LazyLock::new(|| {
            Arc::new(Curation::parse(DEFAULT).expect("the default curation is valid"))
        });
        BUILTIN.clone()
    }

    /// Parses curation text; an error names the field (`categories[1].plugins[0]`).
    pub fn parse(text: &str) -> Result<Curation, String> {
        let raw: RawCuration = yaml::config(text, "a curation file")?;
        let mut categories: Vec<Category> = Vec::new();
        for (i, c) in raw.categories.into_iter().enumerate() {
            let at = format!("categories[{i}]");
            let name = c.name.trim();
            if name.is_empty() || name.chars().count() > 100 {
                return Err(format!(
                    "{at}.name: a name of 1 to 100 characters is needed"
                ));
            }
            if categories.iter().any(|o| o.name == name) {
                return Err(format!("{at}.name: `{name}` is used twice"));
            }
            if c.plugins.is_empty() && c.tags.is_empty() {
                return Err(format!(
                    "{at}: a category needs `plugins` or `tags`, or nothing could be in it"
                ));
            }
            for (j, tag) in c.tags.iter().enumerate() {
                if !is_dns_label(tag) {
                    return Err(format!(
                        "{at}.tags[{j}]: `{tag}` is not a tag (tags are DNS-1123 labels, so it would match no plugin)"
                    ));
                }
            }
            categories.push(Category {
                id: ids::category(name),
                name: name.to_owned(),
                plugins: plugin_keys(&format!("{at}.plugins"), c.plugins)?,
                tags: c.tags.into_iter().collect(),
            });
        }
        let featured = plugin_keys("featured", raw.featured)?;
        let mut publisher_labels = HashMap::new();
        for (publisher, labels) in raw.labels.publishers {
            let at = format!("labels.publishers.{publisher}");
            if !is_dns_label(&publisher) {
                return Err(format!(
                    "{at}: `{publisher}` is not a publisher name (DNS-1123 label)"
                ));
            }
            publisher_labels.insert(publisher, parse_labels(&at, &labels)?);
        }
        let mut plugin_labels = HashMap::new();
        for (key, labels) in raw.labels.plugins {
            let at = format!("labels.plugins.{key}");
            check_plugin_key(&at, &key)?;
            plugin_labels.insert(key, parse_labels(&at, &labels)?);
        }
        Ok(Curation {
            categories,
            featured,
            publisher_labels,
            plugin_labels,
        })
    }

    /// In the file's order.
    pub fn categories(&self) -> &[Category] {
        &self.categories
    }

    pub fn category(&self, id: &str) -> Option<&Category> {
        self.categories.iter().find(|c| c.id == id)
    }

    /// Categories, featured and labels of one plugin.
    pub fn curate(&self, publisher: &str, name: &str, tags: &[String]) -> Curated {
        let key = format!("{publisher}/{name}");
        let mut labels: Vec<Label> = self
            .publisher_labels
            .get(publisher)
            .into_iter()
            .chain(self.plugin_labels.get(&key))
            .flatten()
            .copied()
            .collect();
        if publisher == BUILTIN_PUBLISHER {
            labels.push(Label::Core);
        }
        labels.sort_unstable();
        labels.dedup();
        Curated {
            category_ids: self
                .categories
                .iter()
                .filter(|c| c.holds(&key, tags))
                .map(|c| c.id.clone())
                .collect(),
            featured: self.featured.contains(&key),
            labels,
        }
    }
}

/// `publisher/name` references, checked.
fn plugin_keys(at: &str, keys: Vec<String>) -> Result<HashSet<String>, String> {
    for (j, key) in keys.iter().enumerate() {
        check_plugin_key(&format!("{at}[{j}]"), key)?;
    }
    Ok(keys.into_iter().collect())
}

fn check_plugin_key(at: &str, key: &str) -> Result<(), String> {
    match key.split_once('/') {
        Some((publisher, name)) if is_dns_label(publisher) && is_dns_label(name) => Ok(()),
        _ => Err(format!(
            "{at}: `{key}` is not a plugin as publisher/name (for example fundament/cert-manager)"
        )),
    }
}

fn parse_labels(at: &str, names: &[String]) -> Result<Vec<Label>, String> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            if name == Label::Core.name() {
                return Err(format!(
                    "{at}[{i}]: CORE cannot be granted: every built-in (publisher {BUILTIN_PUBLISHER}) carries it and nothing else may"
                ));
            }
            GRANTABLE
                .into_iter()
                .find(|l| l.name() == name)
                .ok_or_else(|| {
                    format!(
                        "{at}[{i}]: `{name}` is not a label; the file may grant {}",
                        GRANTABLE.map(Label::name).join(" or ")
                    )
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_categories_featured_and_labels() {
        let c = Curation::parse(
            "categories:\n  - name: Security\n    plugins: [acme/guard]\n    tags: [tls]\n  - name: Other\n    tags: [misc]\n\
             featured: [acme/guard]\n\
             labels:\n  publishers: { acme: [SUPPORT_9_TO_17] }\n  plugins: { \"acme/guard\": [RIJKSOVERHEID, SUPPORT_9_TO_17] }\n",
        )
        .unwrap();
        let names: Vec<&str> = c.categories().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["Security", "Other"]);
        assert_eq!(c.categories()[0].id, ids::category("Security"));
        assert_eq!(c.category(&ids::category("Other")).unwrap().name, "Other");
        assert!(c.category(&ids::category("Missing")).is_none());

        let guard = c.curate("acme", "guard", &[]);
        assert_eq!(guard.category_ids, [ids::category("Security")]);
        assert!(guard.featured);
        assert_eq!(guard.labels, [Label::Rijksoverheid, Label::Support9To17]);

        let other = c.curate("acme", "other", &strings(&["misc", "tls"]));
        assert_eq!(
            other.category_ids,
            [ids::category("Security"), ids::category("Other")]
        );
        assert!(!other.featured);
        assert_eq!(other.labels, [Label::Support9To17]);
        assert_eq!(c.curate("beta", "x", &[]), Curated::default());
    }

    #[test]
    fn core_is_every_builtin_and_only_them() {
        let c = Curation::parse("").unwrap();
        assert_eq!(
            c.curate(BUILTIN_PUBLISHER, "anything", &[]).labels,
            [Label::Core]
        );
        assert_eq!(c.curate("acme", "anything", &[]).labels, []);
    }

    #[test]
    fn the_default_sorts_every_builtin_and_features_two() {
        let c = Curation::builtin();
        assert!(c.categories().len() >= 4);
        let mut featured = Vec::new();
        for def in crate::catalog::builtin::definitions().unwrap() {
            // By name alone, whatever the built-in's tags say.
            let curated = c.curate(BUILTIN_PUBLISHER, def.name(), &[]);
            assert!(
                !curated.category_ids.is_empty(),
                "{} has no category",
                def.name()
            );
            assert_eq!(curated.labels, [Label::Core]);
            if curated.featured {
                featured.push(def.name().to_owned());
            }
        }
        featured.sort();
        assert_eq!(featured, ["cert-manager", "gateway"]);
    }

    #[test]
    fn errors_name_the_field() {
        for (text, want) in [
            ("categories:\n  - name: A\n    plugin: [a/b]\n", "plugin"),
            (
                "categories:\n  - name: A\n    tags: [x]\n  - name: A\n    tags: [y]\n",
                "categories[1].name: `A` is used twice",
            ),
            (
                "categories:\n  - name: '  '\n    tags: [x]\n",
                "categories[0].name",
            ),
            (
                "categories:\n  - name: Empty\n",
                "categories[0]: a category needs",
            ),
            (
                "categories:\n  - name: A\n    tags: [Not A Tag]\n",
                "categories[0].tags[0]",
            ),
            (
                "categories:\n  - name: A\n    plugins: [acme/ok, cert-manager]\n",
                "categories[0].plugins[1]: `cert-manager` is not a plugin as publisher/name",
            ),
            ("featured: [acme]\n", "featured[0]: `acme` is not a plugin"),
            ("featured: 3\n", "featured"),
            (
                "labels:\n  publishers: { acme: [GOLD] }\n",
                "labels.publishers.acme[0]: `GOLD` is not a label; the file may grant RIJKSOVERHEID or SUPPORT_9_TO_17",
            ),
            (
                "labels:\n  publishers: { Acme: [RIJKSOVERHEID] }\n",
                "labels.publishers.Acme: `Acme` is not a publisher name",
            ),
            (
                "labels:\n  plugins: { foo: [RIJKSOVERHEID] }\n",
                "labels.plugins.foo: `foo` is not a plugin",
            ),
            ("labels:\n  teams: {}\n", "teams"),
            ("colours: [red]\n", "colours"),
        ] {
            let err = Curation::parse(text).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn core_cannot_be_granted() {
        for (text, field) in [
            (
                "labels:\n  publishers: { acme: [CORE] }\n",
                "labels.publishers.acme[0]",
            ),
            (
                "labels:\n  plugins: { \"acme/foo\": [RIJKSOVERHEID, CORE] }\n",
                "labels.plugins.acme/foo[1]",
            ),
        ] {
            let err = Curation::parse(text).unwrap_err();
            assert!(
                err.starts_with(&format!("{field}: CORE cannot be granted")),
                "{err}"
            );
        }
    }

    #[test]
    fn files_are_read_with_a_size_limit() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.yaml");
        std::fs::write(&big, vec![b'#'; MAX_CURATION_BYTES as usize + 1]).unwrap();
        assert!(matches!(
            Curation::load(&big),
            Err(CurationError::TooLarge(_))
        ));
        let bad = dir.path().join("bad.yaml");
        std::fs::write(&bad, "featured: [nope]\n").unwrap();
        let err = Curation::load(&bad).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("{}: featured[0]", bad.display())),
            "{err}"
        );
        assert!(matches!(
            Curation::load(&dir.path().join("missing.yaml")),
            Err(CurationError::Read(..))
        ));
    }
}
