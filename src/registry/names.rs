//! Which upstream repository a `/v2/` request names. Two forms, so a cluster keeps its
//! original image references:
//!
//! - containerd's registry-mirror form: `/v2/<path>/...?ns=<host[:port]>`, the path as
//!   the upstream knows it (`ns=docker.io`, `library/nginx`);
//! - a direct name for skopeo and docker: `/v2/<host>/<path>/...`, the upstream host as
//!   the first component. A port is written `_PORT` (`127.0.0.1_5000/foo`), because a
//!   repository name cannot hold `:` and a host name cannot hold `_`.

use super::RegistryError;

/// Longest name accepted, host included (what the distribution spec says clients cap).
pub const MAX_NAME: usize = 255;

/// An upstream repository as a request named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    /// `host[:port]`, normalized as published definitions are (`docker.io`).
    pub host: String,
    /// The path on that host.
    pub path: String,
    /// The name as the request wrote it (without `ns`), echoed in tag lists.
    pub name: String,
}

impl Repo {
    /// The repository `name` names, with containerd's `ns` parameter when present.
    pub fn resolve(name: &str, ns: Option<&str>) -> Result<Repo, RegistryError> {
        let invalid = |why: &str| RegistryError::NameInvalid {
            name: name.chars().take(80).collect(),
            why: why.to_owned(),
        };
        if name.len() > MAX_NAME {
            return Err(invalid("longer than 255 characters"));
        }
        let components: Vec<&str> = name.split('/').collect();
        if let Some(ns) = ns {
            if !is_host(ns) {
                return Err(invalid("the `ns` parameter is not a registry host[:port]"));
            }
            if !components.iter().all(|c| is_component(c)) {
                return Err(invalid(COMPONENT_RULE));
            }
            return Ok(Repo {
                host: normalize_host(ns),
                path: name.to_owned(),
                name: name.to_owned(),
            });
        }
        let [first, rest @ ..] = components.as_slice() else {
            return Err(invalid("empty"));
        };
        let host = direct_host(first).ok_or_else(|| {
            invalid(
                "the first component must be the upstream registry host (a port as _PORT), \
                 or the request must carry containerd's ns parameter",
            )
        })?;
        if rest.is_empty() {
            return Err(invalid("no repository path after the host"));
        }
        if !rest.iter().all(|c| is_component(c)) {
            return Err(invalid(COMPONENT_RULE));
        }
        Ok(Repo {
            host: normalize_host(&host),
            path: rest.join("/"),
            name: name.to_owned(),
        })
    }
}

const COMPONENT_RULE: &str =
    "each path component must be lowercase letters and digits separated by `.`, `_`, `__` or `-`";

/// Docker Hub's other names mean the same registry.
fn normalize_host(host: &str) -> String {
    match host {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_owned(),
        other => other.to_owned(),
    }
}

/// The host a direct name's first component encodes: `localhost`, a dotted name, or
/// either with `_PORT`.
fn direct_host(first: &str) -> Option<String> {
    let (name, port) = match first.rsplit_once('_') {
        Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            (name, Some(port))
        }
        _ => (first, None),
    };
    if port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return None;
    }
    if !(name == "localhost" || name.contains('.')) || !is_hostname(name) {
        return None;
    }
    Some(match port {
        Some(port) => format!("{name}:{port}"),
        None => name.to_owned(),
    })
}

fn is_host(s: &str) -> bool {
    let (name, port) = s.split_once(':').unwrap_or((s, ""));
    is_hostname(name) && (port.is_empty() || port.parse::<u16>().is_ok())
}

fn is_hostname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`, the distribution spec's path component.
fn is_component(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || !is_alnum(b[0]) || !is_alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if is_alnum(b[i]) {
            i += 1;
            continue;
        }
        let sep_start = i;
        while i < b.len() && !is_alnum(b[i]) {
            i += 1;
        }
        let sep = &s[sep_start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|c| c == b'-');
        if !ok {
            return false;
        }
    }
    true
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(name: &str, ns: Option<&str>) -> (String, String) {
        let r = Repo::resolve(name, ns).unwrap();
        (r.host, r.path)
    }

    #[test]
    fn both_forms_name_the_upstream_repository() {
        let s = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(
            repo("fundament/cert-manager", Some("ghcr.io")),
            s("ghcr.io", "fundament/cert-manager")
        );
        assert_eq!(
            repo("library/nginx", Some("docker.io")),
            s("docker.io", "library/nginx")
        );
        assert_eq!(
            repo("library/nginx", Some("registry-1.docker.io")),
            s("docker.io", "library/nginx")
        );
        assert_eq!(
            repo("foo/bar", Some("127.0.0.1:5000")),
            s("127.0.0.1:5000", "foo/bar")
        );
        assert_eq!(
            repo("ghcr.io/fundament/cert-manager", None),
            s("ghcr.io", "fundament/cert-manager")
        );
        assert_eq!(
            repo("127.0.0.1_5000/foo/bar", None),
            s("127.0.0.1:5000", "foo/bar")
        );
        assert_eq!(repo("localhost_5000/x", None), s("localhost:5000", "x"));
        assert_eq!(
            repo("docker.io/library/nginx", None),
            s("docker.io", "library/nginx")
        );
        assert_eq!(
            repo("a/b__c/d-e--f/g.h_i", Some("x.io")),
            s("x.io", "a/b__c/d-e--f/g.h_i")
        );
    }

    #[test]
    fn malformed_traversing_and_over_long_names_are_refused() {
        let cases: Vec<(String, Option<&str>, &str)> = vec![
            (
                "nginx".into(),
                None,
                "first component must be the upstream registry host",
            ),
            ("library/nginx".into(), None, "first component"),
            ("ghcr.io".into(), None, "no repository path"),
            ("ghcr.io/../etc/passwd".into(), None, "path component"),
            ("ghcr.io/foo//bar".into(), None, "path component"),
            ("ghcr.io/Foo".into(), None, "path component"),
            ("ghcr.io/foo/".into(), None, "path component"),
            ("ghcr.io/a___b".into(), None, "path component"),
            ("foo".into(), Some("bad host!"), "`ns` parameter"),
            ("foo".into(), Some("x.io:99999"), "`ns` parameter"),
            ("..".into(), Some("x.io"), "path component"),
            ("127.0.0.1_99999/foo".into(), None, "first component"),
            (
                format!("ghcr.io/{}", "a".repeat(300)),
                None,
                "longer than 255",
            ),
        ];
        for (name, ns, why) in cases {
            let err = Repo::resolve(&name, ns).unwrap_err().to_string();
            assert!(err.contains(why), "{name} {ns:?}: {err}");
            assert!(err.len() < 400, "the name is not echoed whole");
        }
    }
}
