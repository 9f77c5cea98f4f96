//! A parsed definition as `organization.v1.PluginDefinition`: what Fundament's plugin
//! controller reads next to the exact bytes.
//!
//! `spec.uiHints`, `spec.customComponents` and `spec.allowedResources` are accepted and
//! preserved as written (DESIGN §2), so their shape is not validated on the way in. Here
//! they are read in the shapes Fundament's messages give them; what does not fit is left
//! out of `definition` and stays in `manifest`, which remains the authority.
//!
//! Layering: HTTP edge only; reads `definition`'s model.

use serde_json::Value;

use crate::definition::{Definition, MenuEntry};
use crate::proto::organization::v1 as pb;

pub fn to_proto(def: &Definition) -> pb::PluginDefinition {
    let m = &def.manifest.metadata;
    let spec = &def.manifest.spec;
    let text = |v: &Option<crate::definition::Located<String>>| {
        v.as_ref().map(|s| s.value.clone()).unwrap_or_default()
    };
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
            capabilities: spec
                .permissions
                .capabilities
                .iter()
                .map(|c| c.value.clone())
                .collect(),
            rbac: spec
                .permissions
                .rbac
                .iter()
                .map(|r| pb::PluginPolicyRule {
                    api_groups: r.value.api_groups.clone(),
                    resources: r.value.resources.clone(),
                    verbs: r.value.verbs.clone(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
        .into(),
        menu: pb::PluginMenu {
            organization: spec.menu.organization.iter().map(menu_entry).collect(),
            project: spec.menu.project.iter().map(menu_entry).collect(),
            ..Default::default()
        }
        .into(),
        crds: spec.crds.iter().map(|c| c.value.clone()).collect(),
        custom_components: objects(spec.custom_components.as_ref(), component),
        allowed_resources: spec
            .allowed_resources
            .as_ref()
            .and_then(Value::as_array)
            .map(|items| items.iter().filter_map(allowed_resource).collect())
            .unwrap_or_default(),
        ui_hints: objects(spec.ui_hints.as_ref(), ui_hint),
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

/// A JSON object's entries that `convert` can read.
fn objects<M: FromIterator<(String, T)> + Default, T>(
    value: Option<&Value>,
    convert: fn(&Value) -> Option<T>,
) -> M {
    value
        .and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| Some((k.clone(), convert(v)?)))
                .collect()
        })
        .unwrap_or_default()
}

fn string(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn component(v: &Value) -> Option<pb::PluginComponentMapping> {
    v.as_object()?;
    Some(pb::PluginComponentMapping {
        list: string(v, "list"),
        detail: string(v, "detail"),
        create: string(v, "create"),
        ..Default::default()
    })
}

fn allowed_resource(v: &Value) -> Option<pb::PluginAllowedResource> {
    v.as_object()?;
    Some(pb::PluginAllowedResource {
        group: string(v, "group"),
        version: string(v, "version"),
        resource: string(v, "resource"),
        verbs: strings(v, "verbs"),
        ..Default::default()
    })
}

fn ui_hint(v: &Value) -> Option<pb::PluginUIHint> {
    v.as_object()?;
    let form_groups = v
        .get("formGroups")
        .and_then(Value::as_array)
        .map(|groups| {
            groups
                .iter()
                .filter(|g| g.is_object())
                .map(|g| pb::PluginFormGroup {
                    name: string(g, "name"),
                    fields: strings(g, "fields"),
                    ..Default::default()
                })
                .collect()
        })
        .unwrap_or_default();
    let status_mapping =
        v.get("statusMapping")
            .filter(|s| s.is_object())
            .map(|s| pb::PluginStatusMapping {
                json_path: string(s, "jsonPath"),
                values: objects(s.get("values"), |value| {
                    value.as_object()?;
                    Some(pb::PluginStatusValue {
                        badge: string(value, "badge"),
                        label: string(value, "label"),
                        ..Default::default()
                    })
                }),
                ..Default::default()
            });
    Some(pb::PluginUIHint {
        form_groups,
        status_mapping: status_mapping.into(),
        ..Default::default()
    })
}
