//! GetPlugin and ListPluginVersions, what stays hidden, and Connect's errors, in process.

use super::*;

#[tokio::test]
async fn versions_latest_first_without_yanked_ones() {
    let state = common::state().await;
    let store = &state.store;
    let v = |version: &str| plugin("vault", version, "secrets");
    for (version, at) in [
        ("v1.0.0", NOW + 10),
        ("v1.10.0", NOW + 30),
        ("v1.9.0", NOW + 40),
        ("v2.0.0", NOW + 50),
    ] {
        store.insert_version("acme", &v(version), at).await.unwrap();
    }
    let id = ids::plugin("acme", "vault");
    // Published when its first version was; the latest is the highest.
    let listing = ok(&state, "ListPlugins", json!({"query": "vault"})).await;
    assert_eq!(
        listing["plugins"][0]["published"],
        rfc3339(NOW + 10).as_str()
    );
    assert_eq!(
        listing["plugins"][0]["latestVersionId"],
        ids::version("acme", "vault", "v2.0.0").as_str()
    );
    let versions = ok(&state, "ListPluginVersions", json!({"pluginId": id})).await;
    let got: Vec<&str> = versions["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(got, ["v2.0.0", "v1.10.0", "v1.9.0", "v1.0.0"]);
    assert_eq!(
        versions["versions"][1],
        json!({
            "id": ids::version("acme", "vault", "v1.10.0"),
            "version": "v1.10.0",
            "published": rfc3339(NOW + 30),
            "definitionHash": v("v1.10.0").hash,
        })
    );

    // Yanking the newest and the oldest: the listing's latest and first move with them.
    store
        .yank("acme", &[v("v2.0.0").hash, v("v1.0.0").hash], &[], NOW + 60)
        .await
        .unwrap();
    let binary: pb::ListPluginVersionsResponse = proto(
        &state,
        "ListPluginVersions",
        &pb::ListPluginVersionsRequest {
            plugin_id: id.clone(),
            ..Default::default()
        },
    )
    .await;
    let got: Vec<(&str, &str, i64)> = binary
        .versions
        .iter()
        .map(|v| {
            (
                v.version.as_str(),
                v.definition_hash.as_str(),
                v.published.seconds,
            )
        })
        .collect();
    let (h10, h9) = (v("v1.10.0").hash, v("v1.9.0").hash);
    assert_eq!(
        got,
        [
            ("v1.10.0", h10.as_str(), NOW + 30),
            ("v1.9.0", h9.as_str(), NOW + 40)
        ]
    );
    assert!(binary.versions.iter().all(|v| v.release_notes.is_empty()));
    let listing = ok(&state, "ListPlugins", json!({"query": "vault"})).await;
    assert_eq!(
        listing["plugins"][0]["latestVersionId"],
        ids::version("acme", "vault", "v1.10.0").as_str()
    );
    assert_eq!(
        listing["plugins"][0]["published"],
        rfc3339(NOW + 30).as_str()
    );
    let details = ok(&state, "GetPlugin", json!({"pluginId": id})).await;
    assert_eq!(
        details["plugin"]["latestVersionId"],
        listing["plugins"][0]["latestVersionId"]
    );
}

#[tokio::test]
async fn unlisted_plugins_and_suspended_publishers_are_hidden() {
    let state = curated_state().await;
    let store = &state.store;
    let gone = plugin("gone", "1.0.0", "misc");
    store.insert_version("zeta", &gone, NOW).await.unwrap();
    let publishers = ok(&state, "ListPublishers", json!({})).await;
    let want = |names: &[&str]| -> Value {
        let list: Vec<Value> = names
            .iter()
            .map(|n| json!({"id": ids::publisher(n), "name": n, "displayName": n}))
            .collect();
        json!({"publishers": list})
    };
    assert_eq!(publishers, want(&["acme", "fundament", "zeta"]));

    // Every version of zeta's one plugin yanked: the plugin and its publisher go.
    store
        .yank("zeta", std::slice::from_ref(&gone.hash), &[], NOW + 1)
        .await
        .unwrap();
    assert_eq!(
        ok(&state, "ListPublishers", json!({})).await,
        want(&["acme", "fundament"])
    );
    let gone_id = ids::plugin("zeta", "gone");
    for method in ["GetPlugin", "ListPluginVersions"] {
        let reply = call(&state, method, json!({"pluginId": gone_id})).await;
        assert_refused(
            &reply,
            (404, "not_found", &format!("plugin {gone_id} not found")),
        );
    }

    // acme suspended by the operator: its plugins leave every answer.
    let vault = ids::plugin("acme", "vault");
    ok(&state, "GetPlugin", json!({"pluginId": vault})).await;
    store
        .suspend_publisher("acme", "{}", &[], NOW + 2)
        .await
        .unwrap();
    let binary: pb::ListPublishersResponse = proto(
        &state,
        "ListPublishers",
        &pb::ListPublishersRequest::default(),
    )
    .await;
    let got: Vec<(&str, &str)> = binary
        .publishers
        .iter()
        .map(|p| (p.name.as_str(), p.display_name.as_str()))
        .collect();
    assert_eq!(got, [("fundament", "fundament")]);
    assert_eq!(binary.publishers[0].id, ids::publisher("fundament"));
    let listing = ok(&state, "ListPlugins", json!({"sort": "PLUGIN_SORT_NAME"})).await;
    assert_eq!(names(&listing), BUILTINS);
    let secrets = ok(
        &state,
        "ListPlugins",
        json!({"categoryId": ids::category("Secrets")}),
    )
    .await;
    assert_eq!(secrets, json!({}));
    for method in ["GetPlugin", "ListPluginVersions"] {
        let reply = call(&state, method, json!({"pluginId": vault})).await;
        assert_refused(&reply, (404, "not_found", "not found"));
    }
}

#[tokio::test]
async fn get_plugin_details() {
    let state = common::state().await;
    let id = ids::plugin("fundament", "cert-manager");
    let details = ok(&state, "GetPlugin", json!({"pluginId": id})).await;
    let p = &details["plugin"];
    // The summary's fields, as ListPlugins gives them.
    let listing = ok(&state, "ListPlugins", json!({})).await;
    for field in [
        "id",
        "name",
        "displayName",
        "descriptionShort",
        "organizationId",
        "categoryIds",
        "tags",
        "labels",
        "latestVersionId",
        "featured",
        "published",
    ] {
        assert_eq!(p[field], listing["plugins"][0][field], "{field}");
    }
    assert!(
        p["description"]
            .as_str()
            .unwrap()
            .starts_with("Automates the issuance")
    );
    assert!(
        p["description"]
            .as_str()
            .unwrap()
            .contains("Kubernetes Secrets")
    );
    assert_eq!(p["authorName"], "Fundament");
    assert_eq!(p["authorUrl"], "https://fundament.io/plugins/cert-manager");
    assert_eq!(
        p["repositoryUrl"],
        "https://github.com/fundament-oss/plugins"
    );
    assert_eq!(p["license"], "Apache-2.0");
    assert_eq!(
        p["capabilities"],
        json!(["internet_access", "manage_secrets"])
    );
    let permissions = p["permissions"].as_array().unwrap();
    assert_eq!(
        permissions[0],
        json!({"resource": "certificates.cert-manager.io", "access": "*"})
    );
    // The core API group's resources go by their bare name.
    assert!(permissions.contains(&json!({"resource": "secrets", "access": "get, list, watch, create, update, patch, delete"})), "{permissions:?}");
    assert!(permissions.contains(&json!({"resource": "events", "access": "create, patch"})));
    assert!(p.get("features").is_none());
    assert_eq!(
        p["documentationLinks"],
        json!([
            {"id": ids::link(&id, "homepage"), "title": "Homepage", "urlName": "homepage", "url": "https://fundament.io/plugins/cert-manager"},
            {"id": ids::link(&id, "documentation"), "title": "Documentation", "urlName": "documentation", "url": "https://docs.fundament.io/plugins/cert-manager/"},
            {"id": ids::link(&id, "repository"), "title": "Source repository", "urlName": "repository", "url": "https://github.com/fundament-oss/plugins"},
        ])
    );

    // Binary protobuf; external-dns has no documentation link and a compound license.
    let dns = ids::plugin("fundament", "external-dns");
    let res: pb::GetPluginResponse = proto(
        &state,
        "GetPlugin",
        &pb::GetPluginRequest {
            plugin_id: dns.clone(),
            ..Default::default()
        },
    )
    .await;
    let p = res.plugin.as_option().expect("plugin set");
    assert_eq!(
        (p.id.as_str(), p.name.as_str()),
        (dns.as_str(), "external-dns")
    );
    assert_eq!(p.license, "Apache-2.0 OR MIT");
    assert_eq!(
        p.labels,
        [EnumValue::Known(pb::PluginLabel::PLUGIN_LABEL_CORE)]
    );
    assert_eq!(p.published.seconds, NOW);
    let links: Vec<&str> = p
        .documentation_links
        .iter()
        .map(|l| l.url_name.as_str())
        .collect();
    assert_eq!(links, ["homepage", "repository"]);
    assert!(p.description.contains("TXT records"));
    // Written as a literal block with line breaks; the short text reads across them.
    assert_eq!(
        p.description_short,
        "Keeps public DNS zones in sync with the Services, Ingresses and Gateway routes running in the cluster."
    );
    assert!(!p.permissions.is_empty() && p.features.is_empty());
    assert_eq!(p.capabilities[0], "internet_access");
}

#[tokio::test]
async fn refusals_are_connect_errors() {
    let state = common::state().await;
    let unknown = ids::plugin("nobody", "nothing");
    for (body, want) in [
        (
            json!({"pluginId": "cert-manager"}),
            (
                400,
                "invalid_argument",
                "plugin_id: `cert-manager` is not a UUID",
            ),
        ),
        (
            json!({"pluginId": ""}),
            (400, "invalid_argument", "plugin_id: "),
        ),
        (
            json!({"pluginId": ids::plugin("fundament", "storage").to_uppercase()}),
            (400, "invalid_argument", "plugin_id: "),
        ),
        (json!({"pluginId": unknown}), (404, "not_found", "plugin ")),
    ] {
        for method in ["GetPlugin", "ListPluginVersions"] {
            assert_refused(&call(&state, method, body.clone()).await, want);
        }
    }
    // A binary request is answered with the same JSON error body.
    let req = pb::GetPluginRequest {
        plugin_id: unknown.clone(),
        ..Default::default()
    };
    let (status, ctype, body) = proto_raw(&state, "GetPlugin", req.encode_to_vec()).await;
    assert_connect_error(
        status,
        &ctype,
        &String::from_utf8_lossy(&body),
        (404, "not_found", &unknown),
    );
    // Bodies over the catalog's 64 KiB: refused before they are read when the length is
    // declared, cut at the limit when not; Connect's code for both, with the limit's own
    // status (413: no handler ran), as `connect::render` draws every layer refusal.
    let big = json!({"query": "x".repeat(70_000)}).to_string();
    for declared in [true, false] {
        let mut req = Request::post(format!("{BASE}/ListPlugins"))
            .header(header::CONTENT_TYPE, "application/json");
        if declared {
            req = req.header(header::CONTENT_LENGTH, big.len());
        }
        let reply = send(&state, req.body(Body::from(big.clone())).unwrap()).await;
        assert_refused(&reply, (413, "resource_exhausted", "exceeds 65536 bytes"));
    }
    // Not JSON of the request type.
    let bad = call(&state, "ListPlugins", json!({"featuredOnly": "yes"})).await;
    assert_refused(&bad, (400, "invalid_argument", "failed to decode JSON"));
    let missing = call(&state, "Nope", json!({})).await;
    assert_refused(&missing, (404, "unimplemented", "Nope"));
    // Other paths are still the pages'.
    let page = common::get(&state, "/catalog.v1.Other/ListPlugins").await;
    assert_eq!(page.status, StatusCode::NOT_FOUND);
    assert!(
        page.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
}
