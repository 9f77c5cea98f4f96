//! Images come along: the downstream mirrors each followed definition's image from the
//! upstream marketplace's own `/v2/`, so the image's registry may be out of reach (here
//! stopped before the downstream starts), and from the image's own registry when the
//! upstream does not have it and the downstream's upstreams file lists it, under the cosign policy its operator set for
//! the followed publisher; skopeo then pulls every platform and the signature from the
//! downstream with the upstream stopped too.

use std::time::{Duration, Instant};

use super::{publisher, repo, until_round};
use crate::common::oci::{self, Upstream};
use crate::common::publishing::{Client, definition, with_image};
use crate::common::{Server, trusted_root};

/// Waits until `server`'s `/v2/` serves `name`'s manifest `digest`.
pub async fn until_served(url: &str, name: &str, digest: &str) {
    let manifest = format!("{url}/v2/{name}/manifests/{digest}");
    let started = Instant::now();
    loop {
        let r = reqwest::Client::new().head(&manifest).send().await.unwrap();
        if r.status() == 200 {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "{name}@{digest} not served by {url}: {}",
            r.status()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn images_are_mirrored_from_the_upstream_marketplace() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Upstream::start(&dir.path().join("registry"), None);
    let (layout, index) = oci::two_platform(&dir.path().join("image"), "v1", 100_000);
    let digest = oci::digest(&index);
    registry.push(&layout.dir, "v1", "acme/tool");
    // Signed with acme's cosign key, as `cosign sign --key` pushes it.
    let keys = dir.path().join("cosign");
    std::fs::create_dir_all(&keys).unwrap();
    let (cosign_private, cosign_public) = oci::cosign_key(&keys, "acme");
    let (sig, tag, sig_manifest) = oci::signature(
        &dir.path().join("sig"),
        &format!("{}/acme/tool", registry.addr),
        &digest,
        |payload| oci::cosign_sign(&cosign_private, payload),
    );
    registry.push(&sig.dir, &tag, "acme/tool");

    // The upstream mirrors from the registry.
    let (up_data, up) = repo(&dir.path().join("up"), &["acme", "beta"]);
    let up_upstreams = dir.path().join("up-upstreams.yaml");
    std::fs::write(
        &up_upstreams,
        format!(
            "otherHosts: skip\nupstreams:\n  - host: {}\n    insecure: true\n",
            registry.addr
        ),
    )
    .unwrap();
    let upstream = Server::start_with(
        &up_data,
        &[
            "--mirror",
            "on",
            "--upstreams",
            up_upstreams.to_str().unwrap(),
        ],
    );
    let image = format!("{}/acme/tool@{digest}", registry.addr);
    let edge = with_image(&definition("gateway", "edge", "1.0.0"), &image);
    let client = Client::new(&upstream.url);
    let (status, body) = client
        .publish_as("acme", &up[0].1, &edge, &[&up[0].0])
        .await;
    assert_eq!(status, 201, "{body}");
    // beta's image is in a registry only the downstream is configured for: the
    // upstream never mirrors it, so the downstream falls back to that registry.
    let other = Upstream::start(&dir.path().join("other"), None);
    let (other_layout, other_index) =
        oci::image(&dir.path().join("other-image"), "v2", &["s390x"], 30_000);
    let other_digest = oci::digest(&other_index);
    other.push(&other_layout.dir, "v2", "beta/store");
    let store = with_image(
        &definition("storage", "store", "1.0.0"),
        &format!("{}/beta/store@{other_digest}", other.addr),
    );
    let (status, body) = client
        .publish_as("beta", &up[1].1, &store, &[&up[1].0])
        .await;
    assert_eq!(status, 201, "{body}");
    let name = format!("{}/acme/tool", registry.addr.replace(':', "_"));
    until_served(&upstream.url, &name, &digest).await;
    // The image's own registry is gone before the downstream ever starts.
    drop(registry);

    // The downstream knows no registry at all: only its upstream marketplace.
    let (down_data, _) = repo(&dir.path().join("down"), &[]);
    let down_upstreams = dir.path().join("down-upstreams.yaml");
    std::fs::write(
        &down_upstreams,
        format!(
            "otherHosts: skip\nupstreams:\n  - host: {}\n    insecure: true\n",
            other.addr
        ),
    )
    .unwrap();
    let up_root = dir.path().join("up-root.json");
    std::fs::write(&up_root, trusted_root(&upstream.url).await).unwrap();
    let serve = |mirror: &str| {
        Server::start_with(
            &down_data,
            &[
                "--upstream",
                &upstream.url,
                "--upstream-root",
                up_root.to_str().unwrap(),
                "--upstream-interval",
                "1s",
                "--mirror",
                mirror,
                "--upstreams",
                down_upstreams.to_str().unwrap(),
            ],
        )
    };
    // First the definitions; then the operator requires acme's images to carry acme's
    // cosign signature, as for a publisher registered here; then the images.
    let downstream = serve("off");
    until_round(&downstream.url, "following acme", |r| {
        publisher(r, "acme")["status"] == "followed"
    })
    .await;
    drop(downstream);
    let o = crate::common::publishing::marketplace(&[
        "publisher",
        "cosign-keys",
        "acme",
        "--cosign-key",
        cosign_public.to_str().unwrap(),
        "--data-dir",
        down_data.to_str().unwrap(),
    ]);
    let out = crate::common::output_text(&o);
    assert!(
        o.status.success() && out.contains("served only when signed"),
        "{out}"
    );
    let downstream = serve("on");
    until_served(&downstream.url, &name, &digest).await;
    let other_name = format!("{}/beta/store", other.addr.replace(':', "_"));
    until_served(&downstream.url, &other_name, &other_digest).await;
    drop(upstream);

    // skopeo pulls every platform back from the downstream alone, digests preserved.
    let out = dir.path().join("pulled");
    let ours = downstream.url.trim_start_matches("http://");
    oci::skopeo(&[
        "copy",
        "--all",
        "--preserve-digests",
        "--src-tls-verify=false",
        &format!("docker://{ours}/{name}@{digest}"),
        &format!("oci:{}:pulled", out.display()),
    ]);
    let mut expected = layout.blobs.clone();
    expected.sort();
    assert_eq!(oci::layout_blobs(&out), expected);
    // The signature came along under its tag.
    let r = reqwest::get(format!("{}/v2/{name}/manifests/{tag}", downstream.url))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), sig_manifest.as_slice());
    let detail: serde_json::Value =
        reqwest::get(format!("{}/api/v1/plugins/acme/edge", downstream.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(detail["latest"]["mirror"]["status"], "mirrored", "{detail}");
    assert!(
        detail["latest"]["mirror"]["verified_by"].is_string(),
        "the signature was checked with acme's key: {detail}"
    );
}
