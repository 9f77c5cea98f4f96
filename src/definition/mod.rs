//! Plugin Definitions: the model, strict parsing and validation.
//!
//! The model is Fundament's own schema (`model`), parsed at least as strictly as
//! Fundament parses it. Every entry point of new input (CLI, HTTP, built-in catalog)
//! turns bytes into a [`Definition`] through [`Definition::parse`] and nothing else, so
//! all of them apply the same rules; bytes already published are read back with
//! [`Definition::parse_published`], which keeps the older design's fields as findings
//! (`legacy`). The marketplace's own metadata travels beside a definition (`extras`).
//! This module does no I/O.

mod approval;
pub mod edit;
mod extras;
mod image;
mod legacy;
mod model;
mod parse;
mod validate;
pub(crate) mod yaml;

use std::fmt;

use serde::Serialize;
use sha2::{Digest, Sha256};

pub use approval::{APPROVAL_CAPABILITIES, Approval, Need};
pub use extras::{
    EXTRAS_API_VERSION, EXTRAS_FILE_SUFFIX, EXTRAS_KIND, Extras, ExtrasDocument, MAX_EXTRAS_BYTES,
};
pub use image::{ImageRef, ImageRefError};
pub use legacy::LegacyField;
pub use model::*;
pub use parse::MAX_DEFINITION_BYTES;
pub use validate::MAX_PLUGIN_NAME;

/// The publisher name of the built-in definitions compiled into the binary. Reserved:
/// no one else may register it. Here, not in `catalog`, because the server and client
/// sides of the signed index, the catalog and the sync worker all need it.
pub const BUILTIN_PUBLISHER: &str = "fundament";

/// One thing wrong with a definition, pointing at where it was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Field path such as `spec.permissions.rbac[1].verbs`; empty for the whole document.
    pub path: String,
    /// Where the problem was found, when the parser could tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<u64>,
    pub message: String,
}

impl Problem {
    pub(crate) fn at(
        path: impl Into<String>,
        pos: Option<Position>,
        message: impl Into<String>,
    ) -> Self {
        Problem {
            // Paths can hold a hostile key name, so they are escaped like messages.
            path: sanitize(&path.into()),
            line: pos.map(|p| p.line),
            column: pos.map(|p| p.column),
            message: sanitize(&message.into()),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (Some(line), Some(column)) = (self.line, self.column) {
            write!(f, "{line}:{column}: ")?;
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

/// Messages can quote the author's input; control characters are escaped so a hostile
/// file cannot rewrite a terminal or a log line.
fn sanitize(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_owned();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A definition was refused; every problem found is listed.
#[derive(Debug, Clone, thiserror::Error, Serialize)]
#[error("invalid plugin definition: {}", .problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct InvalidDefinition {
    pub problems: Vec<Problem>,
}

impl InvalidDefinition {
    pub(crate) fn one(problem: Problem) -> Self {
        InvalidDefinition {
            problems: vec![problem],
        }
    }
}

/// A parsed and validated definition, with the exact bytes it came from, and the
/// marketplace's own metadata signed beside it.
#[derive(Debug, Clone)]
pub struct Definition {
    pub manifest: Manifest,
    /// The published bytes, unchanged: the hash pins these, not a re-serialization.
    pub bytes: Vec<u8>,
    /// `sha256:<hex>` of [`Self::bytes`].
    pub hash: String,
    pub version: semver::Version,
    pub image: ImageRef,
    /// Dependencies, suggestions and cluster capabilities: signed beside the definition
    /// (a TUF target's `custom.extras`), not covered by [`Self::hash`]. Empty until
    /// [`Definition::with_extras`] sets them, except on a definition of the older design,
    /// whose own fields say them.
    pub extras: Extras,
    /// Fields of the older design this definition carries, each naming its replacement:
    /// Fundament cannot install it. Always empty from [`Definition::parse`].
    pub legacy: Vec<Problem>,
}

impl Definition {
    /// Parses and validates new input (publish, sideload, built-in, `validate`): exactly
    /// Fundament's schema plus the marketplace's own rules. A field of the older design
    /// is refused with its replacement named.
    ///
    /// ```
    /// use marketplace::definition::Definition;
    ///
    /// let yaml = "apiVersion: fundament.io/v1
    /// kind: PluginDefinition
    /// metadata: { name: hello, version: v1.2.3 }
    /// spec:
    ///   image: ghcr.io/example/hello@sha256:0000000000000000000000000000000000000000000000000000000000000000
    /// ";
    /// let def = Definition::parse(yaml.as_bytes()).unwrap();
    /// assert_eq!(def.namespace(), "plugin-hello");
    /// assert!(def.hash.starts_with("sha256:"));
    ///
    /// let err = Definition::parse(yaml.replace("@sha256:", ":v1#").as_bytes()).unwrap_err();
    /// assert_eq!(err.problems[0].path, "spec.image");
    /// assert_eq!(err.problems[0].line, Some(5));
    ///
    /// let old = yaml.replace("spec:\n", "spec:\n  dependencies: [db]\n");
    /// let err = Definition::parse(old.as_bytes()).unwrap_err();
    /// assert_eq!(err.problems[0].path, "spec.dependencies");
    /// ```
    pub fn parse(bytes: &[u8]) -> Result<Definition, InvalidDefinition> {
        let def = Self::read(bytes, false)?;
        if !def.legacy.is_empty() {
            return Err(InvalidDefinition {
                problems: def.legacy,
            });
        }
        Ok(def)
    }

    /// Parses a definition that is already published (immutable, served as signed):
    /// everything [`Definition::parse`] checks, except that fields of the older design
    /// are kept as [`Definition::legacy`] findings instead of refused. Only for bytes
    /// the marketplace or a worker already holds, never for new input.
    pub fn parse_published(bytes: &[u8]) -> Result<Definition, InvalidDefinition> {
        Self::read(bytes, true)
    }

    fn read(bytes: &[u8], published: bool) -> Result<Definition, InvalidDefinition> {
        let (manifest, mut legacy) = parse::parse_manifest(bytes, published)?;
        let (mut problems, parsed) = validate::validate(&manifest);
        legacy.extend(legacy::findings(&manifest));
        legacy.sort_by_key(|x| (x.line, x.column));
        let Some((version, image)) = parsed.filter(|_| problems.is_empty()) else {
            // Legacy findings belong in the same list, in file order: a new author fixes
            // them all in one pass.
            problems.extend(legacy);
            problems.sort_by_key(|x| (x.line, x.column));
            return Err(InvalidDefinition { problems });
        };
        let extras = legacy_extras(&manifest.spec);
        Ok(Definition {
            hash: definition_hash(bytes),
            bytes: bytes.to_vec(),
            manifest,
            version,
            image,
            extras,
            legacy,
        })
    }

    /// The definition with the extras its publisher signed beside it, checked against
    /// it (no plugin lists itself).
    pub fn with_extras(mut self, extras: Extras) -> Result<Definition, InvalidDefinition> {
        extras.check(self.name()).map_err(|(path, message)| {
            InvalidDefinition::one(Problem::at(format!("extras.{path}"), None, message))
        })?;
        self.extras = extras;
        Ok(self)
    }

    /// The definition with a companion document's extras, which must name this plugin.
    pub fn with_companion(self, doc: ExtrasDocument) -> Result<Definition, InvalidDefinition> {
        if doc.plugin != self.name() {
            return Err(InvalidDefinition::one(Problem::at(
                "plugin",
                None,
                format!(
                    "the companion document is for plugin `{}`, but the definition is `{}`",
                    doc.plugin,
                    self.name()
                ),
            )));
        }
        self.with_extras(doc.extras)
    }

    /// `None` when Fundament can install this definition; otherwise the fields of the
    /// older design that keep it from doing so, for pages, APIs and logs
    /// (`spec.requirements.internetAccess, spec.dependencies`).
    pub fn not_installable(&self) -> Option<String> {
        if self.legacy.is_empty() {
            return None;
        }
        let mut fields: Vec<&str> = Vec::new();
        for p in &self.legacy {
            if !fields.contains(&p.path.as_str()) {
                fields.push(&p.path);
            }
        }
        Some(fields.join(", "))
    }

    pub fn name(&self) -> &str {
        &self.manifest.metadata.name
    }

    pub fn display_name(&self) -> &str {
        self.manifest
            .metadata
            .display_name
            .as_deref()
            .map_or(self.name(), String::as_str)
    }

    pub fn description(&self) -> &str {
        self.manifest
            .metadata
            .description
            .as_deref()
            .map_or("", String::as_str)
    }

    /// The version as the author wrote it (`v1.19.3`).
    pub fn version_text(&self) -> &str {
        &self.manifest.metadata.version
    }

    /// What an admin approves before install: what `spec.permissions.capabilities`
    /// declares. Every consumer reads this, never the list alone.
    pub fn approval(&self) -> Approval {
        Approval::of(&self.manifest.spec)
    }

    pub fn tags(&self) -> impl Iterator<Item = &str> {
        self.manifest.metadata.tags.iter().map(|t| t.as_str())
    }

    /// The namespace Fundament installs the plugin into.
    pub fn namespace(&self) -> String {
        install_namespace(self.name())
    }
}

/// What a definition of the older design said in its own fields, for the places that
/// show dependencies and cluster capabilities; empty for any other definition.
fn legacy_extras(spec: &Spec) -> Extras {
    let names = |list: &Option<Located<Vec<Located<String>>>>| -> Vec<String> {
        list.as_ref()
            .map(|l| l.iter().map(|s| s.value.clone()).collect())
            .unwrap_or_default()
    };
    Extras {
        dependencies: names(&spec.dependencies),
        suggested_plugins: names(&spec.suggested_plugins),
        cluster_capabilities: spec
            .requirements
            .as_ref()
            .and_then(|r| r.capabilities.as_ref())
            .map(|c| c.iter().map(|s| s.value.clone()).collect())
            .unwrap_or_default(),
    }
}

/// Fundament's plugin controller installs plugin `name` into namespace `plugin-<name>`.
pub fn install_namespace(name: &str) -> String {
    format!("plugin-{name}")
}

/// The consent pin of a definition: `sha256:` + hex digest of the exact bytes.
pub fn definition_hash(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Parses a version with an optional leading `v`, as definitions write it.
pub fn parse_version(text: &str) -> Result<semver::Version, semver::Error> {
    semver::Version::parse(text.strip_prefix('v').unwrap_or(text))
}

/// A DNS-1123 label: lowercase alphanumerics and `-`, starting and ending alphanumeric,
/// at most 63 characters. Plugin, dependency and tag names all follow it (plugin names
/// at most [`MAX_PLUGIN_NAME`]).
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}
