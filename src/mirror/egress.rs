//! Where the mirror may send a request. Definitions name registries, so a publisher
//! chooses the first host the mirror talks to, and an upstream chooses every host after
//! it (redirects, token realms). Without rules that is a request forgery: an upstream
//! that redirects to `http://127.0.0.1:8080/` or `169.254.169.254` makes the marketplace
//! fetch from its own network.
//!
//! The rules, applied to every request the mirror makes:
//! - the operator's upstreams (each `host` and `endpoint` of the upstreams file) may be
//!   on any address: they were configured on purpose;
//! - any other host must resolve only to public addresses: never loopback, private,
//!   link-local, shared (CGNAT), multicast or unspecified. Names are checked in the
//!   resolver the HTTP client connects with, so the address checked is the address
//!   used (a name that resolves to loopback is refused too, and re-resolving later
//!   cannot swap in another);
//! - a redirect or token realm goes to the upstream's own scheme and host, or to a host
//!   its `redirects` allows, and never from HTTPS to HTTP (see [`Policy::follow`]).

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use url::{Host, Url};

/// Why a request was not made. Its text names the host, which an upstream may have
/// chosen: it is for the operator, not for public pages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{host} resolves to {addr}, a non-public address, and is not a configured upstream")]
    Address { host: String, addr: IpAddr },
    #[error("a redirect from HTTPS to plain HTTP ({to})")]
    Downgrade { to: String },
    #[error("{to} is neither the upstream's own host nor listed in its `redirects`")]
    OtherHost { to: String },
    #[error("the scheme of {to} is not http or https")]
    Scheme { to: String },
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooManyRedirects,
}

/// Redirects followed for one request; registries use one or two (blob → CDN).
pub const MAX_REDIRECTS: usize = 5;

/// A host pattern from the upstreams file: `host`, `host:port` or `*.domain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    Exact {
        host: String,
        port: Option<u16>,
    },
    /// Any name ending in `.domain` (not `domain` itself): object stores and CDNs spread
    /// over many names.
    Suffix(String),
}

impl HostPattern {
    pub fn parse(s: &str) -> Option<HostPattern> {
        if let Some(domain) = s.strip_prefix("*.") {
            return is_name(domain).then(|| HostPattern::Suffix(domain.to_ascii_lowercase()));
        }
        let (host, port) = split_host_port(s)?;
        Some(HostPattern::Exact { host, port })
    }

    fn matches(&self, url: &Url) -> bool {
        let Some(host) = url_host(url) else {
            return false;
        };
        match self {
            HostPattern::Exact { host: h, port } => {
                *h == host
                    && match port {
                        Some(p) => url.port_or_known_default() == Some(*p),
                        None => url.port().is_none(),
                    }
            }
            HostPattern::Suffix(domain) => host
                .strip_suffix(domain.as_str())
                .is_some_and(|rest| rest.ends_with('.') && rest.len() > 1),
        }
    }
}

/// The upstreams the operator configured: they may be on any address.
#[derive(Debug, Default)]
pub struct Named {
    exact: Vec<HostPattern>,
    /// Their names without ports: what the resolver sees.
    names: HashSet<String>,
}

impl Named {
    pub fn new(hosts: impl IntoIterator<Item = HostPattern>) -> Named {
        let mut named = Named::default();
        for h in hosts {
            if let HostPattern::Exact { host, .. } = &h {
                named.names.insert(host.clone());
                named.exact.push(h);
            }
        }
        named
    }

    fn contains(&self, url: &Url) -> bool {
        self.exact.iter().any(|p| p.matches(url))
    }
}

/// The rules for one upstream's client.
#[derive(Debug)]
pub struct Policy {
    /// Where requests start: `scheme://host[:port]/` of the registry pulled from.
    pub base: Url,
    /// Hosts its redirects and token realm may go to besides its own.
    pub redirects: Vec<HostPattern>,
    pub named: Arc<Named>,
}

impl Policy {
    /// The first request of an exchange: a URL we built from the base.
    pub async fn start(&self, url: &Url) -> Result<(), Refusal> {
        self.address(url).await
    }

    /// A request to `to`, which the answer from `from` pointed at (a `Location`, or a
    /// token realm from a challenge).
    pub async fn follow(&self, from: &Url, to: &Url) -> Result<(), Refusal> {
        let shown = || to.origin().ascii_serialization();
        if !matches!(to.scheme(), "http" | "https") {
            return Err(Refusal::Scheme { to: shown() });
        }
        if from.scheme() == "https" && to.scheme() == "http" {
            return Err(Refusal::Downgrade { to: shown() });
        }
        let own = to.origin() == self.base.origin();
        if !own && !self.redirects.iter().any(|p| p.matches(to)) {
            return Err(Refusal::OtherHost { to: shown() });
        }
        self.address(to).await
    }

    /// Whether requests to `url` may carry the upstream's credentials or tokens: only
    /// its own origin gets them, never a CDN or object store it redirects to.
    pub fn own(&self, url: &Url) -> bool {
        url.origin() == self.base.origin()
    }

    /// The address rule for `url`. An IP literal is checked here (the resolver never
    /// sees one); a name the operator named with another port is looked up here, since
    /// the resolver, which sees no port, lets the name through.
    async fn address(&self, url: &Url) -> Result<(), Refusal> {
        if self.named.contains(url) {
            return Ok(());
        }
        let host = url_host(url).unwrap_or_default();
        match url.host() {
            Some(Host::Ipv4(ip)) => public(&host, IpAddr::V4(ip)),
            Some(Host::Ipv6(ip)) => public(&host, IpAddr::V6(ip)),
            Some(Host::Domain(_)) if self.named.names.contains(&host) => {
                // Unresolvable: the request fails on its own with a clearer error.
                let Ok(addrs) = tokio::net::lookup_host((host.as_str(), 0)).await else {
                    return Ok(());
                };
                addrs.into_iter().try_for_each(|a| public(&host, a.ip()))
            }
            _ => Ok(()),
        }
    }
}

fn public(host: &str, addr: IpAddr) -> Result<(), Refusal> {
    if is_public(addr) {
        Ok(())
    } else {
        Err(Refusal::Address {
            host: host.to_owned(),
            addr,
        })
    }
}

/// The resolver of every mirror client: names resolve as usual, and a name that is not
/// one the operator named is refused when any of its addresses is not public (refusing
/// the name rather than dropping addresses: a registry on a mixed set is misconfigured,
/// and a partial answer would hide that).
pub struct Resolver {
    pub named: Arc<Named>,
}

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_ascii_lowercase();
        let trusted = self.named.names.contains(&host);
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if !trusted {
                for a in &addrs {
                    public(&host, a.ip())?;
                }
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Whether `ip` is on the public internet as far as we can tell from the address alone.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            // IPv4-mapped (::ffff:a.b.c.d) and NAT64 (64:ff9b::/96) reach an IPv4 host.
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public_v4(v4);
            }
            let s = v6.segments();
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                let [a, b] = s[6].to_be_bytes();
                let [c, d] = s[7].to_be_bytes();
                return is_public_v4(Ipv4Addr::new(a, b, c, d));
            }
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] & 0xffc0) == 0xfec0) // site-local (deprecated, still routed inside)
        }
    }
}

fn is_public_v4(v4: Ipv4Addr) -> bool {
    let [a, b, ..] = v4.octets();
    !(v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_multicast()
        || v4.is_broadcast()
        || a == 0 // "this network"
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && v4.octets()[2] == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240) // reserved
}

/// `host` of `url`, lowercase, IPv6 without brackets.
fn url_host(url: &Url) -> Option<String> {
    Some(match url.host()? {
        Host::Domain(d) => d.to_ascii_lowercase(),
        Host::Ipv4(ip) => ip.to_string(),
        Host::Ipv6(ip) => ip.to_string(),
    })
}

/// `name` or `name:port` (names as registries use them: letters, digits, `-`, `.`).
pub fn split_host_port(s: &str) -> Option<(String, Option<u16>)> {
    let (name, port) = match s.rsplit_once(':') {
        Some((name, port)) => (name, Some(port.parse::<u16>().ok()?)),
        None => (s, None),
    };
    is_name(name).then(|| (name.to_ascii_lowercase(), port))
}

fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(base: &str, redirects: &[&str], named: &[&str]) -> Policy {
        Policy {
            base: Url::parse(base).unwrap(),
            redirects: redirects
                .iter()
                .map(|r| HostPattern::parse(r).unwrap())
                .collect(),
            named: Arc::new(Named::new(
                named.iter().map(|n| HostPattern::parse(n).unwrap()),
            )),
        }
    }

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn non_public_addresses_are_recognized() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(!is_public(bad.parse().unwrap()), "{bad}");
        }
        for good in [
            "1.1.1.1",
            "140.82.112.33",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(is_public(good.parse().unwrap()), "{good}");
        }
    }

    #[tokio::test]
    async fn redirects_stay_on_the_upstream_or_its_allowed_hosts() {
        let p = policy(
            "https://registry.example/",
            &["cdn.example", "*.s3.example"],
            &["registry.example"],
        );
        let from = url("https://registry.example/v2/a/blobs/x");
        assert_eq!(
            p.follow(&from, &url("https://registry.example/v2/b")).await,
            Ok(())
        );
        assert_eq!(p.follow(&from, &url("https://cdn.example/x")).await, Ok(()));
        assert_eq!(
            p.follow(&from, &url("https://b1.s3.example/x")).await,
            Ok(())
        );
        assert!(matches!(
            p.follow(&from, &url("https://s3.example/x")).await,
            Err(Refusal::OtherHost { .. })
        ));
        assert!(matches!(
            p.follow(&from, &url("https://other.example/x")).await,
            Err(Refusal::OtherHost { .. })
        ));
        // Another port of the same host is another host.
        assert!(matches!(
            p.follow(&from, &url("https://registry.example:8443/x"))
                .await,
            Err(Refusal::OtherHost { .. })
        ));
        assert!(matches!(
            p.follow(&from, &url("http://registry.example/x")).await,
            Err(Refusal::Downgrade { .. })
        ));
        assert!(matches!(
            p.follow(&from, &url("http://cdn.example/x")).await,
            Err(Refusal::Downgrade { .. })
        ));
        assert!(matches!(
            p.follow(&from, &url("file:///etc/passwd")).await,
            Err(Refusal::Scheme { .. })
        ));
    }

    #[tokio::test]
    async fn only_named_hosts_may_be_private() {
        let p = policy(
            "http://127.0.0.1:5000/",
            &["127.0.0.1:6000", "127.0.0.1:7000", "169.254.169.254"],
            &["127.0.0.1:5000", "127.0.0.1:7000", "localhost:5000"],
        );
        let from = url("http://127.0.0.1:5000/v2/");
        assert_eq!(p.start(&url("http://127.0.0.1:5000/v2/")).await, Ok(()));
        // Allowed as a redirect and configured as an upstream too.
        assert_eq!(
            p.follow(&from, &url("http://127.0.0.1:7000/b")).await,
            Ok(())
        );
        // Allowed as a redirect, but a private address only an upstream may have.
        assert!(matches!(
            p.follow(&from, &url("http://127.0.0.1:6000/b")).await,
            Err(Refusal::Address { .. })
        ));
        assert!(matches!(
            p.follow(&from, &url("http://169.254.169.254/latest/meta-data/"))
                .await,
            Err(Refusal::Address { .. })
        ));
        // An image pinned on a host nobody configured, at a private address.
        assert!(matches!(
            p.start(&url("https://169.254.169.254/v2/")).await,
            Err(Refusal::Address { .. })
        ));
        assert!(matches!(
            p.start(&url("https://[::1]:9/v2/")).await,
            Err(Refusal::Address { .. })
        ));
        // A named name on another port is checked by address here.
        assert!(matches!(
            p.start(&url("https://localhost:6001/v2/")).await,
            Err(Refusal::Address { .. })
        ));
    }

    #[test]
    fn patterns_parse_as_written() {
        assert_eq!(
            HostPattern::parse("CDN.example:8443"),
            Some(HostPattern::Exact {
                host: "cdn.example".into(),
                port: Some(8443)
            })
        );
        assert_eq!(
            HostPattern::parse("*.s3.amazonaws.com"),
            Some(HostPattern::Suffix("s3.amazonaws.com".into()))
        );
        for bad in ["", "*.", "a b", "x:port", "*", "https://x"] {
            assert_eq!(HostPattern::parse(bad), None, "{bad}");
        }
    }
}
