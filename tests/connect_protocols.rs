//! The Connect routes answer the three protocols the Connect library speaks: Connect,
//! gRPC and gRPC-Web, over HTTP/1.1 and over HTTP/2 without TLS (h2c), on the real
//! binaries (`serve` for `catalog.v1`, `sync` for `organization.v1`). The client is
//! `buf curl`, the independent referee; every protocol must give the same answer and
//! the same error code.

mod common;

use std::process::Command;

use common::Server;
use common::buf;
use common::worker::{Api, token, write_config};

/// `buf curl` with `--protocol` and, for `h2c`, HTTP/2 prior knowledge: exit code,
/// stdout, stderr.
fn curl(
    protocol: &str,
    h2c: bool,
    url: &str,
    data: &str,
    headers: &[&str],
) -> (i32, String, String) {
    let cache = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(buf::binary());
    cmd.arg("curl")
        .arg("--schema")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/proto"))
        .arg("--emit-defaults")
        .args(["--protocol", protocol])
        .arg(format!("--http2-prior-knowledge={h2c}"))
        .args(["--data", data]);
    for h in headers {
        cmd.args(["--header", h]);
    }
    let out = cmd
        .arg(url)
        .env("BUF_CACHE_DIR", cache.path())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const WAYS: [(&str, bool); 5] = [
    ("connect", false),
    ("connect", true),
    ("grpc", false),
    ("grpc", true),
    ("grpcweb", false),
];

/// Calls `url` every way and asserts the same success; returns the answer.
fn same_everywhere(url: &str, data: &str, headers: &[&str]) -> serde_json::Value {
    let (code, first, err) = curl("connect", false, url, data, headers);
    assert_eq!(code, 0, "{err}");
    let first: serde_json::Value = serde_json::from_str(&first).unwrap();
    for (protocol, h2c) in WAYS {
        let (code, out, err) = curl(protocol, h2c, url, data, headers);
        assert_eq!(code, 0, "{protocol} h2c={h2c}: {err}");
        let answer: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(answer, first, "{protocol} h2c={h2c}");
    }
    first
}

/// Calls `url` every way and asserts the same error code (buf exits with it << 3).
fn same_error(url: &str, data: &str, headers: &[&str], code: i32) {
    for (protocol, h2c) in WAYS {
        let (exit, out, err) = curl(protocol, h2c, url, data, headers);
        assert_eq!(exit >> 3, code, "{protocol} h2c={h2c}: {out}{err}");
    }
}

#[tokio::test]
async fn catalog_and_organization_services_answer_connect_grpc_and_grpc_web() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    let catalog = |m: &str| format!("{}/catalog.v1.CatalogService/{m}", server.url);
    let categories = same_everywhere(&catalog("ListCategories"), "{}", &[]);
    assert!(!categories["categories"].as_array().unwrap().is_empty());
    let plugins = same_everywhere(&catalog("ListPlugins"), "{}", &[]);
    assert!(!plugins["plugins"].as_array().unwrap().is_empty());
    // not_found (5) for an id nothing has.
    same_error(
        &catalog("GetPlugin"),
        r#"{"plugin_id":"00000000-0000-5000-8000-000000000000"}"#,
        &[],
        5,
    );

    let config = write_config(dir.path(), &[]);
    let api = Api::start(&config, false);
    let org = "0b6f6bd4-3d6e-4a55-9d37-1c1b4c1e0a11";
    let bearer = format!("Authorization: Bearer {}", token(&config, Some(org)));
    let method = |m: &str| format!("{}/orgs/{org}/organization.v1.PluginService/{m}", api.url);
    let listed = same_everywhere(&method("ListPlugins"), "{}", &[&bearer]);
    assert!(!listed["plugins"].as_array().unwrap().is_empty());
    // unauthenticated (16) without the token.
    same_error(&method("ListPlugins"), "{}", &[], 16);
}
