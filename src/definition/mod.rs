//! Plugin Definitions: the model, strict parsing and validation.
//!
//! Every entry point (CLI, HTTP, built-in catalog) turns bytes into a [`Definition`]
//! through [`Definition::parse`] and nothing else, so all of them apply the same rules.
//! This module does no I/O.

mod approval;
mod image;
mod model;
mod parse;
mod validate;
pub(crate) mod yaml;

use std::fmt;

use serde::Serialize;
use sha2::{Digest, Sha256};

pub use approval::{APPROVAL_CAPABILITIES, Approval, Need};
pub use image::{ImageRef, ImageRefError};
pub use model::*;
pub use parse::MAX_DEFINITION_BYTES;

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

/// A parsed and validated definition, with the exact bytes it came from.
#[derive(Debug, Clone)]
pub struct Definition {
    pub manifest: Manifest,
    /// The published bytes, unchanged: the hash pins these, not a re-serialization.
    pub bytes: Vec<u8>,
    /// `sha256:<hex>` of [`Self::bytes`].
    pub hash: String,
    pub version: semver::Version,
    pub image: ImageRef,
}

impl Definition {
    /// Parses and validates; the only way to obtain a `Definition`.
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
    /// assert_eq!(def.namespace(), "plugin-hello-v1");
    /// assert!(def.hash.starts_with("sha256:"));
    ///
    /// let err = Definition::parse(yaml.replace("@sha256:", ":v1#").as_bytes()).unwrap_err();
    /// assert_eq!(err.problems[0].path, "spec.image");
    /// assert_eq!(err.problems[0].line, Some(5));
    /// ```
    pub fn parse(bytes: &[u8]) -> Result<Definition, InvalidDefinition> {
        let manifest = parse::parse_manifest(bytes)?;
        let (version, image) = validate::validate(&manifest)?;
        Ok(Definition {
            hash: definition_hash(bytes),
            bytes: bytes.to_vec(),
            manifest,
            version,
            image,
        })
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

    /// What an admin approves before install: `spec.requirements` together with what
    /// `spec.permissions.capabilities` implies. Every consumer reads this, never
    /// `spec.requirements` alone.
    pub fn approval(&self) -> Approval {
        Approval::of(&self.manifest.spec)
    }

    pub fn tags(&self) -> impl Iterator<Item = &str> {
        self.manifest.metadata.tags.iter().map(|t| t.as_str())
    }

    /// The namespace a plugin installs into; an upgrade stays within one major version,
    /// so each major gets its own namespace.
    pub fn namespace(&self) -> String {
        install_namespace(self.name(), self.version.major)
    }
}

pub fn install_namespace(name: &str, major: u64) -> String {
    format!("plugin-{name}-v{major}")
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
/// at most 63 characters. Plugin, dependency and tag names all follow it.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}
