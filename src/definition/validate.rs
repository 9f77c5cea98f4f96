//! Semantic rules on a parsed [`Manifest`], beyond what Fundament's own parser checks
//! (names, versions, the digest pin, CRD names, URLs, sizes). All problems are
//! collected, not only the first, so an author fixes a file in one pass.

use std::collections::HashSet;

use super::{
    API_VERSION, AllowedResource, ImageRef, KIND, Located, Manifest, MenuEntry, Metadata,
    Permissions, PolicyRule, Position, Problem, Spec, is_dns_label, parse_version,
};

const MAX_DISPLAY_NAME: usize = 100;
const MAX_DESCRIPTION: usize = 10_000;
const MAX_SHORT_TEXT: usize = 200;
const MAX_URL: usize = 2048;
/// Entries of any list or mapping.
pub(super) const MAX_LIST: usize = 256;
/// Fundament installs a plugin into namespace `plugin-<name>`, a DNS label of at most
/// 63 characters; its API refuses longer plugin names.
pub const MAX_PLUGIN_NAME: usize = 56;

#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn add<T>(&mut self, path: impl Into<String>, at: &Located<T>, message: impl Into<String>) {
        self.at(path, at.position(), message);
    }

    fn at(&mut self, path: impl Into<String>, pos: Position, message: impl Into<String>) {
        self.0.push(Problem::at(path, Some(pos), message));
    }
}

/// Problems that refuse a definition however it arrives (legacy fields are judged by
/// the caller), sorted in file order; the version and image when they parse.
pub(super) fn validate(m: &Manifest) -> (Vec<Problem>, Option<(semver::Version, ImageRef)>) {
    let mut p = Problems::default();
    check_header(&mut p, m);
    let version = check_metadata(&mut p, &m.metadata);
    check_permissions(&mut p, &m.spec.permissions);
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
    check_console(&mut p, &m.spec);
    let image = check_image(&mut p, &m.spec.image);
    // Reported in file order, as an author reads the file.
    p.0.sort_by_key(|x| (x.line, x.column));
    let parsed = match (version, image) {
        (Some(v), Some(i)) => Some((v, i)),
        _ => None,
    };
    (p.0, parsed)
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
    if md.name.len() > MAX_PLUGIN_NAME && md.name.len() <= 63 && is_dns_label(&md.name) {
        p.add(
            "metadata.name",
            &md.name,
            format!(
                "plugin name `{}` is {} characters; Fundament installs a plugin into namespace plugin-<name>, so the limit is {MAX_PLUGIN_NAME}",
                md.name.as_str(),
                md.name.len()
            ),
        );
    } else if let Some(message) = label_problem(&md.name, "plugin name", MAX_PLUGIN_NAME) {
        p.add("metadata.name", &md.name, message);
    }
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
    check_list_len(p, "metadata.tags", &md.tags);
    let mut seen = HashSet::new();
    for (i, tag) in md.tags.iter().enumerate() {
        let path = format!("metadata.tags[{i}]");
        if let Some(message) = label_problem(tag, "tag", 63) {
            p.add(path, tag, message);
        } else if !seen.insert(tag.as_str()) {
            p.add(
                path,
                tag,
                format!("`{}` is listed twice", tag.escape_debug()),
            );
        }
    }
    version
}

/// Capability names and RBAC rules the plugin asks for.
fn check_permissions(p: &mut Problems, permissions: &Permissions) {
    let path = "spec.permissions.capabilities";
    check_list_len(p, path, &permissions.capabilities);
    for (i, cap) in permissions.capabilities.iter().enumerate() {
        if let Some(message) = identifier_problem(cap) {
            p.add(format!("{path}[{i}]"), cap, message);
        }
    }
    check_list_len(p, "spec.permissions.rbac", &permissions.rbac);
    for (i, rule) in permissions.rbac.iter().enumerate() {
        check_rbac_rule(p, &format!("spec.permissions.rbac[{i}]"), rule);
    }
}

fn check_rbac_rule(p: &mut Problems, path: &str, rule: &Located<PolicyRule>) {
    check_verbs(p, &format!("{path}.verbs"), rule, &rule.verbs);
    // A rule of the older design's `nonResourceURLs` has no resources; the legacy
    // finding already says what to write.
    if rule.resources.is_empty() && rule.non_resource_urls.0.is_none() {
        p.add(
            format!("{path}.resources"),
            rule,
            "at least one resource is required",
        );
    }
    for (field, list) in [
        ("resources", &rule.resources),
        ("resourceNames", &rule.resource_names),
    ] {
        if list.iter().any(String::is_empty) {
            p.add(format!("{path}.{field}"), rule, "entries must not be empty");
        }
        if list.len() > MAX_LIST {
            p.add(
                format!("{path}.{field}"),
                rule,
                format!("lists hold at most {MAX_LIST} entries"),
            );
        }
    }
}

fn check_verbs<T>(p: &mut Problems, path: &str, at: &Located<T>, verbs: &[String]) {
    if verbs.is_empty() {
        p.add(path, at, "at least one verb is required");
    } else if verbs
        .iter()
        .any(|v| v.is_empty() || !v.bytes().all(|b| b.is_ascii_alphabetic() || b == b'*'))
    {
        p.add(path, at, "verbs are words such as get, list, watch or `*`");
    } else if verbs.len() > MAX_LIST {
        p.add(path, at, format!("lists hold at most {MAX_LIST} entries"));
    }
}

/// What the console shows: UI hints, custom components, allowed resources.
fn check_console(p: &mut Problems, spec: &Spec) {
    let hints = &spec.ui_hints.entries;
    if hints.len() > MAX_LIST {
        p.add(
            "spec.uiHints",
            &hints.0[MAX_LIST].1,
            format!("holds at most {MAX_LIST} entries"),
        );
    }
    for (key, hint) in &hints.0 {
        let path = format!("spec.uiHints.{key}");
        check_crd_name(p, &path, hint, key);
        check_list_len(p, &format!("{path}.formGroups"), &hint.form_groups);
        for (i, g) in hint.form_groups.iter().enumerate() {
            let gpath = format!("{path}.formGroups[{i}]");
            if g.name.trim().is_empty() {
                p.add(format!("{gpath}.name"), g, "a form group needs a name");
            }
            check_text(p, &format!("{gpath}.name"), g, &g.name);
            if g.fields.len() > MAX_LIST || g.fields.iter().any(|f| f.trim().is_empty()) {
                p.add(
                    format!("{gpath}.fields"),
                    g,
                    format!("fields are 1 to {MAX_LIST} non-empty field paths"),
                );
            }
            for f in &g.fields {
                check_text(p, &format!("{gpath}.fields"), g, f);
            }
        }
        if let Some(m) = &hint.status_mapping {
            let mpath = format!("{path}.statusMapping");
            if m.json_path.trim().is_empty() {
                p.add(
                    format!("{mpath}.jsonPath"),
                    m,
                    "a status mapping needs the JSONPath of the value it maps",
                );
            }
            check_text(p, &format!("{mpath}.jsonPath"), m, &m.json_path);
            if m.values.len() > MAX_LIST {
                p.add(
                    format!("{mpath}.values"),
                    m,
                    format!("holds at most {MAX_LIST} entries"),
                );
            }
            let defaults = m.default.iter().map(|d| ("default".to_owned(), d));
            let values = m
                .values
                .iter()
                .map(|(k, v)| (format!("values.{k}"), v))
                .chain(defaults);
            for (vpath, v) in values {
                check_text(p, &format!("{mpath}.{vpath}.badge"), m, &v.badge);
                check_text(p, &format!("{mpath}.{vpath}.label"), m, &v.label);
            }
        }
    }
    let components = &spec.custom_components;
    if components.len() > MAX_LIST {
        p.add(
            "spec.customComponents",
            &components.0[MAX_LIST].1,
            format!("holds at most {MAX_LIST} entries"),
        );
    }
    for (key, c) in &components.0 {
        let path = format!("spec.customComponents.{key}");
        if key.trim().is_empty() {
            p.add(&path, c, "component mappings are keyed by a resource name");
        }
        check_text(p, &path, c, key);
        for (field, v) in [
            ("list", &c.list),
            ("detail", &c.detail),
            ("create", &c.create),
        ] {
            if let Some(v) = v {
                check_text(p, &format!("{path}.{field}"), v, v);
            }
        }
    }
    check_list_len(p, "spec.allowedResources", &spec.allowed_resources);
    for (i, r) in spec.allowed_resources.iter().enumerate() {
        check_allowed_resource(p, &format!("spec.allowedResources[{i}]"), r);
    }
}

fn check_allowed_resource(p: &mut Problems, path: &str, r: &Located<AllowedResource>) {
    if super::legacy::is_legacy_allowed_resource(r) {
        return;
    }
    for (field, v) in [("version", &r.version), ("resource", &r.resource)] {
        if v.trim().is_empty() {
            p.add(format!("{path}.{field}"), r, "is required");
        }
    }
    for (field, v) in [
        ("group", &r.group),
        ("version", &r.version),
        ("resource", &r.resource),
    ] {
        check_text(p, &format!("{path}.{field}"), r, v);
    }
    check_verbs(p, &format!("{path}.verbs"), r, &r.verbs);
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

/// Why `v` is not a DNS-1123 label of at most `max` characters, if it is not.
pub(super) fn label_problem(v: &str, what: &str, max: usize) -> Option<String> {
    if v.len() > max {
        Some(format!(
            "{what} `{}` is {} characters; the limit is {max}",
            v.escape_debug(),
            v.len()
        ))
    } else if !is_dns_label(v) {
        Some(format!(
            "{what} `{}` must be a DNS-1123 label: lowercase letters, digits and `-`, starting and ending with a letter or digit",
            v.escape_debug()
        ))
    } else {
        None
    }
}

/// Capability names: 1-63 letters, digits, `_` or `-`.
pub(super) fn identifier_problem(v: &str) -> Option<String> {
    let ok = !v.is_empty()
        && v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    (!ok).then(|| "capability names are 1-63 letters, digits, `_` or `-`".to_owned())
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

/// A short text of the console's (labels, field paths, component names).
fn check_text<T>(p: &mut Problems, path: &str, at: &Located<T>, text: &str) {
    let n = text.chars().count();
    if n > MAX_SHORT_TEXT {
        p.add(
            path,
            at,
            format!("is {n} characters; the limit is {MAX_SHORT_TEXT}"),
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
    check_crd_name(p, path, crd, crd);
}

/// [`check_crd`] for a name written at `at` (a key, whose value carries the position).
fn check_crd_name<T>(p: &mut Problems, path: &str, at: &Located<T>, crd: &str) {
    let ok = crd.len() <= 253
        && crd.split_once('.').is_some_and(|(plural, group)| {
            is_dns_label(plural) && group.contains('.') && group.split('.').all(is_dns_label)
        });
    if !ok {
        p.add(
            path,
            at,
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
