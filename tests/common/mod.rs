//! Helpers shared by the integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use marketplace::catalog::builtin;
use marketplace::definition::Definition;
use marketplace::store::Store;
use marketplace::{AppState, app};
use tower::ServiceExt;

pub mod backends;
pub mod background;
pub mod buf;
pub mod containerd;
pub mod garage;
pub mod hostile;
pub mod mirror;
pub mod nginx;
pub mod oci;
pub mod pg;
pub mod publishing;
pub mod tough;
pub mod worker;

pub const NOW: i64 = 1_790_000_000;

/// An app over a fresh in-memory store holding the built-in catalog.
pub async fn state() -> AppState {
    let store = Store::open_in_memory().await.expect("store opens");
    builtin::load(&store, NOW).await.expect("built-ins load");
    AppState::new(store, None)
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

pub async fn get(state: &AppState, uri: &str) -> Reply {
    send(state, Request::get(uri).body(Body::empty()).unwrap()).await
}

pub async fn send(state: &AppState, req: Request<Body>) -> Reply {
    let res = app(state.clone()).oneshot(req).await.expect("infallible");
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.expect("body").to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

pub fn builtin_yaml(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/catalog/{name}.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("catalog file")
}

/// Fails when a message shows Rust `Debug` output (a value printed with `{:?}`: struct
/// fields in braces, `Some(..)`, parser internals) instead of words for its reader.
#[track_caller]
pub fn assert_human(message: &str) {
    for marker in [
        "{ ",
        " }",
        "Some(",
        "Ok(",
        "Err(",
        "Error {",
        "RecordedAnchorEvents",
        "budget breached",
        "Option<",
        "Options",
        "DuplicateKeyPolicy",
        "strict mode",
    ] {
        assert!(
            !message.contains(marker),
            "message shows Rust debug output or parser internals ({marker:?}): {message}"
        );
    }
}

/// A definition as Fundament writes them: `permissions.capabilities: [internet_access]`
/// and no `requirements` (plugin `webhook-relay`).
pub const FUNDAMENT_STYLE: &str = include_str!("fundament-style.yaml");

/// The built-in definition `name` with its version replaced, as new bytes.
pub fn with_version(name: &str, version: &str) -> Definition {
    let yaml = builtin_yaml(name);
    let line = yaml
        .lines()
        .find(|l| l.trim_start().starts_with("version:"))
        .expect("version line");
    let indent = &line[..line.len() - line.trim_start().len()];
    let yaml = yaml.replacen(line, &format!("{indent}version: {version}"), 1);
    Definition::parse(yaml.as_bytes()).expect("modified definition stays valid")
}

/// The real binary serving on a free loopback port; killed when dropped.
pub struct Server {
    pub child: Child,
    pub url: String,
}

impl Server {
    pub fn start(data_dir: &Path) -> Server {
        Server::start_with(data_dir, &[])
    }

    /// [`Server::start`] with more `serve` arguments (operator settings).
    pub fn start_with(data_dir: &Path, args: &[&str]) -> Server {
        Server::start_env(data_dir, args, &[])
    }

    /// [`Server::start_with`] with environment variables (an S3 store's credentials).
    pub fn start_env(data_dir: &Path, args: &[&str], env: &[(&str, String)]) -> Server {
        Server::spawn(data_dir, args, env, Stdio::inherit())
    }

    /// [`Server::start_with`] logging at info, as JSON lines, into `log`.
    pub fn start_logged(data_dir: &Path, args: &[&str], log: &Path) -> Server {
        let env = [
            ("MARKETPLACE_LOG", "info".to_owned()),
            ("MARKETPLACE_LOG_FORMAT", "json".to_owned()),
        ];
        Server::spawn(
            data_dir,
            args,
            &env,
            std::fs::File::create(log).unwrap().into(),
        )
    }

    fn spawn(data_dir: &Path, args: &[&str], env: &[(&str, String)], stderr: Stdio) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_marketplace"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(args)
            .env("MARKETPLACE_LOG", "warn")
            .envs(env.iter().map(|(k, v)| (k, v)))
            // The built-ins pin images on the internet: tests stay on loopback, so the
            // mirror is off unless a test turns it on with its own upstreams.
            .env("MARKETPLACE_MIRROR", "off")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("binary starts");
        let stdout = child.stdout.take().expect("stdout piped");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("reads address line");
        let url = line
            .trim()
            .strip_prefix("marketplace listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_owned();
        Server { child, url }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The body of GET `url`, whatever its status (a page, as a browser would read it).
pub async fn text(url: impl reqwest::IntoUrl) -> String {
    reqwest::get(url).await.unwrap().text().await.unwrap()
}

/// A command's stdout and stderr together, for assertions and failure messages.
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// python-tuf from the virtualenv `.ci/run` creates; `MARKETPLACE_TEST_PYTHON` overrides.
pub fn python() -> PathBuf {
    let path = std::env::var_os("MARKETPLACE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"));
    assert!(
        path.exists(),
        "python-tuf is needed for this test: run `bash .ci/run` (it creates .venv with tuf==7.0.1), or set MARKETPLACE_TEST_PYTHON"
    );
    path
}

/// Runs python-tuf against `url` with a fresh cache; returns its JSON report.
pub fn python_tuf(url: &str, root: &Path, cache: &Path, targets: &[&str]) -> serde_json::Value {
    let out = Command::new(python())
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tuf_client.py"))
        .arg(url)
        .arg(root)
        .arg(cache)
        .args(targets)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python-tuf refused the index: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `1.root.json` from a running server: the trust anchor a client is given once.
pub async fn trusted_root(url: &str) -> Vec<u8> {
    let resp = reqwest::get(format!("{url}/tuf/metadata/1.root.json"))
        .await
        .expect("request");
    assert_eq!(resp.status(), 200, "the server has a root");
    resp.bytes().await.expect("body").to_vec()
}

/// The independent referee (`tests/schema_referee.py`: PyYAML and `jsonschema`, in the
/// virtualenv `.ci/run` creates) run with `args`; its JSON report.
pub fn referee(args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let out = Command::new(python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/schema_referee.py"
        ))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the schema referee failed (is jsonschema installed? run `bash .ci/run`): {}",
        output_text(&out)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `schema/NAME`, the JSON Schemas the referee checks against.
pub fn schema(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("schema")
        .join(name)
}

/// Fundament's own definitions, the test data `../shared/fundament-definitions/` holds
/// (read in place, never copied into the project); `FUNDAMENT_DEFINITIONS` names the
/// folder elsewhere.
pub fn fundament_definitions() -> Vec<PathBuf> {
    let dir = std::env::var_os("FUNDAMENT_DEFINITIONS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fundament-definitions")
        });
    let files = yaml_files(&dir);
    assert!(
        !files.is_empty(),
        "Fundament's definitions are needed for this test: no *.yaml in {} (set FUNDAMENT_DEFINITIONS)",
        dir.display()
    );
    files
}

/// The `*.yaml` files of `dir`, sorted; companion documents (`*.extras.yaml`) too.
pub fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// `tests/fixtures/definitions/KIND/`: `valid`, `refused` or `legacy`.
pub fn fixtures(kind: &str) -> Vec<PathBuf> {
    let files = yaml_files(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/definitions")
            .join(kind),
    );
    assert!(!files.is_empty(), "no fixtures in {kind}");
    files
}

/// Whether `path` is a companion document (`NAME.extras.yaml`), not a definition.
pub fn is_companion(path: &Path) -> bool {
    path.to_string_lossy().ends_with(".extras.yaml")
}

/// The fixture `tests/fixtures/definitions/KIND/NAME`.
pub fn fixture(kind: &str, name: &str) -> PathBuf {
    fixtures(kind)
        .into_iter()
        .find(|f| f.ends_with(name))
        .unwrap_or_else(|| panic!("no fixture {kind}/{name}"))
}
