//! The sync worker's merged views and local API, end to end: two real marketplaces on
//! loopback with different priorities, the real `marketplace sync` binary for rounds
//! (`--once`) and for the API (`--api-only`, and with its own rounds), and HTTP calls
//! as Fundament would make them.

mod common;

use std::time::{Duration, Instant};

use common::publishing::{Client, definition, marketplace, setup_with};
use common::worker::{Api, Source, sync_once, token, write_config_on};
use common::{Server, output_text as out, trusted_root};
use marketplace::definition::Definition;
use reqwest::Method;
use serde_json::Value;

/// The same definition with other bytes (a trailing comment).
fn variant(def: &Definition, tag: &str) -> Definition {
    let mut bytes = def.bytes.clone();
    bytes.extend_from_slice(format!("# {tag}\n").as_bytes());
    Definition::parse(&bytes).unwrap()
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap().to_owned())
        .collect()
}

fn clash<'a>(clashes: &'a Value, name: &str) -> &'a Value {
    clashes
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no clash for {name} in {clashes}"))
}

#[tokio::test]
async fn two_marketplaces_merge_by_priority_and_follow_publishes_and_yanks() {
    two_marketplaces_merge(None).await
}

/// The same rounds (cold, then warm) with the worker's state in PostgreSQL.
#[tokio::test]
async fn two_marketplaces_merge_by_priority_and_follow_publishes_and_yanks_on_postgres() {
    let pg = common::pg::shared();
    two_marketplaces_merge(Some(pg.fresh().await)).await
}

async fn two_marketplaces_merge(database: Option<String>) {
    let dir = tempfile::tempdir().unwrap();
    let m1 = setup_with(&dir.path().join("m1"), &[]);
    let m2 = setup_with(&dir.path().join("m2"), &[]);
    let (s1, s2) = (Server::start(&m1.data), Server::start(&m2.data));
    let (c1, c2) = (Client::new(&s1.url), Client::new(&s2.url));
    let db = definition("postgres-operator", "db", "1.0.0");
    let edge = definition("gateway", "edge", "1.0.0");
    for (c, publisher, token, key, def) in [
        (&c1, "acme", &m1.acme_token, &m1.acme, db.clone()),
        (&c1, "acme", &m1.acme_token, &m1.acme, edge.clone()),
        // m2 offers the same publisher and name with other bytes, and a newer version
        // that must not leak into m1's acme/db.
        (&c2, "acme", &m2.acme_token, &m2.acme, variant(&db, "m2")),
        (
            &c2,
            "acme",
            &m2.acme_token,
            &m2.acme,
            definition("postgres-operator", "db", "2.0.0"),
        ),
        (
            &c2,
            "beta",
            &m2.beta_token,
            &m2.beta,
            variant(&edge, "beta"),
        ),
        (
            &c2,
            "beta",
            &m2.beta_token,
            &m2.beta,
            definition("cert-manager", "cert-manager", "9.0.0"),
        ),
        (
            &c2,
            "beta",
            &m2.beta_token,
            &m2.beta,
            definition("storage", "only-on-m2", "1.0.0"),
        ),
    ] {
        let (status, body) = c.publish_as(publisher, token, &def, &[key]).await;
        assert_eq!(status, 201, "{body}");
    }
    let (r1, r2) = (dir.path().join("m1.json"), dir.path().join("m2.json"));
    std::fs::write(&r1, trusted_root(&s1.url).await).unwrap();
    std::fs::write(&r2, trusted_root(&s2.url).await).unwrap();
    let config = write_config_on(
        dir.path(),
        &[
            Source {
                name: "m1",
                url: &s1.url,
                root: &r1,
                priority: 10,
            },
            Source {
                name: "m2",
                url: &s2.url,
                root: &r2,
                priority: 1,
            },
        ],
        database.as_deref(),
    );
    let o = sync_once(&config);
    assert!(o.status.success(), "{}", out(&o));
    let api = Api::start(&config, false);
    let blue = token(&config, Some("blue"));

    let (status, view) = api.get("/orgs/blue/plugins", Some(&blue)).await;
    assert_eq!(status, 200, "{view}");
    let plugin = |name: &str| -> Value {
        view["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} missing from {view}"))
    };
    // m1 (priority 10) speaks for acme/db: its bytes, not m2's, and not m2's 2.0.0.
    let p = plugin("db");
    assert_eq!(p["publisher"], "acme");
    assert_eq!(names(&p["latest"]), ["1.0.0"]);
    assert_eq!(p["latest"][0]["hash"], db.hash.as_str());
    assert_eq!(p["latest"][0]["trust"]["kind"], "marketplace");
    assert_eq!(p["latest"][0]["trust"]["source"], "m1");
    assert_eq!(
        p["latest"][0]["trust"]["keyIds"][0],
        m1.acme.public().key_id().as_str()
    );
    assert_eq!(p["latest"][0]["requirements"]["internetAccess"], false);
    assert_eq!(p["latest"][0]["dependencies"][0], "storage");
    assert_eq!(clash(&view["clashes"], "db")["kind"], "shadowed");
    assert_eq!(
        clash(&view["clashes"], "db")["others"][0]["sources"][0],
        "m2"
    );
    // Another publisher's name: the higher priority wins, the other is reported.
    assert_eq!(plugin("edge")["publisher"], "acme");
    assert_eq!(
        clash(&view["clashes"], "edge")["others"][0]["publisher"],
        "beta"
    );
    // A built-in name is never taken by another publisher.
    let cm = plugin("cert-manager");
    assert_eq!(
        (cm["publisher"].as_str(), cm["origin"].as_str()),
        (Some("fundament"), Some("builtin"))
    );
    assert_eq!(cm["latest"][0]["trust"]["kind"], "builtin");
    assert_eq!(clash(&view["clashes"], "cert-manager")["kind"], "shadowed");
    // The exact bytes to install, whoever vouches for them.
    let yaml = |path: String| {
        let api = &api;
        let blue = blue.clone();
        async move {
            let r = api
                .http
                .get(format!("{}{path}", api.url))
                .bearer_auth(&blue)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.bytes().await.unwrap().to_vec())
        }
    };
    assert_eq!(
        yaml("/orgs/blue/plugins/db/versions/1.0.0/definition".into()).await,
        (200, db.bytes.clone())
    );
    let builtin_cm = marketplace::catalog::builtin::definitions()
        .unwrap()
        .into_iter()
        .find(|d| d.name() == "cert-manager")
        .unwrap();
    assert_eq!(
        yaml(format!(
            "/orgs/blue/plugins/cert-manager/versions/{}/definition",
            builtin_cm.version
        ))
        .await,
        (200, builtin_cm.bytes.clone())
    );
    assert_eq!(
        yaml("/orgs/blue/plugins/db/versions/2.0.0/definition".into())
            .await
            .0,
        404
    );
    // A plugin only the lower-priority source has is offered from it.
    assert_eq!(plugin("only-on-m2")["latest"][0]["trust"]["source"], "m2");

    // A new version appears in the next round and is an upgrade.
    let newer = definition("postgres-operator", "db", "1.1.0");
    let (status, body) = c1
        .publish_as("acme", &m1.acme_token, &newer, &[&m1.acme])
        .await;
    assert_eq!(status, 201, "{body}");
    let o = sync_once(&config);
    assert!(
        out(&o).contains("m1: 11 definitions (1 downloaded)"),
        "{}",
        out(&o)
    );
    assert!(
        out(&o).contains("m2: 13 definitions, unchanged"),
        "{}",
        out(&o)
    );
    let (status, up) = api
        .get("/orgs/blue/plugins/db/upgrades?from=1.0.0", Some(&blue))
        .await;
    assert_eq!(status, 200, "{up}");
    assert_eq!(names(&up["upgrades"]), ["1.1.0"]);

    // A yanked version leaves upgrades and "latest", and stays listed as yanked.
    let key = dir.path().join("acme.pem");
    m1.acme.save_new(&key).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(["yank", "acme/db@1.1.0", "--server", &s1.url, "--key"])
        .arg(&key)
        .env("MARKETPLACE_TOKEN", &m1.acme_token)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", out(&o));
    assert!(sync_once(&config).status.success());
    let (_, up) = api
        .get("/orgs/blue/plugins/db/upgrades?from=v1.0.0", Some(&blue))
        .await;
    assert_eq!(names(&up["upgrades"]), Vec::<String>::new());
    let (status, detail) = api.get("/orgs/blue/plugins/db", Some(&blue)).await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(names(&detail["versions"]), ["1.1.0", "1.0.0"]);
    assert_eq!(detail["versions"][0]["yanked"], true);
    assert_eq!(names(&detail["plugin"]["latest"]), ["1.0.0"]);

    // The install plan: dependencies first, approvals named.
    let (status, plan) = api
        .get("/orgs/blue/install-plan?plugins=db,backup", Some(&blue))
        .await;
    assert_eq!(status, 200, "{plan}");
    let order: Vec<&str> = plan["order"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["storage", "db", "object-storage", "backup"]);
    assert_eq!(plan["complete"], true);
    assert_eq!(plan["order"][3]["approve"][0], "internetAccess");
    assert_eq!(plan["order"][0]["requiredBy"][0], "db");

    // Errors name what is wrong.
    for (path, want) in [
        ("/orgs/blue/plugins/nope", 404),
        ("/orgs/blue/plugins/db/upgrades?from=one", 400),
        ("/orgs/blue/plugins/db/upgrades", 400),
        ("/orgs/blue/install-plan?plugins=nope", 404),
        ("/orgs/blue/install-plan?plugins=db@1.1.0", 409),
        ("/orgs/blue/install-plan?plugins=", 400),
        ("/orgs/Blue/plugins", 400),
    ] {
        let (status, body) = api.get(path, Some(&blue)).await;
        assert_eq!(status, want, "{path}: {body}");
        assert!(body["error"]["message"].is_string(), "{path}: {body}");
    }

    // /status: both sources, their trusted versions and expiry.
    let m1s = api.source_status("m1").await;
    assert_eq!(m1s["priority"], 10);
    assert_eq!(m1s["definitions"], 11);
    assert!(m1s["trusted"]["snapshot"].as_u64().unwrap() >= 3, "{m1s}");
    assert!(m1s["trusted"]["expiresAt"].as_i64().unwrap() > marketplace::clock::now());
    assert!(m1s["lastReason"].is_null());
    assert_eq!(
        dir.path().join("worker/sync.db").exists(),
        database.is_none(),
        "the worker keeps its state where its configuration says"
    );
}

#[tokio::test]
async fn sideloads_stay_in_their_organization_and_tokens_are_scoped() {
    sideloads_stay_in_their_organization(None).await
}

#[tokio::test]
async fn sideloads_stay_in_their_organization_and_tokens_are_scoped_on_postgres() {
    let pg = common::pg::shared();
    sideloads_stay_in_their_organization(Some(pg.fresh().await)).await
}

/// With the worker's state in `database` (a URL), or its default SQLite file.
async fn sideloads_stay_in_their_organization(database: Option<String>) {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_on(dir.path(), &[], database.as_deref());
    let api = Api::start(&config, false);
    let (blue, red, reader) = (
        token(&config, Some("blue")),
        token(&config, Some("red")),
        token(&config, None),
    );
    let inhouse = definition("storage", "inhouse", "1.0.0");
    let post = |org: &str, token: Option<&str>, body: Vec<u8>| {
        let path = format!("/orgs/{org}/sideloads");
        let api = &api;
        let token = token.map(str::to_owned);
        async move { api.send(Method::POST, &path, token.as_deref(), body).await }
    };

    let (status, body) = post("blue", Some(&blue), inhouse.bytes.clone()).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["hash"], inhouse.hash.as_str());
    assert_eq!(
        post("blue", Some(&blue), inhouse.bytes.clone()).await.0,
        200
    );
    let (status, body) = post("blue", Some(&blue), variant(&inhouse, "x").bytes).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("version_exists")),
        "{body}"
    );
    // Same validation as `marketplace validate`: the field and line are named.
    let broken = String::from_utf8(inhouse.bytes.clone())
        .unwrap()
        .replace("@sha256:", ":latest#");
    let (status, body) = post("blue", Some(&blue), broken.into_bytes()).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["error"]["details"]["problems"][0]["path"],
        "spec.image"
    );
    assert!(body["error"]["details"]["problems"][0]["line"].is_u64());
    let (status, _) = post("blue", Some(&blue), vec![b'#'; 3 * 1024 * 1024]).await;
    assert_eq!(status, 413);
    // Tokens: none, another organization's, a reader's (reads only), a made-up one.
    assert_eq!(post("blue", None, inhouse.bytes.clone()).await.0, 401);
    let (status, body) = post("blue", Some(&red), inhouse.bytes.clone()).await;
    assert_eq!(status, 403, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("red"));
    assert_eq!(
        post("blue", Some(&reader), inhouse.bytes.clone()).await.0,
        403
    );
    assert_eq!(
        post("blue", Some("mst_00"), inhouse.bytes.clone()).await.0,
        401
    );

    // red sideloads a plugin over a built-in name: red sees it, blue does not.
    let own_backup = definition("backup", "backup", "5.0.0");
    assert_eq!(
        post("red", Some(&red), own_backup.bytes.clone()).await.0,
        201
    );
    let view = |org: &'static str, token: String| {
        let api = &api;
        async move { api.get(&format!("/orgs/{org}/plugins"), Some(&token)).await }
    };
    let find = |v: &Value, name: &str| -> Option<Value> {
        v["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
    };
    let (status, b) = view("blue", blue.clone()).await;
    assert_eq!(status, 200, "{b}");
    let (_, r) = view("red", red.clone()).await;
    assert_eq!(find(&b, "inhouse").unwrap()["origin"], "sideloaded");
    assert_eq!(
        find(&b, "inhouse").unwrap()["latest"][0]["trust"]["org"],
        "blue"
    );
    assert!(
        find(&r, "inhouse").is_none(),
        "blue's sideload leaked to red"
    );
    assert_eq!(find(&b, "backup").unwrap()["origin"], "builtin");
    assert_eq!(find(&r, "backup").unwrap()["origin"], "sideloaded");
    assert_eq!(
        clash(&r["clashes"], "backup")["others"][0]["origin"],
        "builtin"
    );
    assert!(
        b["clashes"].as_array().unwrap().is_empty(),
        "{}",
        b["clashes"]
    );
    assert_eq!(
        api.get("/orgs/red/plugins/inhouse", Some(&red)).await.0,
        404
    );
    // A token of one organization cannot read another's view or sideloads.
    assert_eq!(view("blue", red.clone()).await.0, 403);
    assert_eq!(api.get("/orgs/blue/sideloads", Some(&red)).await.0, 403);
    // A reader token reads every organization, each with its own sideloads.
    assert!(find(&view("blue", reader.clone()).await.1, "inhouse").is_some());
    assert!(find(&view("red", reader.clone()).await.1, "inhouse").is_none());

    let (status, list) = api.get("/orgs/blue/sideloads", Some(&blue)).await;
    assert_eq!(status, 200);
    assert_eq!(list["sideloads"].as_array().unwrap().len(), 1);
    let raw = api
        .http
        .get(format!("{}/orgs/blue/sideloads/inhouse/v1.0.0", api.url))
        .bearer_auth(&blue)
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 200);
    assert_eq!(raw.bytes().await.unwrap().to_vec(), inhouse.bytes);
    // red cannot delete blue's sideload; blue can, once.
    let path = "/orgs/blue/sideloads/inhouse/1.0.0";
    assert_eq!(
        api.send(Method::DELETE, path, Some(&red), vec![]).await.0,
        403
    );
    assert_eq!(
        api.send(Method::DELETE, path, Some(&blue), vec![]).await.0,
        204
    );
    assert_eq!(
        api.send(Method::DELETE, path, Some(&blue), vec![]).await.0,
        404
    );
    assert!(find(&view("blue", blue.clone()).await.1, "inhouse").is_none());

    // A revoked token stops working.
    let o = marketplace(&[
        "sync",
        "token",
        "list",
        "--config",
        config.to_str().unwrap(),
    ]);
    let id = out(&o)
        .lines()
        .find(|l| l.contains("org red"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_owned();
    let o = marketplace(&[
        "sync",
        "token",
        "revoke",
        &id,
        "--config",
        config.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", out(&o));
    assert_eq!(view("red", red.clone()).await.0, 401);

    // An unknown route answers in the API's error shape, a body sent to it too.
    let (status, body) = api.get("/orgs/blue/nowhere", Some(&blue)).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );
    let (status, _) = api
        .send(Method::POST, "/nowhere", None, vec![b'#'; 512 * 1024])
        .await;
    assert_eq!(status, 404);

    // No sources: the built-ins alone, and /status needs no token.
    let (status, s) = api.get("/status", None).await;
    assert_eq!(status, 200);
    assert_eq!(s["builtins"], 8);
    assert!(s["sources"].as_array().unwrap().is_empty());
    assert_eq!(
        dir.path().join("worker/sync.db").exists(),
        database.is_none(),
        "the worker keeps its state where its configuration says"
    );
}

#[tokio::test]
async fn the_running_worker_syncs_on_start_and_serves_the_result() {
    running_worker_syncs_on_start(None).await
}

#[tokio::test]
async fn the_running_worker_syncs_on_start_and_serves_the_result_on_postgres() {
    let pg = common::pg::shared();
    running_worker_syncs_on_start(Some(pg.fresh().await)).await
}

async fn running_worker_syncs_on_start(database: Option<String>) {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let server = Server::start(&m.data);
    let c = Client::new(&server.url);
    let def = definition("gateway", "edge", "1.0.0");
    assert_eq!(
        c.publish_signed(&m.acme_token, &def, &[&m.acme]).await.0,
        201
    );
    let root = dir.path().join("root.json");
    std::fs::write(&root, trusted_root(&server.url).await).unwrap();
    let config = write_config_on(
        dir.path(),
        &[Source {
            name: "main",
            url: &server.url,
            root: &root,
            priority: 0,
        }],
        database.as_deref(),
    );
    let api = Api::start(&config, true);
    let reader = token(&config, None);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = api.source_status("main").await;
        if s["lastSuccessAt"].is_i64() {
            assert_eq!(s["definitions"], 9, "{s}");
            break;
        }
        assert!(Instant::now() < deadline, "no round within 30 s: {s}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, body) = api.get("/orgs/any/plugins/edge", Some(&reader)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["versions"][0]["trust"]["source"], "main");
    assert_eq!(
        dir.path().join("worker/sync.db").exists(),
        database.is_none(),
        "the worker keeps its state where its configuration says"
    );
}
