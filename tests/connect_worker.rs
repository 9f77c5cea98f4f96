//! Fundament's `organization.v1.PluginService` on the real `marketplace sync` binary,
//! called as Fundament calls it: `buf curl` (an independent Connect client sending
//! binary protobuf) at `{worker}/orgs/{org}`, and plain HTTP with JSON and with binary
//! bodies encoded from our generated types (`encodings`).

mod common;
#[path = "connect_worker/encodings.rs"]
mod encodings;

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
    let builtin = get("acme", "cert-manager", "v1.19.4", None).json();
    assert_definition(
        &builtin,
        builtin_yaml("cert-manager").as_bytes(),
        "cert-manager",
    );
    assert_eq!(builtin["definition"]["metadata"]["version"], "v1.19.4");
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
    assert_eq!(plugin("cert-manager")["pluginVersion"], "v1.19.4");
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
    assert_eq!(d["pluginVersion"], "v1.19.4");
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
                "v1.19.4",
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
