//! Running the real `marketplace sync` binary in tests: config files, one-shot rounds,
//! tokens and the local API on a free loopback port.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// One `sources` entry: name, marketplace URL, trusted root file, priority.
pub struct Source<'a> {
    pub name: &'a str,
    pub url: &'a str,
    pub root: &'a Path,
    pub priority: i64,
}

/// Writes `DIR/sync.yaml` with data directory `DIR/worker` and the API on a free port.
pub fn write_config(dir: &Path, sources: &[Source]) -> PathBuf {
    write_config_on(dir, sources, None)
}

/// [`write_config`] with the worker's state in `database` (a URL) when given, instead of
/// `DIR/worker/sync.db`.
pub fn write_config_on(dir: &Path, sources: &[Source], database: Option<&str>) -> PathBuf {
    let mut text = "dataDir: worker\nlisten: 127.0.0.1:0\n".to_owned();
    if let Some(url) = database {
        text.push_str(&format!("database: \"{url}\"\n"));
    }
    if !sources.is_empty() {
        text.push_str("sources:\n");
    }
    for s in sources {
        text.push_str(&format!(
            "  - name: {}\n    url: {}\n    root: {}\n    interval: 1h\n    priority: {}\n",
            s.name,
            s.url,
            s.root.display(),
            s.priority
        ));
    }
    let path = dir.join("sync.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

pub fn sync_command(config: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_marketplace"));
    c.args(["sync", "--config"]).arg(config);
    c
}

pub fn sync_once(config: &Path) -> Output {
    sync_command(config).arg("--once").output().unwrap()
}

/// `marketplace sync token create`: for `org`, or a reader token when `None`.
pub fn token(config: &Path, org: Option<&str>) -> String {
    let mut c = sync_command(config);
    c.args(["token", "create"]);
    match org {
        Some(org) => c.args(["--org", org]),
        None => c.arg("--reader"),
    };
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", super::output_text(&o));
    String::from_utf8(o.stdout).unwrap().trim().to_owned()
}

/// `marketplace sync` serving its local API (with `--api-only`, no rounds); killed when
/// dropped.
pub struct Api {
    pub child: Child,
    pub url: String,
    pub http: reqwest::Client,
}

impl Api {
    pub fn start(config: &Path, rounds: bool) -> Api {
        let mut c = sync_command(config);
        if !rounds {
            c.arg("--api-only");
        }
        let child = c
            .env("MARKETPLACE_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // Owned by `Api` from here on, so a failed start still kills it (Drop).
        let mut api = Api {
            child,
            url: String::new(),
            http: reqwest::Client::new(),
        };
        let mut reader = BufReader::new(api.child.stdout.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                reader.read_line(&mut line).unwrap() > 0,
                "the worker exited before serving"
            );
            if let Some(url) = line.trim().strip_prefix("local API listening on ") {
                api.url = url.to_owned();
                // Keep draining stdout so the worker never blocks on a full pipe.
                std::thread::spawn(move || for _ in reader.lines() {});
                return api;
            }
        }
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> (u16, serde_json::Value) {
        self.send(reqwest::Method::GET, path, token, Vec::new())
            .await
    }

    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Vec<u8>,
    ) -> (u16, serde_json::Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.url))
            .body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
        )
    }

    /// `/status`'s entry for `source`.
    pub async fn source_status(&self, source: &str) -> serde_json::Value {
        let (status, body) = self.get("/status", None).await;
        assert_eq!(status, 200, "{body}");
        body["sources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == source)
            .cloned()
            .unwrap_or_else(|| panic!("no {source} in {body}"))
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `DIR/sync.yaml` with one source `m` at `url` (its root fetched from it), after one
/// good round (`sync --once`).
pub async fn synced_from(dir: &Path, url: &str) -> PathBuf {
    let root = dir.join("root.json");
    std::fs::write(&root, super::trusted_root(url).await).unwrap();
    let config = write_config(
        dir,
        &[Source {
            name: "m",
            url,
            root: &root,
            priority: 1,
        }],
    );
    let o = sync_once(&config);
    assert!(o.status.success(), "{}", super::output_text(&o));
    config
}

/// An install plan's order as (name, namespace) pairs.
pub fn install_order(plan: &serde_json::Value) -> Vec<(String, String)> {
    plan["order"]
        .as_array()
        .unwrap_or_else(|| panic!("no order in {plan}"))
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_owned(),
                s["namespace"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}
