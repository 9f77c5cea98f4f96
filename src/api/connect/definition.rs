//! A parsed definition as `organization.v1.PluginDefinition`: what Fundament's plugin
//! controller reads next to the exact bytes.
//!
//! The model is Fundament's schema, so every field has its place in the message except
//! two the contract has no field for: a rule's `resourceNames` and a status mapping's
//! `default` (they stay in `manifest`, which remains the authority).
//!
//! Layering: HTTP edge only; reads `definition`'s model.

use crate::definition::{
    AllowedResource, ComponentMapping, Definition, Located, MenuEntry, PolicyRule, StatusValue,
    UiHint,
};
use crate::proto::organization::v1 as pb;

pub fn to_proto(def: &Definition) -> pb::PluginDefinition {
    let m = &def.manifest.metadata;
    let spec = &def.manifest.spec;
    pb::PluginDefinition {
        metadata: pb::PluginDefinitionMetadata {
            name: def.name().to_owned(),
            display_name: text(&m.display_name),
            version: def.version_text().to_owned(),
            description: text(&m.description),
            author: text(&m.author),
            license: text(&m.license),
            icon: text(&m.icon),
            urls: pb::PluginURLs {
                homepage: text(&m.urls.homepage),
                repository: text(&m.urls.repository),
                documentation: text(&m.urls.documentation),
                ..Default::default()
            }
            .into(),
            tags: def.tags().map(str::to_owned).collect(),
            ..Default::default()
        }
        .into(),
        image: spec.image.value.clone(),
        image_pull_policy: spec.image_pull_policy.as_str().to_owned(),
        permissions: pb::PluginPermissions {
            capabilities: values(&spec.permissions.capabilities),
            rbac: spec.permissions.rbac.iter().map(|r| rule(r)).collect(),
            ..Default::default()
        }
        .into(),
        menu: pb::PluginMenu {
            organization: spec.menu.organization.iter().map(menu_entry).collect(),
            project: spec.menu.project.iter().map(menu_entry).collect(),
            ..Default::default()
        }
        .into(),
        crds: values(&spec.crds),
        custom_components: spec
            .custom_components
            .iter()
            .map(|(k, c)| (k.to_owned(), component(c)))
            .collect(),
        allowed_resources: spec
            .allowed_resources
            .iter()
            .map(|r| allowed_resource(r))
            .collect(),
        ui_hints: spec
            .ui_hints
            .entries
            .iter()
            .map(|(k, h)| (k.to_owned(), ui_hint(h)))
            .collect(),
        ..Default::default()
    }
}

fn text(v: &Option<Located<String>>) -> String {
    v.as_ref().map(|s| s.value.clone()).unwrap_or_default()
}

fn values(v: &[Located<String>]) -> Vec<String> {
    v.iter().map(|s| s.value.clone()).collect()
}

fn rule(r: &PolicyRule) -> pb::PluginPolicyRule {
    pb::PluginPolicyRule {
        api_groups: r.api_groups.clone(),
        resources: r.resources.clone(),
        verbs: r.verbs.clone(),
        ..Default::default()
    }
}

fn menu_entry(e: &MenuEntry) -> pb::PluginMenuEntry {
    pb::PluginMenuEntry {
        crd: e.crd.value.clone(),
        list: e.list,
        detail: e.detail,
        icon: e.icon.clone().unwrap_or_default(),
        label: e.label.clone().unwrap_or_default(),
        ..Default::default()
    }
}

fn component(c: &ComponentMapping) -> pb::PluginComponentMapping {
    pb::PluginComponentMapping {
        list: text(&c.list),
        detail: text(&c.detail),
        create: text(&c.create),
        ..Default::default()
    }
}

fn allowed_resource(r: &AllowedResource) -> pb::PluginAllowedResource {
    pb::PluginAllowedResource {
        group: r.group.clone(),
        version: r.version.clone(),
        resource: r.resource.clone(),
        verbs: r.verbs.clone(),
        ..Default::default()
    }
}

fn status_value(v: &StatusValue) -> pb::PluginStatusValue {
    pb::PluginStatusValue {
        badge: v.badge.clone(),
        label: v.label.clone(),
        ..Default::default()
    }
}

fn ui_hint(h: &UiHint) -> pb::PluginUIHint {
    pb::PluginUIHint {
        form_groups: h
            .form_groups
            .iter()
            .map(|g| pb::PluginFormGroup {
                name: g.name.clone(),
                fields: g.fields.clone(),
                ..Default::default()
            })
            .collect(),
        status_mapping: h
            .status_mapping
            .as_ref()
            .map(|m| pb::PluginStatusMapping {
                json_path: m.json_path.clone(),
                values: m
                    .values
                    .iter()
                    .map(|(k, v)| (k.to_owned(), status_value(v)))
                    .collect(),
                ..Default::default()
            })
            .into(),
        ..Default::default()
    }
}
