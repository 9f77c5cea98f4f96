//! What Fundament installs from the worker (`organization.v1.PluginService` on the real
//! `marketplace sync` binary) is Fundament's schema, checked by the independent referee:
//! the `definition` message `buf curl` prints equals the YAML read by PyYAML, field for
//! field, and the manifest passes `schema/plugin-definition.schema.json`. Versions of the
//! older design are left out of the contract and listed with the reason; sideloads carry
//! a companion document; a refused sideload names every wrong field, in the message and
//! as a `google.rpc.BadRequest` detail.

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use buffa::Message;
use common::publishing::{Client, setup_with};
use common::worker::{Api, install_order, synced_from, token, write_config};
use common::{Server, buf, fixture, fixtures, fundament_definitions, referee, schema};
use marketplace::definition::Definition;
use marketplace::store::Store;
use serde_json::{Value, json};

const SERVICE: &str = "organization.v1.PluginService";

/// A worker with no sources (the built-ins alone), serving its API, with a token for
/// organization `acme`.
fn worker_alone() -> (tempfile::TempDir, Api, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &[]);
    let acme = token(&config, Some("acme"));
    let api = Api::start(&config, false);
    (dir, api, acme)
}

fn method_url(api: &Api, org: &str, method: &str) -> String {
    format!("{}/orgs/{org}/{SERVICE}/{method}", api.url)
}

/// A Connect call with a JSON body, as Fundament's console makes it.
async fn connect(
    api: &Api,
    org: &str,
    method: &str,
    body: Value,
    token: Option<&str>,
) -> (u16, Value) {
    let mut req = api
        .http
        .post(method_url(api, org, method))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

/// `GetPluginDefinition` through `buf curl` (binary protobuf, no token: the plugin
/// controller's call).
fn get_definition(api: &Api, org: &str, name: &str, version: &str) -> buf::Call {
    buf::curl(
        &method_url(api, org, "GetPluginDefinition"),
        &json!({"pluginName": name, "pluginVersion": version}).to_string(),
        &[],
    )
}

#[tokio::test]
async fn every_definition_offered_to_fundament_reads_back_field_for_field() {
    let (dir, api, acme) = worker_alone();

    // The built-ins (organization `builtins` has nothing else), and into `acme` every
    // valid fixture and Fundament's own definitions, sideloaded with Fundament's call.
    let builtins: Vec<(String, PathBuf)> = marketplace::catalog::builtin::definitions()
        .unwrap()
        .into_iter()
        .map(|d| {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("catalog")
                .join(format!("{}.yaml", d.name()));
            ("builtins".to_owned(), path)
        })
        .collect();
    let mut checked = builtins;
    for file in fixtures("valid").into_iter().chain(fundament_definitions()) {
        let bytes = std::fs::read(&file).unwrap();
        let (status, body) = connect(
            &api,
            "acme",
            "PutPluginDefinition",
            json!({"manifest": B64.encode(&bytes)}),
            Some(&acme),
        )
        .await;
        assert_eq!(status, 200, "{}: {body}", file.display());
        checked.push(("acme".to_owned(), file));
    }
    assert_eq!(checked.len(), 8 + 4 + 5);

    for (org, file) in &checked {
        let bytes = std::fs::read(file).unwrap();
        let def = Definition::parse(&bytes).unwrap();
        let reply = get_definition(&api, org, def.name(), def.version_text()).json();
        let manifest = B64.decode(reply["manifest"].as_str().unwrap()).unwrap();
        assert_eq!(manifest, bytes, "{}: the exact bytes", file.display());
        // The referee reads the YAML itself and compares with what buf decoded.
        let definition = dir.path().join("definition.json");
        std::fs::write(&definition, reply["definition"].to_string()).unwrap();
        let verdict = referee(&[
            OsStr::new("compare"),
            file.as_os_str(),
            definition.as_os_str(),
        ]);
        assert_eq!(
            verdict["differences"],
            json!([]),
            "{}: {verdict}",
            file.display()
        );
        // Only the two fields the contract has no place for are left out.
        for gap in verdict["not_in_contract"].as_array().unwrap() {
            let gap = gap.as_str().unwrap();
            assert!(
                gap.ends_with(".resourceNames") || gap.ends_with(".statusMapping.default"),
                "{gap}"
            );
        }
    }
    // And the bytes Fundament receives pass the schema.
    let files: Vec<PathBuf> = checked.into_iter().map(|(_, f)| f).collect();
    let schema = schema("plugin-definition.schema.json");
    let mut args = vec![OsStr::new("check"), schema.as_os_str()];
    args.extend(files.iter().map(|f| f.as_os_str()));
    let report = referee(&args);
    for f in &files {
        assert_eq!(report[f.to_str().unwrap()], json!([]), "{}", f.display());
    }
}

#[tokio::test]
async fn a_refused_sideload_names_every_wrong_field_in_both_apis() {
    let (_dir, api, acme) = worker_alone();
    let legacy = std::fs::read(fixture("legacy", "external-dns.yaml")).unwrap();
    let fields = [
        "spec.requirements.internetAccess",
        "spec.suggestedPlugins",
        "spec.menu.cluster",
        "spec.uiHints.columns",
    ];

    // Fundament's PutPluginDefinition: invalid_argument, the fields in the message and
    // as google.rpc.BadRequest field violations.
    let (status, body) = connect(
        &api,
        "acme",
        "PutPluginDefinition",
        json!({"manifest": B64.encode(&legacy)}),
        Some(&acme),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_argument")),
        "{body}"
    );
    let message = body["message"].as_str().unwrap();
    for f in fields {
        assert!(message.contains(f), "{f} not in {message}");
    }
    let detail = &body["details"][0];
    assert_eq!(detail["type"], "google.rpc.BadRequest");
    let raw = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(detail["value"].as_str().unwrap())
        .unwrap();
    let bad = marketplace::proto::google::rpc::BadRequest::decode_from_slice(&raw).unwrap();
    let violated: Vec<&str> = bad
        .field_violations
        .iter()
        .map(|v| v.field.as_str())
        .collect();
    assert_eq!(violated, fields);
    assert!(
        bad.field_violations[0]
            .description
            .starts_with("45:21: not part of a Fundament definition; declare internet_access"),
        "{:?}",
        bad.field_violations[0]
    );
    assert_eq!(detail["debug"]["problems"][0]["line"], 45);
    // buf, knowing the type from proto/, decodes the same detail.
    let call = buf::curl(
        &method_url(&api, "acme", "PutPluginDefinition"),
        &json!({"manifest": B64.encode(&legacy)}).to_string(),
        &[&format!("Authorization: Bearer {acme}")],
    );
    assert_eq!(call.code(), "invalid_argument");
    assert!(call.stderr.contains("spec.menu.cluster"), "{}", call.stderr);

    // The JSON API: 422 with the same problems.
    let (status, body) = api
        .send(
            reqwest::Method::POST,
            "/orgs/acme/sideloads",
            Some(&acme),
            legacy.clone(),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let paths: Vec<&str> = body["error"]["details"]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, fields);
    // Nothing was stored.
    let (_, list) = api.get("/orgs/acme/sideloads", Some(&acme)).await;
    assert_eq!(list["sideloads"], json!([]));
}

#[tokio::test]
async fn a_sideload_carries_its_companion_into_views_and_install_plans() {
    let (_dir, api, acme) = worker_alone();
    let definition = std::fs::read_to_string(fixture("valid", "webhook-relay.yaml")).unwrap();
    let extras = "apiVersion: marketplace.fundament.io/v1\nkind: PluginExtras\nplugin: webhook-relay\ndependencies: [cert-manager]\nsuggestedPlugins: [observability]\nclusterCapabilities: [loadBalancer]\n";
    let post = |body: Value| {
        let http = api.http.clone();
        let url = format!("{}/orgs/acme/sideloads", api.url);
        let acme = acme.clone();
        async move {
            let r = http
                .post(url)
                .bearer_auth(acme)
                .json(&body)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    // A companion for another plugin is refused, naming it.
    let (status, body) = post(json!({
        "definition": definition,
        "extras": extras.replace("plugin: webhook-relay", "plugin: other"),
    }))
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains(
            "the companion document is for plugin `other`, but the definition is `webhook-relay`"
        ),
        "{body}"
    );
    let (status, body) = post(json!({"definition": definition, "extras": extras})).await;
    assert_eq!(status, 201, "{body}");
    // The same again changes nothing; the same bytes with other extras are another
    // version's worth of change, refused like other bytes.
    let (status, body) = post(json!({"definition": definition, "extras": extras})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post(json!({
        "definition": definition,
        "extras": extras.replace("[cert-manager]", "[gateway]"),
    }))
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("version_exists")),
        "{body}"
    );

    let (status, view) = api
        .get("/orgs/acme/plugins/webhook-relay", Some(&acme))
        .await;
    assert_eq!(status, 200, "{view}");
    let offer = &view["versions"][0];
    assert_eq!(offer["dependencies"], json!(["cert-manager"]));
    assert_eq!(offer["suggestedPlugins"], json!(["observability"]));
    assert_eq!(
        offer["requirements"]["capabilities"],
        json!(["loadBalancer"])
    );
    assert!(offer.get("notInstallable").is_none());

    let (status, plan) = api
        .get("/orgs/acme/install-plan?plugins=webhook-relay", Some(&acme))
        .await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(
        install_order(&plan),
        [
            ("cert-manager".to_owned(), "plugin-cert-manager".to_owned()),
            (
                "webhook-relay".to_owned(),
                "plugin-webhook-relay".to_owned()
            )
        ]
    );
    assert_eq!(
        plan["order"][1]["approve"],
        json!(["internetAccess", "capability:loadBalancer"])
    );
    assert_eq!(plan["complete"], true);
}

#[tokio::test]
async fn versions_of_the_older_design_are_left_out_of_fundaments_contract_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    // A server that ran before this release holds the older design's definitions: the
    // built-in backup 1.16.1 (its successor 1.16.2 arrives with this binary), a plugin
    // whose only version is of the older design, and one with a version of each. Their
    // rows look as migration 0008 left them: no extras, installability unknown.
    let legacy = |name: &str, renamed: &str| {
        let text = std::fs::read_to_string(fixture("legacy", &format!("{name}.yaml")))
            .unwrap()
            .replacen(&format!("name: {name}"), &format!("name: {renamed}"), 1);
        Definition::parse_published(text.as_bytes()).unwrap()
    };
    {
        let store = Store::open(&m.data.join("marketplace.db")).await.unwrap();
        let current_edge = common::publishing::definition("gateway", "edge", "v1.4.1");
        for def in [
            legacy("backup", "backup"),
            legacy("storage", "old-storage"),
            legacy("gateway", "edge"),
            current_edge,
        ] {
            store
                .insert_version("fundament", &def, 1_700_000_000)
                .await
                .unwrap();
        }
        store.close().await;
        let pool = sqlx::SqlitePool::connect(&format!(
            "sqlite://{}",
            m.data.join("marketplace.db").display()
        ))
        .await
        .unwrap();
        sqlx::query("UPDATE plugin_versions SET extras = NULL, not_installable = NULL")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }
    let server = Server::start(&m.data);
    let client = Client::new(&server.url);

    // The server marks them on its pages and in its API, and keeps serving them.
    let detail: Value = client
        .http
        .get(format!(
            "{}/api/v1/plugins/fundament/old-storage",
            server.url
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let fields = detail["latest"]["not_installable"].as_str().unwrap();
    assert!(
        fields.starts_with("spec.requirements.internetAccess"),
        "{fields}"
    );
    assert_eq!(detail["suggested_plugins"][0]["name"], "observability");
    let page = client
        .http
        .get(format!("{}/plugins/fundament/old-storage", server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(&format!(
            "<strong>Not installable by Fundament: {fields}.</strong>"
        )),
        "{page}"
    );
    let backup: Value = client
        .http
        .get(format!("{}/api/v1/plugins/fundament/backup", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(backup["latest"]["version"], "v1.16.2");
    assert!(backup["latest"].get("not_installable").is_none());
    let old = &backup["versions"][0]["versions"][1];
    assert_eq!(old["version"], "v1.16.1");
    assert!(
        old["not_installable"]
            .as_str()
            .unwrap()
            .contains("spec.dependencies")
    );

    // The worker syncs them, and offers Fundament only what it can install.
    let config = synced_from(dir.path(), &server.url).await;
    let acme = token(&config, Some("acme"));
    let api = Api::start(&config, false);

    let (_, status) = api.get("/status", None).await;
    let listed: Vec<(String, String)> = status["notInstallable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            assert!(n["fields"].as_str().unwrap().contains("spec."), "{n}");
            (
                n["name"].as_str().unwrap().to_owned(),
                n["version"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    // backup 1.16.1 is not in the view at all: a source never offers a built-in's
    // older versions (the merge's rule 2).
    assert_eq!(
        listed,
        [
            ("edge".to_owned(), "1.4.0".to_owned()),
            ("old-storage".to_owned(), "1.8.2".to_owned())
        ]
    );
    let (_, view) = api.get("/orgs/acme/plugins/old-storage", Some(&acme)).await;
    assert!(
        view["versions"][0]["notInstallable"]
            .as_str()
            .unwrap()
            .contains("spec.menu.project[0].edit"),
        "{view}"
    );

    let (_, list) = connect(&api, "acme", "ListPlugins", json!({}), Some(&acme)).await;
    let names: Vec<&str> = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(!names.contains(&"old-storage"), "{names:?}");
    let pinned = |name: &str| {
        list["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed"))["pluginVersion"]
            .clone()
    };
    assert_eq!(pinned("backup"), "v1.16.2");
    assert_eq!(pinned("edge"), "v1.4.1");
    let (_, versions) = connect(
        &api,
        "acme",
        "ListPluginDefinitions",
        json!({"pluginId": marketplace::ids::org_plugin("edge")}),
        Some(&acme),
    )
    .await;
    let offered: Vec<&str> = versions["definitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["v1.4.1"], "the older design's 1.4.0 left out");
    // The JSON API still lists both, the older one marked.
    let (_, edge) = api.get("/orgs/acme/plugins/edge", Some(&acme)).await;
    assert_eq!(edge["versions"][0]["version"], "1.4.1");
    assert!(edge["versions"][0].get("notInstallable").is_none());
    assert!(edge["versions"][1]["notInstallable"].is_string(), "{edge}");
    let refused = get_definition(&api, "acme", "old-storage", "v1.8.2");
    assert_eq!(refused.code(), "not_found");
    assert!(
        refused
            .stderr
            .contains("older definition design, which Fundament cannot install"),
        "{}",
        refused.stderr
    );
    assert_eq!(
        get_definition(&api, "acme", "edge", "v1.4.0").code(),
        "not_found"
    );
    let current = get_definition(&api, "acme", "edge", "v1.4.1").json();
    assert_eq!(current["definition"]["metadata"]["version"], "v1.4.1");
}
