//! The same service with bodies we encode ourselves: binary protobuf from the generated
//! types and proto3 JSON, over HTTP to the real binary and in process.

use super::*;

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
        plugin_version: "v1.19.4".into(),
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
        br#"{"pluginName":"cert-manager","pluginVersion":"v1.19.4"}"#.to_vec(),
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

/// The worker's router over an in-memory store with one preset, and a reader token.
async fn in_process(dir: &std::path::Path) -> (axum::Router, String) {
    use marketplace::sync::config::Config;
    use marketplace::sync::sideload::Scope;
    use marketplace::sync::store::SyncStore;
    use marketplace::sync::worker::Worker;

    let config = Config::parse(
        "fundament:\n  presets:\n    - {name: edge, description: Ingress and TLS, plugins: [cert-manager]}\n",
        dir,
    )
    .unwrap();
    let store = SyncStore::open_in_memory().await.unwrap();
    let (_, reader) = store
        .create_token(&Scope::Reader, common::NOW)
        .await
        .unwrap();
    let worker = std::sync::Arc::new(Worker::with_store(config, store).await.unwrap());
    (marketplace::api::worker::router(worker), reader)
}

/// A unary call to `app` in process, with `headers`: status and body.
async fn call_in_process(
    app: &axum::Router,
    uri: String,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, Vec<u8>) {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let mut req = axum::http::Request::post(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = app
        .clone()
        .oneshot(req.body(axum::body::Body::from(body)).unwrap())
        .await
        .unwrap();
    let status = res.status().as_u16();
    (
        status,
        res.into_body().collect().await.unwrap().to_bytes().to_vec(),
    )
}

/// In process: the worker's router over an in-memory store, driven with `oneshot`.
#[tokio::test]
async fn in_process_the_router_serves_both_encodings_per_organization() {
    let dir = tempfile::tempdir().unwrap();
    let (app, reader) = in_process(dir.path()).await;
    let bearer = format!("Bearer {reader}");
    let send = |org: &str, method: &str, content_type: &str, body: Vec<u8>| {
        let uri = format!("/orgs/{org}/{SERVICE}/{method}");
        let app = app.clone();
        let bearer = bearer.clone();
        let content_type = content_type.to_owned();
        async move {
            let headers = [
                ("content-type", content_type.as_str()),
                ("authorization", bearer.as_str()),
            ];
            call_in_process(&app, uri, &headers, body).await
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

/// The service's 2 MiB limit holds for the message a gzip-compressed body inflates to,
/// not only for the bytes on the wire; compressed requests of a normal size are served.
#[tokio::test]
async fn the_limit_applies_to_the_decompressed_message() {
    use std::io::Write;
    let gzip = |bytes: &[u8]| {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(bytes).unwrap();
        gz.finish().unwrap()
    };
    // `ListPlugins` in proto3 JSON, padded with whitespace to `size` bytes.
    let padded = |size: usize| {
        let mut body = b"{".to_vec();
        body.resize(size - 1, b' ');
        body.push(b'}');
        body
    };
    let dir = tempfile::tempdir().unwrap();
    let (app, reader) = in_process(dir.path()).await;
    let bearer = format!("Bearer {reader}");
    let uri = format!("/orgs/blue/{SERVICE}/ListPlugins");
    let headers = [
        ("content-type", "application/json"),
        ("content-encoding", "gzip"),
        // Without it Connect answers in the request's encoding.
        ("accept-encoding", "identity"),
        ("authorization", bearer.as_str()),
    ];
    let big = gzip(&padded(3 * 1024 * 1024));
    assert!(big.len() < 64 * 1024, "small on the wire");
    let (status, body) = call_in_process(&app, uri.clone(), &headers, big).await;
    let reply: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(reply["code"], "resource_exhausted", "{status} {reply}");

    let (status, body) = call_in_process(&app, uri, &headers, gzip(&padded(4096))).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let reply: Value = serde_json::from_slice(&body).unwrap();
    assert!(!reply["plugins"].as_array().unwrap().is_empty(), "{reply}");
}
