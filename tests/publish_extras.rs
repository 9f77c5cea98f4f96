//! Publishing in Fundament's schema, against the real binaries: a definition with its
//! companion document (`publish --extras`) and the image set as Fundament's publishing
//! tool sets it (`--image`); what the catalog, the signed index and the worker's install
//! plans make of them; and what the server refuses: a `custom` that disagrees with the
//! definition, and any field of the older design.

mod common;

use std::path::Path;
use std::process::Command;

use common::publishing::{Client, setup_with, signed_role};
use common::worker::{Api, install_order, synced_from, token};
use common::{Server, output_text as out};
use marketplace::definition::{Definition, Extras, definition_hash};
use marketplace::trust::SigningKey;
use serde_json::{Value, json};

const IMAGE: &str = "registry.example.com/acme/app@sha256:4444444444444444444444444444444444444444444444444444444444444444";

/// An image-free source definition, as a plugin's repository keeps it.
const SOURCE: &str = "apiVersion: fundament.io/v1
kind: PluginDefinition
metadata:
  name: app
  displayName: App
  version: v1.0.0
  description: An application that keeps its data in block storage.
  author: Acme
spec:
  permissions:
    capabilities: [internet_access]
    rbac:
      - apiGroups: [apps.acme.example.com]
        resources: [apps]
        verbs: [get, list, watch]
  crds: [apps.apps.acme.example.com]
";

const EXTRAS: &str = "apiVersion: marketplace.fundament.io/v1
kind: PluginExtras
plugin: app
dependencies: [storage]
suggestedPlugins: [backup, not-here]
clusterCapabilities: [storageClass]
";

fn publish(
    dir: &Path,
    url: &str,
    token: &str,
    key: &SigningKey,
    args: &[&str],
) -> std::process::Output {
    let pem = dir.join("acme.pem");
    if !pem.exists() {
        key.save_new(&pem).unwrap();
    }
    Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .arg("publish")
        .args(args)
        .args(["--server", url, "--key"])
        .arg(&pem)
        .env("MARKETPLACE_TOKEN", token)
        .current_dir(dir)
        .output()
        .unwrap()
}

async fn get_json(url: &str) -> Value {
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

async fn get_text(url: &str) -> String {
    reqwest::get(url).await.unwrap().text().await.unwrap()
}

#[tokio::test]
async fn a_definition_with_dependencies_is_published_with_its_companion_and_planned() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let server = Server::start(&m.data);
    std::fs::write(dir.path().join("app.yaml"), SOURCE).unwrap();
    std::fs::write(dir.path().join("app.extras.yaml"), EXTRAS).unwrap();

    let o = publish(
        dir.path(),
        &server.url,
        &m.acme_token,
        &m.acme,
        &["app.yaml", "--extras", "app.extras.yaml", "--image", IMAGE],
    );
    assert!(o.status.success(), "{}", out(&o));
    // The bytes signed are the source with the image set, as Fundament's tool sets it.
    let expected = format!("{SOURCE}  image: {IMAGE}\n  imagePullPolicy: IfNotPresent\n");
    let hash = definition_hash(expected.as_bytes());
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains(&format!("published acme/app v1.0.0 ({hash})")),
        "{stdout}"
    );
    let served = get_text(&format!(
        "{}/plugins/acme/app/versions/v1.0.0/definition.yaml",
        server.url
    ))
    .await;
    assert_eq!(served, expected);

    // The extras are in the publisher's signed target.
    let role = get_json(&format!("{}/api/v1/publishers/acme/role", server.url)).await;
    let custom = &role["signed"]["targets"]["acme/app/1.0.0.yaml"]["custom"];
    assert_eq!(
        custom["extras"],
        json!({"dependencies": ["storage"], "suggestedPlugins": ["backup", "not-here"], "clusterCapabilities": ["storageClass"]})
    );
    assert_eq!(custom["approval"]["internetAccess"], true);

    // The catalog shows them.
    let detail = get_json(&format!("{}/api/v1/plugins/acme/app", server.url)).await;
    assert_eq!(detail["namespace"], "plugin-app");
    assert_eq!(detail["dependencies"][0]["name"], "storage");
    assert_eq!(
        detail["dependencies"][0]["found"][0]["publisher"],
        "fundament"
    );
    assert_eq!(detail["suggested_plugins"][1]["found"], json!([]));
    assert_eq!(detail["cluster_capabilities"], json!(["storageClass"]));
    let page = get_text(&format!("{}/plugins/acme/app", server.url)).await;
    assert!(
        page.contains("<a href=\"/plugins/fundament/storage\">Block Storage (fundament)</a>"),
        "{page}"
    );
    assert!(
        page.contains("not-here <span class=\"badge\">not in catalog</span>"),
        "{page}"
    );
    assert!(
        page.contains("<strong>Cluster must offer</strong> <span><code>storageClass</code>"),
        "{page}"
    );
    let storage = get_json(&format!("{}/api/v1/plugins/fundament/storage", server.url)).await;
    assert!(
        storage["required_by"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "app"),
        "{storage}"
    );

    // A worker reads them from the signed index, and plans the dependency first.
    let config = synced_from(dir.path(), &server.url).await;
    let acme = token(&config, Some("acme"));
    let api = Api::start(&config, false);
    let (status, plan) = api
        .get("/orgs/acme/install-plan?plugins=app", Some(&acme))
        .await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(
        install_order(&plan),
        [
            ("storage".to_owned(), "plugin-storage".to_owned()),
            ("app".to_owned(), "plugin-app".to_owned())
        ]
    );
    assert_eq!(
        plan["order"][1]["approve"],
        json!(["internetAccess", "capability:storageClass"])
    );
}

#[tokio::test]
async fn a_custom_that_disagrees_with_the_definition_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let server = Server::start(&m.data);
    let c = Client::new(&server.url);
    let text = format!("{SOURCE}  image: {IMAGE}\n");
    let def = Definition::parse(text.as_bytes()).unwrap();

    // Extras no companion document could say: signed, but refused.
    let mut listing_itself = def.clone();
    listing_itself.extras = Extras {
        dependencies: vec!["app".into()],
        ..Default::default()
    };
    let role = signed_role(&c, &listing_itself, &[&m.acme]).await;
    let (status, body) = c
        .publish("acme", Some(&m.acme_token), &def.bytes, &role)
        .await;
    common::publishing::assert_refused(
        status,
        &body,
        422,
        "rejected",
        "custom.extras.dependencies[0]: a plugin cannot list itself",
    );

    // An approval summary that hides what the file asks for.
    let mut hiding = def.clone();
    hiding.manifest.spec.permissions.capabilities.clear();
    let role = signed_role(&c, &hiding, &[&m.acme]).await;
    let (status, body) = c
        .publish("acme", Some(&m.acme_token), &def.bytes, &role)
        .await;
    common::publishing::assert_refused(
        status,
        &body,
        422,
        "rejected",
        "custom.approval is not what the definition says",
    );

    // Nothing was published; the honest role is accepted.
    let role = signed_role(&c, &def, &[&m.acme]).await;
    let (status, body) = c
        .publish("acme", Some(&m.acme_token), &def.bytes, &role)
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["role_version"], 1);
}

#[tokio::test]
async fn a_definition_of_the_older_design_is_refused_with_every_field_named() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let server = Server::start(&m.data);
    let c = Client::new(&server.url);
    let old = std::fs::read_to_string(common::fixture("legacy", "postgres-operator.yaml"))
        .unwrap()
        .replacen("name: postgres-operator", "name: db", 1);
    std::fs::write(dir.path().join("db.yaml"), &old).unwrap();

    // The CLI refuses before anything is signed, each field with its line.
    let o = publish(
        dir.path(),
        &server.url,
        &m.acme_token,
        &m.acme,
        &["db.yaml"],
    );
    assert!(!o.status.success());
    let text = out(&o);
    assert!(
        text.contains("not publishing: invalid definition(s)"),
        "{text}"
    );
    assert!(
        text.contains(
            "db.yaml:84:7: spec.uiHints.defaults.clusters.postgresql.cnpg.io: unknown field"
        ),
        "{text}"
    );

    // The API refuses a signed upload of it, every problem in `details`.
    let def = Definition::parse_published(old.as_bytes()).unwrap();
    let role = signed_role(&c, &def, &[&m.acme]).await;
    let (status, body) = c
        .publish("acme", Some(&m.acme_token), &def.bytes, &role)
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("invalid_definition")),
        "{body}"
    );
    let problems = body["error"]["details"]["problems"].as_array().unwrap();
    assert!(!problems.is_empty(), "{body}");
    assert!(problems.iter().all(|p| p["line"].is_u64()), "{body}");
    // Nothing was stored.
    let r = reqwest::get(format!("{}/api/v1/plugins/acme/db", server.url))
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn image_edits_that_cannot_be_made_are_refused_before_signing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.yaml"), SOURCE).unwrap();
    std::fs::write(
        dir.path().join("two.yaml"),
        SOURCE.replace("name: app", "name: two"),
    )
    .unwrap();
    let key = SigningKey::generate().unwrap();
    // No server is needed: these are refused before anything is fetched.
    let url = "http://127.0.0.1:9";
    for (args, refusal) in [
        (
            &["app.yaml", "--image", "ghcr.io/acme/app:v1"][..],
            "--image image `ghcr.io/acme/app:v1` is not pinned by digest",
        ),
        (
            &["app.yaml", "two.yaml", "--image", IMAGE],
            "--image sets the image of one definition",
        ),
        (
            &["app.yaml", "--image", IMAGE, "--extras", "two.yaml"],
            "invalid companion document(s)",
        ),
    ] {
        let o = publish(dir.path(), url, "mkt_x", &key, args);
        assert!(!o.status.success(), "{args:?}");
        assert!(out(&o).contains(refusal), "{args:?}: {}", out(&o));
    }
}
