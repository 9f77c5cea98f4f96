//! Stable UUIDs for what Fundament's contracts identify by id: plugins, versions,
//! publishers, categories, tags, presets and stored definitions.
//!
//! Every id is a UUIDv5 (RFC 9562) of a kind and the natural key under one namespace of
//! ours, so an id never changes across restarts, replicas or a rebuilt database, and a
//! tool can compute one from the names alone. The kind keeps a plugin and a category of
//! the same name apart. No module here does I/O.
//!
//! Layering: depends on nothing of ours.

use uuid::Uuid;

/// Namespace of every id the marketplace hands out (a random UUIDv4, fixed forever).
const NAMESPACE: Uuid = Uuid::from_u128(0x7d8b_1298_1e40_4925_82f9_9848_f720_eebd);

fn derive(kind: &str, parts: &[&str]) -> String {
    // NUL cannot occur in names, versions or hashes, so the joined key is unambiguous.
    let mut key = Vec::with_capacity(64);
    key.extend_from_slice(kind.as_bytes());
    for part in parts {
        key.push(0);
        key.extend_from_slice(part.as_bytes());
    }
    Uuid::new_v5(&NAMESPACE, &key).to_string()
}

/// A marketplace plugin: one publisher's name.
pub fn plugin(publisher: &str, name: &str) -> String {
    derive("plugin", &[publisher, name])
}

/// One published version of a marketplace plugin.
pub fn version(publisher: &str, name: &str, version: &str) -> String {
    derive("version", &[publisher, name, version])
}

pub fn publisher(name: &str) -> String {
    derive("publisher", &[name])
}

/// A reviewer (`marketplace reviewer add NAME`): the user id reviews are recorded under.
pub fn reviewer(name: &str) -> String {
    derive("reviewer", &[name])
}

pub fn category(name: &str) -> String {
    derive("category", &[name])
}

pub fn tag(name: &str) -> String {
    derive("tag", &[name])
}

/// A documentation link of a plugin (`kind` is `homepage`, `documentation`, ...).
pub fn link(plugin_id: &str, kind: &str) -> String {
    derive("link", &[plugin_id, kind])
}

/// A plugin as an organization sees it on the worker: one name, whichever source
/// offers it (a sideload that shadows a synced plugin keeps the name's id).
pub fn org_plugin(name: &str) -> String {
    derive("org-plugin", &[name])
}

/// A definition stored for an organization: its name, version and exact bytes.
pub fn definition(org: &str, name: &str, version: &str, hash: &str) -> String {
    derive("definition", &[org, name, version, hash])
}

/// An Atom feed of the marketplace's own (the whole catalog's: `feed("catalog")`).
pub fn feed(name: &str) -> String {
    derive("feed", &[name])
}

pub fn preset(name: &str) -> String {
    derive("preset", &[name])
}

/// `text` as a UUID in its canonical lowercase hyphenated form, or why it is not one.
pub fn parse(field: &str, text: &str) -> Result<String, String> {
    match Uuid::try_parse(text) {
        Ok(id) if id.hyphenated().to_string() == text => Ok(text.to_owned()),
        _ => Err(format!(
            "{field}: `{}` is not a UUID (lowercase, hyphenated)",
            text.chars().take(80).collect::<String>()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_keep_kinds_and_keys_apart() {
        // Pinned: a change here changes every id clients have stored. The values were
        // computed independently with Python's `uuid.uuid5`.
        assert_eq!(
            plugin("fundament", "cert-manager"),
            "5301a083-ff1d-5e15-885d-0013b79d7d65"
        );
        assert_eq!(
            org_plugin("cert-manager"),
            "de3396ee-6a00-5bbf-9827-f48c1ee936ef"
        );
        assert_ne!(
            plugin("fundament", "cert-manager"),
            plugin("acme", "cert-manager")
        );
        assert_ne!(category("security"), tag("security"));
        assert_ne!(plugin("a-b", "c"), plugin("a", "b-c"));
        let id = publisher("fundament");
        assert_eq!(Uuid::parse_str(&id).unwrap().get_version_num(), 5);
        assert_eq!(parse("plugin_id", &id).unwrap(), id);
    }

    #[test]
    fn parse_names_the_field_and_refuses_other_spellings() {
        let id = org_plugin("cert-manager");
        for bad in ["", "cert-manager", &id.to_uppercase(), &id.replace('-', "")] {
            let err = parse("plugin_id", bad).unwrap_err();
            assert!(err.starts_with("plugin_id: "), "{err}");
        }
    }
}
