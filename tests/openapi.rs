//! The OpenAPI 3.1 description of the server's JSON API (`/api/v1/openapi.json`),
//! checked by independent tools against the real binary: `openapi-spec-validator`
//! accepts the document, and `schemathesis` calls every operation it describes, with a
//! valid operator token and path parameters that name real things, and finds no 5xx
//! and no answer that breaks its schema (both in the virtualenv `.ci/run` creates).

mod common;

use std::path::Path;
use std::process::Command;

use common::publishing::{marketplace, operator_token, setup_with};
use common::{Server, output_text};
use marketplace::trust::SigningKey;

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

#[tokio::test]
async fn the_description_validates_and_schemathesis_finds_nothing_against_the_real_server() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let data = m.data.to_str().unwrap();
    // What the admin operations act on: a publisher and a reviewer to spare.
    let gamma = SigningKey::generate().unwrap().public().hex();
    let o = marketplace(&[
        "publisher",
        "add",
        "gamma",
        "--key",
        &gamma,
        "--data-dir",
        data,
    ]);
    assert!(o.status.success(), "{}", output_text(&o));
    let o = marketplace(&["reviewer", "add", "rex", "--data-dir", data]);
    assert!(o.status.success(), "{}", output_text(&o));
    let token = operator_token(&m.data, "fuzzer");
    let curation = dir.path().join("curation.yaml");
    std::fs::write(
        &curation,
        "categories:\n  - name: Security\n    tags: [security]\n",
    )
    .unwrap();
    let server = Server::start_with(&m.data, &["--curation", curation.to_str().unwrap()]);
    let url = &server.url;

    let doc = reqwest::get(format!("{url}/api/v1/openapi.json"))
        .await
        .unwrap();
    assert_eq!(doc.headers()["content-type"], "application/json");
    let doc: serde_json::Value = doc.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    let o = Command::new(tool("openapi-spec-validator"))
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));

    let operations: usize = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|p| p.as_object().unwrap().len())
        .sum();
    assert_eq!(operations, 23, "{}", doc["paths"]);

    let version = {
        let d: serde_json::Value =
            reqwest::get(format!("{url}/api/v1/plugins/fundament/cert-manager"))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
        d["latest"]["version"].as_str().unwrap().to_owned()
    };
    let config = dir.path().join("schemathesis.toml");
    std::fs::write(
        &config,
        format!(
            r#"[auth.openapi.operator_token]
bearer = "${{ST_OPERATOR_TOKEN}}"

[[operations]]
include-tag = "catalog"
parameters = {{ "path.publisher" = "fundament", "path.name" = "cert-manager", "path.version" = "{version}", "query.from" = "{version}" }}

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
"#
        ),
    )
    .unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let o = Command::new(tool("schemathesis"))
        .arg("--config-file")
        .arg(&config)
        .args(["run", &format!("{url}/api/v1/openapi.json"), "--url", url])
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
        ])
        .current_dir(&run)
        .env("ST_OPERATOR_TOKEN", &token)
        .output()
        .unwrap();
    let text = output_text(&o);
    assert!(o.status.success(), "schemathesis:\n{text}");
    assert!(text.contains("23 selected / 23 total"), "{text}");
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
    assert!(generated > 200, "{text}");
}
