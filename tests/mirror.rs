//! The image mirror end to end, with real parts only: Debian's `docker-registry` as the
//! upstream, images built offline and pushed with `skopeo`, the real `marketplace
//! serve` mirroring on publish, and `skopeo` pulling everything back from our `/v2/`
//! with the upstream stopped.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Server;
use common::oci::{self, Upstream};
use common::publishing::{Client, definition, setup_with, with_image};

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
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(&dir.path().join("upstream"), None);
    let (layout, index) = oci::two_platform(&dir.path().join("image"), "v1", 200_000);
    let index_digest = oci::digest(&index);
    let dest = upstream.dest_args();
    let mut args: Vec<&str> = vec!["copy", "--all", "--preserve-digests"];
    args.extend(dest.iter().map(String::as_str));
    let src = format!("oci:{}:v1", layout.dir.display());
    let to = format!("docker://{}/acme/tool:v1", upstream.addr);
    oci::skopeo(&[args.as_slice(), &[&src, &to]].concat());
    // A cosign-style signature beside it, as `cosign sign` would push it.
    let (sig, tag, sig_manifest) = oci::signature(
        &dir.path().join("sig"),
        &format!("{}/acme/tool", upstream.addr),
        &index_digest,
        "c2lnbmF0dXJl",
    );
    let src = format!("oci:{}:{tag}", sig.dir.display());
    let to = format!("docker://{}/acme/tool:{tag}", upstream.addr);
    oci::skopeo(&[args.as_slice(), &[&src, &to]].concat());

    let m = setup_with(&dir.path().join("m"), &[]);
    let upstreams = upstreams_file(dir.path(), &upstream, None);
    let server = Server::start_with(&m.data, &["--mirror", "on", "--upstreams", &upstreams]);
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
    let r = reqwest::get(format!(
        "{}/v2/acme/tool/manifests/{index_digest}?ns={addr}",
        server.url
    ))
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), index.as_slice());
    // The signature came along, under its tag.
    let r = reqwest::get(format!("{}/v2/{name}/manifests/{tag}", server.url))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), sig_manifest.as_slice());
    let tags: serde_json::Value = reqwest::get(format!("{}/v2/{name}/tags/list", server.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(tags["tags"], serde_json::json!([tag]));
}
