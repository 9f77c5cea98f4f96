//! The image mirror end to end, with real parts only: Debian's `docker-registry` as the
//! upstream, images built offline and pushed with `skopeo`, the real `marketplace
//! serve` mirroring on publish, and `skopeo` pulling everything back from our `/v2/`
//! with the upstream stopped.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Server;
use common::oci::{self, Upstream};
use common::publishing::{Client, definition, mirror_cli, setup_with, until_status, with_image};

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
    let page = reqwest::get(format!("{}/plugins/acme/edge", server.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("Mirrored here"), "{page}");
    let metrics = reqwest::get(format!("{}/metrics", server.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
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
}

/// `marketplace mirror ...` on `data`: exit status and stdout.
#[tokio::test]
async fn over_tls_with_credentials_a_missing_image_fails_clearly_and_arrives_on_retry() {
    let dir = tempfile::tempdir().unwrap();
    let tls = oci::Tls::make(&dir.path().join("tls"));
    let upstream = Upstream::start(&dir.path().join("upstream"), Some(&tls));
    let (layout, index) = oci::two_platform(&dir.path().join("image"), "v1", 50_000);
    let index_digest = oci::digest(&index);
    let image = format!("{}/acme/tool@{index_digest}", upstream.addr);

    let m = setup_with(&dir.path().join("m"), &[]);
    let upstreams = upstreams_file(dir.path(), &upstream, Some(&tls));
    let server = Server::start_with(&m.data, &["--mirror", "on", "--upstreams", &upstreams]);
    let c = Client::new(&server.url);
    let def = with_image(&definition("gateway", "edge", "1.0.0"), &image);
    assert_eq!(
        c.publish_signed(&m.acme_token, &def, &[&m.acme]).await.0,
        201
    );

    // Not pushed yet: the job fails with the reason and a next attempt.
    let failed = until_status(&m.data, &image, "failed").await;
    let error = failed["lastError"].as_str().unwrap();
    assert!(error.contains("not found upstream"), "{error}");
    assert!(failed["nextAttemptAt"].as_i64().unwrap() > 0);
    let (_, table) = mirror_cli(&m.data, &["status"]);
    assert!(
        table.contains("failed") && table.contains("not found upstream"),
        "{table}"
    );
    // The password never appears in what the operator or the log sees.
    assert!(!table.contains(oci::PASSWORD));
    let page = reqwest::get(format!("{}/plugins/acme/edge", server.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("Mirror failed:") && page.contains("not found upstream; next attempt in"),
        "{page}"
    );

    upstream.push(&layout.dir, "v1", "acme/tool");
    let (ok, out) = mirror_cli(&m.data, &["retry", "acme/tool"]);
    assert!(ok && out.contains("1 failed image(s) due now"), "{out}");
    let mirrored = until_status(&m.data, &image, "mirrored").await;
    let expected: u64 = layout.blobs.iter().map(|d| layout.size(d)).sum();
    assert_eq!(mirrored["size"].as_u64().unwrap(), expected);
    until_served(
        &server,
        &direct(&upstream.addr, "acme/tool"),
        &index_digest,
        Duration::from_secs(10),
    )
    .await;

    // Every stored blob verifies; nothing is unreferenced.
    let (ok, out) = mirror_cli(&m.data, &["verify"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("7 blob(s)") && out.contains("0 corrupt, 0 missing"),
        "{out}"
    );
    let (ok, out) = mirror_cli(&m.data, &["gc", "--min-age", "0s"]);
    assert!(
        ok && out.contains("0 blob(s) and 0 unfinished download(s), 0 bytes would be removed"),
        "{out}"
    );

    // A layer damaged on our disk: verify names it, --repair mirrors the image again.
    let layer = layout.largest();
    let stored = m
        .data
        .join("blobs/sha256")
        .join(&layer[7..9])
        .join(&layer[7..]);
    oci::flip_byte(&stored, 100);
    let (ok, out) = mirror_cli(&m.data, &["verify"]);
    assert!(!ok, "{out}");
    assert!(out.contains(&format!("corrupt  {layer}")), "{out}");
    let (ok, out) = mirror_cli(&m.data, &["verify", "--repair"]);
    assert!(!ok && out.contains("1 image(s) queued"), "{out}");
    until_status(&m.data, &image, "mirrored").await;
    let (ok, out) = mirror_cli(&m.data, &["verify"]);
    assert!(ok, "after the repair: {out}");
}

#[tokio::test]
async fn an_upstream_serving_other_bytes_than_the_digest_stores_nothing_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, layout, _index, index_digest) = upstream_with_image(dir.path(), 50_000);
    // The registry's copy of the largest layer is damaged: it serves other bytes under
    // the layer's digest, as a faulty or hostile registry would.
    let layer = layout.largest();
    let file = upstream.blob_file(&layer);
    oci::flip_byte(&file, 1000);

    let (m, server, image) = publish_pinning(dir.path(), &upstream, &index_digest).await;
    let failed = until_status(&m.data, &image, "failed").await;
    let error = failed["lastError"].as_str().unwrap();
    assert!(
        error.contains(&layer) && error.contains("digest"),
        "{error}"
    );
    assert!(
        !m.data
            .join("blobs/sha256")
            .join(&layer[7..9])
            .join(&layer[7..])
            .exists(),
        "nothing is stored under a digest the bytes do not hash to"
    );
    assert_eq!(
        std::fs::read_dir(m.data.join("blobs/tmp")).unwrap().count(),
        0,
        "no partial file is left behind"
    );
    let r = reqwest::get(format!(
        "{}/v2/{}/manifests/{index_digest}",
        server.url,
        direct(&upstream.addr, "acme/tool")
    ))
    .await
    .unwrap();
    assert_eq!(r.status(), 404, "a failed image is not served");
}

#[tokio::test]
async fn a_mirror_killed_mid_transfer_resumes_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    // Two layers of 48 MiB: long enough to be caught in the middle.
    let (upstream, _layout, _index, index_digest) = upstream_with_image(dir.path(), 48 << 20);

    let m = setup_with(&dir.path().join("m"), &[]);
    let upstreams = upstreams_file(dir.path(), &upstream, None);
    let serve_args = [
        "--mirror",
        "on",
        "--upstreams",
        &upstreams,
        "--mirror-lease",
        "3s",
    ];
    let mut server = Server::start_with(&m.data, &serve_args);
    let image = format!("{}/acme/tool@{index_digest}", upstream.addr);
    let def = with_image(&definition("gateway", "edge", "1.0.0"), &image);
    let c = Client::new(&server.url);
    assert_eq!(
        c.publish_signed(&m.acme_token, &def, &[&m.acme]).await.0,
        201
    );

    // SIGKILL as soon as a layer is half-written.
    let tmp = m.data.join("blobs/tmp");
    let started = Instant::now();
    loop {
        let writing = std::fs::read_dir(&tmp)
            .map(|d| {
                d.filter_map(Result::ok)
                    .any(|e| e.metadata().is_ok_and(|m| m.len() > 4 << 20))
            })
            .unwrap_or(false);
        if writing {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no layer transfer seen"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    // The killed download's temporary files: `mirror gc` lists them (dry run, so they
    // stay), and the next start removes them, long before they are an hour old.
    let left: Vec<String> = tmp_names(&tmp);
    assert!(!left.is_empty());
    let (ok, out) = mirror_cli(&m.data, &["gc"]);
    assert!(ok, "{out}");
    for name in &left {
        assert!(
            out.contains(&format!("unfinished  tmp/{name} (")),
            "gc does not list {name}: {out}"
        );
        assert!(tmp.join(name).exists(), "a dry run removed {name}");
    }
    assert!(
        out.contains(&format!("{} unfinished download(s)", left.len())),
        "{out}"
    );
    let blobs_dir = m.data.join("blobs/sha256");
    let stored_before: Vec<(std::path::PathBuf, std::time::SystemTime)> =
        std::fs::read_dir(&blobs_dir)
            .unwrap()
            .flat_map(|shard| std::fs::read_dir(shard.unwrap().path()).unwrap())
            .map(|e| {
                let e = e.unwrap();
                (e.path(), e.metadata().unwrap().modified().unwrap())
            })
            .collect();
    let (_, out) = mirror_cli(&m.data, &["status"]);
    assert!(out.contains("mirroring"), "killed mid-job: {out}");

    // Restarted: the dead server's lease runs out and the job resumes to the end.
    let server = Server::start_with(&m.data, &serve_args);
    let now = tmp_names(&tmp);
    for name in &left {
        assert!(!now.contains(name), "{name} survived the restart");
    }
    until_status(&m.data, &image, "mirrored").await;
    until_served(
        &server,
        &direct(&upstream.addr, "acme/tool"),
        &index_digest,
        Duration::from_secs(10),
    )
    .await;
    // What was complete before the kill was kept, not fetched again.
    for (path, modified) in &stored_before {
        assert_eq!(
            std::fs::metadata(path).unwrap().modified().unwrap(),
            *modified,
            "{} rewritten",
            path.display()
        );
    }
    let (ok, out) = mirror_cli(&m.data, &["verify"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("7 blob(s)") && out.contains("0 corrupt, 0 missing"),
        "{out}"
    );
    assert_eq!(tmp_names(&tmp), Vec::<String>::new(), "finished downloads");
    // `gc --delete` removes such a file, named as the store names them, beside the
    // running server.
    let dead = format!("{}.0123abcd", "ab".repeat(32));
    std::fs::write(tmp.join(&dead), vec![0u8; 1000]).unwrap();
    let (ok, out) = mirror_cli(&m.data, &["gc", "--delete"]);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("removed  tmp/{dead} (1000 bytes)")),
        "{out}"
    );
    assert!(!tmp.join(&dead).exists());
    drop(server);
}

/// The names of the files in the blob store's `tmp/`, sorted.
fn tmp_names(tmp: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
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

/// A publisher registers a cosign key: its image signed with that key is mirrored and
/// shown as verified; one signed with another key, one whose signature covers other
/// bytes than its payload, and one not signed are refused and not served. Signatures
/// are made here as cosign makes them (ECDSA P-256, openssl).
#[tokio::test]
async fn a_publishers_cosign_key_decides_which_images_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(&dir.path().join("upstream"), None);
    let keys = dir.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let (ours, ours_pub) = oci::cosign_key(&keys, "acme");
    let (foreign, _) = oci::cosign_key(&keys, "foreign");
    let mut digests = Vec::new();
    // The tampered one is signed with our key, but over other bytes than the payload
    // it carries (a payload edited after signing).
    for (i, (repo, signer, tampered)) in [
        ("acme/good", Some(&ours), false),
        ("acme/foreign", Some(&foreign), false),
        ("acme/unsigned", None, false),
        ("acme/tampered", Some(&ours), true),
    ]
    .into_iter()
    .enumerate()
    {
        // Sizes differ so the images have their own digests.
        let (layout, index) = oci::two_platform(&dir.path().join(repo), "v1", 10_000 + i);
        let digest = oci::digest(&index);
        upstream.push(&layout.dir, "v1", repo);
        if let Some(key) = signer {
            let (sig, tag, _) = oci::signature(
                &dir.path().join(format!("{repo}-sig")),
                &format!("{}/{repo}", upstream.addr),
                &digest,
                |payload| {
                    let mut signed = payload.to_vec();
                    if tampered {
                        signed.extend_from_slice(b" ");
                    }
                    oci::cosign_sign(key, &signed)
                },
            );
            upstream.push(&sig.dir, &tag, repo);
        }
        digests.push((repo, digest));
    }

    let m = setup_with(&dir.path().join("m"), &[]);
    let o = common::publishing::marketplace(&[
        "publisher",
        "rotate-key",
        "acme",
        "--key",
        &m.acme.public().hex(),
        "--cosign-key",
        ours_pub.to_str().unwrap(),
        "--data-dir",
        m.data.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", common::output_text(&o));
    let pem_text = std::fs::read_to_string(&ours_pub).unwrap();
    let key_id = {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(
            pem::parse(&pem_text).unwrap().contents(),
        ))
    };
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("cosign key {key_id}")));

    let upstreams = upstreams_file(dir.path(), &upstream, None);
    let server = Server::start_with(&m.data, &["--mirror", "on", "--upstreams", &upstreams]);
    let c = Client::new(&server.url);
    for (repo, digest) in &digests {
        let name = repo.rsplit('/').next().unwrap();
        let def = with_image(
            &definition("gateway", name, "1.0.0"),
            &format!("{}/{repo}@{digest}", upstream.addr),
        );
        assert_eq!(
            c.publish_signed(&m.acme_token, &def, &[&m.acme]).await.0,
            201,
            "{repo}"
        );
    }
    let image = |i: usize| format!("{}/{}@{}", upstream.addr, digests[i].0, digests[i].1);

    let good = until_status(&m.data, &image(0), "mirrored").await;
    assert_eq!(good["verifiedBy"], key_id.as_str(), "{good}");
    until_served(
        &server,
        &direct(&upstream.addr, "acme/good"),
        &digests[0].1,
        Duration::from_secs(10),
    )
    .await;
    let page = reqwest::get(format!("{}/plugins/acme/good", server.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(&format!("image signature verified by {}", &key_id[..16])),
        "{page}"
    );

    // The public text says which keys did not vouch for the image; why each signature
    // failed quotes what the upstream served, so only the operator's detail has it.
    let refused = until_status(&m.data, &image(1), "failed").await;
    let error = refused["lastError"].as_str().unwrap();
    assert!(
        error.contains("no cosign signature verifies with"),
        "{error}"
    );
    let detail = refused["lastErrorDetail"].as_str().unwrap();
    assert!(
        detail.contains("does not verify with any registered key"),
        "{detail}"
    );
    let unsigned = until_status(&m.data, &image(2), "failed").await;
    let error = unsigned["lastError"].as_str().unwrap();
    assert!(error.contains("no cosign signature"), "{error}");
    let tampered = until_status(&m.data, &image(3), "failed").await;
    let detail = tampered["lastErrorDetail"].as_str().unwrap();
    assert!(
        detail.contains("does not verify with any registered key"),
        "{detail}"
    );
    for (repo, digest) in &digests[1..] {
        let r = reqwest::get(format!(
            "{}/v2/{}/manifests/{digest}",
            server.url,
            direct(&upstream.addr, repo)
        ))
        .await
        .unwrap();
        assert_eq!(r.status(), 404, "{repo} must not be served");
    }
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

/// Pushes `manifest` (and its `blobs`) to `repo:reference` with the distribution API
/// itself: monolithic blob uploads, then the manifest. For artifacts skopeo does not copy.
async fn push_raw(
    addr: &str,
    repo: &str,
    reference: &str,
    media_type: &str,
    manifest: &[u8],
    blobs: &[&[u8]],
) {
    let http = reqwest::Client::new();
    for blob in blobs {
        let r = http
            .post(format!("http://{addr}/v2/{repo}/blobs/uploads/"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        let location = r.headers()["location"].to_str().unwrap().to_owned();
        let url = if location.starts_with("http") {
            location
        } else {
            format!("http://{addr}{location}")
        };
        let sep = if url.contains('?') { '&' } else { '?' };
        let r = http
            .put(format!("{url}{sep}digest={}", oci::digest(blob)))
            .header("content-type", "application/octet-stream")
            .body(blob.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    }
    let r = http
        .put(format!("http://{addr}/v2/{repo}/manifests/{reference}"))
        .header("content-type", media_type)
        .body(manifest.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
}

/// A referrer (an SBOM whose `subject` is the image) listed the way a registry without
/// the referrers API lists them, the OCI 1.1 tag schema (`sha256-<hex>` naming an
/// index), is mirrored and served through our referrers API.
#[tokio::test]
async fn referrers_of_the_pinned_image_are_mirrored_and_listed() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, _layout, index, index_digest) = upstream_with_image(dir.path(), 10_000);
    let empty = b"{}".to_vec();
    let sbom = br#"{"spdxVersion":"SPDX-2.3","name":"tool"}"#.to_vec();
    let artifact_type = "application/vnd.example.sbom.v1";
    let referrer = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": oci::OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": oci::digest(&empty), "size": 2},
        "layers": [{"mediaType": "application/spdx+json", "digest": oci::digest(&sbom), "size": sbom.len()}],
        "subject": {"mediaType": oci::OCI_INDEX, "digest": index_digest, "size": index.len()},
        "annotations": {"org.example.kind": "sbom"},
    })
    .to_string()
    .into_bytes();
    let referrer_digest = oci::digest(&referrer);
    push_raw(
        &upstream.addr,
        "acme/tool",
        &referrer_digest,
        oci::OCI_MANIFEST,
        &referrer,
        &[&empty, &sbom],
    )
    .await;
    let listing = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": oci::OCI_INDEX,
        "manifests": [{
            "mediaType": oci::OCI_MANIFEST,
            "digest": referrer_digest,
            "size": referrer.len(),
            "artifactType": artifact_type,
            "annotations": {"org.example.kind": "sbom"},
        }],
    })
    .to_string()
    .into_bytes();
    let fallback_tag = format!("sha256-{}", &index_digest[7..]);
    push_raw(
        &upstream.addr,
        "acme/tool",
        &fallback_tag,
        oci::OCI_INDEX,
        &listing,
        &[],
    )
    .await;

    let (m, server, image) = publish_pinning(dir.path(), &upstream, &index_digest).await;
    until_status(&m.data, &image, "mirrored").await;
    drop(upstream);

    let name = direct(image.split('/').next().unwrap(), "acme/tool");
    let listed: serde_json::Value =
        reqwest::get(format!("{}/v2/{name}/referrers/{index_digest}", server.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    let manifests = listed["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1, "{listed}");
    assert_eq!(manifests[0]["digest"], referrer_digest.as_str());
    assert_eq!(manifests[0]["artifactType"], artifact_type);
    assert_eq!(manifests[0]["annotations"]["org.example.kind"], "sbom");
    // The referrer and its blobs are served, byte for byte.
    assert_eq!(
        served(format!(
            "{}/v2/{name}/manifests/{referrer_digest}",
            server.url
        ))
        .await,
        referrer
    );
    let r = reqwest::get(format!(
        "{}/v2/{name}/blobs/{}",
        server.url,
        oci::digest(&sbom)
    ))
    .await
    .unwrap();
    assert_eq!(r.bytes().await.unwrap().as_ref(), sbom.as_slice());
}

/// A job stuck on an upstream that never answers does not hold up an image published
/// after it: the mirror claims again whenever a slot is free.
///
/// The stuck upstream is this test's named fake: a listener that accepts connections
/// and never answers, the one fault a real registry does not produce on demand.
#[tokio::test]
async fn a_stuck_transfer_does_not_hold_up_later_images() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, _layout, _index, index_digest) = upstream_with_image(dir.path(), 10_000);
    let black_hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hole = black_hole.local_addr().unwrap().to_string();
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    {
        let held = held.clone();
        std::thread::spawn(move || {
            for conn in black_hole.incoming().flatten() {
                held.lock().unwrap().push(conn); // kept open, never answered
            }
        });
    }
    let upstreams = dir.path().join("upstreams.yaml");
    std::fs::write(
        &upstreams,
        format!(
            "otherHosts: skip\nupstreams:\n  - host: {}\n    insecure: true\n  - host: {hole}\n    insecure: true\n",
            upstream.addr
        ),
    )
    .unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let server = Server::start_with(
        &m.data,
        &["--mirror", "on", "--upstreams", upstreams.to_str().unwrap()],
    );
    let c = Client::new(&server.url);
    let stuck = format!("{hole}/stuck/image@sha256:{}", "5".repeat(64));
    let def = with_image(&definition("gateway", "stuck", "1.0.0"), &stuck);
    assert_eq!(
        c.publish_signed(&m.acme_token, &def, &[&m.acme]).await.0,
        201
    );
    until_status(&m.data, &stuck, "mirroring").await;

    let image = format!("{}/acme/tool@{index_digest}", upstream.addr);
    let def = with_image(&definition("gateway", "edge", "1.0.0"), &image);
    assert_eq!(
        c.publish_signed(&m.acme_token, &def, &[&m.acme]).await.0,
        201
    );
    let started = Instant::now();
    until_status(&m.data, &image, "mirrored").await;
    // Well inside the stuck request's 60 s read deadline.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let (_, out) = mirror_cli(&m.data, &["status"]);
    assert!(out.contains(&format!("mirroring {stuck}")), "{out}");
}
