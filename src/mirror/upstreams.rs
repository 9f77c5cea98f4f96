//! The server's configuration of upstream registries (`serve --upstreams FILE`): per
//! host, plain HTTP or a CA bundle, and basic-auth credentials read from a file.
//! Secrets never reach a log line or an error message: [`Upstream`]'s `Debug` omits
//! them.
//!
//! ```yaml
//! otherHosts: pull          # or skip: mirror only the hosts listed below
//! upstreams:
//!   - host: registry.internal:5000
//!     caFile: /etc/marketplace/registry-ca.pem
//!     username: mirror
//!     passwordFile: /run/secrets/registry-password
//!   - host: 127.0.0.1:5000
//!     insecure: true        # plain HTTP: only for a registry on a trusted network
//!   - host: ghcr.io         # images pinned on ghcr.io ...
//!     endpoint: registry.internal:5000   # ... pulled from the site's own registry
//!   - host: docker.io
//!     redirects: [production.cloudflare.docker.com]   # where its blobs are served
//! ```
//!
//! `redirects` lists the hosts (`host`, `host:port` or `*.domain`) an upstream may send
//! the mirror to besides itself (a CDN or object store for blobs, a token realm on
//! another host); see `egress` for the rules every request follows. Only configured
//! upstreams (`host`, `endpoint`) may be on loopback or private addresses.
//!
//! `endpoint` is for sites that cannot reach the host a definition names (an air-gapped
//! data centre): the images are carried in and pushed to a local registry under the
//! same paths, and digests prove they are the same images. Everything else in the entry
//! (`insecure`, `caFile`, credentials) then applies to the endpoint.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::Arc;

use serde::Deserialize;

use super::client::{Client, Options, base_url};
use super::egress::{HostPattern, Named, Policy, split_host_port};

/// The largest configuration file read.
const MAX_CONFIG_BYTES: u64 = 256 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum UpstreamsError {
    #[error("{path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct File {
    #[serde(default)]
    other_hosts: OtherHosts,
    #[serde(default)]
    upstreams: Vec<Entry>,
}

/// What happens to images on hosts the file does not list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OtherHosts {
    /// Pulled anonymously over HTTPS with the system's trust roots.
    #[default]
    Pull,
    /// Not mirrored: their jobs stay pending (an air-gapped site that brings images in
    /// another way, or an operator who allows only some registries).
    Skip,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Entry {
    host: String,
    endpoint: Option<String>,
    #[serde(default)]
    insecure: bool,
    ca_file: Option<PathBuf>,
    username: Option<String>,
    password_file: Option<PathBuf>,
    #[serde(default)]
    redirects: Vec<String>,
}

/// One configured upstream registry.
#[derive(Clone)]
pub struct Upstream {
    pub host: String,
    /// Where this host's images are pulled from, when not from the host itself.
    pub endpoint: Option<String>,
    pub insecure: bool,
    /// Hosts its redirects and token realm may go to besides its own.
    pub redirects: Vec<HostPattern>,
    ca: Option<Vec<u8>>,
    auth: Option<(String, String)>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("host", &self.host)
            .field("endpoint", &self.endpoint)
            .field("insecure", &self.insecure)
            .field("redirects", &self.redirects)
            .field("ca", &self.ca.is_some())
            .field("username", &self.auth.as_ref().map(|(u, _)| u))
            .finish_non_exhaustive()
    }
}

/// Every configured upstream, and the rule for the others.
#[derive(Debug, Clone, Default)]
pub struct Upstreams {
    pub other_hosts: OtherHosts,
    by_host: HashMap<String, Upstream>,
}

impl Upstreams {
    /// No registry at all: every image comes from a marketplace's `/v2/` (a bundle
    /// being imported) or not at all.
    pub fn none() -> Upstreams {
        Upstreams {
            other_hosts: OtherHosts::Skip,
            by_host: HashMap::new(),
        }
    }

    /// Reads `path`; relative `caFile` and `passwordFile` paths are relative to it.
    pub fn load(path: &Path) -> Result<Upstreams, UpstreamsError> {
        let read = |p: &Path, max: u64| -> Result<Vec<u8>, UpstreamsError> {
            let meta = std::fs::metadata(p).map_err(|error| UpstreamsError::Read {
                path: p.to_owned(),
                error,
            })?;
            if meta.len() > max {
                return Err(UpstreamsError::Invalid {
                    path: p.to_owned(),
                    message: format!("larger than {max} bytes"),
                });
            }
            std::fs::read(p).map_err(|error| UpstreamsError::Read {
                path: p.to_owned(),
                error,
            })
        };
        let invalid = |message: String| UpstreamsError::Invalid {
            path: path.to_owned(),
            message,
        };
        let bytes = read(path, MAX_CONFIG_BYTES)?;
        let text = std::str::from_utf8(&bytes).map_err(|e| invalid(format!("not UTF-8: {e}")))?;
        let file: File =
            crate::definition::yaml::config(text, "an upstreams file").map_err(invalid)?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut by_host = HashMap::new();
        for (i, e) in file.upstreams.into_iter().enumerate() {
            let at = |m: &str| invalid(format!("upstreams[{i}] ({}): {m}", e.host));
            if split_host_port(&e.host).is_none() {
                return Err(at("host must be host or host:port"));
            }
            if e.endpoint
                .as_deref()
                .is_some_and(|h| split_host_port(h).is_none())
            {
                return Err(at("endpoint must be host or host:port"));
            }
            let ca = match &e.ca_file {
                None => None,
                Some(f) => {
                    let pem_bytes = read(&base.join(f), MAX_CONFIG_BYTES)?;
                    // A bundle with no certificate would add no trust root, silently: refuse it here.
                    let certs = pem::parse_many(&pem_bytes)
                        .map_err(|err| at(&format!("caFile is not PEM: {err}")))?;
                    if !certs.iter().any(|c| c.tag() == "CERTIFICATE") {
                        return Err(at("caFile holds no CERTIFICATE block"));
                    }
                    Some(pem_bytes)
                }
            };
            if e.insecure && ca.is_some() {
                return Err(at("insecure (plain HTTP) and caFile contradict each other"));
            }
            let auth = match (e.username, &e.password_file) {
                (None, None) => None,
                (Some(user), Some(f)) => {
                    let secret = read(&base.join(f), 64 * 1024)?;
                    let secret =
                        String::from_utf8(secret).map_err(|_| at("passwordFile is not UTF-8"))?;
                    Some((user, secret.trim_end_matches(['\n', '\r']).to_owned()))
                }
                _ => return Err(at("username and passwordFile go together")),
            };
            let mut redirects = Vec::new();
            for r in &e.redirects {
                let p = HostPattern::parse(r).ok_or_else(|| {
                    at(&format!(
                        "redirects: `{r}` is not host, host:port or *.domain"
                    ))
                })?;
                redirects.push(p);
            }
            let upstream = Upstream {
                host: e.host.clone(),
                endpoint: e.endpoint,
                insecure: e.insecure,
                redirects,
                ca,
                auth,
            };
            if by_host.insert(e.host.clone(), upstream).is_some() {
                return Err(at("listed twice"));
            }
        }
        Ok(Upstreams {
            other_hosts: file.other_hosts,
            by_host,
        })
    }

    /// The hosts whose images are mirrored, when the others are skipped.
    pub fn allowed_hosts(&self) -> Option<Vec<String>> {
        match self.other_hosts {
            OtherHosts::Pull => None,
            OtherHosts::Skip => Some(self.by_host.keys().cloned().collect()),
        }
    }

    pub fn get(&self, host: &str) -> Option<&Upstream> {
        self.by_host.get(host)
    }

    /// Every upstream the operator configured (hosts and endpoints): the only hosts
    /// the mirror may reach on a non-public address. A `redirects` entry is not one of
    /// them: a CDN on a private network is listed as an upstream too.
    pub fn named(&self) -> Named {
        self.named_with(None)
    }

    /// [`Upstreams::named`] and `extra` (the upstream marketplace a server follows).
    pub fn named_with(&self, extra: Option<&str>) -> Named {
        Named::new(
            self.by_host
                .values()
                .flat_map(|u| [Some(&u.host), u.endpoint.as_ref()])
                .chain([extra.map(str::to_owned).as_ref()])
                .flatten()
                .filter_map(|h| HostPattern::parse(h)),
        )
    }
}

impl Upstream {
    /// An anonymous HTTPS upstream (a host the file does not list).
    pub fn default_for(host: &str) -> Upstream {
        Upstream {
            host: host.to_owned(),
            endpoint: None,
            insecure: false,
            redirects: Vec::new(),
            ca: None,
            auth: None,
        }
    }

    /// The `/v2/` of an upstream marketplace at `authority` (`host[:port]`), anonymous:
    /// plain HTTP when `insecure`.
    pub fn marketplace(authority: &str, insecure: bool) -> Upstream {
        Upstream {
            insecure,
            ..Upstream::default_for(authority)
        }
    }

    /// The registry images of this host are pulled from.
    pub fn pull_from(&self) -> &str {
        self.endpoint.as_deref().unwrap_or(&self.host)
    }

    /// A client for this upstream: its protocol, trust roots, credentials, and the
    /// egress rules with the operator's `named` hosts.
    pub fn client(&self, named: Arc<Named>, request_timeout: Duration) -> Result<Client, String> {
        // Docker Hub's registry API is not at the name images use.
        let registry = match self.pull_from() {
            "docker.io" => "registry-1.docker.io",
            other => other,
        };
        let policy = Policy {
            base: base_url(registry, self.insecure)?,
            redirects: self.redirects.clone(),
            named,
        };
        Client::new(
            policy,
            Options {
                ca: self.ca.clone(),
                basic: self.auth.clone(),
                request_timeout,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_configures_hosts_and_secrets_stay_out_of_debug_output() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pw"), "s3cret\n").unwrap();
        std::fs::write(
            dir.path().join("ca.pem"),
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let path = dir.path().join("upstreams.yaml");
        std::fs::write(
            &path,
            "otherHosts: skip\nupstreams:\n  - host: reg.example:5000\n    caFile: ca.pem\n    username: alice\n    passwordFile: pw\n    redirects: [cdn.example, '*.s3.example']\n  - host: 127.0.0.1:5000\n    insecure: true\n  - host: ghcr.io\n    endpoint: 127.0.0.1:5000\n    insecure: true\n",
        )
        .unwrap();
        let u = Upstreams::load(&path).unwrap();
        let mut hosts = u.allowed_hosts().unwrap();
        hosts.sort();
        assert_eq!(hosts, ["127.0.0.1:5000", "ghcr.io", "reg.example:5000"]);
        assert_eq!(u.get("ghcr.io").unwrap().pull_from(), "127.0.0.1:5000");
        assert_eq!(
            u.get("reg.example:5000").unwrap().pull_from(),
            "reg.example:5000"
        );
        let reg = u.get("reg.example:5000").unwrap();
        assert_eq!(reg.auth, Some(("alice".to_owned(), "s3cret".to_owned())));
        assert!(!format!("{u:?}").contains("s3cret"));
        assert_eq!(
            reg.redirects,
            [
                HostPattern::parse("cdn.example").unwrap(),
                HostPattern::Suffix("s3.example".into())
            ]
        );
        assert!(u.get("127.0.0.1:5000").unwrap().insecure);
    }

    #[test]
    fn mistakes_are_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("empty.pem"), "nothing here").unwrap();
        let cases = [
            ("upstreams:\n  - host: x.io\n    user: a\n", "unknown field"),
            ("upstreams:\n  - host: 'bad host'\n", "host must be"),
            (
                "upstreams:\n  - host: x.io\n    username: a\n",
                "go together",
            ),
            (
                "upstreams:\n  - host: x.io\n    caFile: empty.pem\n",
                "no CERTIFICATE",
            ),
            (
                "upstreams:\n  - host: x.io\n    caFile: missing.pem\n",
                "missing.pem",
            ),
            (
                "upstreams:\n  - host: x.io\n  - host: x.io\n",
                "listed twice",
            ),
            ("otherHosts: maybe\n", "maybe"),
            (
                "upstreams:\n  - host: x.io\n    endpoint: 'a b'\n",
                "endpoint must be",
            ),
            (
                "upstreams:\n  - host: x.io\n    redirects: ['https://cdn.x.io']\n",
                "redirects: `https://cdn.x.io`",
            ),
        ];
        for (yaml, why) in cases {
            let path = dir.path().join("u.yaml");
            std::fs::write(&path, yaml).unwrap();
            let err = Upstreams::load(&path).unwrap_err().to_string();
            assert!(err.contains(why), "{yaml}: {err}");
        }
    }
}
