//! The OpenAPI 3.1 descriptions of the server's JSON API (`/api/v1/openapi.json`) and
//! of the sync worker's local API (`/openapi.json`), checked by independent tools
//! against the real binaries: `openapi-spec-validator` accepts each document, and
//! `schemathesis` calls every operation each describes, with valid tokens of every kind
//! and path parameters that name real things, and finds no 5xx and no answer that breaks
//! its schema (both in the virtualenv `.ci/run` creates). Its report (HAR) must show
//! no request refused for the failed-authentication budget, and a success for every
//! operation a generated request can succeed at; the others' successes are made here
//! and checked against the document with Python's `jsonschema`.

mod common;

use std::path::Path;
use std::process::Command;

use common::publishing::{Client, definition, marketplace, operator_token, setup_with};
use common::worker::{Api, synced_from, token};
use common::{Server, output_text, python};
use marketplace::trust::SigningKey;
use marketplace::trust::publisher::plan::sign_role;
use serde_json::Value;

fn tool(name: &str) -> std::path::PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".venv/bin")
        .join(name);
    assert!(
        path.exists(),
        "{name} is needed for this test: run `bash .ci/run`"
    );
    path
}

fn run(args: &[&str]) -> String {
    let o = marketplace(args);
    assert!(o.status.success(), "{args:?}: {}", output_text(&o));
    String::from_utf8(o.stdout).unwrap()
}

/// The document at `url`, after `openapi-spec-validator` accepted it; with its number of
/// operations.
async fn validated(url: &str, dir: &Path) -> (Value, usize) {
    let doc = reqwest::get(url).await.unwrap();
    assert_eq!(doc.headers()["content-type"], "application/json");
    let doc: Value = doc.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let file = dir.join("openapi.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    let o = Command::new(tool("openapi-spec-validator"))
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    let operations = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|p| p.as_object().unwrap().len())
        .sum();
    (doc, operations)
}

/// Runs schemathesis on the document at `spec` against `base` with `config` (TOML) and
/// the environment `env`; returns its HAR entries as (method, path, status).
fn fuzz(
    dir: &Path,
    spec: &str,
    base: &str,
    config: &str,
    env: &[(&str, &str)],
    operations: usize,
) -> Vec<(String, String, u16)> {
    let run = dir.join("run");
    std::fs::create_dir(&run).unwrap();
    let file = dir.join("schemathesis.toml");
    std::fs::write(&file, config).unwrap();
    let har = dir.join("report.har");
    let o = Command::new(tool("schemathesis"))
        .arg("--config-file")
        .arg(&file)
        .args(["run", spec, "--url", base])
        .args([
            "--checks",
            "not_a_server_error,response_schema_conformance",
            "--max-examples",
            "25",
            "--generation-deterministic",
            "--workers",
            "1",
            "--generation-with-security-parameters",
            "false",
            "--phases",
            "examples,coverage,fuzzing",
            "--request-timeout",
            "20",
            "--no-color",
            "--report",
            "har",
            "--report-har-path",
        ])
        .arg(&har)
        .current_dir(&run)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = output_text(&o);
    assert!(o.status.success(), "schemathesis:\n{text}");
    assert!(
        text.contains(&format!("{operations} selected / {operations} total")),
        "{text}"
    );
    let generated: usize = text
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_suffix(" passed")?
                .split(" generated, ")
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no count of test cases:\n{text}"));
    assert!(generated > 10 * operations, "{text}");
    let har: Value = serde_json::from_slice(&std::fs::read(&har).unwrap()).unwrap();
    har["log"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let url = e["request"]["url"].as_str().unwrap();
            let path = url
                .strip_prefix(base)
                .unwrap_or(url)
                .split('?')
                .next()
                .unwrap()
                .to_owned();
            (
                e["request"]["method"].as_str().unwrap().to_uppercase(),
                path,
                e["response"]["status"].as_u64().unwrap() as u16,
            )
        })
        .collect()
}

/// Whether `path` (as requested) is an instance of the template `/a/{x}/b`.
fn matches(template: &str, path: &str) -> bool {
    let (t, p): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    t.len() == p.len()
        && t.iter()
            .zip(&p)
            .all(|(t, p)| (t.starts_with('{') && !p.is_empty()) || t == p)
}

/// Every operation of `doc` not in `made_here` has a 2xx among `calls`, and no call was
/// refused for the failed-authentication budget.
#[track_caller]
fn every_operation_succeeded(doc: &Value, calls: &[(String, String, u16)], made_here: &[&str]) {
    let limited: Vec<_> = calls.iter().filter(|c| c.2 == 429).collect();
    assert!(limited.is_empty(), "rate limited: {limited:?}");
    let mut missing = Vec::new();
    for (template, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let op = format!("{} {template}", method.to_uppercase());
            let ok = calls.iter().any(|(m, p, s)| {
                m.eq_ignore_ascii_case(method) && matches(template, p) && (200..300).contains(s)
            });
            if !ok && !made_here.contains(&op.as_str()) {
                let seen: Vec<u16> = calls
                    .iter()
                    .filter(|(m, p, _)| m.eq_ignore_ascii_case(method) && matches(template, p))
                    .map(|c| c.2)
                    .collect();
                missing.push(format!("{op} (answered {seen:?})"));
            }
        }
    }
    assert!(missing.is_empty(), "no success for {missing:?}");
}

/// `body`, an answer of `method path` with `status`, is valid against its schema in `doc`
/// (Python's `jsonschema`, JSON Schema 2020-12 as OpenAPI 3.1 uses it).
#[track_caller]
fn conforms(doc: &Value, method: &str, path: &str, status: u16, body: &Value) {
    let pointer = format!(
        "#/paths/{}/{method}/responses/{status}/content/application~1json/schema",
        path.replace('~', "~0").replace('/', "~1")
    );
    let script = r#"
import json, sys
from jsonschema import Draft202012Validator
doc, pointer, body = json.loads(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
schema = dict(doc, **{"$ref": pointer})
errors = [e.message for e in Draft202012Validator(schema).iter_errors(body)]
print("\n".join(errors))
sys.exit(1 if errors else 0)
"#;
    let o = Command::new(python())
        .args(["-c", script])
        .arg(doc.to_string())
        .arg(&pointer)
        .arg(body.to_string())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{method} {path} {status} breaks its schema: {}\n{body}",
        output_text(&o)
    );
}

/// The operations no generated request can succeed at: their successes are made by the
/// test and checked with `conforms`.
const SERVER_MADE_HERE: &[&str] = &[
    // A publish, yank or re-sign needs a role signed over the server's current metadata.
    "POST /api/v1/publishers/{publisher}/definitions",
    "POST /api/v1/publishers/{publisher}/yank",
    "POST /api/v1/publishers/{publisher}/role",
    // New keys must be Ed25519 public keys.
    "POST /api/v1/admin/publishers",
    "PUT /api/v1/admin/publishers/{name}/keys",
    // Cosign keys must be PEM public keys.
    "PUT /api/v1/admin/publishers/{name}/cosign-keys",
];

#[tokio::test]
async fn the_server_description_validates_and_schemathesis_finds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // The upstream this server follows, so `/api/v1/upstream` has a round to show.
    let up = setup_with(&dir.path().join("up"), &[]);
    let upstream = Server::start(&up.data);
    let up_root = dir.path().join("up-root.json");
    std::fs::write(&up_root, common::trusted_root(&upstream.url).await).unwrap();

    let m = setup_with(&dir.path().join("m"), &[]);
    let data = m.data.to_str().unwrap();
    // What the admin operations act on: a publisher (with a version published, so that
    // it can be suspended) and a reviewer to spare.
    let gamma = SigningKey::generate().unwrap();
    let gamma_token = run(&[
        "publisher",
        "add",
        "gamma",
        "--key",
        &gamma.public().hex(),
        "--data-dir",
        data,
    ])
    .lines()
    .last()
    .unwrap()
    .trim()
    .to_owned();
    run(&["reviewer", "add", "rex", "--data-dir", data]);
    let rita = run(&["reviewer", "add", "rita", "--data-dir", data])
        .lines()
        .nth(1)
        .unwrap()
        .trim()
        .to_owned();
    let operator = operator_token(&m.data, "fuzzer");
    let curation = dir.path().join("curation.yaml");
    std::fs::write(
        &curation,
        "categories:\n  - name: Security\n    tags: [security]\n",
    )
    .unwrap();
    let server = Server::start_with(
        &m.data,
        &[
            "--curation",
            curation.to_str().unwrap(),
            "--review",
            "required",
            "--upstream",
            &upstream.url,
            "--upstream-root",
            up_root.to_str().unwrap(),
        ],
    );
    let url = server.url.as_str();

    // Review: acme's edge 1.0.0 approved and published, 1.1.0 approved (waiting for
    // acme's signature), 1.2.0 pending; gamma's vault 1.0.0 published.
    let key = dir.path().join("acme.pem");
    m.acme.save_new(&key).unwrap();
    let gamma_key = dir.path().join("gamma.pem");
    gamma.save_new(&gamma_key).unwrap();
    let as_publisher = |token: &str, args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--server", url, "--token", token]);
        run(&all)
    };
    let as_acme = |args: &[&str]| as_publisher(&m.acme_token, args);
    let as_rita = |args: &[&str]| {
        let mut all = vec!["review"];
        all.extend(args);
        all.extend(["--server", url, "--token", &rita]);
        run(&all)
    };
    let mut ids = Vec::new();
    for version in ["1.0.0", "1.1.0", "1.2.0"] {
        let file = dir.path().join(format!("edge-{version}.yaml"));
        std::fs::write(&file, definition("gateway", "edge", version).bytes).unwrap();
        as_acme(&["submit", file.to_str().unwrap()]);
        let id = marketplace::ids::version("acme", "edge", version);
        if version != "1.2.0" {
            as_rita(&["approve", &id]);
        }
        if version == "1.0.0" {
            as_acme(&["publish", "--approved", "--key", key.to_str().unwrap()]);
        }
        ids.push(id);
    }
    let vault = dir.path().join("vault.yaml");
    std::fs::write(&vault, definition("storage", "vault", "1.0.0").bytes).unwrap();
    as_publisher(&gamma_token, &["submit", vault.to_str().unwrap()]);
    as_rita(&[
        "approve",
        &marketplace::ids::version("gamma", "vault", "1.0.0"),
    ]);
    as_publisher(
        &gamma_token,
        &[
            "publish",
            "--approved",
            "--key",
            gamma_key.to_str().unwrap(),
        ],
    );
    let client = reqwest::Client::new();
    let round = async {
        loop {
            let r: Value = reqwest::get(format!("{url}/api/v1/upstream"))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if !r["last_round"].is_null() {
                return r;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), round)
        .await
        .expect("the first upstream round within a minute");

    let (doc, operations) = validated(&format!("{url}/api/v1/openapi.json"), dir.path()).await;
    assert_eq!(operations, 33, "{}", doc["paths"]);
    let version = {
        let d: Value = reqwest::get(format!("{url}/api/v1/plugins/fundament/cert-manager"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        d["latest"]["version"].as_str().unwrap().to_owned()
    };
    let config = format!(
        r#"[auth.openapi.operator_token]
bearer = "${{ST_OPERATOR_TOKEN}}"

[auth.openapi.publisher_token]
bearer = "${{ST_PUBLISHER_TOKEN}}"

[auth.openapi.reviewer_token]
bearer = "${{ST_REVIEWER_TOKEN}}"

[[operations]]
include-tag = "catalog"
parameters = {{ "path.publisher" = "fundament", "path.name" = "cert-manager", "path.version" = "{version}", "query.from" = "{version}" }}

[[operations]]
include-tag = "publishing"
parameters = {{ "path.publisher" = "acme" }}

[[operations]]
include-tag = "review"
parameters = {{ "path.id" = "{id}" }}

[[operations]]
include-path-regex = "^/api/v1/admin/publishers/"
parameters = {{ "path.name" = "gamma" }}

# Revoking rex succeeds once; every later call is 404 by design.
[[operations]]
include-path-regex = "^/api/v1/admin/reviewers/"
parameters = {{ "path.name" = "rex" }}
warnings = false

[warnings]
fail-on = ["missing_test_data", "missing_auth"]
"#,
        id = ids[1],
    );
    let calls = fuzz(
        dir.path(),
        &format!("{url}/api/v1/openapi.json"),
        url,
        &config,
        &[
            ("ST_OPERATOR_TOKEN", &operator),
            ("ST_PUBLISHER_TOKEN", &m.acme_token),
            ("ST_REVIEWER_TOKEN", &rita),
        ],
        operations,
    );
    every_operation_succeeded(&doc, &calls, SERVER_MADE_HERE);

    // The successes no generated request reaches, made here and held to the document.
    let api = |path: &str| format!("{url}/api/v1/{path}");
    let delta = SigningKey::generate().unwrap();
    let (status, added) = admin(
        &client,
        reqwest::Method::POST,
        &api("admin/publishers"),
        &operator,
        serde_json::json!({ "name": "delta", "public_keys": [delta.public().hex()] }),
    )
    .await;
    conforms(&doc, "post", "/api/v1/admin/publishers", status, &added);
    let (status, rotated) = admin(
        &client,
        reqwest::Method::PUT,
        &api("admin/publishers/delta/keys"),
        &operator,
        serde_json::json!({ "public_keys": [delta.public().hex()] }),
    )
    .await;
    conforms(
        &doc,
        "put",
        "/api/v1/admin/publishers/{name}/keys",
        status,
        &rotated,
    );
    let (_, pem) = common::oci::cosign_key(dir.path(), "cosign");
    let (status, cosign) = admin(
        &client,
        reqwest::Method::PUT,
        &api("admin/publishers/delta/cosign-keys"),
        &operator,
        serde_json::json!({ "cosign_keys": [std::fs::read_to_string(pem).unwrap()] }),
    )
    .await;
    conforms(
        &doc,
        "put",
        "/api/v1/admin/publishers/{name}/cosign-keys",
        status,
        &cosign,
    );

    // acme publishes the approved 1.1.0, re-signs, then yanks 1.0.0.
    let c = Client::new(url);
    let edge = definition("gateway", "edge", "1.1.0");
    let (status, published) = c.publish_signed(&m.acme_token, &edge, &[&m.acme]).await;
    assert_eq!(status, 201, "{published}");
    conforms(
        &doc,
        "post",
        "/api/v1/publishers/{publisher}/definitions",
        status,
        &published,
    );
    let next = |yank: Option<&str>| {
        let c = &c;
        let key = &m.acme;
        let yank = yank.map(str::to_owned);
        async move {
            let mut role = c.role("acme").await.unwrap().signed;
            role.version = std::num::NonZeroU64::new(role.version.get() + 1).unwrap();
            if let Some(name) = yank {
                role.targets
                    .iter_mut()
                    .find(|(n, _)| n.raw().ends_with(&name))
                    .expect("the target to yank")
                    .1
                    .custom
                    .insert("yanked".into(), Value::Bool(true));
            }
            let signed = sign_role("acme", role, &[key], 1).await.unwrap();
            serde_json::json!({ "role": String::from_utf8(signed).unwrap() })
        }
    };
    let (status, resigned) = c
        .post("acme/role", Some(&m.acme_token), &next(None).await)
        .await;
    assert_eq!(status, 200, "{resigned}");
    conforms(
        &doc,
        "post",
        "/api/v1/publishers/{publisher}/role",
        status,
        &resigned,
    );
    let (status, yanked) = c
        .post(
            "acme/yank",
            Some(&m.acme_token),
            &next(Some("/1.0.0.yaml")).await,
        )
        .await;
    assert_eq!(status, 200, "{yanked}");
    conforms(
        &doc,
        "post",
        "/api/v1/publishers/{publisher}/yank",
        status,
        &yanked,
    );
}

/// `body` sent as JSON with `method` to `url` with an operator's `token`; a success.
async fn admin(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: &str,
    body: Value,
) -> (u16, Value) {
    let r = client
        .request(method, url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap();
    assert!((200..300).contains(&status), "{status}: {body}");
    (status, body)
}

#[tokio::test]
async fn the_worker_description_validates_and_schemathesis_finds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let server = Server::start(&m.data);
    let config = synced_from(dir.path(), &server.url).await;
    let org = token(&config, Some("acme-org"));
    let api = Api::start(&config, false);
    let url = api.url.as_str();
    // Two sideloads: one the reads find, one the deletes may take.
    let mut added = Vec::new();
    for name in ["inhouse", "scratch"] {
        let def = definition("storage", name, "1.0.0");
        let (status, body) = api
            .send(
                reqwest::Method::POST,
                "/orgs/acme-org/sideloads",
                Some(&org),
                def.bytes.clone(),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        added.push(body);
    }
    let (_, cert) = api
        .get("/orgs/acme-org/plugins/cert-manager", Some(&org))
        .await;
    let version = cert["plugin"]["latest"][0]["version"]
        .as_str()
        .unwrap()
        .to_owned();

    let (doc, operations) = validated(&format!("{url}/openapi.json"), dir.path()).await;
    assert_eq!(operations, 11, "{}", doc["paths"]);
    let config = format!(
        r#"[auth.openapi.org_token]
bearer = "${{ST_ORG_TOKEN}}"

[parameters]
"path.org" = "acme-org"

[[operations]]
include-tag = "plugins"
parameters = {{ "path.org" = "acme-org", "path.name" = "cert-manager", "path.version" = "{version}", "query.from" = "{version}", "query.plugins" = "cert-manager" }}

[[operations]]
include-path-regex = "^/orgs/\\{{org\\}}/sideloads/\\{{name\\}}/\\{{version\\}}$"
include-method = "GET"
parameters = {{ "path.org" = "acme-org", "path.name" = "inhouse", "path.version" = "1.0.0" }}

# Deleting scratch succeeds once; every later call is 404 by design.
[[operations]]
include-path-regex = "^/orgs/\\{{org\\}}/sideloads/"
include-method = "DELETE"
parameters = {{ "path.org" = "acme-org", "path.name" = "scratch", "path.version" = "1.0.0" }}
warnings = false

[warnings]
fail-on = ["missing_test_data", "missing_auth"]
"#
    );
    let calls = fuzz(
        dir.path(),
        &format!("{url}/openapi.json"),
        url,
        &config,
        &[("ST_ORG_TOKEN", &org)],
        operations,
    );
    // No generated body is a valid definition: the sideloads made above are checked.
    every_operation_succeeded(&doc, &calls, &["POST /orgs/{org}/sideloads"]);
    for body in &added {
        conforms(&doc, "post", "/orgs/{org}/sideloads", 201, body);
    }
}
