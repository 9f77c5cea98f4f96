//! The typed shape of a `fundament.io/v1` `PluginDefinition`.
//!
//! Every struct refuses unknown fields; positions are kept (through [`Located`]) on the
//! values that validation may complain about, so a problem can name its line and column.

use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_saphyr::Spanned;

pub const API_VERSION: &str = "fundament.io/v1";
pub const KIND: &str = "PluginDefinition";

/// A value with the line and column (1-based) where it was written.
///
/// Derefs to the value and serializes as the bare value, so the rest of the program can
/// ignore positions.
#[derive(Clone, PartialEq, Eq)]
pub struct Located<T> {
    pub value: T,
    pub line: u64,
    pub column: u64,
}

impl<T> Located<T> {
    pub fn position(&self) -> Position {
        Position {
            line: self.line,
            column: self.column,
        }
    }
}

impl<T> Deref for Located<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: fmt::Debug> fmt::Debug for Located<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.value.fmt(f)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Located<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let spanned = Spanned::<T>::deserialize(d)?;
        Ok(Located {
            line: spanned.referenced.line(),
            column: spanned.referenced.column(),
            value: spanned.value,
        })
    }
}

impl<T: Serialize> Serialize for Located<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(s)
    }
}

/// A 1-based line and column in the definition's source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Position {
    pub line: u64,
    pub column: u64,
}

/// Accepts `key:` with no value (YAML null) as an empty list: authors write that for
/// "none", and refusing it would buy no safety.
fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Manifest {
    pub api_version: Located<String>,
    pub kind: Located<String>,
    pub metadata: Metadata,
    pub spec: Spec,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Metadata {
    pub name: Located<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<Located<String>>,
    pub version: Located<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<Located<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<Located<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<Located<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon: Option<Located<String>>,
    #[serde(default)]
    pub urls: Urls,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub tags: Vec<Located<String>>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Urls {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub homepage: Option<Located<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<Located<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation: Option<Located<String>>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Spec {
    #[serde(default)]
    pub permissions: Permissions,
    #[serde(default)]
    pub requirements: Requirements,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub dependencies: Vec<Located<String>>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub suggested_plugins: Vec<Located<String>>,
    #[serde(default)]
    pub menu: Menu,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub crds: Vec<Located<String>>,
    /// Console rendering hints; opaque to the marketplace and preserved as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ui_hints: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_components: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_resources: Option<serde_json::Value>,
    pub image: Located<String>,
    #[serde(default)]
    pub image_pull_policy: ImagePullPolicy,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Permissions {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub capabilities: Vec<Located<String>>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub rbac: Vec<Located<PolicyRule>>,
}

/// A Kubernetes RBAC `PolicyRule`, with Kubernetes' own field names.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicyRule {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub api_groups: Vec<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub resources: Vec<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub verbs: Vec<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub resource_names: Vec<String>,
    #[serde(
        default,
        rename = "nonResourceURLs",
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

/// What an organization admin must approve before the plugin is installed, as written.
/// `spec.permissions.capabilities` can imply the same needs; the effective summary is
/// [`super::Approval`], never these fields alone.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Requirements {
    /// `None` when not written. Validation must tell an explicit `false` (which
    /// contradicts a capability declaring the need) from silence (which does not).
    #[serde(
        default,
        deserialize_with = "present",
        serialize_with = "absent_as_false"
    )]
    pub internet_access: Option<Located<bool>>,
    #[serde(
        default,
        deserialize_with = "present",
        serialize_with = "absent_as_false"
    )]
    pub kube_system_deployment: Option<Located<bool>>,
    #[serde(
        default,
        deserialize_with = "present",
        serialize_with = "absent_as_false"
    )]
    pub privileged: Option<Located<bool>>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub capabilities: Vec<Located<String>>,
}

/// A written requirement must be a boolean: `internetAccess:` with no value (null) stays
/// the type error it always was instead of passing as "not written".
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Located<bool>>, D::Error> {
    Located::deserialize(d).map(Some)
}

/// Serializes an unwritten requirement as `false`, as it was before the field could be
/// absent, so the JSON API's `manifest` keeps its shape.
fn absent_as_false<S: Serializer>(v: &Option<Located<bool>>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bool(v.as_ref().is_some_and(|b| b.value))
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Menu {
    /// `cluster` is the seed format's older name for the same list.
    #[serde(default, alias = "cluster", deserialize_with = "null_as_empty")]
    pub organization: Vec<MenuEntry>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub project: Vec<MenuEntry>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MenuEntry {
    pub crd: Located<String>,
    #[serde(default)]
    pub list: bool,
    #[serde(default)]
    pub detail: bool,
    #[serde(default)]
    pub edit: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub enum ImagePullPolicy {
    /// Not set: Kubernetes picks the default for a digest-pinned image.
    #[default]
    #[serde(rename = "")]
    Unset,
    Always,
    IfNotPresent,
    Never,
}

impl ImagePullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ImagePullPolicy::Unset => "",
            ImagePullPolicy::Always => "Always",
            ImagePullPolicy::IfNotPresent => "IfNotPresent",
            ImagePullPolicy::Never => "Never",
        }
    }
}
