//! Atom feeds (RFC 4287) of new versions: the whole catalog, one publisher's, one
//! plugin's. A yanked version stays in its feed, marked (title, category `yanked`,
//! summary) and updated at the time of the yank, so a reader learns of it.
//!
//! Links are relative references, resolved against the feed's own URL as RFC 4287
//! says, so a feed is right behind any host name or proxy without configuring one. Ids
//! are `urn:uuid:` forms of the stable ids in [`crate::ids`], so they never change.
//!
//! Layering: presentation only: builds the document from the store's rows, no queries.

use std::fmt::Write;

use crate::ids;
use crate::store::FeedVersion;

/// What a feed is about.
#[derive(Debug, Clone)]
pub struct Feed {
    /// `urn:uuid:…`, stable.
    pub id: String,
    pub title: String,
    /// The feed's own path (`rel="self"`).
    pub path: String,
    /// The page it follows (`rel="alternate"`).
    pub page: String,
    /// Who the feed is by when it lists nothing (Atom wants an author either way).
    pub author: String,
}

impl Feed {
    /// Every version in the catalog.
    pub fn catalog() -> Feed {
        Feed {
            id: urn(&ids::feed("catalog")),
            title: "New plugin versions · Fundament Plugin Marketplace".to_owned(),
            path: "/feed.atom".to_owned(),
            page: "/".to_owned(),
            author: "Fundament Plugin Marketplace".to_owned(),
        }
    }

    /// One publisher's versions.
    pub fn publisher(name: &str) -> Feed {
        Feed {
            id: urn(&ids::publisher(name)),
            title: format!("New versions by {name} · Fundament Plugin Marketplace"),
            path: publisher_path(name),
            page: format!("/?publisher={name}"),
            author: name.to_owned(),
        }
    }

    /// One plugin's versions.
    pub fn plugin(publisher: &str, name: &str, display_name: &str) -> Feed {
        Feed {
            id: urn(&ids::plugin(publisher, name)),
            title: format!(
                "{display_name} ({publisher}/{name}) versions · Fundament Plugin Marketplace"
            ),
            path: plugin_path(publisher, name),
            page: super::views::plugin_url(publisher, name),
            author: publisher.to_owned(),
        }
    }
}

/// Where a publisher's feed is served.
pub fn publisher_path(name: &str) -> String {
    format!("/publishers/{name}/feed.atom")
}

/// Where a plugin's feed is served.
pub fn plugin_path(publisher: &str, name: &str) -> String {
    format!("/plugins/{publisher}/{name}/feed.atom")
}

fn urn(uuid: &str) -> String {
    format!("urn:uuid:{uuid}")
}

/// When an entry last changed: its yank, else its publication.
fn updated(v: &FeedVersion) -> i64 {
    v.yanked_at.unwrap_or(v.published_at).max(v.published_at)
}

/// The feed document with `versions` (newest first) as its entries; `empty_updated`
/// is the feed's time when it has none.
pub fn render(feed: &Feed, versions: &[FeedVersion], empty_updated: i64) -> String {
    let when = |t: i64| crate::clock::rfc3339(t);
    let feed_updated = versions.iter().map(updated).max().unwrap_or(empty_updated);
    let mut out = String::with_capacity(1024 + versions.len() * 900);
    out.push_str("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n");
    out.push_str("<feed xmlns=\"http://www.w3.org/2005/Atom\">\n");
    let _ = writeln!(out, "  <id>{}</id>", text(&feed.id));
    let _ = writeln!(out, "  <title type=\"text\">{}</title>", text(&feed.title));
    let _ = writeln!(out, "  <updated>{}</updated>", when(feed_updated));
    let _ = writeln!(
        out,
        "  <link rel=\"self\" type=\"application/atom+xml\" href=\"{}\"/>",
        text(&feed.path)
    );
    let _ = writeln!(
        out,
        "  <link rel=\"alternate\" type=\"text/html\" href=\"{}\"/>",
        text(&feed.page)
    );
    let _ = writeln!(
        out,
        "  <author><name>{}</name></author>",
        text(&feed.author)
    );
    let _ = writeln!(out, "  <generator>marketplace</generator>");
    for v in versions {
        entry(&mut out, v);
    }
    out.push_str("</feed>\n");
    out
}

fn entry(out: &mut String, v: &FeedVersion) {
    let when = |t: i64| crate::clock::rfc3339(t);
    let page = super::views::plugin_url(&v.publisher, &v.name);
    let display = if v.display_name.is_empty() {
        &v.name
    } else {
        &v.display_name
    };
    let mut title = format!("{display} {}", v.version);
    let mut summary = v.description.clone();
    if v.yanked {
        title.push_str(" (yanked)");
        summary = format!(
            "Yanked by its publisher: do not install this version. {}",
            v.description
        );
    }
    out.push_str("  <entry>\n");
    let _ = writeln!(
        out,
        "    <id>{}</id>",
        urn(&ids::version(&v.publisher, &v.name, &v.version))
    );
    let _ = writeln!(out, "    <title type=\"text\">{}</title>", text(&title));
    let _ = writeln!(out, "    <published>{}</published>", when(v.published_at));
    let _ = writeln!(out, "    <updated>{}</updated>", when(updated(v)));
    let _ = writeln!(
        out,
        "    <link rel=\"alternate\" type=\"text/html\" href=\"{}\"/>",
        text(&page)
    );
    let _ = writeln!(
        out,
        "    <link rel=\"related\" type=\"application/yaml\" title=\"Definition\" href=\"{}\"/>",
        text(&format!(
            "{page}/versions/{}/definition.yaml",
            percent(&v.version)
        ))
    );
    let _ = writeln!(
        out,
        "    <author><name>{}</name></author>",
        text(&v.publisher)
    );
    if v.yanked {
        out.push_str("    <category term=\"yanked\" label=\"Yanked\"/>\n");
    }
    let _ = writeln!(
        out,
        "    <summary type=\"text\">{}</summary>",
        text(&summary)
    );
    out.push_str("  </entry>\n");
}

/// `s` as XML character data or an attribute value: markup characters escaped, and the
/// characters XML 1.0 cannot carry at all (most C0 controls, U+FFFE, U+FFFF) left out,
/// since a definition's text may hold them and one would make the document invalid.
fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

/// A version as one path segment (`+` of build metadata and anything else outside the
/// unreserved set percent-encoded).
fn percent(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(v: &str, yanked_at: Option<i64>) -> FeedVersion {
        FeedVersion {
            publisher: "acme".into(),
            name: "gateway".into(),
            display_name: "Gateway <&> \"API\"".into(),
            description: "Routes\u{1}traffic\u{FFFF} & more".into(),
            version: v.into(),
            published_at: 1_700_000_000,
            yanked: yanked_at.is_some(),
            yanked_at,
        }
    }

    #[test]
    fn escapes_markup_and_drops_what_xml_cannot_carry() {
        assert_eq!(text("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
        assert_eq!(text("x\u{0}\u{1b}y\u{FFFE}\tz\n"), "xy\tz\n");
        let doc = render(
            &Feed::plugin("acme", "gateway", "Gateway <&>"),
            &[version("1.0.0+build.1", None)],
            0,
        );
        assert!(doc.contains(
            "<title type=\"text\">Gateway &lt;&amp;&gt; &quot;API&quot; 1.0.0+build.1</title>"
        ));
        assert!(doc.contains("Routestraffic &amp; more"), "{doc}");
        assert!(
            doc.contains("/versions/1.0.0%2Bbuild.1/definition.yaml"),
            "{doc}"
        );
        assert!(!doc.contains('\u{1}'));
    }

    #[test]
    fn a_yank_is_marked_and_updates_the_entry_and_the_feed() {
        let doc = render(
            &Feed::catalog(),
            &[
                version("2.0.0", Some(1_700_000_500)),
                version("1.0.0", None),
            ],
            0,
        );
        assert!(doc.contains("2.0.0 (yanked)</title>"));
        assert!(doc.contains("<category term=\"yanked\" label=\"Yanked\"/>"));
        assert_eq!(doc.matches("<category").count(), 1);
        assert!(doc.contains("<summary type=\"text\">Yanked by its publisher"));
        let yank = crate::clock::rfc3339(1_700_000_500);
        assert!(doc.contains(&format!("  <updated>{yank}</updated>\n  <link")));
        assert!(doc.contains(&format!("<updated>{yank}</updated>")));
        assert_eq!(doc.matches("<entry>").count(), 2);
    }

    #[test]
    fn an_empty_feed_still_has_its_author_and_time() {
        let doc = render(&Feed::publisher("acme"), &[], 1_700_000_000);
        assert!(doc.contains("<author><name>acme</name></author>"));
        assert!(doc.contains(&format!(
            "<updated>{}</updated>",
            crate::clock::rfc3339(1_700_000_000)
        )));
        assert!(doc.contains("href=\"/publishers/acme/feed.atom\""));
    }
}
