//! The typed shape of a `fundament.io/v1` `PluginDefinition`: Fundament's own schema,
//! field for field (`fundament-contracts.md`, "The Plugin Definition as Fundament parses
//! it").
//!
//! Every struct refuses unknown fields, as Fundament's parser does at every level.
//! Fields of the marketplace's older design (`spec.requirements`, menu `edit`, ...) are
//! still *recognized* here, in [`super::legacy`]'s types, so that validation can name
//! their replacement instead of a bare "unknown field", and so that a definition
//! published before they were retired can still be read and shown. Positions are kept
//! (through [`Located`]) on the values that validation may complain about, so a problem
//! can name its line and column.

use std::fmt;
use std::ops::Deref;

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_saphyr::Spanned;

use super::legacy::{LegacyField, Requirements};

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

/// Accepts `key:` with no value (YAML null) as an empty list, as Fundament's decoder
/// does (a nil slice): authors write that for "none".
pub(super) fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
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
    pub menu: Menu,
    /// Keyed by a free name (Fundament's own definitions use the resource's kind).
    #[serde(default)]
    pub custom_components: Entries<ComponentMapping>,
    /// Keyed by CRD name.
    #[serde(default)]
    pub ui_hints: UiHints,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub crds: Vec<Located<String>>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub allowed_resources: Vec<Located<AllowedResource>>,
    pub image: Located<String>,
    #[serde(default)]
    pub image_pull_policy: ImagePullPolicy,

    // The older design's fields (not Fundament's): recognized so that they are refused
    // with their replacement named, or marked on a definition published before.
    #[serde(default, skip_serializing)]
    pub requirements: Option<Located<Requirements>>,
    #[serde(default, skip_serializing)]
    pub dependencies: Option<Located<Vec<Located<String>>>>,
    #[serde(default, skip_serializing)]
    pub suggested_plugins: Option<Located<Vec<Located<String>>>>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Permissions {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub capabilities: Vec<Located<String>>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub rbac: Vec<Located<PolicyRule>>,
}

/// A Kubernetes RBAC `PolicyRule` as Fundament's definition has it: no
/// `nonResourceURLs` (a plugin's rules are about resources).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicyRule {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub api_groups: Vec<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub resources: Vec<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub verbs: Vec<String>,
    /// Empty: every object of the resources.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub resource_names: Vec<String>,
    #[serde(default, rename = "nonResourceURLs", skip_serializing)]
    pub non_resource_urls: LegacyField,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Menu {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub organization: Vec<MenuEntry>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub project: Vec<MenuEntry>,
    /// The older design's name for a cluster-wide list; Fundament has none.
    #[serde(default, skip_serializing)]
    pub cluster: LegacyField,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MenuEntry {
    pub crd: Located<String>,
    #[serde(default)]
    pub list: bool,
    #[serde(default)]
    pub detail: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing)]
    pub edit: LegacyField,
}

/// The console's own components for one resource, by file name.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ComponentMapping {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<Located<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Located<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create: Option<Located<String>>,
    #[serde(default, skip_serializing)]
    pub edit: LegacyField,
    #[serde(default, skip_serializing)]
    pub actions: LegacyField,
}

/// How the console shows one CRD: form groups and a status badge.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UiHint {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub form_groups: Vec<Located<FormGroup>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_mapping: Option<Located<StatusMapping>>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FormGroup {
    #[serde(default)]
    pub name: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub fields: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StatusMapping {
    #[serde(default)]
    pub json_path: String,
    /// Keyed by the value found at `jsonPath` (`"True"`, `"Active"`).
    #[serde(default)]
    pub values: Entries<StatusValue>,
    /// Shown when the value matches none of `values`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<StatusValue>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StatusValue {
    #[serde(default)]
    pub badge: String,
    #[serde(default)]
    pub label: String,
}

/// A resource the plugin's UI may use through the console.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AllowedResource {
    /// `""` is the core group.
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub resource: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub verbs: Vec<String>,
    /// The older design wrote `apiGroup` and `kinds` instead.
    #[serde(default, rename = "apiGroup", skip_serializing)]
    pub api_group: LegacyField,
    #[serde(default, skip_serializing)]
    pub kinds: LegacyField,
}

/// A YAML mapping with string keys, in the order written, each value with its position.
///
/// Keys are plain strings (a located key would hide its name from the error path that
/// names a failing field); problems about a key point at its value.
#[derive(Debug, Clone)]
pub struct Entries<V>(pub Vec<(String, Located<V>)>);

impl<V> Default for Entries<V> {
    fn default() -> Self {
        Entries(Vec::new())
    }
}

impl<V> Entries<V> {
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(k, v)| (k.as_str(), &v.value))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Entries<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EntriesVisitor<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for EntriesVisitor<V> {
            type Value = Entries<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(Entries::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    entries.push((key, map.next_value()?));
                }
                Ok(Entries(entries))
            }
        }
        d.deserialize_any(EntriesVisitor(std::marker::PhantomData))
    }
}

impl<V: Serialize> Serialize for Entries<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k.as_str(), &v.value)))
    }
}

/// `spec.uiHints`: [`UiHint`]s by CRD name. The older design's shape (`columns` and
/// `formOrder`, each keyed by CRD) is recognized by those two keys, which no CRD name
/// can be (CRD names have a dot).
#[derive(Debug, Clone, Default)]
pub struct UiHints {
    pub entries: Entries<UiHint>,
    /// `columns` or `formOrder` keys of the older design, with their values' positions.
    pub legacy: Vec<(String, Position)>,
}

pub const LEGACY_UI_HINT_KEYS: [&str; 2] = ["columns", "formOrder"];

impl<'de> Deserialize<'de> for UiHints {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct HintsVisitor;
        impl<'de> Visitor<'de> for HintsVisitor {
            type Value = UiHints;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping of CRD names to UI hints")
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(UiHints::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut hints = UiHints::default();
                while let Some(key) = map.next_key::<String>()? {
                    if LEGACY_UI_HINT_KEYS.contains(&key.as_str()) {
                        let at = map.next_value::<Located<IgnoredAny>>()?;
                        hints.legacy.push((key, at.position()));
                    } else {
                        hints.entries.0.push((key, map.next_value()?));
                    }
                }
                Ok(hints)
            }
        }
        d.deserialize_any(HintsVisitor)
    }
}

impl Serialize for UiHints {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.entries.serialize(s)
    }
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
