//! The image mirror against upstreams that misbehave on purpose. The upstream here is
//! the named fake `common::hostile::Hostile` (no real registry redirects to internal
//! addresses or sends an endless manifest on demand); everything else is real: the
//! `marketplace serve` binary, its database and blob store, HTTP on loopback, and, for
//! the image that must still arrive, Debian's `docker-registry`.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Server;
use common::hostile::{Act, Hostile};
use common::oci;
use common::publishing::{Client, Setup, definition, setup_with, until_status, with_image};

/// What an internal service answers; it must never appear anywhere public.
const INTERNAL: &str = "INTERNAL-SECRET-instance-identity-9f2c";

/// Writes `upstreams.yaml` under `dir` with `entries` (YAML list items) and every other
/// host skipped.
fn upstreams(dir: &Path, entries: &str) -> String {
    let path = dir.join("upstreams.yaml");
    std::fs::write(&path, format!("otherHosts: skip\nupstreams:\n{entries}")).unwrap();
    path.to_str().unwrap().to_owned()
}

/// A marketplace under `dir/m` mirroring with `upstreams` and `args`.
fn marketplace(dir: &Path, upstreams: &str, args: &[&str]) -> (Setup, Server) {
    let m = setup_with(&dir.join("m"), &[]);
    let mut all = vec!["--mirror", "on", "--upstreams", upstreams];
    all.extend_from_slice(args);
    let server = Server::start_with(&m.data, &all);
    (m, server)
}

/// Publishes acme's `name` 1.0.0 pinning `image`.
async fn publish(m: &Setup, server: &Server, name: &str, image: &str) {
    let def = with_image(&definition("gateway", name, "1.0.0"), image);
    let (status, body) = Client::new(&server.url)
        .publish_signed(&m.acme_token, &def, &[&m.acme])
        .await;
    assert_eq!(status, 201, "{body}");
}

/// The plugin page and the public API entry of acme's `name`, as anyone reads them.
async fn public_view(server: &Server, name: &str) -> (String, serde_json::Value) {
    let page = common::text(format!("{}/plugins/acme/{name}", server.url)).await;
    let api: serde_json::Value = reqwest::get(format!("{}/api/v1/plugins/acme/{name}", server.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (page, api)
}

/// The `mirror.error` of a public API entry, wherever the version list puts it.
fn api_errors(api: &serde_json::Value) -> String {
    let mut found = Vec::new();
    fn walk(v: &serde_json::Value, found: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::String(e)) =
                    map.get("mirror").and_then(|m| m.get("error"))
                {
                    found.push(e.clone());
                }
                map.values().for_each(|v| walk(v, found));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| walk(v, found)),
            _ => {}
        }
    }
    walk(api, &mut found);
    found.join("\n")
}

/// An upstream's redirects to the marketplace's own network are refused: another
/// loopback port, a link-local address, a name that resolves to loopback, (from an
/// HTTPS upstream) plain HTTP, and a token realm on another host. The internal service is never reached, and nothing it
/// could have said, nor where it is, appears on the page or in the API.
#[tokio::test]
async fn redirects_into_the_marketplaces_network_are_refused_and_nothing_leaks() {
    let dir = tempfile::tempdir().unwrap();
    let internal = Hostile::start();
    internal.answer_everything(INTERNAL);
    let internal_port = internal.addr.rsplit(':').next().unwrap().to_owned();
    let tls = oci::Tls::make(&dir.path().join("tls"));
    let upstream = Hostile::start();
    let secure = Hostile::start_tls(&tls);
    // Its challenge sends the mirror to the internal service for a token.
    let realmed = Hostile::start();
    realmed.require_token_at(&format!("{}/token", internal.url));

    // Each image's manifest redirects somewhere it must not go.
    let cases = [
        (
            "port",
            &upstream,
            format!("{}/latest/meta-data/", internal.url),
        ),
        (
            "linklocal",
            &upstream,
            "http://169.254.169.254/latest/meta-data/".to_owned(),
        ),
        (
            "name",
            &upstream,
            format!("http://localhost:{internal_port}/latest/meta-data/"),
        ),
        ("downgrade", &secure, format!("{}/latest/", internal.url)),
        (
            "downgradeself",
            &secure,
            format!("http://{}/v2/acme/x/manifests/y", secure.addr),
        ),
        // No redirect: the manifest is there, behind the challenge.
        ("realm", &realmed, String::new()),
    ];
    // The link-local address and the name are even allowed as redirect targets: the
    // address rule still refuses them. The internal service's own address is allowed
    // for the HTTPS upstream, to show the downgrade rule refusing it.
    let path = upstreams(
        dir.path(),
        &format!(
            "  - host: {}\n    insecure: true\n    redirects: ['169.254.169.254', 'localhost:{internal_port}']\n  - host: {}\n    caFile: {}\n    redirects: ['{}']\n  - host: {}\n    insecure: true\n",
            upstream.addr,
            secure.addr,
            tls.ca.display(),
            internal.addr,
            realmed.addr
        ),
    );
    let (m, server) = marketplace(dir.path(), &path, &[]);
    let mut images = Vec::new();
    for (name, host, to) in &cases {
        let (digest, _) = host.image(&format!("acme/{name}"), 1000);
        if !to.is_empty() {
            host.act(
                &format!("/v2/acme/{name}/manifests/{digest}"),
                Act::Redirect(to.clone()),
            );
        }
        let image = format!("{}/acme/{name}@{digest}", host.addr);
        publish(&m, &server, name, &image).await;
        images.push((name, image));
    }

    let mut details = Vec::new();
    for (name, image) in &images {
        let refused = if **name == "realm" {
            "token realm refused"
        } else {
            "redirect refused"
        };
        let failed = until_status(&m.data, image, "failed").await;
        let public = failed["lastError"].as_str().unwrap();
        assert!(
            public.ends_with(&format!(": {refused}")),
            "{name}: {public}"
        );
        details.push(failed["lastErrorDetail"].as_str().unwrap().to_owned());

        let (page, api) = public_view(&server, name).await;
        let errors = api_errors(&api);
        assert!(errors.contains(refused), "{name}: {api}");
        assert!(
            page.contains("Mirror failed:") && page.contains(refused),
            "{name}: {page}"
        );
        for shown in [&page, &errors] {
            for secret in [
                INTERNAL,
                &internal.addr,
                "169.254",
                "localhost",
                "meta-data",
            ] {
                assert!(!shown.contains(secret), "{name} shows {secret}: {shown}");
            }
        }
    }
    // The operator reads why.
    let why = [
        "is neither the upstream's own host nor listed in its `redirects`",
        "169.254.169.254 resolves to 169.254.169.254, a non-public address",
        "localhost resolves to ",
        "a redirect from HTTPS to plain HTTP",
        "a redirect from HTTPS to plain HTTP",
        "token realm refused: http://127.0.0.1:",
    ];
    for ((detail, why), (name, _)) in details.iter().zip(why).zip(&images) {
        assert!(detail.contains(why), "{name}: {detail}");
    }
    assert!(internal.seen().is_empty(), "{:?}", internal.seen());
}

/// The peak resident memory (`VmHWM`) and the current one (`VmRSS`) of `pid`, KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// A 100 MB manifest (streamed, no length declared) is refused at our 4 MiB cap while
/// it arrives: the server's peak memory grows by at most 16 MiB, and most of the
/// manifest is never even sent. (Before, the whole manifest was read first: this test
/// measured a peak 100 MiB higher.)
#[tokio::test]
async fn a_manifest_past_the_cap_is_refused_while_it_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Hostile::start();
    let (digest, _) = upstream.image("acme/huge", 1000);
    let total = 100_000_000;
    upstream.act(
        &format!("/v2/acme/huge/manifests/{digest}"),
        Act::Endless(total),
    );
    let path = upstreams(
        dir.path(),
        &format!("  - host: {}\n    insecure: true\n", upstream.addr),
    );
    let (m, server) = marketplace(dir.path(), &path, &[]);
    // Let the server settle (built-ins loaded, first pages rendered) before measuring.
    public_view(&server, "nothing").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = server.child.id();
    let (_, before) = memory_kib(pid);

    let image = format!("{}/acme/huge@{digest}", upstream.addr);
    publish(&m, &server, "huge", &image).await;
    let failed = until_status(&m.data, &image, "failed").await;
    let (peak, after) = memory_kib(pid);
    let growth = peak.saturating_sub(before);
    println!(
        "manifest of {total} bytes refused: RSS before {before} KiB, peak {peak} KiB (+{growth} KiB), after {after} KiB; the upstream sent {} bytes",
        upstream.endless_sent()
    );
    assert!(growth <= 16 * 1024, "peak grew by {growth} KiB");
    // Our 4 MiB, the sockets' buffers on both sides, and what was in flight when the
    // connection closed: well under half of it.
    assert!(
        upstream.endless_sent() < 48 * 1024 * 1024,
        "{} bytes were sent",
        upstream.endless_sent()
    );
    let public = failed["lastError"].as_str().unwrap();
    assert!(public.contains("manifest too large"), "{public}");
    let (page, _) = public_view(&server, "huge").await;
    assert!(page.contains("manifest too large"), "{page}");
}

/// Two images whose layers trickle in one byte at a time hold both mirror slots; each
/// fails with `timed out` at its blob's deadline (the grace plus its size at the
/// minimum rate), and an image from another registry, published after them, is
/// mirrored meanwhile.
#[tokio::test]
async fn a_trickling_blob_fails_at_its_deadline_and_frees_its_slot() {
    let dir = tempfile::tempdir().unwrap();
    let trickler = Hostile::start();
    let registry = oci::Upstream::start(&dir.path().join("registry"), None);
    let (layout, index) = oci::two_platform(&dir.path().join("image"), "v1", 10_000);
    registry.push(&layout.dir, "v1", "acme/tool");
    let path = upstreams(
        dir.path(),
        &format!(
            "  - host: {}\n    insecure: true\n  - host: {}\n    insecure: true\n",
            trickler.addr, registry.addr
        ),
    );
    // A 4,000-byte layer at 1 KiB/s after 2 s of grace: a deadline near 6 s. The
    // trickle (a byte every 100 ms) would take 400 s, and never trips the 60 s
    // per-read timeout.
    let (m, server) = marketplace(
        dir.path(),
        &path,
        &[
            "--mirror-jobs",
            "2",
            "--mirror-min-rate",
            "1KiB",
            "--mirror-grace",
            "2s",
        ],
    );
    let started = Instant::now();
    let mut slow = Vec::new();
    for name in ["slow1", "slow2"] {
        let (digest, layer) = trickler.image(&format!("acme/{name}"), 4000);
        trickler.act(
            &format!("/v2/acme/{name}/blobs/{layer}"),
            Act::Trickle(Duration::from_millis(100)),
        );
        let image = format!("{}/acme/{name}@{digest}", trickler.addr);
        publish(&m, &server, name, &image).await;
        slow.push(image);
    }
    for image in &slow {
        until_status(&m.data, image, "mirroring").await;
    }
    let normal = format!("{}/acme/tool@{}", registry.addr, oci::digest(&index));
    publish(&m, &server, "normal", &normal).await;

    until_status(&m.data, &normal, "mirrored").await;
    for image in &slow {
        let failed = until_status(&m.data, image, "failed").await;
        let public = failed["lastError"].as_str().unwrap();
        assert!(public.ends_with(": timed out"), "{public}");
        let detail = failed["lastErrorDetail"].as_str().unwrap();
        assert!(detail.contains("the blob's deadline"), "{detail}");
    }
    let took = started.elapsed();
    println!("both trickling jobs failed and the other image was mirrored within {took:?}");
    // The deadline: 2 s + 4,000 bytes at 1,024 per second, 5.9 s after the claim.
    assert!(
        took >= Duration::from_millis(5900),
        "failed before the deadline: {took:?}"
    );
    assert!(took < Duration::from_secs(30), "{took:?}");
}

/// A registry that sends blobs to a CDN works when its `redirects` lists the CDN: the
/// token from its realm goes to the registry only, never to the CDN, and what the
/// marketplace serves afterwards is the image, byte for byte.
#[tokio::test]
async fn a_cdn_redirect_listed_in_the_upstreams_file_is_followed_without_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Hostile::start();
    let cdn = Hostile::start();
    upstream.require_token(oci::USER, oci::PASSWORD);
    let (digest, layer) = upstream.image("acme/cdn", 5000);
    let layer_bytes = oci::noise("acme/cdn", 5000);
    cdn.file(
        &format!("/blobs/{layer}"),
        "application/octet-stream",
        layer_bytes.clone(),
    );
    upstream.act(
        &format!("/v2/acme/cdn/blobs/{layer}"),
        Act::Redirect(format!("{}/blobs/{layer}?signed=1", cdn.url)),
    );
    std::fs::write(dir.path().join("password"), oci::PASSWORD).unwrap();
    // The CDN is on loopback here, so it is configured as an upstream too: only
    // upstreams may be on private addresses.
    let path = upstreams(
        dir.path(),
        &format!(
            "  - host: {}\n    insecure: true\n    username: {}\n    passwordFile: password\n    redirects: ['{}']\n  - host: {}\n    insecure: true\n",
            upstream.addr,
            oci::USER,
            cdn.addr,
            cdn.addr
        ),
    );
    let (m, server) = marketplace(dir.path(), &path, &[]);
    let image = format!("{}/acme/cdn@{digest}", upstream.addr);
    publish(&m, &server, "cdn", &image).await;
    until_status(&m.data, &image, "mirrored").await;

    let name = format!("{}/acme/cdn", upstream.addr.replace(':', "_"));
    let served = reqwest::get(format!("{}/v2/{name}/blobs/{layer}", server.url))
        .await
        .unwrap();
    assert_eq!(served.status(), 200);
    assert_eq!(served.bytes().await.unwrap().to_vec(), layer_bytes);

    let cdn_seen = cdn.seen();
    assert_eq!(cdn_seen.len(), 1, "{cdn_seen:?}");
    assert_eq!(cdn_seen[0].1, None, "credentials went to the CDN");
    let seen = upstream.seen();
    let token = seen
        .iter()
        .find(|(p, _)| p.starts_with("/token"))
        .expect("the realm was asked");
    assert!(
        token.0.contains("scope=repository%3Aacme%2Fcdn%3Apull"),
        "{token:?}"
    );
    assert!(
        token.1.as_deref().unwrap().starts_with("Basic "),
        "{token:?}"
    );
    assert!(
        seen.iter()
            .any(|(p, a)| p.starts_with("/v2/acme/cdn/blobs/")
                && a.as_deref() == Some("Bearer hostile-token-1")),
        "{seen:?}"
    );
}

/// A job as a whole has a deadline too: with a minimum rate so low that the blob's own
/// deadline is days away, the job still fails with `timed out` at
/// `--mirror-job-timeout`.
#[tokio::test]
async fn a_job_fails_at_its_own_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let trickler = Hostile::start();
    let (digest, layer) = trickler.image("acme/crawl", 4000);
    trickler.act(
        &format!("/v2/acme/crawl/blobs/{layer}"),
        Act::Trickle(Duration::from_millis(100)),
    );
    let path = upstreams(
        dir.path(),
        &format!("  - host: {}\n    insecure: true\n", trickler.addr),
    );
    let (m, server) = marketplace(
        dir.path(),
        &path,
        &["--mirror-min-rate", "1", "--mirror-job-timeout", "3s"],
    );
    let started = Instant::now();
    let image = format!("{}/acme/crawl@{digest}", trickler.addr);
    publish(&m, &server, "crawl", &image).await;
    let failed = until_status(&m.data, &image, "failed").await;
    let took = started.elapsed();
    assert!(
        failed["lastError"]
            .as_str()
            .unwrap()
            .ends_with(": timed out"),
        "{failed}"
    );
    let detail = failed["lastErrorDetail"].as_str().unwrap();
    assert!(detail.contains("the job's deadline"), "{detail}");
    assert!(took >= Duration::from_secs(3), "{took:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
}
