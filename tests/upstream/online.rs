//! A downstream following an upstream online.

use std::process::Command;

use sha2::{Digest, Sha256};

use super::{bytes, publisher, repo, until_round};
use crate::common::mirror::Mirror;
use crate::common::publishing::{Client, definition, marketplace};
use crate::common::worker::{Api, Source, sync_once, token, write_config};
use crate::common::{Server, output_text, python_tuf, trusted_root};

fn sha256(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

#[tokio::test]
async fn a_downstream_serves_the_upstream_publishers_roles_under_its_own_root() {
    let dir = tempfile::tempdir().unwrap();
    let (up_data, up) = repo(&dir.path().join("up"), &["acme", "beta", "gamma"]);
    let upstream = Server::start(&up_data);
    let client = Client::new(&upstream.url);
    let edge = definition("gateway", "edge", "1.0.0");
    let store = definition("storage", "store", "1.0.0");
    let theirs = definition("gateway", "theirs", "1.0.0");
    for (name, i, def) in [
        ("acme", 0, &edge),
        ("beta", 1, &store),
        ("gamma", 2, &theirs),
    ] {
        let (status, body) = client.publish_as(name, &up[i].1, def, &[&up[i].0]).await;
        assert_eq!(status, 201, "{name}: {body}");
    }

    // The downstream: its own root, its own publisher gamma.
    let (down_data, down) = repo(&dir.path().join("down"), &["gamma"]);
    let up_root = dir.path().join("up-root.json");
    std::fs::write(&up_root, trusted_root(&upstream.url).await).unwrap();
    let downstream = Server::start_with(
        &down_data,
        &[
            "--upstream",
            &upstream.url,
            "--upstream-root",
            up_root.to_str().unwrap(),
            "--upstream-interval",
            "1s",
        ],
    );
    let down_client = Client::new(&downstream.url);
    let local = definition("storage", "local", "1.0.0");
    let (status, body) = down_client
        .publish_as("gamma", &down[0].1, &local, &[&down[0].0])
        .await;
    assert_eq!(status, 201, "{body}");

    let status = until_round(&downstream.url, "following acme and beta", |r| {
        publisher(r, "acme")["status"] == "followed" && publisher(r, "beta")["status"] == "followed"
    })
    .await;
    let round = &status["last_round"];
    assert_eq!(status["url"], format!("{}/", upstream.url), "{status}");
    assert!(round["error"].is_null(), "{round}");
    assert_eq!(publisher(round, "acme")["definitions"], 1, "{round}");
    assert_eq!(publisher(round, "gamma")["status"], "clash", "{round}");
    assert_eq!(
        publisher(round, "gamma")["reason"],
        "a publisher of this marketplace has the name",
        "{round}"
    );
    assert_eq!(publisher(round, "fundament")["status"], "clash", "{round}");

    // The upstream publishers' roles are the upstream's bytes; the top roles are ours.
    for role in ["acme", "beta"] {
        let (s1, theirs) = bytes(&format!("{}/tuf/metadata/1.{role}.json", upstream.url)).await;
        let (s2, ours) = bytes(&format!("{}/tuf/metadata/1.{role}.json", downstream.url)).await;
        assert_eq!((s1, s2), (200, 200), "{role}");
        assert_eq!(sha256(&theirs), sha256(&ours), "{role}'s role differs");
    }
    assert_ne!(
        trusted_root(&upstream.url).await,
        trusted_root(&downstream.url).await
    );

    // python-tuf, trusting only the downstream's root, downloads every target.
    let down_root = dir.path().join("down-root.json");
    std::fs::write(&down_root, trusted_root(&downstream.url).await).unwrap();
    let names = [
        "acme/edge/1.0.0.yaml",
        "beta/store/1.0.0.yaml",
        "gamma/local/1.0.0.yaml",
        "gamma/theirs/1.0.0.yaml",
    ];
    let got = python_tuf(&downstream.url, &down_root, &dir.path().join("py"), &names);
    for (name, def) in [(names[0], &edge), (names[1], &store), (names[2], &local)] {
        assert_eq!(
            format!(
                "sha256:{}",
                got["targets"][name]["sha256"].as_str().unwrap()
            ),
            def.hash,
            "{name}: {got}"
        );
    }
    // The upstream's gamma is left out: the local gamma speaks for the name.
    assert!(got["targets"][names[3]].is_null(), "{got}");
    // The catalog shows the followed plugins and where their publisher comes from.
    let origin = format!("{}/", upstream.url);
    let detail: serde_json::Value =
        reqwest::get(format!("{}/api/v1/plugins/acme/edge", downstream.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(detail["origin"], origin.as_str(), "{detail}");
    let page = crate::common::text(format!("{}/plugins/acme/edge", downstream.url)).await;
    assert!(
        page.contains(&format!(
            "is followed from the marketplace at <a href=\"{origin}\""
        )),
        "{page}"
    );
    let local_detail: serde_json::Value =
        reqwest::get(format!("{}/api/v1/plugins/gamma/local", downstream.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert!(local_detail["origin"].is_null(), "{local_detail}");
    // A followed publisher's keys and tokens are the upstream's, and it cannot publish
    // here.
    let d = down_data.to_str().unwrap();
    let o = marketplace(&["publisher", "new-token", "acme", "--data-dir", d]);
    assert!(!o.status.success());
    assert!(
        output_text(&o).contains("is followed from the upstream marketplace"),
        "{}",
        output_text(&o)
    );
    let o = marketplace(&["publisher", "list", "--data-dir", d]);
    assert!(
        output_text(&o).contains(&format!("followed from {origin}")),
        "{}",
        output_text(&o)
    );

    // A yank and a new version upstream reach the downstream.
    let key = dir.path().join("acme.pem");
    up[0].0.save_new(&key).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args([
            "yank",
            "acme/edge@1.0.0",
            "--server",
            &upstream.url,
            "--key",
        ])
        .arg(&key)
        .env("MARKETPLACE_TOKEN", &up[0].1)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    let newer = definition("gateway", "edge", "1.1.0");
    let (status, body) = client
        .publish_as("acme", &up[0].1, &newer, &[&up[0].0])
        .await;
    assert_eq!(status, 201, "{body}");
    until_round(&downstream.url, "with acme's yank and 1.1.0", |r| {
        publisher(r, "acme")["definitions"] == 2
    })
    .await;
    let detail: serde_json::Value =
        reqwest::get(format!("{}/api/v1/plugins/acme/edge", downstream.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(detail["latest"]["version"], "1.1.0", "{detail}");
    let yanked: Vec<_> = detail["versions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|major| major["versions"].as_array().unwrap())
        .filter(|v| v["yanked"] == true)
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(yanked, ["1.0.0"], "{detail}");
    // acme's current role (v3: the yank made v2) is the upstream's; a round takes
    // only the versions current when it runs, as any TUF client does.
    let (_, theirs) = bytes(&format!("{}/tuf/metadata/3.acme.json", upstream.url)).await;
    let (s, ours) = bytes(&format!("{}/tuf/metadata/3.acme.json", downstream.url)).await;
    assert_eq!((s, sha256(&ours)), (200, sha256(&theirs)), "acme v3");

    // The upstream's operator suspends beta: the downstream stops delegating to it.
    let o = marketplace(&[
        "publisher",
        "suspend",
        "beta",
        "--data-dir",
        up_data.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", output_text(&o));
    until_round(&downstream.url, "with beta gone", |r| {
        publisher(r, "beta")["status"] == "gone"
    })
    .await;
    // Only the upstream can bring it back.
    let o = marketplace(&[
        "publisher",
        "resume",
        "beta",
        "--data-dir",
        down_data.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        output_text(&o).contains("which no longer delegates to it"),
        "{}",
        output_text(&o)
    );
    let got = python_tuf(
        &downstream.url,
        &down_root,
        &dir.path().join("py"),
        &["beta/store/1.0.0.yaml", "acme/edge/1.1.0.yaml"],
    );
    assert!(got["targets"]["beta/store/1.0.0.yaml"].is_null(), "{got}");
    assert_eq!(
        format!(
            "sha256:{}",
            got["targets"]["acme/edge/1.1.0.yaml"]["sha256"]
                .as_str()
                .unwrap()
        ),
        newer.hash
    );

    // The upstream rotates its root; the downstream follows it and goes on.
    let new_root = dir.path().join("up-root-2.pem");
    marketplace::trust::SigningKey::generate()
        .unwrap()
        .save_new(&new_root)
        .unwrap();
    let o = marketplace(&[
        "repo",
        "rotate-root",
        "--data-dir",
        up_data.to_str().unwrap(),
        "--old-root-key",
        dir.path().join("up/root.pem").to_str().unwrap(),
        "--new-root-key",
        new_root.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", output_text(&o));
    let newest = definition("gateway", "edge", "1.2.0");
    let (status, body) = client
        .publish_as("acme", &up[0].1, &newest, &[&up[0].0])
        .await;
    assert_eq!(status, 201, "{body}");
    let status = until_round(&downstream.url, "after the upstream's root rotation", |r| {
        r["upstream_root"] == 2 && publisher(r, "acme")["definitions"] == 3
    })
    .await;
    assert!(status["last_round"]["error"].is_null(), "{status}");

    // A sync worker of the downstream, trusting its root only, sees the upstream's
    // publishers by name, next to the local one, and not the suspended beta.
    let config = write_config(
        dir.path(),
        &[Source {
            name: "internal",
            url: &downstream.url,
            root: &down_root,
            priority: 1,
        }],
    );
    let o = sync_once(&config);
    assert!(o.status.success(), "{}", output_text(&o));
    let api = Api::start(&config, false);
    let reader = token(&config, Some("blue"));
    let (status, view) = api.get("/orgs/blue/plugins", Some(&reader)).await;
    assert_eq!(status, 200, "{view}");
    let find = |name: &str| {
        view["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
    };
    let edge_view = find("edge").unwrap_or_else(|| panic!("edge missing: {view}"));
    assert_eq!(edge_view["publisher"], "acme", "{edge_view}");
    assert_eq!(find("local").unwrap()["publisher"], "gamma");
    assert!(find("store").is_none(), "{view}");
    assert!(find("theirs").is_none(), "{view}");
}

#[tokio::test]
async fn a_role_tampered_in_transit_holds_back_only_its_publisher_and_bins_come_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (up_data, up) = repo(&dir.path().join("up"), &["acme", "beta"]);
    let upstream = Server::start(&up_data);
    let client = Client::new(&upstream.url);
    let edge = definition("gateway", "edge", "1.0.0");
    let store = definition("storage", "store", "1.0.0");
    for (name, i, def) in [("acme", 0, &edge), ("beta", 1, &store)] {
        let (status, body) = client.publish_as(name, &up[i].1, def, &[&up[i].0]).await;
        assert_eq!(status, 201, "{name}: {body}");
    }
    // beta goes on to hashed bins: its third target passes --flat-max-targets 2.
    let beta_key = dir.path().join("beta.pem");
    up[1].0.save_new(&beta_key).unwrap();
    for v in ["1.1.0", "1.2.0"] {
        let def = definition("storage", "store", v);
        let file = dir.path().join(format!("store-{v}.yaml"));
        std::fs::write(&file, &def.bytes).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_marketplace"))
            .arg("publish")
            .arg(&file)
            .args([
                "--server",
                &upstream.url,
                "--flat-max-targets",
                "2",
                "--key",
            ])
            .arg(&beta_key)
            .env("MARKETPLACE_TOKEN", &up[1].1)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", output_text(&o));
    }
    // Between the two: a mirror that serves acme's role with one byte changed.
    let mirror = Mirror::start(&upstream.url);
    let (_, role) = bytes(&format!("{}/tuf/metadata/1.acme.json", upstream.url)).await;
    let tampered = String::from_utf8(role)
        .unwrap()
        .replacen("edge", "edgf", 1)
        .into_bytes();
    mirror.set("/tuf/metadata/1.acme.json", tampered);

    let (down_data, _) = repo(&dir.path().join("down"), &[]);
    let up_root = dir.path().join("up-root.json");
    std::fs::write(&up_root, trusted_root(&upstream.url).await).unwrap();
    let downstream = Server::start_with(
        &down_data,
        &[
            "--upstream",
            &mirror.url,
            "--upstream-root",
            up_root.to_str().unwrap(),
            "--upstream-interval",
            "1s",
        ],
    );
    let status = until_round(&downstream.url, "with beta followed", |r| {
        publisher(r, "beta")["status"] == "followed"
    })
    .await;
    let acme = publisher(&status["last_round"], "acme");
    assert_eq!(acme["status"], "held_back", "{status}");
    let reason = acme["reason"].as_str().unwrap();
    assert!(reason.contains("1.acme.json"), "{reason}");
    let (s, _) = bytes(&format!("{}/tuf/metadata/1.acme.json", downstream.url)).await;
    assert_eq!(s, 404, "nothing of acme is served");
    let (s, _) = bytes(&format!("{}/api/v1/plugins/acme/edge", downstream.url)).await;
    assert_eq!(s, 404);
    let (s, _) = bytes(&format!("{}/api/v1/plugins/beta/store", downstream.url)).await;
    assert_eq!(s, 200);
    // beta's top role and every bin are the upstream's bytes; python-tuf, trusting the
    // downstream's root, walks them to every target.
    let role = |base: &str, bin: Option<&str>| {
        let url = match bin {
            Some(b) => format!("{base}/api/v1/publishers/beta/role?bin={b}"),
            None => format!("{base}/api/v1/publishers/beta/role"),
        };
        async move { bytes(&url).await }
    };
    let (_, top) = role(&upstream.url, None).await;
    assert_eq!(role(&downstream.url, None).await, (200, top.clone()));
    let top: serde_json::Value = serde_json::from_slice(&top).unwrap();
    let bins: Vec<String> = top["signed"]["delegations"]["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(bins.len(), 16, "{top}");
    for bin in &bins {
        let theirs = role(&upstream.url, Some(bin)).await;
        assert_eq!(role(&downstream.url, Some(bin)).await, theirs, "{bin}");
    }
    let down_root = dir.path().join("down-root.json");
    std::fs::write(&down_root, trusted_root(&downstream.url).await).unwrap();
    let names = [
        "beta/store/1.0.0.yaml",
        "beta/store/1.1.0.yaml",
        "beta/store/1.2.0.yaml",
    ];
    let got = python_tuf(&downstream.url, &down_root, &dir.path().join("py"), &names);
    for n in names {
        assert!(got["targets"][n]["sha256"].is_string(), "{n}: {got}");
    }

    // The mirror mends its ways: acme comes along at the next round.
    mirror.thaw();
    until_round(&downstream.url, "with acme followed", |r| {
        publisher(r, "acme")["status"] == "followed"
    })
    .await;
    let (s, ours) = bytes(&format!("{}/tuf/metadata/1.acme.json", downstream.url)).await;
    let (_, theirs) = bytes(&format!("{}/tuf/metadata/1.acme.json", upstream.url)).await;
    assert_eq!((s, sha256(&ours)), (200, sha256(&theirs)));
}
