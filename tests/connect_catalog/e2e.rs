//! The real server binary with an operator's `--curation` file, driven by `buf curl`
//! (an independent Connect client sending binary protobuf) and by plain HTTP in proto3
//! JSON; definitions published, yanked and suspended as a publisher and an operator do.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use marketplace::ids;
use serde_json::{Value, json};

use crate::common::publishing::{Client, definition, marketplace, setup};
use crate::common::{Server, buf, output_text};

const CURATION: &str = "
categories:
  - name: Edge
    plugins: [acme/edge]
  - name: Security
    tags: [security]
featured: [acme/edge]
labels:
  publishers: { acme: [SUPPORT_9_TO_17] }
  plugins: { \"acme/edge\": [RIJKSOVERHEID] }
";

fn rpc(server: &Server, method: &str, data: Value) -> buf::Call {
    buf::curl(
        &format!("{}/catalog.v1.CatalogService/{method}", server.url),
        &data.to_string(),
        &[],
    )
}

fn names(listing: &Value) -> Vec<&str> {
    listing["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn buf_curl_against_the_server_binary() {
    let dir = tempfile::tempdir().unwrap();
    let (data, key, token, _) = setup(dir.path());
    let curation = dir.path().join("curation.yaml");
    std::fs::write(&curation, CURATION).unwrap();
    let server = Server::start_with(&data, &["--curation", curation.to_str().unwrap()]);
    // A second after the built-ins were stored, so RECENTLY_ADDED tells them apart.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let c = Client::new(&server.url);
    for version in ["1.0.0", "1.1.0"] {
        let def = definition("gateway", "edge", version);
        let (status, body) = c.publish_signed(&token, &def, &[&key]).await;
        assert_eq!(status, 201, "{body}");
    }
    let edge = ids::plugin("acme", "edge");

    // ListPlugins: the curation file's featured plugin and labels, newest first.
    let recent = rpc(
        &server,
        "ListPlugins",
        json!({"sort": "PLUGIN_SORT_RECENTLY_ADDED"}),
    )
    .json();
    assert_eq!(names(&recent).len(), 9, "{recent}");
    let first = &recent["plugins"][0];
    assert_eq!(first["id"], edge.as_str());
    assert_eq!(first["organizationId"], ids::publisher("acme").as_str());
    assert_eq!(
        first["latestVersionId"],
        ids::version("acme", "edge", "1.1.0").as_str()
    );
    assert_eq!(first["featured"], true);
    assert_eq!(first["categoryIds"], json!([ids::category("Edge")]));
    assert_eq!(
        first["labels"],
        json!(["PLUGIN_LABEL_RIJKSOVERHEID", "PLUGIN_LABEL_SUPPORT_9_TO_17"])
    );
    assert_eq!(first["image"], "", "buf prints defaults");
    let published: Vec<jiff::Timestamp> = recent["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["published"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(published[0] > published[1], "{published:?}");
    assert!(published.is_sorted_by(|a, b| a >= b), "{published:?}");
    for p in &recent["plugins"].as_array().unwrap()[1..] {
        assert_eq!(p["labels"], json!(["PLUGIN_LABEL_CORE"]), "{p}");
        assert_eq!(p["featured"], false, "the file features no built-in: {p}");
    }
    let featured = rpc(&server, "ListPlugins", json!({"featuredOnly": true})).json();
    assert_eq!(names(&featured), ["edge"]);
    let security = rpc(
        &server,
        "ListPlugins",
        json!({"categoryId": ids::category("Security")}),
    )
    .json();
    assert_eq!(names(&security), ["cert-manager"]);

    // GetPlugin and ListPluginVersions.
    let details = rpc(&server, "GetPlugin", json!({"pluginId": edge})).json();
    let p = &details["plugin"];
    assert_eq!(
        (p["name"].as_str(), p["authorName"].as_str()),
        (Some("edge"), Some("Fundament"))
    );
    assert_eq!(
        p["repositoryUrl"],
        "https://github.com/fundament-oss/plugins"
    );
    assert_eq!(p["capabilities"], json!(["manage_load_balancers"]));
    assert!(!p["permissions"].as_array().unwrap().is_empty(), "{p}");
    assert_eq!(p["documentationLinks"].as_array().unwrap().len(), 3, "{p}");
    assert_eq!(p["features"], json!([]));
    let versions = rpc(&server, "ListPluginVersions", json!({"pluginId": edge})).json();
    let got: Vec<(&str, &str)> = versions["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["version"].as_str().unwrap(), v["id"].as_str().unwrap()))
        .collect();
    let (v11, v10) = (
        ids::version("acme", "edge", "1.1.0"),
        ids::version("acme", "edge", "1.0.0"),
    );
    assert_eq!(got, [("1.1.0", v11.as_str()), ("1.0.0", v10.as_str())]);

    // ListCategories in the file's order; ListPublishers leaves out beta (nothing listed).
    let categories = rpc(&server, "ListCategories", json!({})).json();
    assert_eq!(
        categories,
        json!({"categories": [
            {"id": ids::category("Edge"), "name": "Edge"},
            {"id": ids::category("Security"), "name": "Security"},
        ]})
    );
    let publishers = rpc(&server, "ListPublishers", json!({})).json();
    let got: Vec<&str> = publishers["publishers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(got, ["acme", "fundament"]);

    // Refusals, as buf reports them (its exit code carries the Connect code).
    let bad = rpc(&server, "GetPlugin", json!({"pluginId": "edge"}));
    assert_eq!(bad.code(), "invalid_argument", "{bad:?}");
    assert!(bad.stderr.contains("plugin_id"), "{}", bad.stderr);
    let unknown = ids::plugin("acme", "missing");
    let missing = rpc(&server, "ListPluginVersions", json!({"pluginId": unknown}));
    assert_eq!(missing.code(), "not_found", "{missing:?}");
    let long = rpc(&server, "ListPlugins", json!({"query": "x".repeat(201)}));
    assert_eq!(long.code(), "invalid_argument", "{long:?}");

    // Plain HTTP with proto3 JSON, as Fundament's console sends it.
    let http = reqwest::Client::new();
    let post = |method: &str, body: Value| {
        http.post(format!("{}/catalog.v1.CatalogService/{method}", server.url))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    let res = post(
        "ListPlugins",
        json!({"query": "edge", "sort": "PLUGIN_SORT_NAME"}),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/json");
    let listing: Value = res.json().await.unwrap();
    assert_eq!(names(&listing), ["edge"]);
    assert_eq!(listing["plugins"][0]["displayName"], "Gateway");
    assert_eq!(listing["plugins"][0]["published"], first["published"]);
    let res = post("GetPlugin", json!({"pluginId": unknown}))
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        body,
        json!({"code": "not_found", "message": format!("plugin {unknown} not found")})
    );

    // The publisher yanks 1.1.0 with the CLI: versions and latest move back.
    let key_file = dir.path().join("acme.pem");
    key.save_new(&key_file).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(["yank", "acme/edge@1.1.0", "--server", &server.url])
        .args(["--key", key_file.to_str().unwrap()])
        .env("MARKETPLACE_TOKEN", &token)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let versions = rpc(&server, "ListPluginVersions", json!({"pluginId": edge})).json();
    assert_eq!(
        versions["versions"].as_array().unwrap().len(),
        1,
        "{versions}"
    );
    assert_eq!(versions["versions"][0]["id"], v10.as_str());
    let details = rpc(&server, "GetPlugin", json!({"pluginId": edge})).json();
    assert_eq!(details["plugin"]["latestVersionId"], v10.as_str());

    // The operator suspends acme from another process: gone from every answer.
    let data_dir = data.to_str().unwrap();
    let out = marketplace(&["publisher", "suspend", "acme", "--data-dir", data_dir]);
    assert!(out.status.success(), "{}", output_text(&out));
    let publishers = rpc(&server, "ListPublishers", json!({})).json();
    assert_eq!(
        publishers["publishers"].as_array().unwrap().len(),
        1,
        "{publishers}"
    );
    assert_eq!(publishers["publishers"][0]["name"], "fundament");
    assert_eq!(
        rpc(&server, "GetPlugin", json!({"pluginId": edge})).code(),
        "not_found"
    );
    let featured = rpc(&server, "ListPlugins", json!({"featuredOnly": true})).json();
    assert_eq!(featured, json!({"plugins": []}));
}

#[test]
fn a_bad_curation_file_stops_serve() {
    let dir = tempfile::tempdir().unwrap();
    let curation = dir.path().join("curation.yaml");
    std::fs::write(&curation, "labels:\n  publishers: { acme: [CORE] }\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--curation")
        .arg(&curation)
        .env("MARKETPLACE_MIRROR", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("serve kept running with a curation that grants CORE");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let text = output_text(&out);
    assert!(!text.contains("listening"), "{text}");
    assert!(
        text.contains(&format!(
            "{}: labels.publishers.acme[0]: CORE cannot be granted",
            curation.display()
        )),
        "{text}"
    );
    // Nothing was created: the file is read before the data directory.
    assert!(!dir.path().join("data").exists());
}
