//! Fundament's `organization.v1.PluginService` on the real `marketplace sync` binary,
//! called as Fundament calls it: `buf curl` (an independent Connect client sending
//! binary protobuf) at `{worker}/orgs/{org}`, and plain HTTP with JSON and with binary
//! bodies encoded from our generated types.

mod common;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use buffa::Message;
use common::buf;
use common::publishing::{Client, definition, setup_with};
use common::worker::{Api, Source, sync_once, token, write_config};
use common::{Server, builtin_yaml, output_text as out, trusted_root};
use marketplace::definition::{Definition, definition_hash};
use marketplace::ids;
use marketplace::proto::organization::v1 as pb;
use serde_json::{Value, json};

const SERVICE: &str = "organization.v1.PluginService";

fn url(api: &Api, org: &str, method: &str) -> String {
    format!("{}/orgs/{org}/{SERVICE}/{method}", api.url)
}

fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}")
}

/// Calls `method` through buf, with `token` when given.
fn call(api: &Api, org: &str, method: &str, data: Value, token: Option<&str>) -> buf::Call {
    let auth = token.map(bearer);
    let headers: Vec<&str> = auth.iter().map(String::as_str).collect();
    buf::curl(&url(api, org, method), &data.to_string(), &headers)
}

/// The manifest buf printed (base64 in proto3 JSON), decoded.
fn manifest(reply: &Value) -> Vec<u8> {
    B64.decode(reply["manifest"].as_str().expect("manifest"))
        .unwrap()
}

/// Asserts what Fundament's plugin controller checks, and that the bytes are `want`.
#[track_caller]
fn assert_definition(reply: &Value, want: &[u8], name: &str) {
    let got = manifest(reply);
    assert_eq!(got, want, "the manifest is not the published bytes");
    assert_eq!(reply["hash"], definition_hash(&got), "hash mismatch");
    assert_eq!(reply["definition"]["metadata"]["name"], name);
}

fn sideload_yaml() -> Definition {
    definition("storage", "team-tool", "v0.3.0")
}

/// Appends a `fundament:` section to the config `write_config` wrote.
fn with_fundament(config: &std::path::Path, section: &str) {
    let mut text = std::fs::read_to_string(config).unwrap();
    text.push_str(section);
    std::fs::write(config, text).unwrap();
}

#[tokio::test]
async fn fundament_installs_builtin_synced_and_sideloaded_definitions() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let server = Server::start(&m.data);
    let client = Client::new(&server.url);
    let db = |v: &str| definition("postgres-operator", "db", v);
    for v in ["0.9.0", "1.0.0", "1.1.0"] {
        let (status, body) = client
            .publish_as("acme", &m.acme_token, &db(v), &[&m.acme])
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let key = dir.path().join("acme.pem");
    m.acme.save_new(&key).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(["yank", "acme/db@1.1.0", "--server", &server.url, "--key"])
        .arg(&key)
        .env("MARKETPLACE_TOKEN", &m.acme_token)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", out(&o));
    let root = dir.path().join("root.json");
    std::fs::write(&root, trusted_root(&server.url).await).unwrap();
    let config = write_config(
        dir.path(),
        &[Source {
            name: "m",
            url: &server.url,
            root: &root,
            priority: 1,
        }],
    );
    with_fundament(
        &config,
        "fundament:\n  presets:\n    - name: data\n      description: Databases and what they need\n      plugins: [db, storage, not-offered]\n    - {name: ghosts, plugins: [not-offered]}\n",
    );
    let o = sync_once(&config);
    assert!(o.status.success(), "{}", out(&o));
    let acme = token(&config, Some("acme"));
    let other = token(&config, Some("other"));
    let reader = token(&config, None);
    let api = Api::start(&config, false);

    // The organization admin sideloads through PutPluginDefinition (its token).
    let tool = sideload_yaml();
    let put = |replace: bool, bytes: &[u8], token: Option<&str>| {
        call(
            &api,
            "acme",
            "PutPluginDefinition",
            json!({
                "pluginId": ids::org_plugin("team-tool"),
                "pluginVersion": "v0.3.0",
                "manifest": B64.encode(bytes),
                "replace": replace,
            }),
            token,
        )
    };
    let first = put(false, &tool.bytes, Some(&acme)).json();
    assert_eq!(first["pluginId"], ids::org_plugin("team-tool"));
    assert_eq!(first["pluginVersion"], "v0.3.0");
    assert_eq!(first["hash"], tool.hash.as_str());
    // The same bytes again return the same row.
    assert_eq!(put(false, &tool.bytes, Some(&acme)).json(), first);

    // Fundament's plugin controller: no token, exact bytes, hash it can recompute.
    let get = |org: &str, name: &str, version: &str, token: Option<&str>| {
        call(
            &api,
            org,
            "GetPluginDefinition",
            json!({"pluginName": name, "pluginVersion": version}),
            token,
        )
    };
    let builtin = get("acme", "cert-manager", "v1.19.3", None).json();
    assert_definition(
        &builtin,
        builtin_yaml("cert-manager").as_bytes(),
        "cert-manager",
    );
    assert_eq!(builtin["definition"]["metadata"]["version"], "v1.19.3");
    assert!(
        builtin["definition"]["image"]
            .as_str()
            .unwrap()
            .contains("@sha256:")
    );
    let synced = get("acme", "db", "1.0.0", None).json();
    assert_definition(&synced, &db("1.0.0").bytes, "db");
    // A pinned version stays installable after a yank: yanking hides, never rewrites.
    assert_definition(
        &get("acme", "db", "1.1.0", None).json(),
        &db("1.1.0").bytes,
        "db",
    );
    let sideloaded = get("acme", "team-tool", "0.3.0", None).json();
    assert_definition(&sideloaded, &tool.bytes, "team-tool");
    // Another organization is not offered acme's sideload.
    assert_eq!(get("other", "team-tool", "0.3.0", None).code(), "not_found");
    assert_eq!(get("acme", "db", "7.0.0", None).code(), "not_found");
    assert_eq!(get("acme", "db", "seven", None).code(), "invalid_argument");
    assert_eq!(
        get("acme", "Not_A_Name", "1.0.0", None).code(),
        "invalid_argument"
    );
    assert_eq!(
        get("acme", "db", "1.0.0", Some("mst_nonsense")).code(),
        "unauthenticated"
    );
    assert_eq!(
        get("acme", "db", "1.0.0", Some(&other)).code(),
        "permission_denied"
    );
    assert_definition(
        &get("acme", "db", "1.0.0", Some(&reader)).json(),
        &db("1.0.0").bytes,
        "db",
    );

    // Listings: the organization's token or the reader token.
    let list = call(&api, "acme", "ListPlugins", json!({}), Some(&acme)).json();
    let plugin = |name: &str| -> Value {
        list["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} missing from {list}"))
    };
    let p = plugin("db");
    assert_eq!(p["id"], ids::org_plugin("db"));
    assert_eq!(p["pluginVersion"], "1.0.0", "1.1.0 is yanked");
    assert_eq!(p["definitionHash"], db("1.0.0").hash.as_str());
    assert_eq!(p["image"], db("1.0.0").manifest.spec.image.value.as_str());
    let t = plugin("team-tool");
    assert_eq!(t["pluginVersion"], "v0.3.0");
    assert_eq!(t["definitionHash"], tool.hash.as_str());
    assert_eq!(plugin("cert-manager")["pluginVersion"], "v1.19.3");
    assert_eq!(
        plugin("cert-manager")["tags"][0]["id"],
        ids::tag(plugin("cert-manager")["tags"][0]["name"].as_str().unwrap())
    );
    let by_reader = call(&api, "acme", "ListPlugins", json!({}), Some(&reader)).json();
    assert_eq!(by_reader, list);
    let others = call(&api, "other", "ListPlugins", json!({}), Some(&other)).json();
    assert!(!others.to_string().contains("team-tool"), "{others}");
    assert_eq!(
        call(&api, "acme", "ListPlugins", json!({}), None).code(),
        "unauthenticated"
    );
    assert_eq!(
        call(&api, "acme", "ListPlugins", json!({}), Some(&other)).code(),
        "permission_denied"
    );

    let versions = call(
        &api,
        "acme",
        "ListPluginDefinitions",
        json!({"pluginId": ids::org_plugin("db")}),
        Some(&acme),
    )
    .json();
    assert_eq!(
        versions["definitions"],
        json!([
            {"version": "1.0.0", "hash": db("1.0.0").hash},
            {"version": "0.9.0", "hash": db("0.9.0").hash},
        ]),
        "latest first, the yanked 1.1.0 left out"
    );
    let detail = call(
        &api,
        "acme",
        "GetPluginDetail",
        json!({"pluginId": ids::org_plugin("cert-manager")}),
        Some(&acme),
    )
    .json();
    let d = &detail["plugin"];
    assert_eq!(d["name"], "cert-manager");
    assert_eq!(d["pluginVersion"], "v1.19.3");
    assert_eq!(d["definitionHash"], builtin["hash"]);
    assert_eq!(d["author"]["name"], "Fundament");
    assert_eq!(
        d["repositoryUrl"],
        "https://github.com/fundament-oss/plugins"
    );
    assert!(
        d["documentationLinks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["urlName"] == "homepage"),
        "{d}"
    );
    for (method, data, code) in [
        (
            "GetPluginDetail",
            json!({"pluginId": "db"}),
            "invalid_argument",
        ),
        (
            "GetPluginDetail",
            json!({"pluginId": ids::org_plugin("nope")}),
            "not_found",
        ),
        (
            "ListPluginDefinitions",
            json!({"pluginId": ""}),
            "invalid_argument",
        ),
        (
            "ListPluginDefinitions",
            json!({"pluginId": ids::org_plugin("nope")}),
            "not_found",
        ),
    ] {
        assert_eq!(
            call(&api, "acme", method, data, Some(&acme)).code(),
            code,
            "{method}"
        );
    }

    let presets = call(&api, "acme", "ListPresets", json!({}), Some(&acme)).json();
    assert_eq!(
        presets["presets"],
        json!([{
            "id": ids::preset("data"),
            "name": "data",
            "description": "Databases and what they need",
            "pluginIds": [ids::org_plugin("db"), ids::org_plugin("storage")],
        }]),
        "only offered plugins; a preset with none is left out"
    );

    // Other bytes under a stored version: failed_precondition unless `replace`.
    let mut changed = tool.bytes.clone();
    changed.extend_from_slice(b"# rebuilt\n");
    assert_eq!(
        put(false, &changed, Some(&acme)).code(),
        "failed_precondition"
    );
    assert_definition(
        &get("acme", "team-tool", "v0.3.0", None).json(),
        &tool.bytes,
        "team-tool",
    );
    assert_eq!(
        put(true, &changed, Some(&reader)).code(),
        "permission_denied"
    );
    assert_eq!(put(true, &changed, None).code(), "unauthenticated");
    let replaced = put(true, &changed, Some(&acme)).json();
    assert_eq!(replaced["hash"], definition_hash(&changed));
    assert_ne!(replaced["id"], first["id"]);
    assert_definition(
        &get("acme", "team-tool", "v0.3.0", None).json(),
        &changed,
        "team-tool",
    );
    for (data, phrase) in [
        (
            json!({"manifest": B64.encode(b"kind: [")}),
            "manifest: invalid plugin definition",
        ),
        (json!({}), "manifest: empty"),
        (
            json!({"manifest": B64.encode(&tool.bytes), "pluginId": ids::org_plugin("db")}),
            "plugin_id",
        ),
        (
            json!({"manifest": B64.encode(&tool.bytes), "pluginVersion": "0.4.0"}),
            "plugin_version",
        ),
    ] {
        let c = call(&api, "acme", "PutPluginDefinition", data, Some(&acme));
        assert_eq!(c.code(), "invalid_argument");
        assert!(c.stderr.contains(phrase), "{phrase}: {}", c.stderr);
    }

    // Ids survive a restart.
    drop(api);
    let api = Api::start(&config, false);
    let again = call(&api, "acme", "ListPlugins", json!({}), Some(&acme)).json();
    let ids_of = |v: &Value| -> Vec<(String, String)> {
        v["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["name"].to_string(), p["id"].to_string()))
            .collect()
    };
    assert_eq!(ids_of(&again), ids_of(&list));
}

/// POSTs a Connect unary call with `content_type`; status, content type and body.
async fn post(
    api: &Api,
    org: &str,
    method: &str,
    content_type: &str,
    body: Vec<u8>,
    token: Option<&str>,
) -> (u16, String, Vec<u8>) {
    let mut req = api
        .http
        .post(url(api, org, method))
        .header("content-type", content_type)
        .body(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, ct, r.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn binary_and_json_encodings_agree_and_errors_use_connects_body() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &[]);
    let api = Api::start(&config, false);
    let want = builtin_yaml("cert-manager");

    let request = pb::GetPluginDefinitionRequest {
        plugin_name: "cert-manager".into(),
        plugin_version: "v1.19.3".into(),
        ..Default::default()
    };
    let (status, ct, body) = post(
        &api,
        "acme",
        "GetPluginDefinition",
        "application/proto",
        request.encode_to_vec(),
        None,
    )
    .await;
    assert_eq!((status, ct.as_str()), (200, "application/proto"));
    let binary = pb::GetPluginDefinitionResponse::decode_from_slice(&body).unwrap();
    assert_eq!(binary.manifest, want.as_bytes());
    assert_eq!(binary.hash, definition_hash(want.as_bytes()));
    let meta = binary
        .definition
        .as_option()
        .unwrap()
        .metadata
        .as_option()
        .unwrap();
    assert_eq!(meta.name, "cert-manager");

    let (status, ct, body) = post(
        &api,
        "acme",
        "GetPluginDefinition",
        "application/json",
        br#"{"pluginName":"cert-manager","pluginVersion":"v1.19.3"}"#.to_vec(),
        None,
    )
    .await;
    assert_eq!((status, ct.as_str()), (200, "application/json"));
    let json: Value = serde_json::from_slice(&body).unwrap();
    // proto3 JSON: lowerCamelCase names, bytes in base64.
    assert_eq!(
        B64.decode(json["manifest"].as_str().unwrap()).unwrap(),
        want.as_bytes()
    );
    assert_eq!(json["hash"], binary.hash.as_str());
    assert_eq!(json["definition"]["imagePullPolicy"], "IfNotPresent");
    assert!(
        json["definition"]["permissions"]["rbac"][0]["apiGroups"].is_array(),
        "{json}"
    );

    // Errors: the HTTP status of Connect's code table and its JSON body, whatever the
    // request's encoding.
    let missing = pb::GetPluginDefinitionRequest {
        plugin_name: "cert-manager".into(),
        plugin_version: "0.0.1".into(),
        ..Default::default()
    };
    for (content_type, body, status, code) in [
        (
            "application/proto",
            missing.encode_to_vec(),
            404,
            "not_found",
        ),
        (
            "application/json",
            br#"{"pluginName":"x","pluginVersion":"1"}"#.to_vec(),
            400,
            "invalid_argument",
        ),
        (
            "application/json",
            br#"{"pluginName": 5}"#.to_vec(),
            400,
            "invalid_argument",
        ),
        ("application/json", b"{}".to_vec(), 400, "invalid_argument"),
    ] {
        let (got, ct, reply) = post(
            &api,
            "acme",
            "GetPluginDefinition",
            content_type,
            body,
            None,
        )
        .await;
        assert_eq!(got, status, "{}", String::from_utf8_lossy(&reply));
        assert_eq!(ct, "application/json");
        let e: Value = serde_json::from_slice(&reply).unwrap();
        assert_eq!(e["code"], code, "{e}");
        assert!(!e["message"].as_str().unwrap().is_empty());
    }
    let (status, _, reply) = post(
        &api,
        "acme",
        "ListPlugins",
        "application/json",
        b"{}".to_vec(),
        None,
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(
        serde_json::from_slice::<Value>(&reply).unwrap()["code"],
        "unauthenticated"
    );
    let (status, _, reply) = post(
        &api,
        "Not-An-Org",
        "ListPlugins",
        "application/json",
        b"{}".to_vec(),
        None,
    )
    .await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&reply));
    // A body over the limit is refused in Connect's shape too.
    let (status, _, reply) = post(
        &api,
        "acme",
        "PutPluginDefinition",
        "application/proto",
        vec![0u8; 3 * 1024 * 1024],
        None,
    )
    .await;
    assert_eq!(status, 413, "{}", String::from_utf8_lossy(&reply));
    assert_eq!(
        serde_json::from_slice::<Value>(&reply).unwrap()["code"],
        "resource_exhausted"
    );
}

#[tokio::test]
async fn anonymous_definition_access_follows_the_config_switch() {
    for (mode, builtin_anonymous, sideload_anonymous) in [
        (None, true, true),
        (Some("offered"), true, true),
        (Some("public"), true, false),
        (Some("none"), false, false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = write_config(dir.path(), &[]);
        if let Some(mode) = mode {
            with_fundament(
                &config,
                &format!("fundament:\n  anonymousDefinitions: {mode}\n"),
            );
        }
        let acme = token(&config, Some("acme"));
        let api = Api::start(&config, false);
        let tool = sideload_yaml();
        let (status, body) = api
            .send(
                reqwest::Method::POST,
                "/orgs/acme/sideloads",
                Some(&acme),
                tool.bytes.clone(),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        let get = |name: &str, version: &str, token: Option<&str>| {
            call(
                &api,
                "acme",
                "GetPluginDefinition",
                json!({"pluginName": name, "pluginVersion": version}),
                token,
            )
        };
        for (name, version, bytes, open) in [
            (
                "cert-manager",
                "v1.19.3",
                builtin_yaml("cert-manager").into_bytes(),
                builtin_anonymous,
            ),
            (
                "team-tool",
                "v0.3.0",
                tool.bytes.clone(),
                sideload_anonymous,
            ),
        ] {
            let anonymous = get(name, version, None);
            if open {
                assert_definition(&anonymous.json(), &bytes, name);
            } else {
                assert_eq!(anonymous.code(), "unauthenticated", "{mode:?} {name}");
                assert!(
                    anonymous.stderr.contains("anonymousDefinitions"),
                    "{}",
                    anonymous.stderr
                );
            }
            // The organization's token is always enough.
            assert_definition(&get(name, version, Some(&acme)).json(), &bytes, name);
        }
    }
}

/// In process: the worker's router over an in-memory store, driven with `oneshot`.
#[tokio::test]
async fn in_process_the_router_serves_both_encodings_per_organization() {
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use marketplace::sync::config::Config;
    use marketplace::sync::sideload::Scope;
    use marketplace::sync::store::SyncStore;
    use marketplace::sync::worker::Worker;
    use tower::ServiceExt;

    let dir = tempfile::tempdir().unwrap();
    let config = Config::parse(
        "fundament:\n  presets:\n    - {name: edge, description: Ingress and TLS, plugins: [cert-manager]}\n",
        dir.path(),
    )
    .unwrap();
    let store = SyncStore::open_in_memory().await.unwrap();
    let (_, reader) = store
        .create_token(&Scope::Reader, common::NOW)
        .await
        .unwrap();
    let worker = std::sync::Arc::new(Worker::with_store(config, store).await.unwrap());
    let app = marketplace::api::worker::router(worker);
    let send = |org: &str, method: &str, content_type: &str, body: Vec<u8>| {
        let req = Request::post(format!("/orgs/{org}/{SERVICE}/{method}"))
            .header("content-type", content_type)
            .header("authorization", format!("Bearer {reader}"))
            .body(Body::from(body))
            .unwrap();
        let app = app.clone();
        async move {
            let res = app.oneshot(req).await.unwrap();
            let status = res.status().as_u16();
            (
                status,
                res.into_body().collect().await.unwrap().to_bytes().to_vec(),
            )
        }
    };

    let (status, body) = send("blue", "ListPresets", "application/proto", Vec::new()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let presets = pb::ListPresetsResponse::decode_from_slice(&body).unwrap();
    assert_eq!(presets.presets.len(), 1);
    assert_eq!(presets.presets[0].id, ids::preset("edge"));
    assert_eq!(
        presets.presets[0].plugin_ids,
        [ids::org_plugin("cert-manager")]
    );

    let (status, binary) = send("blue", "ListPlugins", "application/proto", Vec::new()).await;
    assert_eq!(status, 200);
    let binary = pb::ListPluginsResponse::decode_from_slice(&binary).unwrap();
    let (status, json) = send("blue", "ListPlugins", "application/json", b"{}".to_vec()).await;
    assert_eq!(status, 200);
    let json: Value = serde_json::from_slice(&json).unwrap();
    let builtins = marketplace::catalog::builtin::definitions().unwrap();
    let mut names: Vec<&str> = builtins.iter().map(|d| d.name()).collect();
    names.dedup();
    assert_eq!(binary.plugins.len(), names.len());
    for (b, j) in binary
        .plugins
        .iter()
        .zip(json["plugins"].as_array().unwrap())
    {
        assert_eq!(j["id"], b.id.as_str());
        assert_eq!(b.id, ids::org_plugin(&b.name));
        assert_eq!(j["definitionHash"], b.definition_hash.as_str());
        assert_eq!(j["pluginVersion"], b.plugin_version.as_str());
        assert!(b.definition_hash.starts_with("sha256:"));
    }

    let (status, body) = send("blue", "GetPlugin", "application/json", b"{}".to_vec()).await;
    assert_eq!(status, 404, "an unknown method");
    assert!(String::from_utf8_lossy(&body).contains("\"code\""));
}
