//! The mirror when things go wrong: a missing image then `mirror retry` (over TLS with
//! credentials), an upstream serving other bytes than the digest, a kill mid-transfer,
//! and a stuck upstream that must not hold up later images.

use super::*;

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
    let page = common::text(format!("{}/plugins/acme/edge", server.url)).await;
    assert!(
        page.contains("Mirror failed:") && page.contains("not found upstream; next attempt in"),
        "{page}"
    );

    // An operator of replicas sees and retries it through the admin API, from a
    // machine without the data directory.
    let ops = common::publishing::operator_token(&m.data, "ops");
    let remote = |args: &[&str]| {
        let o = common::publishing::admin_cli(&server.url, &ops, args);
        (o.status.success(), common::output_text(&o))
    };
    let (ok, listed) = remote(&["mirror", "status", "--json"]);
    assert!(ok, "{listed}");
    let listed: serde_json::Value =
        serde_json::from_str(listed.lines().next().unwrap_or_default()).unwrap();
    let entry = common::publishing::image_entry(&listed, &image)
        .unwrap_or_else(|| panic!("{image} not in {listed}"));
    assert_eq!(entry["status"], "failed");
    assert_eq!(entry["lastError"], failed["lastError"]);
    let (ok, out) = remote(&["mirror", "verify"]);
    assert!(
        !ok && out.contains("beside the database and the blob store"),
        "{out}"
    );

    upstream.push(&layout.dir, "v1", "acme/tool");
    let (ok, out) = mirror_cli(&m.data, &["retry", "no-such-image"]);
    assert!(ok && out.contains("0 failed image(s) due now"), "{out}");
    let (ok, out) = remote(&["mirror", "retry", "acme/tool"]);
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
