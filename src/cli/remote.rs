//! `--server URL`: a command that changes server state, done through the admin API
//! (`/api/v1/admin/...`) with the operator's token from `MARKETPLACE_OPERATOR_TOKEN`,
//! so operators of replicas never need the data directory. The answers are the same
//! `admin` types the commands print on the data directory.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Where the admin API is; with it, the command acts through the server.
#[derive(Debug, Args, Clone)]
pub(super) struct ServerArgs {
    /// Act through this server's admin API (with the operator token in
    /// MARKETPLACE_OPERATOR_TOKEN) instead of on the data directory.
    #[arg(long, env = "MARKETPLACE_SERVER", global = true, value_name = "URL")]
    pub(super) server: Option<url::Url>,
}

impl ServerArgs {
    /// The admin API client, when `--server` is given.
    pub(super) fn remote(&self) -> anyhow::Result<Option<Remote>> {
        self.server.as_ref().map(Remote::new).transpose()
    }
}

pub(super) struct Remote {
    http: reqwest::Client,
    base: url::Url,
    token: String,
}

/// The token's variable.
const TOKEN_VAR: &str = "MARKETPLACE_OPERATOR_TOKEN";

impl Remote {
    fn new(server: &url::Url) -> anyhow::Result<Remote> {
        if !matches!(server.scheme(), "http" | "https") || server.host().is_none() {
            bail!("--server {server}: give the server's http(s) URL");
        }
        let token = std::env::var(TOKEN_VAR)
            .ok()
            .filter(|t| !t.trim().is_empty())
            .with_context(|| {
                format!(
                    "--server needs an operator token in {TOKEN_VAR} (`marketplace operator token create NAME` on the server's database)"
                )
            })?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()?;
        let mut base = server.clone();
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        Ok(Remote {
            http,
            base,
            token: token.trim().to_owned(),
        })
    }

    pub(super) async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.call::<(), T>(reqwest::Method::GET, path, None).await
    }

    /// One admin call. Not retried: a write that reached the server before its answer
    /// was lost would be done twice (a second token, say); the refusal says what
    /// happened.
    pub(super) async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
    ) -> anyhow::Result<T> {
        let url = self.base.join(&format!("api/v1/admin/{path}"))?;
        let mut request = self
            .http
            .request(method.clone(), url.clone())
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("{method} {url}"))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .with_context(|| format!("{method} {url}: reading the answer"))?;
        if !status.is_success() {
            let message = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(300).collect());
            bail!("{message} (the server answered {status})");
        }
        serde_json::from_slice(&bytes)
            .with_context(|| format!("{method} {url}: the answer is not what this version expects"))
    }
}
