//! Container image references pinned by digest: `repository@sha256:<64 lowercase hex>`.

use std::fmt;

use serde::Serialize;

/// A runtime image reference that is always pinned by digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImageRef {
    /// `registry.example/path/name`, without tag or digest.
    pub repository: String,
    /// `sha256:<hex>`.
    pub digest: String,
}

/// Why a string is not a digest-pinned image reference; each message says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageRefError {
    #[error("image reference is longer than {MAX_LEN} characters")]
    TooLong,
    #[error(
        "image `{image}` is not pinned by digest; write it as repository@sha256:<64 hex digits>"
    )]
    NotPinned { image: String },
    #[error("digest `{digest}` must use sha256 (`sha256:<64 hex digits>`)")]
    NotSha256 { digest: String },
    #[error("digest `{digest}` must be `sha256:` followed by exactly 64 lowercase hex digits")]
    BadDigest { digest: String },
    #[error("image repository is empty")]
    EmptyRepository,
    #[error(
        "image `{repository}` carries a tag next to the digest; drop the tag, the digest alone pins the image"
    )]
    Tagged { repository: String },
    #[error("image registry host `{host}` is not a valid host[:port]")]
    BadHost { host: String },
    #[error(
        "image path component `{component}` must be lowercase letters and digits, separated by `.`, `_`, `__` or `-`"
    )]
    BadComponent { component: String },
}

/// Longest accepted reference.
const MAX_LEN: usize = 512;

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.repository, self.digest)
    }
}

impl ImageRef {
    /// Parses `repo@sha256:<hex>`; the error says what to change.
    pub fn parse(s: &str) -> Result<ImageRef, ImageRefError> {
        if s.len() > MAX_LEN {
            return Err(ImageRefError::TooLong);
        }
        let Some((repository, digest)) = s.split_once('@') else {
            return Err(ImageRefError::NotPinned {
                image: s.to_owned(),
            });
        };
        let Some(hex) = digest.strip_prefix("sha256:") else {
            return Err(ImageRefError::NotSha256 {
                digest: digest.to_owned(),
            });
        };
        if hex.len() != 64
            || !hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(ImageRefError::BadDigest {
                digest: digest.to_owned(),
            });
        }
        validate_repository(repository)?;
        Ok(ImageRef {
            repository: repository.to_owned(),
            digest: digest.to_owned(),
        })
    }
}

impl ImageRef {
    /// The registry host (`host[:port]`) and the repository path on it, as a client
    /// resolves them: a reference without a host is Docker Hub's (`docker.io`), where a
    /// one-component name lives under `library/`.
    pub fn upstream(&self) -> (String, String) {
        match self.repository.split_once('/') {
            Some((first, rest)) if is_host(first) => (first.to_owned(), rest.to_owned()),
            Some(_) => ("docker.io".to_owned(), self.repository.clone()),
            None => (
                "docker.io".to_owned(),
                format!("library/{}", self.repository),
            ),
        }
    }
}

/// A first component with a dot or port, or "localhost", names a registry host.
fn is_host(component: &str) -> bool {
    component.contains(['.', ':']) || component == "localhost"
}

/// OCI distribution's repository grammar, plus an optional registry host[:port].
fn validate_repository(repo: &str) -> Result<(), ImageRefError> {
    if repo.is_empty() {
        return Err(ImageRefError::EmptyRepository);
    }
    let mut parts: Vec<&str> = repo.split('/').collect();
    let last = parts.last().copied().unwrap_or_default();
    if last.contains(':') {
        return Err(ImageRefError::Tagged {
            repository: repo.to_owned(),
        });
    }
    if parts.len() > 1 && is_host(parts[0]) {
        let host = parts.remove(0);
        let (name, port) = host.split_once(':').unwrap_or((host, ""));
        let host_ok = !name.is_empty()
            && name.split('.').all(|l| {
                !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        let port_ok = port.is_empty() || port.parse::<u16>().is_ok();
        if !host_ok || !port_ok {
            return Err(ImageRefError::BadHost {
                host: host.to_owned(),
            });
        }
    }
    for part in parts {
        if !is_path_component(part) {
            return Err(ImageRefError::BadComponent {
                component: part.to_owned(),
            });
        }
    }
    Ok(())
}

fn is_path_component(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || !b[0].is_ascii_alphanumeric() || !b[b.len() - 1].is_ascii_alphanumeric() {
        return false;
    }
    b.iter()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-'))
        && !s.contains("..")
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn the_upstream_is_resolved_as_a_client_does() {
        let cases = [
            ("ghcr.io/foo/bar", "ghcr.io", "foo/bar"),
            ("127.0.0.1:5000/a/b/c", "127.0.0.1:5000", "a/b/c"),
            ("localhost/x", "localhost", "x"),
            ("nginx", "docker.io", "library/nginx"),
            ("bitnami/redis", "docker.io", "bitnami/redis"),
        ];
        for (repo, host, path) in cases {
            let image = ImageRef::parse(&format!("{repo}@{D}")).unwrap();
            assert_eq!(
                image.upstream(),
                (host.to_owned(), path.to_owned()),
                "{repo}"
            );
        }
    }

    #[test]
    fn accepts_pinned_references() {
        for repo in [
            "ghcr.io/org/plugin",
            "localhost:5000/a",
            "library/nginx",
            "nginx",
            "reg.io/a/b_c/d-e.f",
        ] {
            let r = ImageRef::parse(&format!("{repo}@{D}")).unwrap();
            assert_eq!(r.repository, repo);
            assert_eq!(r.digest, D);
        }
    }

    #[test]
    fn refuses_unpinned_or_malformed() {
        for (input, needle) in [
            ("ghcr.io/org/plugin:v1", "not pinned"),
            (&format!("ghcr.io/org/plugin:v1@{D}") as &str, "tag"),
            ("ghcr.io/org/plugin@sha256:ABC", "64 lowercase"),
            ("ghcr.io/org/plugin@md5:0123", "sha256"),
            (&format!("ghcr.io/Org/plugin@{D}"), "path component"),
            (&format!("@{D}"), "empty"),
        ] {
            let err = ImageRef::parse(input).unwrap_err().to_string();
            assert!(err.contains(needle), "{input}: {err}");
        }
    }
}
