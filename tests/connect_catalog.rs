//! `catalog.v1.CatalogService` on the server: Connect requests in process, in proto3
//! JSON (Fundament's console) and binary protobuf (its Go components), against the
//! whole application: listings here, single plugins and refusals in `plugins`; then the
//! real binary driven by `buf curl` (`e2e`).

mod common;
#[path = "connect_catalog/e2e.rs"]
mod e2e;
#[path = "connect_catalog/limits.rs"]
mod limits;
#[path = "connect_catalog/plugins.rs"]
mod plugins;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use buffa::{EnumValue, Message};
use common::publishing::definition;
use common::{NOW, Reply, send};
use http_body_util::BodyExt;
use marketplace::catalog::Curation;
use marketplace::definition::Definition;
use marketplace::proto::catalog::v1 as pb;
use marketplace::{AppState, app, ids};
use serde_json::{Value, json};
use tower::ServiceExt;

const BASE: &str = "/catalog.v1.CatalogService";

/// The built-ins, sorted by name.
const BUILTINS: [&str; 8] = [
    "backup",
    "cert-manager",
    "external-dns",
    "gateway",
    "object-storage",
    "observability",
    "postgres-operator",
    "storage",
];

/// A new definition `name` at `version` with these tags (from the storage built-in).
fn plugin(name: &str, version: &str, tags: &str) -> Definition {
    let yaml = String::from_utf8(definition("storage", name, version).bytes.to_vec()).unwrap();
    let yaml = yaml.replacen(
        "tags: [storage, csi, block-storage, high-availability]",
        &format!("tags: [{tags}]"),
        1,
    );
    Definition::parse(yaml.as_bytes()).expect("valid definition")
}

async fn call(state: &AppState, method: &str, body: Value) -> Reply {
    send(
        state,
        Request::post(format!("{BASE}/{method}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap(),
    )
    .await
}

/// A successful call in proto3 JSON: the response message.
async fn ok(state: &AppState, method: &str, body: Value) -> Value {
    let reply = call(state, method, body).await;
    assert_eq!(reply.status, StatusCode::OK, "{method}: {}", reply.body);
    assert_eq!(reply.headers[header::CONTENT_TYPE], "application/json");
    reply.json()
}

/// A call in binary protobuf: status, content type and the raw body.
async fn proto_raw(
    state: &AppState,
    method: &str,
    message: Vec<u8>,
) -> (StatusCode, String, Vec<u8>) {
    let req = Request::post(format!("{BASE}/{method}"))
        .header(header::CONTENT_TYPE, "application/proto")
        .body(Body::from(message))
        .unwrap();
    let res = app(state.clone()).oneshot(req).await.unwrap();
    let status = res.status();
    let ctype = res.headers()[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    let body = res.into_body().collect().await.unwrap().to_bytes().to_vec();
    (status, ctype, body)
}

async fn proto<Res: Message>(state: &AppState, method: &str, req: &impl Message) -> Res {
    let (status, ctype, body) = proto_raw(state, method, req.encode_to_vec()).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{method}: {}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(ctype, "application/proto");
    Res::decode_from_slice(&body).expect("a response of the contract's type")
}

/// Connect's error body and the status its code maps to.
#[track_caller]
fn assert_connect_error(status: StatusCode, ctype: &str, body: &str, want: (u16, &str, &str)) {
    let (want_status, code, phrase) = want;
    assert_eq!(status.as_u16(), want_status, "{body}");
    assert_eq!(ctype, "application/json");
    let body: Value = serde_json::from_str(body).expect("JSON error body");
    assert_eq!(body["code"], code, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains(phrase), "{message:?} lacks {phrase:?}");
    let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["code", "message"], "{body}");
}

#[track_caller]
fn assert_refused(reply: &Reply, want: (u16, &str, &str)) {
    let ctype = reply.headers[header::CONTENT_TYPE].to_str().unwrap();
    assert_connect_error(reply.status, ctype, &reply.body, want);
}

/// Plugin names of a listing (proto3 JSON leaves an empty list out).
fn names(listing: &Value) -> Vec<String> {
    let plugins = match &listing["plugins"] {
        Value::Null => return Vec::new(),
        plugins => plugins.as_array().expect("a list"),
    };
    plugins
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect()
}

fn rfc3339(unix: i64) -> String {
    jiff::Timestamp::from_second(unix).unwrap().to_string()
}

#[tokio::test]
async fn list_plugins_speaks_proto3_json() {
    let state = common::state().await;
    let listing = ok(&state, "ListPlugins", json!({})).await;
    // The default curation features cert-manager and gateway: first, then by name.
    let mut rest: Vec<&str> = BUILTINS.to_vec();
    rest.retain(|n| !["cert-manager", "gateway"].contains(n));
    let want: Vec<&str> = ["cert-manager", "gateway"]
        .into_iter()
        .chain(rest)
        .collect();
    assert_eq!(names(&listing), want);

    let cert = &listing["plugins"][0];
    let id = ids::plugin("fundament", "cert-manager");
    // Pinned: clients store these ids.
    assert_eq!(id, "5301a083-ff1d-5e15-885d-0013b79d7d65");
    assert_eq!(cert["id"], id.as_str());
    assert_eq!(cert["displayName"], "Cert Manager");
    assert_eq!(
        cert["descriptionShort"],
        "Automates the issuance and renewal of TLS certificates for cluster workloads."
    );
    assert_eq!(cert["organizationId"], ids::publisher("fundament").as_str());
    assert_eq!(
        cert["latestVersionId"],
        ids::version("fundament", "cert-manager", "v1.19.4").as_str()
    );
    assert_eq!(
        cert["tags"],
        json!(["security", "tls", "certificates", "networking"])
    );
    assert_eq!(
        cert["categoryIds"],
        json!([ids::category("Security"), ids::category("Networking")])
    );
    assert_eq!(cert["labels"], json!(["PLUGIN_LABEL_CORE"]));
    assert_eq!(cert["featured"], true);
    assert_eq!(cert["published"], rfc3339(NOW).as_str());
    // No artwork: proto3 JSON leaves an empty string out, as it does false.
    assert!(cert.get("image").is_none(), "{cert}");
    assert!(cert.get("display_name").is_none(), "{cert}");
    for p in listing["plugins"].as_array().unwrap() {
        assert_eq!(p["labels"], json!(["PLUGIN_LABEL_CORE"]), "{p}");
        assert!(
            p["categoryIds"].as_array().is_some_and(|c| !c.is_empty()),
            "{p}"
        );
    }
    assert!(listing["plugins"][2].get("featured").is_none());
}

#[tokio::test]
async fn list_plugins_in_binary_protobuf() {
    let state = common::state().await;
    let res: pb::ListPluginsResponse = proto(
        &state,
        "ListPlugins",
        &pb::ListPluginsRequest {
            sort: EnumValue::Known(pb::PluginSort::PLUGIN_SORT_NAME),
            ..Default::default()
        },
    )
    .await;
    let got: Vec<&str> = res.plugins.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(got, BUILTINS);
    let storage = &res.plugins[7];
    assert_eq!(storage.id, ids::plugin("fundament", "storage"));
    assert_eq!(
        storage.labels,
        [EnumValue::Known(pb::PluginLabel::PLUGIN_LABEL_CORE)]
    );
    assert_eq!(storage.published.seconds, NOW);
    assert_eq!(storage.category_ids, [ids::category("Storage")]);
    assert!(!storage.featured && storage.image.is_empty());

    let featured: pb::ListPluginsResponse = proto(
        &state,
        "ListPlugins",
        &pb::ListPluginsRequest {
            featured_only: true,
            ..Default::default()
        },
    )
    .await;
    let got: Vec<(&str, bool)> = featured
        .plugins
        .iter()
        .map(|p| (p.name.as_str(), p.featured))
        .collect();
    assert_eq!(got, [("cert-manager", true), ("gateway", true)]);
}

#[tokio::test]
async fn search_matches_as_the_pages_do() {
    let state = common::state().await;
    state
        .store
        .insert_version("acme", &plugin("vault-tls", "1.0.0", "secrets"), NOW)
        .await
        .unwrap();
    for query in [
        "cert",
        "storage",
        "TLS cert",
        "dns",
        "vault-t",
        "nothing-like-this",
    ] {
        let pages = common::get(
            &state,
            &format!(
                "/api/v1/plugins?per_page=100&sort=name&q={}",
                query.replace(' ', "+")
            ),
        )
        .await
        .json();
        let mut want: Vec<String> = pages["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect();
        want.sort();
        let got = names(
            &ok(
                &state,
                "ListPlugins",
                json!({"query": query, "sort": "PLUGIN_SORT_NAME"}),
            )
            .await,
        );
        assert_eq!(got, want, "{query}");
    }
    // Prefix words: `cert` finds cert-manager (and plugins tagged certificates).
    let got = names(&ok(&state, "ListPlugins", json!({"query": "cert"})).await);
    assert!(got.contains(&"cert-manager".to_owned()), "{got:?}");
    assert!(!got.contains(&"storage".to_owned()), "{got:?}");
    // Words without letters or digits match nothing; they are not an error.
    assert_eq!(
        ok(&state, "ListPlugins", json!({"query": "%% --"})).await,
        json!({})
    );

    ok(&state, "ListPlugins", json!({"query": "x".repeat(200)})).await;
    let long = call(&state, "ListPlugins", json!({"query": "x".repeat(201)})).await;
    assert_refused(
        &long,
        (
            400,
            "invalid_argument",
            "query: search text is limited to 200 characters",
        ),
    );
}

const CURATION: &str = "
categories:
  - name: Secrets
    plugins: [acme/vault]
  - name: Storage
    tags: [storage]
featured: [acme/vault, fundament/backup]
labels:
  publishers: { acme: [SUPPORT_9_TO_17] }
  plugins: { \"acme/vault\": [RIJKSOVERHEID] }
";

async fn curated_state() -> AppState {
    let mut state = common::state().await;
    state.curation = Arc::new(marketplace::catalog::curation::LiveCuration::fixed(
        Arc::new(Curation::parse(CURATION).unwrap()),
    ));
    for (name, tags) in [("vault", "secrets"), ("disks", "storage, csi")] {
        state
            .store
            .insert_version("acme", &plugin(name, "1.0.0", tags), NOW + 5)
            .await
            .unwrap();
    }
    state
}

#[tokio::test]
async fn categories_featured_and_labels_come_from_the_curation() {
    let state = curated_state().await;
    let categories = ok(&state, "ListCategories", json!({})).await;
    assert_eq!(
        categories,
        json!({"categories": [
            {"id": ids::category("Secrets"), "name": "Secrets"},
            {"id": ids::category("Storage"), "name": "Storage"},
        ]})
    );
    let binary: pb::ListCategoriesResponse = proto(
        &state,
        "ListCategories",
        &pb::ListCategoriesRequest::default(),
    )
    .await;
    let got: Vec<(&str, &str)> = binary
        .categories
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (ids::category("Secrets").as_str(), "Secrets"),
            (ids::category("Storage").as_str(), "Storage")
        ]
    );

    // Featured first (by name), then the rest by name.
    let listing = ok(&state, "ListPlugins", json!({})).await;
    let got = names(&listing);
    assert_eq!(got[..2], ["backup", "vault"]);
    assert_eq!(got.len(), BUILTINS.len() + 2);
    let by_name = |n: &str| -> Value {
        listing["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == n)
            .cloned()
            .unwrap()
    };
    let vault = by_name("vault");
    assert_eq!(vault["id"], ids::plugin("acme", "vault").as_str());
    assert_eq!(vault["organizationId"], ids::publisher("acme").as_str());
    assert_eq!(vault["featured"], true);
    assert_eq!(vault["categoryIds"], json!([ids::category("Secrets")]));
    assert_eq!(
        vault["labels"],
        json!(["PLUGIN_LABEL_RIJKSOVERHEID", "PLUGIN_LABEL_SUPPORT_9_TO_17"])
    );
    // A publisher's label reaches all its plugins; CORE stays the built-ins' alone.
    assert_eq!(
        by_name("disks")["labels"],
        json!(["PLUGIN_LABEL_SUPPORT_9_TO_17"])
    );
    assert_eq!(
        by_name("disks")["categoryIds"],
        json!([ids::category("Storage")])
    );
    assert_eq!(by_name("backup")["labels"], json!(["PLUGIN_LABEL_CORE"]));
    assert!(by_name("cert-manager").get("featured").is_none());
    assert!(by_name("cert-manager").get("categoryIds").is_none());

    // Category filter: by name and by tag.
    let storage = ids::category("Storage");
    let got = names(
        &ok(
            &state,
            "ListPlugins",
            json!({"categoryId": storage, "sort": "PLUGIN_SORT_NAME"}),
        )
        .await,
    );
    assert_eq!(got, ["backup", "disks", "object-storage", "storage"]);
    let got = names(
        &ok(
            &state,
            "ListPlugins",
            json!({"categoryId": storage, "featuredOnly": true}),
        )
        .await,
    );
    assert_eq!(got, ["backup"]);
    let got = names(
        &ok(
            &state,
            "ListPlugins",
            json!({"categoryId": ids::category("Secrets")}),
        )
        .await,
    );
    assert_eq!(got, ["vault"]);
    // A category this server does not have holds nothing; a malformed id is refused.
    let unknown = ok(
        &state,
        "ListPlugins",
        json!({"categoryId": ids::category("Nope")}),
    )
    .await;
    assert_eq!(unknown, json!({}));
    let bad = call(&state, "ListPlugins", json!({"categoryId": "Storage"})).await;
    assert_refused(
        &bad,
        (
            400,
            "invalid_argument",
            "category_id: `Storage` is not a UUID",
        ),
    );
}

#[tokio::test]
async fn sorts() {
    let state = common::state().await;
    // Published after the built-ins (NOW), the later first.
    for (name, at) in [("older", NOW + 10), ("newer", NOW + 20)] {
        state
            .store
            .insert_version("acme", &plugin(name, "1.0.0", "misc"), at)
            .await
            .unwrap();
    }
    let sorted = |sort: &'static str| {
        let state = state.clone();
        async move { names(&ok(&state, "ListPlugins", json!({"sort": sort})).await) }
    };
    let recent = sorted("PLUGIN_SORT_RECENTLY_ADDED").await;
    assert_eq!(recent[..3], ["newer", "older", "backup"]);
    assert_eq!(recent[3..], BUILTINS[1..]);
    let mut all: Vec<String> = BUILTINS.iter().map(|s| s.to_string()).collect();
    all.extend(["newer".into(), "older".into()]);
    all.sort();
    assert_eq!(sorted("PLUGIN_SORT_NAME").await, all);
    let featured = sorted("PLUGIN_SORT_FEATURED").await;
    assert_eq!(featured[..2], ["cert-manager", "gateway"]);
    assert_eq!(sorted("PLUGIN_SORT_UNSPECIFIED").await, featured);
    // Numbers work too (proto3 JSON accepts them); one outside the enum is refused.
    assert_eq!(
        names(&ok(&state, "ListPlugins", json!({"sort": 1})).await),
        recent
    );
    let bad = call(&state, "ListPlugins", json!({"sort": 9})).await;
    assert_refused(
        &bad,
        (400, "invalid_argument", "sort: 9 is not a PluginSort"),
    );
    let req = pb::ListPluginsRequest {
        sort: EnumValue::Unknown(4),
        ..Default::default()
    };
    let (status, ctype, body) = proto_raw(&state, "ListPlugins", req.encode_to_vec()).await;
    assert_connect_error(
        status,
        &ctype,
        &String::from_utf8_lossy(&body),
        (400, "invalid_argument", "sort: 4"),
    );
}
