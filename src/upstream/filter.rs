//! `--upstream-plugins`: which of an upstream's plugins a marketplace follows, as
//! `PUBLISHER/PLUGIN` patterns where `*` stands for any run of characters
//! (`acme/*,beta/gateway`). A publisher is followed when a pattern selects one of its
//! plugins. Its signed role comes whole (the publisher's signature covers every target
//! it lists), so its other plugins' definitions come too; only the selected plugins'
//! images are mirrored.

use std::fmt;

/// Patterns; no pattern means everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    patterns: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--upstream-plugins: `{pattern}` {reason}")]
pub struct FilterError {
    pub pattern: String,
    pub reason: &'static str,
}

/// The longest filter accepted, so a mistaken file name or paste is refused early.
const MAX_PATTERNS: usize = 1000;

impl Filter {
    /// Everything.
    pub fn all() -> Filter {
        Filter::default()
    }

    /// Comma-separated `PUBLISHER/PLUGIN` patterns; `*` alone means everything.
    pub fn parse(text: &str) -> Result<Filter, FilterError> {
        let mut patterns = Vec::new();
        for raw in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = |reason| FilterError {
                pattern: raw.chars().take(80).collect(),
                reason,
            };
            if raw == "*" {
                return Ok(Filter::all());
            }
            let Some((publisher, plugin)) = raw.split_once('/') else {
                return Err(bad("is not PUBLISHER/PLUGIN (use `*` for any part)"));
            };
            let valid = |part: &str| {
                !part.is_empty()
                    && part.len() <= 63
                    && part.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'*'
                    })
            };
            if !valid(publisher) || !valid(plugin) {
                return Err(bad(
                    "may hold lowercase letters, digits, `-` and `*` on each side of one `/`",
                ));
            }
            patterns.push((publisher.to_owned(), plugin.to_owned()));
            if patterns.len() > MAX_PATTERNS {
                return Err(bad("is one pattern too many (at most 1000)"));
            }
        }
        if patterns.is_empty() {
            return Err(FilterError {
                pattern: text.chars().take(80).collect(),
                reason: "selects nothing; leave the option out to follow everything",
            });
        }
        Ok(Filter { patterns })
    }

    pub fn is_all(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Whether plugin `plugin` of `publisher` is selected.
    pub fn selects(&self, publisher: &str, plugin: &str) -> bool {
        self.is_all()
            || self
                .patterns
                .iter()
                .any(|(p, n)| glob(p, publisher) && glob(n, plugin))
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_all() {
            return f.write_str("*");
        }
        let parts: Vec<String> = self
            .patterns
            .iter()
            .map(|(p, n)| format!("{p}/{n}"))
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// `*` matches any run of characters (none included); everything else itself.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_select_publishers_and_plugins() {
        let f = Filter::parse("acme/*, beta/gate*y,*/cert-manager").unwrap();
        assert!(f.selects("acme", "anything"));
        assert!(f.selects("beta", "gateway"));
        assert!(f.selects("beta", "gatey"));
        assert!(!f.selects("beta", "gate"));
        assert!(f.selects("gamma", "cert-manager"));
        assert!(!f.selects("gamma", "cert-manager-extra"));
        assert_eq!(f.to_string(), "acme/*,beta/gate*y,*/cert-manager");
        assert!(Filter::parse("*").unwrap().is_all());
        assert!(Filter::all().selects("x", "y"));
    }

    #[test]
    fn bad_patterns_are_named() {
        let e = Filter::parse("acme").unwrap_err();
        assert_eq!(e.pattern, "acme");
        assert!(e.to_string().contains("PUBLISHER/PLUGIN"), "{e}");
        let e = Filter::parse("acme/Foo").unwrap_err();
        assert_eq!(e.pattern, "acme/Foo");
        let e = Filter::parse("a/b/c").unwrap_err();
        assert_eq!(e.pattern, "a/b/c");
        assert!(Filter::parse(" , ").is_err());
    }
}
