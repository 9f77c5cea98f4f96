//! The image mirror end to end, with real parts only: Debian's `docker-registry` as the
//! upstream, images built offline and pushed with `skopeo`, the real `marketplace
//! serve` mirroring on publish, and `skopeo` pulling everything back from our `/v2/`
//! with the upstream stopped. Here: mirroring and pulling back, an `endpoint`, `mirror
//! run`; `faults` (a missing image, damaged bytes, a kill mid-transfer, a stuck
//! upstream) and `provenance` (cosign signatures, referrers) share these helpers.

mod common;
#[path = "mirror/faults.rs"]
mod faults;
#[path = "mirror/provenance.rs"]
mod provenance;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Server;
use common::oci::{self, Upstream};
use common::publishing::{
    Client, definition, mirror_cli, setup_on, setup_with, until_status, with_image,
};

/// A plain-HTTP `docker-registry` under `dir` holding a two-platform image (layers of
/// `layer_bytes`) as `acme/tool:v1`; the layout, the index and its digest.
fn upstream_with_image(dir: &Path, layer_bytes: usize) -> (Upstream, oci::Layout, Vec<u8>, String) {
    let upstream = Upstream::start(&dir.join("upstream"), None);
    let (layout, index) = oci::two_platform(&dir.join("image"), "v1", layer_bytes);
    let digest = oci::digest(&index);
    upstream.push(&layout.dir, "v1", "acme/tool");
    (upstream, layout, index, digest)
}

/// Writes an upstreams file that lists `upstream` and skips every other host (the
/// built-ins pin images on the internet; tests stay on loopback).
fn upstreams_file(dir: &Path, upstream: &Upstream, tls: Option<&oci::Tls>) -> String {
    let path = dir.join("upstreams.yaml");
    let entry = match tls {
        None => format!("  - host: {}\n    insecure: true\n", upstream.addr),
        Some(tls) => {
            std::fs::write(
                dir.join("registry-password"),
                format!("{}\n", oci::PASSWORD),
            )
            .unwrap();
            format!(
                "  - host: {}\n    caFile: {}\n    username: {}\n    passwordFile: registry-password\n",
                upstream.addr,
                tls.ca.display(),
                oci::USER
            )
        }
    };
    std::fs::write(&path, format!("otherHosts: skip\nupstreams:\n{entry}")).unwrap();
    path.to_str().unwrap().to_owned()
}

/// A marketplace under `dir/m` mirroring from `upstream` (plain HTTP) where acme
/// publishes `edge` 1.0.0 pinning `acme/tool@digest` there; its setup, server and the
/// image reference.
async fn publish_pinning(
    dir: &Path,
    upstream: &Upstream,
    digest: &str,
) -> (common::publishing::Setup, Server, String) {
    let m = setup_with(&dir.join("m"), &[]);
    let upstreams = upstreams_file(dir, upstream, None);
    let server = Server::start_with(&m.data, &["--mirror", "on", "--upstreams", &upstreams]);
    let image = format!("{}/acme/tool@{digest}", upstream.addr);
    let def = with_image(&definition("gateway", "edge", "1.0.0"), &image);
    let c = Client::new(&server.url);
    assert_eq!(
        c.publish_signed(&m.acme_token, &def, &[&m.acme]).await.0,
        201
    );
    (m, server, image)
}

/// The body of a 200 answer to GET `url`.
async fn served(url: String) -> Vec<u8> {
    let r = reqwest::get(&url).await.unwrap();
    assert_eq!(r.status(), 200, "{url}");
    r.bytes().await.unwrap().to_vec()
}

/// The direct `/v2/` name of `addr/path` (a port as `_PORT`).
fn direct(addr: &str, path: &str) -> String {
    format!("{}/{path}", addr.replace(':', "_"))
}

/// Waits until our `/v2/` serves `name`'s manifest `digest`.
async fn until_served(server: &Server, name: &str, digest: &str, within: Duration) {
    let url = format!("{}/v2/{name}/manifests/{digest}", server.url);
    let started = Instant::now();
    loop {
        let r = reqwest::Client::new().head(&url).send().await.unwrap();
        if r.status() == 200 {
            return;
        }
        assert!(
            started.elapsed() < within,
            "{name}@{digest} not served after {within:?}: {}",
            r.status()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_published_image_is_mirrored_and_pulled_back_with_the_upstream_gone() {
    mirrored_and_pulled_back(None).await
}

/// The same with the server's store in PostgreSQL: jobs claimed, content recorded and
/// served from there.
#[tokio::test]
async fn a_published_image_is_mirrored_and_pulled_back_with_the_upstream_gone_on_postgres() {
    let pg = common::pg::shared();
    mirrored_and_pulled_back(Some(pg.fresh().await)).await
}

async fn mirrored_and_pulled_back(database: Option<String>) {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, layout, index, index_digest) = upstream_with_image(dir.path(), 200_000);
    // A cosign-style signature beside it, as `cosign sign` would push it.
    let (sig, tag, sig_manifest) = oci::signature(
        &dir.path().join("sig"),
        &format!("{}/acme/tool", upstream.addr),
        &index_digest,
        |_| "c2lnbmF0dXJl".into(),
    );
    upstream.push(&sig.dir, &tag, "acme/tool");

    let m = setup_on(&dir.path().join("m"), &[], database.as_deref());
    let upstreams = upstreams_file(dir.path(), &upstream, None);
    let mut args = vec!["--mirror", "on", "--upstreams", &upstreams];
    if let Some(url) = &database {
        args.extend(["--database", url]);
    }
    let server = Server::start_with(&m.data, &args);
    let def = with_image(
        &definition("gateway", "edge", "1.0.0"),
        &format!("{}/acme/tool@{index_digest}", upstream.addr),
    );
    let c = Client::new(&server.url);
    assert_eq!(
        c.publish_signed(&m.acme_token, &def, &[&m.acme]).await.0,
        201
    );
    let name = direct(&upstream.addr, "acme/tool");
    until_served(&server, &name, &index_digest, Duration::from_secs(60)).await;
    drop(upstream);

    // skopeo pulls every platform back from us alone, digests preserved.
    let out = dir.path().join("pulled");
    let ours = server.url.trim_start_matches("http://");
    oci::skopeo(&[
        "copy",
        "--all",
        "--preserve-digests",
        "--src-tls-verify=false",
        &format!("docker://{ours}/{name}@{index_digest}"),
        &format!("oci:{}:pulled", out.display()),
    ]);
    let mut expected = layout.blobs.clone();
    expected.sort();
    assert_eq!(oci::layout_blobs(&out), expected);
    let inspected = oci::skopeo(&[
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{ours}/{name}@{index_digest}"),
    ]);
    assert_eq!(inspected.as_bytes(), index.as_slice());

    // containerd's mirror form: the upstream path and `ns`.
    let addr = name.split('/').next().unwrap().replace('_', ":");
    assert_eq!(
        served(format!(
            "{}/v2/acme/tool/manifests/{index_digest}?ns={addr}",
            server.url
        ))
        .await,
        index
    );
    // The signature came along, under its tag.
    assert_eq!(
        served(format!("{}/v2/{name}/manifests/{tag}", server.url)).await,
        sig_manifest
    );
    let tags: serde_json::Value = reqwest::get(format!("{}/v2/{name}/tags/list", server.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(tags["tags"], serde_json::json!([tag]));

    // The status per version: the detail API, the plugin page, the metrics.
    let detail: serde_json::Value =
        reqwest::get(format!("{}/api/v1/plugins/acme/edge", server.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    let mirror = &detail["latest"]["mirror"];
    assert_eq!(mirror["status"], "mirrored", "{detail}");
    let expected_size: u64 = layout
        .blobs
        .iter()
        .chain(&sig.blobs)
        .collect::<std::collections::BTreeSet<_>>()
        .iter()
        .map(|d| {
            let in_image = layout.dir.join("blobs/sha256").join(&d[7..]);
            let path = if in_image.exists() {
                in_image
            } else {
                sig.dir.join("blobs/sha256").join(&d[7..])
            };
            std::fs::metadata(path).unwrap().len()
        })
        .sum();
    assert_eq!(
        mirror["size"].as_u64().unwrap(),
        expected_size,
        "image, platforms and signature"
    );
    let page = common::text(format!("{}/plugins/acme/edge", server.url)).await;
    assert!(page.contains("Mirrored here"), "{page}");
    let metrics = common::text(format!("{}/metrics", server.url)).await;
    assert!(
        metrics.contains("marketplace_mirror_images{status=\"mirrored\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!("marketplace_mirror_bytes {expected_size}")),
        "{metrics}"
    );
    // The built-ins' images (on the internet, skipped here) wait.
    assert!(
        metrics.contains("marketplace_mirror_images{status=\"pending\"} 8"),
        "{metrics}"
    );
    assert_eq!(
        m.data.join("marketplace.db").exists(),
        database.is_none(),
        "the store is where --database says"
    );
}

/// An air-gapped site: definitions pin images on a host it cannot reach; the images
/// were carried in and pushed to the site's own registry under the same paths, and the
/// upstreams file sends that host's pulls there. Served under the original name.
#[tokio::test]
async fn images_of_an_unreachable_host_are_pulled_from_the_configured_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let local = Upstream::start(&dir.path().join("local"), None);
    let (layout, index) = oci::two_platform(&dir.path().join("image"), "v1", 20_000);
    let index_digest = oci::digest(&index);
    local.push(&layout.dir, "v1", "acme/tool");

    let m = setup_with(&dir.path().join("m"), &[]);
    let upstreams = dir.path().join("upstreams.yaml");
    std::fs::write(
        &upstreams,
        format!(
            "otherHosts: skip\nupstreams:\n  - host: registry.example.com\n    endpoint: {}\n    insecure: true\n",
            local.addr
        ),
    )
    .unwrap();
    // This site also restricts pulls to holders of a token.
    let token = "site-pull-token-0123456789";
    let tokens = dir.path().join("pull-tokens");
    std::fs::write(&tokens, format!("# cluster nodes\n{token}\n")).unwrap();
    let server = Server::start_with(
        &m.data,
        &[
            "--mirror",
            "on",
            "--upstreams",
            upstreams.to_str().unwrap(),
            "--registry-token-file",
            tokens.to_str().unwrap(),
        ],
    );
    let image = format!("registry.example.com/acme/tool@{index_digest}");
    let def = with_image(&definition("gateway", "edge", "1.0.0"), &image);
    let c = Client::new(&server.url);
    assert_eq!(
        c.publish_signed(&m.acme_token, &def, &[&m.acme]).await.0,
        201
    );
    until_status(&m.data, &image, "mirrored").await;
    let r = reqwest::Client::new()
        .get(format!(
            "{}/v2/acme/tool/manifests/{index_digest}?ns=registry.example.com",
            server.url
        ))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), index.as_slice());
    // skopeo with the token as a password pulls; without it, it is refused.
    let ours = server.url.trim_start_matches("http://");
    let reference = format!("docker://{ours}/registry.example.com/acme/tool@{index_digest}");
    let inspected = oci::skopeo(&[
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("--creds=node:{token}"),
        &reference,
    ]);
    assert_eq!(inspected.as_bytes(), index.as_slice());
    let refused = std::process::Command::new("skopeo")
        .args([
            "--insecure-policy",
            "inspect",
            "--raw",
            "--tls-verify=false",
            &reference,
        ])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("unauthorized"), "{stderr}");
}

/// `marketplace mirror run` mirrors what is due in the foreground, with no server
/// running; a server with the mirror off then serves it.
#[tokio::test]
async fn mirror_run_works_through_the_queue_without_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, _layout, _index, index_digest) = upstream_with_image(dir.path(), 30_000);

    let m = setup_with(&dir.path().join("m"), &[]);
    let image = format!("{}/acme/tool@{index_digest}", upstream.addr);
    {
        let server = Server::start(&m.data);
        let def = with_image(&definition("gateway", "edge", "1.0.0"), &image);
        let c = Client::new(&server.url);
        assert_eq!(
            c.publish_signed(&m.acme_token, &def, &[&m.acme]).await.0,
            201
        );
    }
    let upstreams = upstreams_file(dir.path(), &upstream, None);
    // A download of an earlier `mirror run` that was killed: removed as this one starts.
    let dead = m
        .data
        .join(format!("blobs/tmp/{}.0123abcd", "cd".repeat(32)));
    std::fs::write(&dead, vec![0u8; 2000]).unwrap();
    let (ok, out) = mirror_cli(&m.data, &["run", "--upstreams", &upstreams]);
    assert!(ok, "{out}");
    assert!(out.contains("1 image(s) mirrored, 0 failed"), "{out}");
    assert!(
        out.contains("removed 1 unfinished download(s) of a process that died (2000 bytes)"),
        "{out}"
    );
    assert!(!dead.exists());
    until_status(&m.data, &image, "mirrored").await;
    // Nothing is due any more: a second run does nothing.
    let (ok, out) = mirror_cli(&m.data, &["run", "--upstreams", &upstreams]);
    assert!(ok && out.contains("0 image(s) mirrored, 0 failed"), "{out}");

    drop(upstream);
    let server = Server::start(&m.data); // mirror off
    until_served(
        &server,
        &direct(image.split('/').next().unwrap(), "acme/tool"),
        &index_digest,
        Duration::from_secs(5),
    )
    .await;
}
