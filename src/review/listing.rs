//! A plugin's listing as its publisher writes it, and Fundament's field rules for it
//! (`fundament-contracts.md`, registry.v1): every problem names its field, the way
//! Fundament's own validation answers `invalid_argument`.

use crate::catalog::Curation;
use crate::ids;

use super::ReviewError;

/// At most this many characters (Fundament's limits).
pub const MAX_DISPLAY_NAME: usize = 255;
pub const MAX_DESCRIPTION_SHORT: usize = 255;
pub const MAX_DESCRIPTION: usize = 8_000;
pub const MAX_LICENSE: usize = 64;
pub const MAX_CATEGORIES: usize = 10;
pub const MAX_TAGS: usize = 20;
pub const MAX_LINKS: usize = 20;
pub const MAX_FEATURES: usize = 20;
pub const MAX_ALLOWED_ORGANIZATIONS: usize = 500;
/// Ours, where Fundament's table names no limit: a tag is a short label, a URL fits
/// any browser, a feature block is a heading and a paragraph.
pub const MAX_TAG: usize = 63;
pub const MAX_URL: usize = 2_048;
pub const MAX_TITLE: usize = 255;
pub const MAX_FEATURE_BODY: usize = 4_000;
/// Plugin names: Fundament's listing rule allows a DNS-1123 label (63), but its
/// definitions allow 56 characters (`plugin-` + name is a namespace), and a listing no
/// definition could fill would be a trap.
pub const MAX_NAME: usize = 56;

/// Who may see a plugin. Only public plugins exist yet: restricted visibility is
/// refused until it is built, never served as public.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    Unspecified,
    Public,
    Restricted,
    /// A number the contract does not define.
    Unknown(i32),
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Link {
    /// Empty on input: the server gives it a stable id.
    pub id: String,
    pub title: String,
    pub url_name: String,
    pub url: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Feature {
    pub title: String,
    pub body: String,
}

/// The editable fields of a listing (CreatePlugin sets a part of them, UpdatePlugin
/// replaces them all: proto3 has no field presence, so an empty field clears it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListingFields {
    pub display_name: String,
    pub description_short: String,
    pub description: String,
    pub category_ids: Vec<String>,
    pub tags: Vec<String>,
    /// Artwork URL.
    pub image: String,
    pub repository_url: String,
    pub license: String,
    pub author_name: String,
    pub author_url: String,
    pub documentation_links: Vec<Link>,
    pub features: Vec<Feature>,
    pub visibility: Visibility,
    pub allowed_organization_ids: Vec<String>,
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> ReviewError {
    ReviewError::Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}

fn chars(field: &str, text: &str, min: usize, max: usize) -> Result<(), ReviewError> {
    let n = text.chars().count();
    if n < min {
        return Err(invalid(field, "is required"));
    }
    if n > max {
        return Err(invalid(
            field,
            format!("is {n} characters; at most {max} are allowed"),
        ));
    }
    Ok(())
}

/// An absolute http(s) URL, when set. Other schemes (`javascript:`, `data:`) would be
/// unsafe to render as a link or an image on the catalog pages.
fn url(field: &str, text: &str) -> Result<(), ReviewError> {
    if text.is_empty() {
        return Ok(());
    }
    chars(field, text, 0, MAX_URL)?;
    match url::Url::parse(text) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(()),
        _ => Err(invalid(
            field,
            format!(
                "`{}` is not an absolute http(s) URL",
                text.chars().take(80).collect::<String>().escape_debug()
            ),
        )),
    }
}

fn count<T>(field: &str, items: &[T], max: usize) -> Result<(), ReviewError> {
    if items.len() > max {
        return Err(invalid(
            field,
            format!("has {} entries; at most {max} are allowed", items.len()),
        ));
    }
    Ok(())
}

/// A UUID in canonical form.
pub fn uuid(field: &str, text: &str) -> Result<String, ReviewError> {
    ids::parse(field, text).map_err(|message| {
        // `ids::parse` puts the field first; keep only the reason.
        let reason = message
            .strip_prefix(&format!("{field}: "))
            .unwrap_or(&message)
            .to_owned();
        invalid(field, reason)
    })
}

/// Fundament's listing name rule, `^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`, and our length.
pub fn check_name(name: &str) -> Result<(), ReviewError> {
    let bytes = name.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && bytes[bytes.len() - 1] != b'-'
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
    if !ok {
        return Err(invalid(
            "name",
            "must be a DNS-1123 label starting with a letter: lowercase letters, digits and `-`, at most 63 characters",
        ));
    }
    if name.len() > MAX_NAME {
        return Err(invalid(
            "name",
            format!(
                "is {} characters; a plugin definition's name is at most {MAX_NAME}",
                name.len()
            ),
        ));
    }
    Ok(())
}

/// Fundament's version rule: `^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`, at most 64
/// characters (no build metadata: it is not valid in an OCI tag).
pub fn check_version(version: &str) -> Result<(), ReviewError> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let rest = version.strip_prefix('v').unwrap_or(version);
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    let ok = version.len() <= 64
        && parts.len() == 3
        && parts.iter().all(|p| digits(p))
        && pre.is_none_or(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        });
    if !ok {
        return Err(invalid(
            "version",
            format!(
                "`{}` must be MAJOR.MINOR.PATCH with an optional `v` and pre-release, at most 64 characters, without build metadata",
                version.chars().take(80).collect::<String>().escape_debug()
            ),
        ));
    }
    Ok(())
}

impl ListingFields {
    /// Fundament's rules, the operator's categories, and what this marketplace offers
    /// (public visibility only). `plugin_id` gives documentation links their ids.
    pub fn check(&mut self, curation: &Curation, plugin_id: &str) -> Result<(), ReviewError> {
        chars("display_name", &self.display_name, 1, MAX_DISPLAY_NAME)?;
        chars(
            "description_short",
            &self.description_short,
            0,
            MAX_DESCRIPTION_SHORT,
        )?;
        chars("description", &self.description, 0, MAX_DESCRIPTION)?;
        count("category_ids", &self.category_ids, MAX_CATEGORIES)?;
        for (i, id) in self.category_ids.iter().enumerate() {
            let field = format!("category_ids[{i}]");
            uuid(&field, id)?;
            if curation.category(id).is_none() {
                return Err(invalid(
                    field,
                    format!("{id} is not one of this marketplace's categories (ListCategories)"),
                ));
            }
        }
        dedup(&mut self.category_ids);
        count("tags", &self.tags, MAX_TAGS)?;
        for (i, tag) in self.tags.iter().enumerate() {
            let field = format!("tags[{i}]");
            chars(&field, tag, 1, MAX_TAG)?;
            if tag.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(invalid(
                    field,
                    "must not contain spaces or control characters",
                ));
            }
        }
        dedup(&mut self.tags);
        url("image", &self.image)?;
        url("repository_url", &self.repository_url)?;
        url("author_url", &self.author_url)?;
        chars("license", &self.license, 0, MAX_LICENSE)?;
        chars("author_name", &self.author_name, 0, MAX_DISPLAY_NAME)?;
        count("documentation_links", &self.documentation_links, MAX_LINKS)?;
        for (i, link) in self.documentation_links.iter_mut().enumerate() {
            let at = |f: &str| format!("documentation_links[{i}].{f}");
            chars(&at("title"), &link.title, 1, MAX_TITLE)?;
            chars(&at("url_name"), &link.url_name, 0, MAX_TITLE)?;
            chars(&at("url"), &link.url, 1, MAX_URL)?;
            url(&at("url"), &link.url)?;
            link.id = if link.id.is_empty() {
                ids::link(plugin_id, &format!("{i}\0{}", link.url))
            } else {
                uuid(&at("id"), &link.id)?
            };
        }
        count("features", &self.features, MAX_FEATURES)?;
        for (i, feature) in self.features.iter().enumerate() {
            chars(
                &format!("features[{i}].title"),
                &feature.title,
                1,
                MAX_TITLE,
            )?;
            chars(
                &format!("features[{i}].body"),
                &feature.body,
                0,
                MAX_FEATURE_BODY,
            )?;
        }
        count(
            "allowed_organization_ids",
            &self.allowed_organization_ids,
            MAX_ALLOWED_ORGANIZATIONS,
        )?;
        for (i, id) in self.allowed_organization_ids.iter().enumerate() {
            uuid(&format!("allowed_organization_ids[{i}]"), id)?;
        }
        match self.visibility {
            Visibility::Public if self.allowed_organization_ids.is_empty() => Ok(()),
            Visibility::Public => Err(invalid(
                "allowed_organization_ids",
                "applies to RESTRICTED visibility only; a PUBLIC plugin is offered to every organization",
            )),
            Visibility::Restricted => Err(ReviewError::Unimplemented(
                "visibility: PLUGIN_VISIBILITY_RESTRICTED is not offered by this marketplace yet; publish the plugin as PLUGIN_VISIBILITY_PUBLIC".into(),
            )),
            Visibility::Unspecified => Err(invalid(
                "visibility",
                "must be PLUGIN_VISIBILITY_PUBLIC or PLUGIN_VISIBILITY_RESTRICTED",
            )),
            Visibility::Unknown(n) => Err(invalid(
                "visibility",
                format!("{n} is not a PluginVisibility (1 or 2)"),
            )),
        }
    }
}

/// Drops repeats, keeping the first of each in place.
fn dedup(items: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    items.retain(|i| seen.insert(i.clone()));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> ListingFields {
        ListingFields {
            display_name: "Cert Manager".into(),
            description_short: String::new(),
            description: String::new(),
            category_ids: vec![],
            tags: vec!["tls".into(), "tls".into()],
            image: "https://example.com/logo.svg".into(),
            repository_url: String::new(),
            license: "Apache-2.0".into(),
            author_name: String::new(),
            author_url: String::new(),
            documentation_links: vec![Link {
                title: "Docs".into(),
                url: "https://example.com/docs".into(),
                ..Default::default()
            }],
            features: vec![],
            visibility: Visibility::Public,
            allowed_organization_ids: vec![],
        }
    }

    fn field_of(e: ReviewError) -> String {
        match e {
            ReviewError::Invalid { field, .. } => field,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_valid_listing_gets_link_ids_and_loses_repeats() {
        let mut f = fields();
        f.check(&Curation::builtin(), &ids::plugin("acme", "x"))
            .unwrap();
        assert_eq!(f.tags, ["tls"]);
        assert!(ids::parse("id", &f.documentation_links[0].id).is_ok());
    }

    #[test]
    fn each_rule_names_its_field() {
        let curation = Curation::builtin();
        type Spoil = Box<dyn Fn(&mut ListingFields)>;
        let cases: Vec<(&str, Spoil)> = vec![
            ("display_name", Box::new(|f| f.display_name.clear())),
            (
                "display_name",
                Box::new(|f| f.display_name = "x".repeat(256)),
            ),
            (
                "description_short",
                Box::new(|f| f.description_short = "x".repeat(256)),
            ),
            (
                "description",
                Box::new(|f| f.description = "x".repeat(8_001)),
            ),
            (
                "category_ids[0]",
                Box::new(|f| f.category_ids = vec!["security".into()]),
            ),
            (
                "category_ids[0]",
                Box::new(|f| f.category_ids = vec![ids::category("no-such-category")]),
            ),
            ("tags", Box::new(|f| f.tags = vec!["t".into(); 21])),
            (
                "image",
                Box::new(|f| f.image = "javascript:alert(1)".into()),
            ),
            (
                "repository_url",
                Box::new(|f| f.repository_url = "/relative".into()),
            ),
            (
                "author_url",
                Box::new(|f| f.author_url = "example.com".into()),
            ),
            ("license", Box::new(|f| f.license = "x".repeat(65))),
            (
                "documentation_links[0].url",
                Box::new(|f| f.documentation_links[0].url = "ftp://x/y".into()),
            ),
            (
                "documentation_links",
                Box::new(|f| f.documentation_links = vec![f.documentation_links[0].clone(); 21]),
            ),
            (
                "features",
                Box::new(|f| {
                    f.features = vec![
                        Feature {
                            title: "t".into(),
                            body: String::new()
                        };
                        21
                    ]
                }),
            ),
            (
                "allowed_organization_ids[0]",
                Box::new(|f| f.allowed_organization_ids = vec!["acme".into()]),
            ),
            (
                "allowed_organization_ids",
                Box::new(|f| f.allowed_organization_ids = vec![ids::publisher("acme")]),
            ),
            (
                "visibility",
                Box::new(|f| f.visibility = Visibility::Unspecified),
            ),
            (
                "visibility",
                Box::new(|f| f.visibility = Visibility::Unknown(7)),
            ),
        ];
        for (field, spoil) in cases {
            let mut f = fields();
            spoil(&mut f);
            let e = f.check(&curation, "p").unwrap_err();
            assert_eq!(field_of(e), field);
        }
        let mut f = fields();
        f.visibility = Visibility::Restricted;
        assert!(matches!(
            f.check(&curation, "p"),
            Err(ReviewError::Unimplemented(m)) if m.contains("RESTRICTED")
        ));
    }

    #[test]
    fn names_and_versions_follow_fundaments_patterns() {
        for ok in ["a", "cert-manager", "a1"] {
            check_name(ok).unwrap();
        }
        for bad in ["", "1a", "A", "a-", "a_b", &"a".repeat(57)] {
            assert_eq!(field_of(check_name(bad).unwrap_err()), "name", "{bad}");
        }
        for ok in ["1.2.3", "v1.2.3", "v1.2.3-rc.1", "0.0.0-a-b"] {
            check_version(ok).unwrap();
        }
        for bad in [
            "1.2",
            "v1.2.3+build",
            "1.2.3-",
            "01.x.3",
            "V1.2.3",
            &format!("1.2.3-{}", "a".repeat(60)),
        ] {
            assert_eq!(
                field_of(check_version(bad).unwrap_err()),
                "version",
                "{bad}"
            );
        }
    }
}
