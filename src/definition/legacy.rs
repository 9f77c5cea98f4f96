//! Fields of the marketplace's older definition design, which Fundament's parser does
//! not have: recognized only to be named.
//!
//! A new definition (publish, sideload, built-in, `validate`) carrying one is refused
//! with its replacement named; a definition published before they were retired stays
//! readable and served as signed, marked "not installable by Fundament" with the same
//! findings ([`super::Definition::not_installable`]).

use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};

use super::model::null_as_empty;
use super::{
    Entries, ImagePullPolicy, Located, Manifest, Menu, Metadata, Permissions, Position, Problem,
    Spec, UiHints,
};

/// A field that is recognized only to be refused: where it was written, if it was.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LegacyField(pub Option<Position>);

impl<'de> Deserialize<'de> for LegacyField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let at = Located::<IgnoredAny>::deserialize(d)?;
        Ok(LegacyField(Some(at.position())))
    }
}

/// The older design's `spec.requirements`. Its booleans still count for what an admin
/// approves on a definition published with them ([`super::Approval`]); its
/// `capabilities` are the cluster capabilities now carried in the companion document.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Requirements {
    #[serde(default)]
    pub internet_access: Option<Located<bool>>,
    #[serde(default)]
    pub kube_system_deployment: Option<Located<bool>>,
    #[serde(default)]
    pub privileged: Option<Located<bool>>,
    #[serde(default)]
    pub capabilities: Option<Vec<Located<String>>>,
}

const MOVED_TO_EXTRAS: &str = "not part of a Fundament definition; list it in the plugin's companion document (PluginExtras, `marketplace publish --extras FILE`)";

/// Every field of the older design `m` carries, each as a problem at its position whose
/// message names the replacement.
pub(super) fn findings(m: &Manifest) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut add = |path: String, pos: Option<Position>, message: String| {
        out.push(Problem::at(path, pos, message));
    };
    let spec = &m.spec;
    if let Some(req) = &spec.requirements {
        let flags = [
            ("internetAccess", &req.internet_access, "internet_access"),
            (
                "kubeSystemDeployment",
                &req.kube_system_deployment,
                "kube_system_deployment",
            ),
            ("privileged", &req.privileged, "privileged"),
        ];
        let mut named = false;
        for (field, value, capability) in flags {
            if let Some(v) = value {
                named = true;
                add(
                    format!("spec.requirements.{field}"),
                    Some(v.position()),
                    format!(
                        "not part of a Fundament definition; declare {capability} in spec.permissions.capabilities"
                    ),
                );
            }
        }
        if let Some(caps) = &req.capabilities {
            named = true;
            add(
                "spec.requirements.capabilities".into(),
                caps.first().map(Located::position).or(Some(req.position())),
                format!("{MOVED_TO_EXTRAS} as clusterCapabilities"),
            );
        }
        if !named {
            add(
                "spec.requirements".into(),
                Some(req.position()),
                "not part of a Fundament definition; declare what an admin approves in spec.permissions.capabilities".into(),
            );
        }
    }
    for (field, list) in [
        ("dependencies", &spec.dependencies),
        ("suggestedPlugins", &spec.suggested_plugins),
    ] {
        if let Some(list) = list {
            add(
                format!("spec.{field}"),
                Some(list.position()),
                format!("{MOVED_TO_EXTRAS} as {field}"),
            );
        }
    }
    if let Some(pos) = spec.menu.cluster.0 {
        add(
            "spec.menu.cluster".into(),
            Some(pos),
            "not part of a Fundament definition; write organization (Fundament's menus are organization and project)".into(),
        );
    }
    for (section, entries) in [
        ("organization", &spec.menu.organization),
        ("project", &spec.menu.project),
    ] {
        for (i, e) in entries.iter().enumerate() {
            if let Some(pos) = e.edit.0 {
                add(
                    format!("spec.menu.{section}[{i}].edit"),
                    Some(pos),
                    "not part of a Fundament definition; menu entries have list and detail (a create form is a customComponents entry)".into(),
                );
            }
        }
    }
    for (key, pos) in &spec.ui_hints.legacy {
        add(
            format!("spec.uiHints.{key}"),
            Some(*pos),
            "the older shape of uiHints; Fundament keys uiHints by CRD name, each with formGroups and statusMapping".into(),
        );
    }
    for (name, c) in spec.custom_components.iter() {
        for (field, at) in [("edit", c.edit), ("actions", c.actions)] {
            if let Some(pos) = at.0 {
                add(
                    format!("spec.customComponents.{name}.{field}"),
                    Some(pos),
                    "not part of a Fundament definition; component mappings have list, detail and create".into(),
                );
            }
        }
    }
    for (i, r) in spec.allowed_resources.iter().enumerate() {
        for (field, at) in [("apiGroup", r.api_group), ("kinds", r.kinds)] {
            if let Some(pos) = at.0 {
                add(
                    format!("spec.allowedResources[{i}].{field}"),
                    Some(pos),
                    "the older shape of allowedResources; write group, version, resource and verbs"
                        .into(),
                );
            }
        }
    }
    for (i, r) in spec.permissions.rbac.iter().enumerate() {
        if let Some(pos) = r.non_resource_urls.0 {
            add(
                format!("spec.permissions.rbac[{i}].nonResourceURLs"),
                Some(pos),
                "not part of a Fundament definition; a plugin's rules name apiGroups, resources, verbs and resourceNames".into(),
            );
        }
    }
    out
}

/// The older design's field names, which the model recognizes only to refuse.
const NAMES: [&str; 9] = [
    "requirements",
    "dependencies",
    "suggestedPlugins",
    "cluster",
    "edit",
    "actions",
    "apiGroup",
    "kinds",
    "nonResourceURLs",
];

/// An "unknown field `x`, expected one of a, b" message without the older design's
/// names, which the model only recognizes to refuse: an author is never told to write
/// one of them.
pub(super) fn without_legacy_names(message: String) -> String {
    const EXPECTED: &str = ", expected one of ";
    let Some(at) = message
        .find(EXPECTED)
        .filter(|_| message.starts_with("unknown field"))
    else {
        return message;
    };
    let (head, list) = message.split_at(at + EXPECTED.len());
    let kept: Vec<&str> = list
        .split(", ")
        .filter(|name| !NAMES.contains(&name.trim_matches('`')))
        .collect();
    format!("{head}{}", kept.join(", "))
}

/// Whether an allowed resource is written in the older shape (its own checks then do
/// not apply: the finding already says what to write).
pub(super) fn is_legacy_allowed_resource(r: &super::AllowedResource) -> bool {
    r.api_group.0.is_some() || r.kinds.0.is_some()
}

/// A definition as the older design accepted it: Fundament's fields where they were
/// typed already, and `uiHints`, `customComponents` and `allowedResources` kept as
/// written, in any shape. Read only for bytes already published, when they do not fit
/// [`Manifest`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PublishedManifest {
    api_version: Located<String>,
    kind: Located<String>,
    metadata: Metadata,
    spec: PublishedSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PublishedSpec {
    #[serde(default)]
    permissions: Permissions,
    #[serde(default)]
    menu: Menu,
    #[serde(default)]
    custom_components: LegacyField,
    #[serde(default)]
    ui_hints: LegacyField,
    #[serde(default, deserialize_with = "null_as_empty")]
    crds: Vec<Located<String>>,
    #[serde(default)]
    allowed_resources: LegacyField,
    image: Located<String>,
    #[serde(default)]
    image_pull_policy: ImagePullPolicy,
    #[serde(default)]
    requirements: Option<Located<Requirements>>,
    #[serde(default)]
    dependencies: Option<Located<Vec<Located<String>>>>,
    #[serde(default)]
    suggested_plugins: Option<Located<Vec<Located<String>>>>,
}

/// `text` read as the older design accepted it, when Fundament's shapes do not fit it:
/// the manifest without its console fields, and a finding for each one left out.
pub(super) fn parse_published(text: &str) -> Option<(Manifest, Vec<Problem>)> {
    let m: PublishedManifest = super::yaml::deserialize(text).ok()?;
    let mut findings = Vec::new();
    for (field, at) in [
        ("uiHints", m.spec.ui_hints),
        ("customComponents", m.spec.custom_components),
        ("allowedResources", m.spec.allowed_resources),
    ] {
        if let Some(pos) = at.0 {
            findings.push(Problem::at(
                format!("spec.{field}"),
                Some(pos),
                format!(
                    "written in the older design's free form; Fundament's {field} has its own shape"
                ),
            ));
        }
    }
    let spec = m.spec;
    let manifest = Manifest {
        api_version: m.api_version,
        kind: m.kind,
        metadata: m.metadata,
        spec: Spec {
            permissions: spec.permissions,
            menu: spec.menu,
            custom_components: Entries::default(),
            ui_hints: UiHints::default(),
            crds: spec.crds,
            allowed_resources: Vec::new(),
            image: spec.image,
            image_pull_policy: spec.image_pull_policy,
            requirements: spec.requirements,
            dependencies: spec.dependencies,
            suggested_plugins: spec.suggested_plugins,
        },
    };
    Some((manifest, findings))
}
