//! Hashed-bin delegations end to end: `marketplace publish`, `yank` and `resign` with
//! small bin limits against the real server, checked by python-tuf and by our tough-based
//! client at each layout (flat, 16 bins, 256 bins).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::publishing::{Client, assert_refused, definition, setup};
use common::{Server, output_text, python_tuf, trusted_root};
use marketplace::definition::Definition;
use tough::schema::{Signed, Targets};

/// Runs a publisher command with `--flat-max-targets 2 --bin-max-targets BIN_MAX`.
fn run(args: &[&str], server: &str, key: &Path, token: &str, bin_max: usize) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(args)
        .args(["--server", server, "--key", key.to_str().unwrap()])
        .args([
            "--flat-max-targets",
            "2",
            "--bin-max-targets",
            &bin_max.to_string(),
        ])
        .env("MARKETPLACE_TOKEN", token)
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "marketplace {args:?}: {text}");
    text
}

/// Versions `from..to` of `edge-gateway` as files to publish.
fn files(dir: &Path, from: usize, to: usize) -> (Vec<Definition>, Vec<PathBuf>) {
    (from..to)
        .map(|i| {
            let def = definition("gateway", "edge-gateway", &format!("1.0.{i}"));
            let path = dir.join(format!("edge-{i}.yaml"));
            std::fs::write(&path, &def.bytes).unwrap();
            (def, path)
        })
        .unzip()
}

fn name(def: &Definition) -> String {
    format!(
        "acme/edge-gateway/{}.yaml",
        def.version_text().trim_start_matches('v')
    )
}

/// acme's top role as the API serves it, and the number of bins it delegates.
async fn top(c: &Client) -> (Signed<Targets>, usize) {
    let role = c.role("acme").await.expect("acme has a role");
    let bins = role
        .signed
        .delegations
        .as_ref()
        .map_or(0, |d| d.roles.len());
    (role, bins)
}

/// Our own verifier: every published target is found and downloads intact.
async fn tough_sees(url: &str, root: &Path, store: &Path, defs: &[Definition]) {
    let base = url::Url::parse(&format!("{url}/")).unwrap();
    let repo = common::tough::load(&std::fs::read(root).unwrap(), &base, store)
        .await
        .expect("the index verifies");
    let acme = repo
        .all_targets()
        .filter(|(n, _)| n.raw().starts_with("acme/"))
        .count();
    assert_eq!(acme, defs.len());
    for def in [&defs[0], defs.last().unwrap()] {
        let target = tough::TargetName::new(name(def)).unwrap();
        use tough::IntoVec;
        let bytes = repo.read_target(&target).await.unwrap().expect("listed");
        assert_eq!(bytes.into_vec().await.unwrap(), def.bytes);
    }
}

#[tokio::test]
async fn a_publisher_grows_from_flat_to_16_then_256_bins() {
    let dir = tempfile::tempdir().unwrap();
    let (data, key, token, _) = setup(dir.path());
    let key_file = dir.path().join("acme.pem");
    key.save_new(&key_file).unwrap();
    let server = Server::start(&data);
    let c = Client::new(&server.url);
    let url = server.url.as_str();
    let publish = |paths: &[PathBuf], bin_max: usize| {
        let mut args = vec!["publish"];
        args.extend(paths.iter().map(|p| p.to_str().unwrap()));
        run(&args, url, &key_file, &token, bin_max)
    };

    // Flat: two targets in acme's own role.
    let (mut defs, paths) = files(dir.path(), 0, 2);
    publish(&paths, 4);
    assert_eq!(top(&c).await.1, 0);
    let root = dir.path().join("root.json");
    std::fs::write(&root, trusted_root(url).await).unwrap();
    let py_cache = dir.path().join("py");
    python_tuf(url, &root, &py_cache, &[&name(&defs[0])]);

    // The third target passes --flat-max-targets 2: 16 bins, every one uploaded.
    let (more, paths) = files(dir.path(), 2, 3);
    defs.extend(more);
    publish(&paths, 4);
    let (role, bins) = top(&c).await;
    assert_eq!((bins, role.signed.targets.len()), (16, 0));
    let top_version = role.signed.version.get();

    // The fourth re-signs its bin alone (at most 4 targets, no bin passes 4).
    let (more, paths) = files(dir.path(), 3, 4);
    defs.extend(more);
    let out = publish(&paths, 4);
    assert!(out.contains(", bin acme."), "{out}");
    assert_eq!(top(&c).await.0.signed.version.get(), top_version);
    // python-tuf follows from its flat-era cache, and from nothing.
    let names: Vec<String> = defs.iter().map(name).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    for report in [
        python_tuf(url, &root, &py_cache, &refs),
        python_tuf(url, &root, &dir.path().join("py-fresh"), &refs),
    ] {
        for (def, n) in defs.iter().zip(&names) {
            assert_eq!(report["targets"][n]["length"], def.bytes.len(), "{n}");
        }
    }
    tough_sees(url, &root, &dir.path().join("tough"), &defs).await;

    // 64 targets cannot fit 16 bins of at most 3: every target moves to 256 bins.
    let (more, paths) = files(dir.path(), 4, 64);
    defs.extend(more);
    publish(&paths, 3);
    let (role, bins) = top(&c).await;
    assert_eq!(bins, 256);
    assert_eq!(role.signed.version.get(), top_version + 1);

    // A yank re-signs one bin; a re-sign renews every role.
    let yanked = name(&defs[10]);
    let out = run(
        &["yank", "acme/edge-gateway@1.0.10"],
        url,
        &key_file,
        &token,
        3,
    );
    assert!(out.contains(", bin acme."), "{out}");
    let out = run(&["resign"], url, &key_file, &token, 3);
    assert!(out.contains("64 target(s) in 256 bins"), "{out}");

    // The index page shows acme's bins as one row, without the older 16.
    let page = reqwest::get(format!("{url}/signed-index"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("256 hashed bins of acme"), "{page}");
    assert!(page.contains("data-role=\"acme.*\""));
    assert!(!page.contains("data-role=\"acme.0\""));

    let names: Vec<String> = [0, 10, 3, 63].iter().map(|&i| name(&defs[i])).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    for cache in [py_cache, dir.path().join("py-late")] {
        let report = python_tuf(url, &root, &cache, &refs);
        for n in &names {
            assert!(report["targets"][n].is_object(), "python-tuf finds {n}");
        }
        assert_eq!(report["targets"][&yanked]["custom"]["yanked"], true);
    }
    tough_sees(url, &root, &dir.path().join("tough"), &defs).await;
    tough_sees(url, &root, &dir.path().join("tough-late"), &defs).await;
}

#[tokio::test]
async fn bin_uploads_and_lookups_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let (data, key, token, beta_token) = setup(dir.path());
    let key_file = dir.path().join("acme.pem");
    key.save_new(&key_file).unwrap();
    let server = Server::start(&data);
    let c = Client::new(&server.url);
    let (_, paths) = files(dir.path(), 0, 3);
    let mut args = vec!["publish"];
    args.extend(paths.iter().map(|p| p.to_str().unwrap()));
    run(&args, &server.url, &key_file, &token, 4);

    // Bin lookups: one of acme's bins, a malformed name, another publisher's prefix.
    let get = |q: &str| {
        reqwest::get(format!(
            "{}/api/v1/publishers/acme/role?bin={q}",
            server.url
        ))
    };
    assert_eq!(get("acme.a").await.unwrap().status(), 200);
    for bad in ["acme.zz", "acme.", "beta.a", "acme.123", "acme.A"] {
        let r = get(bad).await.unwrap();
        assert_eq!(r.status(), 400, "{bad}");
    }
    assert_eq!(get("acme.00").await.unwrap().status(), 404, "not a bin yet");

    // A bin from acme, posted under beta's token or as a bin of the wrong layout.
    let bin = reqwest::get(format!(
        "{}/api/v1/publishers/acme/role?bin=acme.a",
        server.url
    ))
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    let body = serde_json::json!({ "bins": { "acme.a": bin } });
    let (status, reply) = c.post("acme/role", Some(&beta_token), &body).await;
    assert_refused(status, &reply, 403, "forbidden", "another publisher");
    // The current version again: stale.
    let (status, reply) = c.post("acme/role", Some(&token), &body).await;
    assert_refused(status, &reply, 409, "stale", "is stale");
    let body = serde_json::json!({ "bins": { "acme.00": bin } });
    let (status, reply) = c.post("acme/role", Some(&token), &body).await;
    assert_refused(
        status,
        &reply,
        409,
        "stale",
        "not a bin of acme's current role",
    );
    let (status, reply) = c
        .post("acme/role", Some(&token), &serde_json::json!({}))
        .await;
    assert_refused(status, &reply, 422, "rejected", "holds no role");
}
