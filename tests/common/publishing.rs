//! Helpers for tests that publish: a repository with publishers, definitions to
//! publish, and an HTTP client for the publish API.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use marketplace::definition::Definition;
use marketplace::trust::SigningKey;
use marketplace::trust::publisher::plan::build_role;
use tough::schema::{Signed, Targets};

use super::builtin_yaml;

pub const YEAR: std::time::Duration = std::time::Duration::from_secs(365 * 86_400);

pub fn marketplace(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(args)
        .output()
        .expect("binary runs")
}

/// A repo with publisher `acme` (one key) and `beta`; returns data dir, acme key, tokens.
pub fn setup(dir: &Path) -> (PathBuf, SigningKey, String, String) {
    let s = setup_with(dir, &[]);
    (s.data, s.acme, s.acme_token, s.beta_token)
}

/// A repository with publishers `acme` and `beta`, each with one key.
pub struct Setup {
    pub data: PathBuf,
    pub acme: SigningKey,
    pub acme_token: String,
    pub beta: SigningKey,
    pub beta_token: String,
}

/// [`setup`] with extra `repo init` arguments (e.g. short lifetimes), keeping both keys.
pub fn setup_with(dir: &Path, init_args: &[&str]) -> Setup {
    setup_on(dir, init_args, None)
}

/// [`setup_with`] with the server's store in `database` (a URL) when given.
pub fn setup_on(dir: &Path, init_args: &[&str], database: Option<&str>) -> Setup {
    std::fs::create_dir_all(dir).unwrap();
    let on: Vec<&str> = match database {
        Some(url) => vec!["--database", url],
        None => Vec::new(),
    };
    let data = dir.join("data");
    let root = dir.join("root.pem");
    SigningKey::generate().unwrap().save_new(&root).unwrap();
    let d = data.to_str().unwrap();
    assert!(
        marketplace(
            &[
                "repo",
                "init",
                "--data-dir",
                d,
                "--root-key",
                root.to_str().unwrap()
            ]
            .iter()
            .chain(init_args)
            .chain(&on)
            .copied()
            .collect::<Vec<_>>()
        )
        .status
        .success()
    );
    let acme = SigningKey::generate().unwrap();
    let acme_token = add_publisher_on(&data, "acme", &[&acme], 1, database);
    let beta = SigningKey::generate().unwrap();
    let beta_token = add_publisher_on(&data, "beta", &[&beta], 1, database);
    Setup {
        data,
        acme,
        acme_token,
        beta,
        beta_token,
    }
}

/// `marketplace publisher add NAME` with `keys` and `threshold` on `data`; its token.
pub fn add_publisher(data: &Path, name: &str, keys: &[&SigningKey], threshold: u64) -> String {
    add_publisher_on(data, name, keys, threshold, None)
}

/// [`add_publisher`] with the server's store in `database` (a URL) when given.
pub fn add_publisher_on(
    data: &Path,
    name: &str,
    keys: &[&SigningKey],
    threshold: u64,
    database: Option<&str>,
) -> String {
    let mut args = vec!["publisher".to_owned(), "add".into(), name.into()];
    if let Some(url) = database {
        args.extend(["--database".into(), url.into()]);
    }
    for k in keys {
        args.extend(["--key".into(), k.public().hex()]);
    }
    args.extend([
        "--threshold".into(),
        threshold.to_string(),
        "--data-dir".into(),
        data.to_str().unwrap().into(),
    ]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = marketplace(&refs);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .trim()
        .to_owned()
}

/// A built-in definition renamed and re-versioned: new bytes for `acme` to publish.
/// `def` pinning `image` (`repo@sha256:...`) instead of its own.
pub fn with_image(def: &Definition, image: &str) -> Definition {
    let yaml = super::oci::pin_image(std::str::from_utf8(&def.bytes).unwrap(), image);
    Definition::parse(yaml.as_bytes()).expect("valid definition")
}

/// The built-in `from` renamed and re-versioned, with the built-in's extras (its
/// companion document), which a publish signs beside it.
pub fn definition(from: &str, name: &str, version: &str) -> Definition {
    let extras = marketplace::catalog::builtin::definitions()
        .expect("built-ins load")
        .into_iter()
        .find(|d| d.name() == from)
        .map(|d| d.extras)
        .unwrap_or_default();
    definition_bytes(from, name, version)
        .with_extras(extras)
        .expect("the built-in's extras suit the renamed plugin")
}

/// [`definition`] without the extras: only the definition's bytes.
pub fn definition_bytes(from: &str, name: &str, version: &str) -> Definition {
    let yaml = builtin_yaml(from);
    let mut out = String::new();
    let (mut named, mut versioned) = (false, false);
    for line in yaml.lines() {
        let t = line.trim_start();
        if !named && t.starts_with("name:") {
            out.push_str(&format!("  name: {name}\n"));
            named = true;
        } else if !versioned && t.starts_with("version:") {
            out.push_str(&format!("  version: {version}\n"));
            versioned = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    Definition::parse(out.as_bytes()).expect("still valid")
}

pub struct Client {
    pub http: reqwest::Client,
    pub url: String,
}

impl Client {
    pub fn new(url: &str) -> Client {
        Client {
            http: reqwest::Client::new(),
            url: url.to_owned(),
        }
    }

    pub async fn role(&self, publisher: &str) -> Option<Signed<Targets>> {
        let r = self
            .http
            .get(format!("{}/api/v1/publishers/{publisher}/role", self.url))
            .send()
            .await
            .unwrap();
        if r.status() == 404 {
            return None;
        }
        assert_eq!(r.status(), 200);
        Some(serde_json::from_slice(&r.bytes().await.unwrap()).unwrap())
    }

    pub async fn publish(
        &self,
        publisher: &str,
        token: Option<&str>,
        def: &[u8],
        role: &[u8],
    ) -> (u16, serde_json::Value) {
        let body = serde_json::json!({
            "definition": String::from_utf8(def.to_vec()).unwrap(),
            "role": String::from_utf8(role.to_vec()).unwrap(),
        });
        self.post(&format!("{publisher}/definitions"), token, &body)
            .await
    }

    /// POSTs JSON to `/api/v1/publishers/{path}`; returns status and JSON body.
    pub async fn post(
        &self,
        path: &str,
        token: Option<&str>,
        body: &serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let mut req = self
            .http
            .post(format!("{}/api/v1/publishers/{path}", self.url))
            .json(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }
}

impl Client {
    /// Publishes `def` as acme with a role signed by `keys` on acme's current metadata.
    pub async fn publish_signed(
        &self,
        token: &str,
        def: &Definition,
        keys: &[&SigningKey],
    ) -> (u16, serde_json::Value) {
        self.publish_as("acme", token, def, keys).await
    }

    /// Publishes `def` as `publisher` with a role signed by `keys`.
    pub async fn publish_as(
        &self,
        publisher: &str,
        token: &str,
        def: &Definition,
        keys: &[&SigningKey],
    ) -> (u16, serde_json::Value) {
        let role = signed_role_of(self, publisher, def, keys).await;
        self.publish(publisher, Some(token), &def.bytes, &role)
            .await
    }
}

pub async fn signed_role(c: &Client, def: &Definition, keys: &[&SigningKey]) -> Vec<u8> {
    signed_role_of(c, "acme", def, keys).await
}

pub async fn signed_role_of(
    c: &Client,
    publisher: &str,
    def: &Definition,
    keys: &[&SigningKey],
) -> Vec<u8> {
    let current = c.role(publisher).await;
    build_role(
        publisher,
        current.as_ref(),
        def,
        keys,
        1,
        YEAR,
        marketplace::clock::now(),
    )
    .await
    .unwrap()
}

/// An API refusal: its status, error code, and a phrase of its message.
pub fn assert_refused(status: u16, body: &serde_json::Value, want: u16, code: &str, phrase: &str) {
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (want, Some(code)),
        "{body}"
    );
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(phrase),
        "message {message:?} lacks {phrase:?}"
    );
}

/// `marketplace mirror --data-dir DATA ARGS...`: success and stdout with stderr.
pub fn mirror_cli(data: &Path, args: &[&str]) -> (bool, String) {
    let mut all = vec!["mirror", "--data-dir", data.to_str().unwrap()];
    all.extend_from_slice(args);
    let o = marketplace(&all);
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

/// The entry of `mirror status --json` (`all`) for `image` (`HOST/PATH@DIGEST`).
pub fn image_entry(all: &serde_json::Value, image: &str) -> Option<serde_json::Value> {
    all["images"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| {
            format!(
                "{}/{}@{}",
                i["host"].as_str().unwrap(),
                i["repository"].as_str().unwrap(),
                i["digest"].as_str().unwrap()
            ) == image
        })
        .cloned()
}

/// Waits until `mirror status` shows `image` with `status`, and returns its entry.
pub async fn until_status(data: &Path, image: &str, status: &str) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let (ok, out) = mirror_cli(data, &["status", "--json"]);
        assert!(ok, "{out}");
        let all: serde_json::Value = serde_json::from_str(&out).unwrap();
        if let Some(entry) = image_entry(&all, image).filter(|e| e["status"] == status) {
            return entry;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{image} never {status}: {out}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `marketplace operator token create NAME` on `data`: the operator's token.
pub fn operator_token(data: &Path, name: &str) -> String {
    let o = marketplace(&[
        "operator",
        "token",
        "create",
        name,
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", super::output_text(&o));
    String::from_utf8(o.stdout).unwrap().trim().to_owned()
}

/// `marketplace ARGS --server URL` with `token` as the operator's, from a folder with no
/// data directory (and `MARKETPLACE_DATA_DIR` naming one that must stay absent).
pub fn admin_cli(server: &str, token: &str, args: &[&str]) -> std::process::Output {
    let away = tempfile::tempdir().unwrap();
    let data = away.path().join("no-data-dir");
    let o = Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(args)
        .args(["--server", server])
        .current_dir(away.path())
        .env("MARKETPLACE_DATA_DIR", &data)
        .env("MARKETPLACE_OPERATOR_TOKEN", token)
        .output()
        .expect("binary runs");
    assert!(
        !data.exists() && !away.path().join("data").exists(),
        "{args:?} touched a data directory"
    );
    o
}
