//! Semantic rules on a parsed [`Manifest`]. All problems are collected, not only the
//! first, so an author fixes a file in one pass.

use std::collections::HashSet;

use super::{
    API_VERSION, ImageRef, InvalidDefinition, KIND, Located, Manifest, MenuEntry, Metadata,
    Permissions, PolicyRule, Problem, Spec, is_dns_label, parse_version,
};

const MAX_DISPLAY_NAME: usize = 100;
const MAX_DESCRIPTION: usize = 10_000;
const MAX_SHORT_TEXT: usize = 200;
const MAX_URL: usize = 2048;
const MAX_LIST: usize = 256;

#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn add<T>(&mut self, path: impl Into<String>, at: &Located<T>, message: impl Into<String>) {
        self.0.push(Problem::at(path, Some(at.position()), message));
    }
}

pub(super) fn validate(m: &Manifest) -> Result<(semver::Version, ImageRef), InvalidDefinition> {
    let mut p = Problems::default();
    check_header(&mut p, m);
    let version = check_metadata(&mut p, &m.metadata);
    check_permissions(&mut p, &m.spec.permissions);
    check_requirements(&mut p, &m.spec);
    check_related_plugins(&mut p, &m.spec, &m.metadata.name);
    for (section, entries) in [
        ("organization", &m.spec.menu.organization),
        ("project", &m.spec.menu.project),
    ] {
        check_menu(&mut p, section, entries);
    }
    check_list_len(&mut p, "spec.crds", &m.spec.crds);
    for (i, crd) in m.spec.crds.iter().enumerate() {
        check_crd(&mut p, &format!("spec.crds[{i}]"), crd);
    }
    let image = check_image(&mut p, &m.spec.image);

    match (version, image) {
        (Some(v), Some(i)) if p.0.is_empty() => Ok((v, i)),
        _ => {
            // Reported in file order, as an author reads the file.
            p.0.sort_by_key(|x| (x.line, x.column));
            Err(InvalidDefinition { problems: p.0 })
        }
    }
}

/// `apiVersion` and `kind` name this format.
fn check_header(p: &mut Problems, m: &Manifest) {
    if m.api_version.as_str() != API_VERSION {
        p.add(
            "apiVersion",
            &m.api_version,
            format!("must be `{API_VERSION}`, found `{}`", *m.api_version),
        );
    }
    if m.kind.as_str() != KIND {
        p.add(
            "kind",
            &m.kind,
            format!("must be `{KIND}`, found `{}`", *m.kind),
        );
    }
}

/// Name, version, texts, icon, links and tags; the version when it parses.
fn check_metadata(p: &mut Problems, md: &Metadata) -> Option<semver::Version> {
    check_label(p, "metadata.name", &md.name, "plugin name");
    let version = match parse_version(&md.version) {
        Ok(v) => Some(v),
        Err(e) => {
            p.add(
                "metadata.version",
                &md.version,
                format!(
                    "`{}` is not a semantic version (MAJOR.MINOR.PATCH, optional leading `v`): {e}",
                    *md.version
                ),
            );
            None
        }
    };
    for (path, text, max) in [
        ("metadata.displayName", &md.display_name, MAX_DISPLAY_NAME),
        ("metadata.description", &md.description, MAX_DESCRIPTION),
        ("metadata.author", &md.author, MAX_SHORT_TEXT),
        ("metadata.license", &md.license, MAX_SHORT_TEXT),
    ] {
        check_len(p, path, text.as_ref(), max);
    }
    if let Some(icon) = md.icon.as_ref().filter(|i| !is_dns_label(i)) {
        p.add(
            "metadata.icon",
            icon,
            "icon names are lowercase words joined by `-` (at most 63 characters)",
        );
    }
    for (field, url) in [
        ("homepage", &md.urls.homepage),
        ("repository", &md.urls.repository),
        ("documentation", &md.urls.documentation),
    ] {
        if let Some(url) = url {
            check_url(p, &format!("metadata.urls.{field}"), url);
        }
    }
    check_names(p, "metadata.tags", &md.tags, "tag");
    version
}

/// Capability names and RBAC rules the plugin asks for.
fn check_permissions(p: &mut Problems, permissions: &Permissions) {
    check_capabilities(
        p,
        "spec.permissions.capabilities",
        &permissions.capabilities,
    );
    check_list_len(p, "spec.permissions.rbac", &permissions.rbac);
    for (i, rule) in permissions.rbac.iter().enumerate() {
        check_rbac_rule(p, &format!("spec.permissions.rbac[{i}]"), rule);
    }
}

fn check_rbac_rule(p: &mut Problems, path: &str, rule: &Located<PolicyRule>) {
    if rule.verbs.is_empty() {
        p.add(
            format!("{path}.verbs"),
            rule,
            "at least one verb is required",
        );
    }
    if rule
        .verbs
        .iter()
        .any(|v| v.is_empty() || !v.bytes().all(|b| b.is_ascii_alphabetic() || b == b'*'))
    {
        p.add(
            format!("{path}.verbs"),
            rule,
            "verbs are words such as get, list, watch or `*`",
        );
    }
    if rule.resources.is_empty() && rule.non_resource_urls.is_empty() {
        p.add(
            format!("{path}.resources"),
            rule,
            "at least one resource is required",
        );
    }
    if rule.resources.iter().any(String::is_empty) {
        p.add(
            format!("{path}.resources"),
            rule,
            "resource names must not be empty",
        );
    }
}

/// Cluster capabilities the plugin needs, and requirement flags that contradict what
/// the rest of the definition asks for.
fn check_requirements(p: &mut Problems, spec: &Spec) {
    check_capabilities(
        p,
        "spec.requirements.capabilities",
        &spec.requirements.capabilities,
    );
    for c in super::approval::contradictions(spec) {
        p.add(c.path, c.at, c.message);
    }
}

fn check_capabilities(p: &mut Problems, path: &str, list: &[Located<String>]) {
    check_list_len(p, path, list);
    for (i, cap) in list.iter().enumerate() {
        check_identifier(p, &format!("{path}[{i}]"), cap);
    }
}

/// Dependencies and suggested plugins: plugin names, each once, never the plugin itself.
fn check_related_plugins(p: &mut Problems, spec: &Spec, own_name: &Located<String>) {
    for (field, list) in [
        ("dependencies", &spec.dependencies),
        ("suggestedPlugins", &spec.suggested_plugins),
    ] {
        let path = format!("spec.{field}");
        check_names(p, &path, list, "plugin name");
        for (i, dep) in list.iter().enumerate() {
            if dep.as_str() == own_name.as_str() {
                p.add(format!("{path}[{i}]"), dep, "a plugin cannot list itself");
            }
        }
    }
}

/// The runtime image, pinned by digest; the reference when it parses.
fn check_image(p: &mut Problems, image: &Located<String>) -> Option<ImageRef> {
    match ImageRef::parse(image) {
        Ok(image) => Some(image),
        Err(e) => {
            p.add("spec.image", image, e.to_string());
            None
        }
    }
}

fn check_label(p: &mut Problems, path: &str, v: &Located<String>, what: &str) {
    if v.len() > 63 {
        p.add(
            path,
            v,
            format!(
                "{what} `{}` is {} characters; the limit is 63",
                v.escape_debug(),
                v.len()
            ),
        );
    } else if !is_dns_label(v) {
        p.add(path, v, format!("{what} `{}` must be a DNS-1123 label: lowercase letters, digits and `-`, starting and ending with a letter or digit", v.escape_debug()));
    }
}

fn check_names(p: &mut Problems, path: &str, list: &[Located<String>], what: &str) {
    check_list_len(p, path, list);
    let mut seen = HashSet::new();
    for (i, item) in list.iter().enumerate() {
        check_label(p, &format!("{path}[{i}]"), item, what);
        if !seen.insert(item.as_str()) {
            p.add(
                format!("{path}[{i}]"),
                item,
                format!("`{}` is listed twice", item.escape_debug()),
            );
        }
    }
}

fn check_list_len<T>(p: &mut Problems, path: &str, list: &[Located<T>]) {
    if list.len() > MAX_LIST {
        p.add(
            path,
            &list[MAX_LIST],
            format!("lists hold at most {MAX_LIST} entries"),
        );
    }
}

fn check_len(p: &mut Problems, path: &str, v: Option<&Located<String>>, max: usize) {
    if let Some(v) = v {
        let n = v.chars().count();
        if n > max {
            p.add(path, v, format!("is {n} characters; the limit is {max}"));
        }
    }
}

fn check_identifier(p: &mut Problems, path: &str, v: &Located<String>) {
    let ok = !v.is_empty()
        && v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !ok {
        p.add(
            path,
            v,
            "capability names are 1-63 letters, digits, `_` or `-`",
        );
    }
}

fn check_url(p: &mut Problems, path: &str, url: &Located<String>) {
    // Only web links: anything else (javascript:, data:, file:) would be unsafe to render.
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    let ok = url.len() <= MAX_URL
        && rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'))
        && !url.chars().any(|c| c.is_whitespace() || c.is_control());
    if !ok {
        p.add(
            path,
            url,
            format!(
                "`{}` must be an absolute http(s) URL of at most {MAX_URL} characters",
                url.escape_debug()
            ),
        );
    }
}

/// CRD names are `<plural>.<group>` and the group has at least one dot (`example.com`).
fn check_crd(p: &mut Problems, path: &str, crd: &Located<String>) {
    let ok = crd.len() <= 253
        && crd.split_once('.').is_some_and(|(plural, group)| {
            is_dns_label(plural) && group.contains('.') && group.split('.').all(is_dns_label)
        });
    if !ok {
        p.add(
            path,
            crd,
            format!(
                "`{}` must name a CRD as <plural>.<group>, e.g. certificates.cert-manager.io",
                crd.escape_debug()
            ),
        );
    }
}

fn check_menu(p: &mut Problems, section: &str, entries: &[MenuEntry]) {
    if entries.len() > MAX_LIST {
        p.add(
            format!("spec.menu.{section}"),
            &entries[MAX_LIST].crd,
            format!("lists hold at most {MAX_LIST} entries"),
        );
    }
    for (i, entry) in entries.iter().enumerate() {
        let path = format!("spec.menu.{section}[{i}]");
        check_crd(p, &format!("{path}.crd"), &entry.crd);
        if entry.edit && !entry.detail {
            p.add(
                format!("{path}.edit"),
                &entry.crd,
                "an editable entry must also have `detail: true`",
            );
        }
        for (field, text) in [("label", &entry.label), ("icon", &entry.icon)] {
            if text
                .as_ref()
                .is_some_and(|t| t.chars().count() > MAX_SHORT_TEXT)
            {
                p.add(
                    format!("{path}.{field}"),
                    &entry.crd,
                    format!("is longer than {MAX_SHORT_TEXT} characters"),
                );
            }
        }
    }
}
