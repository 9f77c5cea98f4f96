//! Where an image comes from and who vouches for it: a publisher's cosign keys decide
//! what is served, and referrers of the pinned image are mirrored and listed.

use super::*;

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
    let page = common::text(format!("{}/plugins/acme/good", server.url)).await;
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

/// A referrer (an SBOM whose `subject` is the image) listed the way a registry without
/// the referrers API lists them, the OCI 1.1 tag schema (`sha256-<hex>` naming an
/// index), is mirrored and served through our referrers API.
#[tokio::test]
async fn referrers_of_the_pinned_image_are_mirrored_and_listed() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, _layout, index, index_digest) = upstream_with_image(dir.path(), 10_000);
    let oci::Referrer {
        digest: referrer_digest,
        manifest: referrer,
        sbom,
        artifact_type,
    } = oci::push_sbom_referrer(&upstream.addr, "acme/tool", &index_digest, index.len()).await;

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
