//! The marketplace's own metadata about a plugin version, which Fundament's definition
//! has no fields for: dependencies, suggested plugins and the cluster capabilities it
//! needs. It travels *beside* the definition, never inside it.
//!
//! The publisher writes it as a companion document (`kind: PluginExtras`, parsed here
//! with the definitions' strictness) and signs it in the version's TUF target, as
//! `custom.extras` ([`Extras::from_custom`] reads it back, as strictly, because a
//! remote marketplace's metadata is input like any other).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::validate::{MAX_LIST, identifier_problem, label_problem};
use super::yaml::{self, MAX_YAML_BYTES};
use super::{InvalidDefinition, Located, Position, Problem};

pub const EXTRAS_API_VERSION: &str = "marketplace.fundament.io/v1";
pub const EXTRAS_KIND: &str = "PluginExtras";

/// How a companion document's file is named beside its definition's `NAME.yaml`:
/// `NAME.extras.yaml` (the built-in catalog, `marketplace validate`).
pub const EXTRAS_FILE_SUFFIX: &str = ".extras.yaml";

/// A companion document is a few lines; this is far more than any needs.
pub const MAX_EXTRAS_BYTES: usize = 64 * 1024;
// The YAML parser's own budgets are sized for definitions, which are larger.
const _: () = assert!(MAX_EXTRAS_BYTES <= MAX_YAML_BYTES);

/// What the marketplace says of a version beyond the definition. Empty when the
/// publisher wrote no companion.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Extras {
    /// Plugins to install first (names; ordered by install plans, never enforced).
    #[serde(default)]
    pub dependencies: Vec<String>,
    /// Plugins that work well with this one.
    #[serde(default)]
    pub suggested_plugins: Vec<String>,
    /// What the cluster must offer (`storageClass`, `volumeSnapshots`, ...).
    #[serde(default)]
    pub cluster_capabilities: Vec<String>,
}

/// The companion document as a publisher writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Document {
    api_version: Located<String>,
    kind: Located<String>,
    /// The `metadata.name` of the definition it goes with.
    plugin: Located<String>,
    #[serde(default)]
    dependencies: Option<Vec<Located<String>>>,
    #[serde(default)]
    suggested_plugins: Option<Vec<Located<String>>>,
    #[serde(default)]
    cluster_capabilities: Option<Vec<Located<String>>>,
}

/// A parsed companion document: which plugin it is for, and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtrasDocument {
    pub plugin: String,
    pub extras: Extras,
}

impl Extras {
    pub fn is_empty(&self) -> bool {
        self == &Extras::default()
    }

    /// Parses and validates a companion document (YAML), with every problem named by
    /// field and line like a definition's.
    pub fn parse_document(bytes: &[u8]) -> Result<ExtrasDocument, InvalidDefinition> {
        let whole = |msg: String| InvalidDefinition::one(Problem::at("", None, msg));
        if bytes.len() > MAX_EXTRAS_BYTES {
            return Err(whole(format!(
                "companion document is {} bytes; the limit is {MAX_EXTRAS_BYTES} bytes",
                bytes.len()
            )));
        }
        let text = std::str::from_utf8(bytes)
            .map_err(|_| whole("companion document is not valid UTF-8".into()))?;
        let doc: Document = yaml::deserialize(text).map_err(|failed| {
            let (err, path) = *failed;
            let pos = err.location().and_then(|l| {
                (l.line() > 0).then(|| Position {
                    line: l.line(),
                    column: l.column(),
                })
            });
            InvalidDefinition::one(Problem::at(
                super::parse::clean_path(&path),
                pos,
                yaml::message(&err, "a PluginExtras document"),
            ))
        })?;
        let mut problems = Vec::new();
        let mut add = |path: String, at: Position, message: String| {
            problems.push(Problem::at(path, Some(at), message));
        };
        if doc.api_version.as_str() != EXTRAS_API_VERSION {
            add(
                "apiVersion".into(),
                doc.api_version.position(),
                format!(
                    "must be `{EXTRAS_API_VERSION}`, found `{}`",
                    doc.api_version.escape_debug()
                ),
            );
        }
        if doc.kind.as_str() != EXTRAS_KIND {
            add(
                "kind".into(),
                doc.kind.position(),
                format!(
                    "must be `{EXTRAS_KIND}`, found `{}`",
                    doc.kind.escape_debug()
                ),
            );
        }
        if let Some(message) = label_problem(&doc.plugin, "plugin name", 63) {
            add("plugin".into(), doc.plugin.position(), message);
        }
        let lists = [
            ("dependencies", &doc.dependencies),
            ("suggestedPlugins", &doc.suggested_plugins),
            ("clusterCapabilities", &doc.cluster_capabilities),
        ];
        for (field, list) in lists {
            for (path, at, message) in
                list_problems(field, list.as_deref().unwrap_or(&[]), &doc.plugin)
            {
                add(path, at, message);
            }
        }
        if !problems.is_empty() {
            problems.sort_by_key(|p| (p.line, p.column));
            return Err(InvalidDefinition { problems });
        }
        let strings = |list: Option<Vec<Located<String>>>| {
            list.unwrap_or_default()
                .into_iter()
                .map(|s| s.value)
                .collect()
        };
        Ok(ExtrasDocument {
            plugin: doc.plugin.value,
            extras: Extras {
                dependencies: strings(doc.dependencies),
                suggested_plugins: strings(doc.suggested_plugins),
                cluster_capabilities: strings(doc.cluster_capabilities),
            },
        })
    }

    /// Reads `custom.extras` of a signed target for plugin `plugin`: the same rules as a
    /// companion document, the first broken one named.
    pub fn from_custom(value: &serde_json::Value, plugin: &str) -> Result<Extras, String> {
        let extras: Extras = serde_json::from_value(value.clone())
            .map_err(|e| format!("custom.extras is malformed: {e}"))?;
        extras
            .check(plugin)
            .map_err(|(path, message)| format!("custom.extras.{path}: {message}"))?;
        Ok(extras)
    }

    /// The rules of a companion document, for extras that come without positions.
    pub fn check(&self, plugin: &str) -> Result<(), (String, String)> {
        let located = |list: &[String]| -> Vec<Located<String>> {
            list.iter()
                .map(|s| Located {
                    value: s.clone(),
                    line: 0,
                    column: 0,
                })
                .collect()
        };
        let own = Located {
            value: plugin.to_owned(),
            line: 0,
            column: 0,
        };
        for (field, list) in [
            ("dependencies", &self.dependencies),
            ("suggestedPlugins", &self.suggested_plugins),
            ("clusterCapabilities", &self.cluster_capabilities),
        ] {
            if let Some((path, _, message)) = list_problems(field, &located(list), &own)
                .into_iter()
                .next()
            {
                return Err((path, message));
            }
        }
        Ok(())
    }
}

/// Plugin names (dependencies, suggestions) or capability identifiers: each valid, each
/// once, never the plugin itself, at most [`MAX_LIST`].
fn list_problems(
    field: &str,
    list: &[Located<String>],
    own: &Located<String>,
) -> Vec<(String, Position, String)> {
    let mut out = Vec::new();
    if list.len() > MAX_LIST {
        out.push((
            field.to_owned(),
            list[MAX_LIST].position(),
            format!("lists hold at most {MAX_LIST} entries"),
        ));
    }
    let mut seen = HashSet::new();
    for (i, item) in list.iter().enumerate() {
        let path = format!("{field}[{i}]");
        let problem = if field == "clusterCapabilities" {
            identifier_problem(item)
        } else if item.as_str() == own.as_str() {
            Some("a plugin cannot list itself".to_owned())
        } else {
            label_problem(item, "plugin name", 63)
        };
        if let Some(message) = problem {
            out.push((path, item.position(), message));
        } else if !seen.insert(item.as_str()) {
            out.push((
                path,
                item.position(),
                format!("`{}` is listed twice", item.escape_debug()),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(body: &str) -> String {
        format!(
            "apiVersion: marketplace.fundament.io/v1\nkind: PluginExtras\nplugin: backup\n{body}"
        )
    }

    #[test]
    fn a_companion_document_reads_into_extras() {
        let parsed = Extras::parse_document(
            doc("dependencies: [object-storage]\nsuggestedPlugins: [observability]\nclusterCapabilities: [volumeSnapshots]\n")
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(parsed.plugin, "backup");
        assert_eq!(parsed.extras.dependencies, ["object-storage"]);
        assert_eq!(parsed.extras.suggested_plugins, ["observability"]);
        assert_eq!(parsed.extras.cluster_capabilities, ["volumeSnapshots"]);
    }

    #[test]
    fn problems_name_the_field_and_line() {
        let err = Extras::parse_document(
            doc("dependencies: [backup, Object_Storage, db, db]\nclusterCapabilities: ['has space']\n")
                .as_bytes(),
        )
        .unwrap_err();
        let got: Vec<String> = err.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "4:16: dependencies[0]: a plugin cannot list itself",
                "4:24: dependencies[1]: plugin name `Object_Storage` must be a DNS-1123 label: lowercase letters, digits and `-`, starting and ending with a letter or digit",
                "4:44: dependencies[3]: `db` is listed twice",
                "5:23: clusterCapabilities[0]: capability names are 1-63 letters, digits, `_` or `-`",
            ]
        );
    }

    #[test]
    fn unknown_fields_and_wrong_headers_are_refused() {
        let err = Extras::parse_document(doc("requires: [x]\n").as_bytes()).unwrap_err();
        assert_eq!(err.problems[0].line, Some(4));
        assert!(
            err.problems[0].message.contains("unknown field `requires`"),
            "{err}"
        );
        let err = Extras::parse_document(
            b"apiVersion: fundament.io/v1\nkind: PluginDefinition\nplugin: x\n",
        )
        .unwrap_err();
        let paths: Vec<&str> = err.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, ["apiVersion", "kind"]);
    }

    #[test]
    fn custom_extras_are_checked_like_a_document() {
        let good = serde_json::json!({"dependencies": ["db"], "suggestedPlugins": [], "clusterCapabilities": ["storageClass"]});
        assert_eq!(
            Extras::from_custom(&good, "app").unwrap().dependencies,
            ["db"]
        );
        let own = serde_json::json!({"dependencies": ["app"]});
        assert_eq!(
            Extras::from_custom(&own, "app").unwrap_err(),
            "custom.extras.dependencies[0]: a plugin cannot list itself"
        );
        let unknown = serde_json::json!({"dependencies": [], "requires": []});
        assert!(
            Extras::from_custom(&unknown, "app")
                .unwrap_err()
                .contains("unknown field `requires`")
        );
    }
}
