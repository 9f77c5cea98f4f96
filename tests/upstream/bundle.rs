//! Bundles for a site with no network: `bundle create` on a connected marketplace
//! (with a mirrored image from `docker-registry`), `bundle import` on a third
//! marketplace that never talks to it (the connected one and the registry are stopped
//! first); python-tuf and skopeo against the importer; `--since` writing only what is
//! new; an older bundle refused as a rollback; a tampered blob and a tampered role
//! refused with nothing changed.

use std::path::Path;

use sha2::{Digest, Sha256};

use super::{bytes, repo};
use crate::common::oci::{self, Upstream};
use crate::common::publishing::{Client, definition, marketplace, with_image};
use crate::common::{Server, output_text, python_tuf, trusted_root};

fn run(args: &[&str]) -> (bool, String) {
    let o = marketplace(args);
    (o.status.success(), output_text(&o))
}

/// Flips one byte of the entry `name` of the tar file at `bundle`, `at` bytes in.
fn tamper(bundle: &Path, name: &str, at: u64) {
    let file = std::fs::File::open(bundle).unwrap();
    let mut archive = tar::Archive::new(file);
    let position = archive
        .entries()
        .unwrap()
        .map(Result::unwrap)
        .find(|e| e.path().unwrap().to_string_lossy() == name)
        .map(|e| e.raw_file_position())
        .unwrap_or_else(|| panic!("{name} is not in the bundle"));
    oci::flip_byte(bundle, (position + at) as usize);
}

/// Names of the bundle's entries, in order.
fn entries(bundle: &Path) -> Vec<String> {
    let mut archive = tar::Archive::new(std::fs::File::open(bundle).unwrap());
    archive
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
        .collect()
}

#[tokio::test]
async fn a_bundle_carries_the_index_and_images_into_a_site_without_network() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Upstream::start(&dir.path().join("registry"), None);
    let (layout, index) = oci::two_platform(&dir.path().join("image"), "v1", 50_000);
    let digest = oci::digest(&index);
    registry.push(&layout.dir, "v1", "acme/tool");
    // A cosign-style signature beside it.
    let (sig, sig_tag, sig_manifest) = oci::signature(
        &dir.path().join("sig"),
        &format!("{}/acme/tool", registry.addr),
        &digest,
        |_| "c2lnbmF0dXJl".into(),
    );
    registry.push(&sig.dir, &sig_tag, "acme/tool");
    // And an SBOM that refers to it.
    let sbom = oci::push_sbom_referrer(&registry.addr, "acme/tool", &digest, index.len()).await;
    let upstreams = dir.path().join("upstreams.yaml");
    std::fs::write(
        &upstreams,
        format!(
            "otherHosts: skip\nupstreams:\n  - host: {}\n    insecure: true\n",
            registry.addr
        ),
    )
    .unwrap();

    // The connected marketplace: acme's edge pins the image, beta's store.
    let (data, keys) = repo(&dir.path().join("connected"), &["acme", "beta"]);
    let connected = Server::start_with(
        &data,
        &["--mirror", "on", "--upstreams", upstreams.to_str().unwrap()],
    );
    let client = Client::new(&connected.url);
    let image = format!("{}/acme/tool@{digest}", registry.addr);
    let edge = with_image(&definition("gateway", "edge", "1.0.0"), &image);
    let store = definition("storage", "store", "1.0.0");
    for (name, i, def) in [("acme", 0, &edge), ("beta", 1, &store)] {
        let (status, body) = client
            .publish_as(name, &keys[i].1, def, &[&keys[i].0])
            .await;
        assert_eq!(status, 201, "{name}: {body}");
    }
    let name = format!("{}/acme/tool", registry.addr.replace(':', "_"));
    super::images::until_served(&connected.url, &name, &digest).await;
    let root = dir.path().join("connected-root.json");
    std::fs::write(&root, trusted_root(&connected.url).await).unwrap();
    let d = data.to_str().unwrap();

    let b1 = dir.path().join("b1.tar");
    let (ok, out) = run(&["bundle", "create", b1.to_str().unwrap(), "--data-dir", d]);
    assert!(ok, "{out}");
    assert!(out.contains("1 images"), "{out}");
    let listed = entries(&b1);
    assert_eq!(listed[0], "bundle.json");
    for wanted in [
        "oci/oci-layout",
        "oci/index.json",
        "tuf/metadata/timestamp.json",
        "tuf/metadata/1.root.json",
        "tuf/metadata/1.acme.json",
    ] {
        assert!(
            listed.iter().any(|e| e == wanted),
            "{wanted} missing: {listed:?}"
        );
    }
    for blob in layout.blobs.iter().chain(&sig.blobs) {
        let entry = format!("oci/blobs/sha256/{}", &blob[7..]);
        assert!(listed.contains(&entry), "{entry} missing");
    }
    // An independent reader of OCI layouts copies the image out of it.
    let extracted = dir.path().join("b1");
    std::fs::create_dir_all(&extracted).unwrap();
    tar::Archive::new(std::fs::File::open(&b1).unwrap())
        .unpack(&extracted)
        .unwrap();
    let copied = dir.path().join("copied");
    oci::skopeo(&[
        "copy",
        "--all",
        "--preserve-digests",
        &format!(
            "oci:{}:{}/acme/tool@{digest}",
            extracted.join("oci").display(),
            registry.addr
        ),
        &format!("oci:{}:copied", copied.display()),
    ]);
    let mut expected = layout.blobs.clone();
    expected.sort();
    assert_eq!(oci::layout_blobs(&copied), expected);

    // A new version, and a bundle of only what is new since b1.
    let edge2 = with_image(&definition("gateway", "edge", "1.1.0"), &image);
    let (status, body) = client
        .publish_as("acme", &keys[0].1, &edge2, &[&keys[0].0])
        .await;
    assert_eq!(status, 201, "{body}");
    let b2 = dir.path().join("b2.tar");
    let (ok, out) = run(&[
        "bundle",
        "create",
        b2.to_str().unwrap(),
        "--since",
        b1.to_str().unwrap(),
        "--data-dir",
        d,
    ]);
    assert!(ok, "{out}");
    assert!(
        out.contains("definitions (1 new)") && out.contains("0 blobs"),
        "{out}"
    );
    assert!(!entries(&b2).iter().any(|e| e.starts_with("oci/blobs/")));
    // And one more, for the tampering below.
    let edge3 = with_image(&definition("gateway", "edge", "1.2.0"), &image);
    let (status, body) = client
        .publish_as("acme", &keys[0].1, &edge3, &[&keys[0].0])
        .await;
    assert_eq!(status, 201, "{body}");
    let b3 = dir.path().join("b3.tar");
    let (ok, out) = run(&[
        "bundle",
        "create",
        b3.to_str().unwrap(),
        "--since",
        b2.to_str().unwrap(),
        "--data-dir",
        d,
    ]);
    assert!(ok, "{out}");
    let (_, connected_role) = bytes(&format!("{}/tuf/metadata/3.acme.json", connected.url)).await;
    // The site has no network to any of it.
    drop(connected);
    drop(registry);

    let (site, _) = repo(&dir.path().join("site"), &["local"]);
    let s = site.to_str().unwrap();
    let import = |bundle: &Path| {
        run(&[
            "bundle",
            "import",
            bundle.to_str().unwrap(),
            "--upstream",
            "https://plugins.example.com",
            "--upstream-root",
            root.to_str().unwrap(),
            "--data-dir",
            s,
        ])
    };
    // A tampered blob: refused before anything is applied.
    let bad = dir.path().join("bad-blob.tar");
    std::fs::copy(&b1, &bad).unwrap();
    tamper(
        &bad,
        &format!("oci/blobs/sha256/{}", &layout.blobs[0][7..]),
        10,
    );
    let (ok, out) = import(&bad);
    assert!(!ok && out.contains("tampered"), "{out}");
    let (ok, out) = run(&["publisher", "list", "--data-dir", s]);
    assert!(ok && !out.contains("acme"), "nothing applied: {out}");

    let (ok, out) = import(&b1);
    assert!(ok, "{out}");
    assert!(
        out.contains("2 publishers followed (acme, beta)") && out.contains("1 images mirrored"),
        "{out}"
    );
    let (ok, out) = import(&b2);
    assert!(ok, "{out}");
    // An older bundle than the last imported: a rollback.
    let (ok, out) = import(&b1);
    assert!(!ok && out.contains("older than the trusted"), "{out}");
    // A role tampered in b3: nothing of b3 applied; b3 as made imports.
    let bad = dir.path().join("bad-role.tar");
    std::fs::copy(&b3, &bad).unwrap();
    tamper(&bad, "tuf/metadata/3.acme.json", 40);
    let (ok, out) = import(&bad);
    assert!(
        !ok && out.contains("nothing was applied") && out.contains("acme"),
        "{out}"
    );
    let server = Server::start(&site);
    let (s404, _) = bytes(&format!("{}/tuf/metadata/3.acme.json", server.url)).await;
    assert_eq!(s404, 404, "b3's acme role was not applied");
    drop(server);
    let (ok, out) = import(&b3);
    assert!(ok, "{out}");

    // The site serves the connected marketplace's publishers under its own root.
    let server = Server::start(&site);
    let (s, ours) = bytes(&format!("{}/tuf/metadata/3.acme.json", server.url)).await;
    assert_eq!(s, 200);
    assert_eq!(
        hex::encode(Sha256::digest(&ours)),
        hex::encode(Sha256::digest(&connected_role))
    );
    let site_root = dir.path().join("site-root.json");
    std::fs::write(&site_root, trusted_root(&server.url).await).unwrap();
    let names = [
        "acme/edge/1.0.0.yaml",
        "acme/edge/1.1.0.yaml",
        "acme/edge/1.2.0.yaml",
        "beta/store/1.0.0.yaml",
    ];
    let got = python_tuf(&server.url, &site_root, &dir.path().join("py"), &names);
    for (n, def) in names.iter().zip([&edge, &edge2, &edge3, &store]) {
        assert_eq!(
            format!("sha256:{}", got["targets"][n]["sha256"].as_str().unwrap()),
            def.hash,
            "{n}"
        );
    }
    let detail: serde_json::Value =
        reqwest::get(format!("{}/api/v1/plugins/acme/edge", server.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(detail["origin"], "https://plugins.example.com/", "{detail}");
    // skopeo pulls every platform from the site.
    let pulled = dir.path().join("pulled");
    let ours = server.url.trim_start_matches("http://");
    oci::skopeo(&[
        "copy",
        "--all",
        "--preserve-digests",
        "--src-tls-verify=false",
        &format!("docker://{ours}/{name}@{digest}"),
        &format!("oci:{}:pulled", pulled.display()),
    ]);
    assert_eq!(oci::layout_blobs(&pulled), expected);
    // The signature came along under its tag, the SBOM as a referrer.
    let (status, served) = bytes(&format!("{}/v2/{name}/manifests/{sig_tag}", server.url)).await;
    assert_eq!((status, served), (200, sig_manifest));
    let listed: serde_json::Value =
        reqwest::get(format!("{}/v2/{name}/referrers/{digest}", server.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(
        listed["manifests"][0]["digest"],
        sbom.digest.as_str(),
        "{listed}"
    );
    assert_eq!(listed["manifests"][0]["artifactType"], sbom.artifact_type);
    let (status, served) = bytes(&format!(
        "{}/v2/{name}/manifests/{}",
        server.url, sbom.digest
    ))
    .await;
    assert_eq!((status, served), (200, sbom.manifest.clone()));
    let (status, served) = bytes(&format!(
        "{}/v2/{name}/blobs/{}",
        server.url,
        oci::digest(&sbom.sbom)
    ))
    .await;
    assert_eq!((status, served), (200, sbom.sbom.clone()));
    drop(server);

    // One platform only: the other's manifest and layer stay out, and the site serves
    // the platform it has.
    let platform_blobs = |arch: &str| {
        let index: serde_json::Value = serde_json::from_slice(&index).unwrap();
        let entry = index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["platform"]["architecture"] == arch)
            .unwrap()
            .clone();
        let manifest_digest = entry["digest"].as_str().unwrap().to_owned();
        let manifest: serde_json::Value = serde_json::from_slice(
            &std::fs::read(layout.dir.join("blobs/sha256").join(&manifest_digest[7..])).unwrap(),
        )
        .unwrap();
        [
            manifest_digest,
            manifest["layers"][0]["digest"].as_str().unwrap().to_owned(),
        ]
    };
    let amd64 = dir.path().join("amd64.tar");
    let (ok, out) = run(&[
        "bundle",
        "create",
        amd64.to_str().unwrap(),
        "--platform",
        "linux/amd64",
        "--data-dir",
        d,
    ]);
    assert!(ok, "{out}");
    let listed = entries(&amd64);
    for digest in platform_blobs("amd64") {
        assert!(
            listed.contains(&format!("oci/blobs/sha256/{}", &digest[7..])),
            "{digest}"
        );
    }
    for digest in platform_blobs("arm64") {
        assert!(
            !listed.contains(&format!("oci/blobs/sha256/{}", &digest[7..])),
            "{digest}"
        );
    }
    let (ok, out) = run(&[
        "bundle",
        "create",
        "x.tar",
        "--platform",
        "amd64",
        "--data-dir",
        d,
    ]);
    assert!(!ok && out.contains("is not OS/ARCH"), "{out}");
    let (site2, _) = repo(&dir.path().join("site2"), &[]);
    let (ok, out) = run(&[
        "bundle",
        "import",
        amd64.to_str().unwrap(),
        "--upstream",
        "https://plugins.example.com",
        "--upstream-root",
        root.to_str().unwrap(),
        "--data-dir",
        site2.to_str().unwrap(),
    ]);
    assert!(ok && out.contains("1 images mirrored"), "{out}");
    let server = Server::start(&site2);
    let ours = server.url.trim_start_matches("http://");
    let one = dir.path().join("one-platform");
    oci::skopeo(&[
        "copy",
        "--override-os",
        "linux",
        "--override-arch",
        "amd64",
        "--src-tls-verify=false",
        &format!("docker://{ours}/{name}@{digest}"),
        &format!("oci:{}:one", one.display()),
    ]);
    let (status, _) = bytes(&format!(
        "{}/v2/{name}/manifests/{}",
        server.url,
        platform_blobs("arm64")[0]
    ))
    .await;
    assert_eq!(status, 404, "the platform left out is not served");
}
