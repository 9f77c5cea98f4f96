//! `marketplace publish FILE... --server URL --key KEY`

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use tough::schema::{Signed, Targets};

use crate::definition::Definition;
use crate::trust::publish::{build_role_adding, delegations_for};
use crate::trust::{PublicKey, SigningKey};

const ATTEMPTS: usize = 3;

#[derive(Debug, Args)]
pub struct PublishArgs {
    /// The definition file(s) to publish; several are published as one role version
    /// (all or none).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    #[command(flatten)]
    publisher: PublisherOptions,
}

/// What every publisher command needs: where, who (token) and the signing keys.
#[derive(Debug, Args)]
pub(super) struct PublisherOptions {
    /// Marketplace base URL, e.g. https://plugins.example.com
    #[arg(long, env = "MARKETPLACE_SERVER")]
    pub server: String,
    /// The publisher's private key; repeat when the threshold needs several.
    #[arg(long = "key", value_name = "PUBLISHER_KEY", required = true)]
    pub keys: Vec<PathBuf>,
    /// API token of the publisher.
    #[arg(long, env = "MARKETPLACE_TOKEN", hide_env_values = true)]
    pub token: String,
    /// Lifetime of the signed role metadata.
    #[arg(long, default_value = "365d", value_parser = super::repo::parse_lifetime)]
    pub expires: Duration,
}

impl PublisherOptions {
    /// The signing keys and an HTTP client for the marketplace.
    pub(super) fn connect(&self) -> anyhow::Result<(Vec<SigningKey>, reqwest::Client)> {
        let keys = self
            .keys
            .iter()
            .map(|k| SigningKey::load(k))
            .collect::<Result<Vec<_>, _>>()?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?;
        Ok((keys, http))
    }

    pub(super) fn base(&self) -> &str {
        self.server.trim_end_matches('/')
    }
}

pub fn run(args: PublishArgs) -> anyhow::Result<()> {
    tokio::runtime::Runtime::new()
        .context("starting the async runtime")?
        .block_on(publish(args))
}

async fn publish(a: PublishArgs) -> anyhow::Result<()> {
    let mut defs = Vec::new();
    let mut problems = Vec::new();
    for file in &a.files {
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        match Definition::parse(&bytes) {
            Ok(def) => defs.push(def),
            Err(e) => problems.extend(e.problems.iter().map(|p| format!("{}:{p}", file.display()))),
        }
    }
    if !problems.is_empty() {
        bail!(
            "not publishing: invalid definition(s):\n{}",
            problems.join("\n")
        );
    }
    let texts = defs
        .iter()
        .zip(&a.files)
        .map(|(d, f)| {
            String::from_utf8(d.bytes.clone())
                .with_context(|| format!("{} is not UTF-8", f.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (keys, http) = a.publisher.connect()?;
    let key_refs: Vec<&SigningKey> = keys.iter().collect();
    let publisher = whoami(&http, a.publisher.base(), &a.publisher.token).await?;
    let adding: Vec<(&Definition, bool)> = defs.iter().map(|d| (d, false)).collect();

    let trusted = publics(&keys);
    let done = sign_and_post(
        &a.publisher,
        &http,
        &publisher,
        &trusted,
        "definitions",
        async |current| {
            let role = build_role_adding(
                &publisher,
                current.as_ref(),
                &adding,
                &key_refs,
                keys.len() as u64,
                a.publisher.expires,
                crate::clock::now(),
            )
            .await?;
            let role = String::from_utf8(role).expect("signed JSON is UTF-8");
            Ok(match &texts[..] {
                [one] => serde_json::json!({ "definition": one, "role": role }),
                many => serde_json::json!({ "definitions": many, "role": role }),
            })
        },
    )
    .await?;
    for def in &defs {
        println!(
            "published {publisher}/{} {} ({}) as role version {}",
            def.name(),
            def.version_text(),
            def.hash,
            done["role_version"]
        );
    }
    Ok(())
}

/// Fetches the publisher's current role (trusted only with a signature by `trusted`),
/// lets `sign` turn it into the request body, and POSTs that to
/// `/api/v1/publishers/P/{path}`. On 409 (another update landed first) it signs again on
/// fresh metadata, up to [`ATTEMPTS`] times. Returns the server's JSON answer.
pub(super) async fn sign_and_post(
    opts: &PublisherOptions,
    http: &reqwest::Client,
    publisher: &str,
    trusted: &[PublicKey],
    path: &str,
    mut sign: impl AsyncFnMut(Option<Signed<Targets>>) -> anyhow::Result<serde_json::Value>,
) -> anyhow::Result<serde_json::Value> {
    let base = opts.base();
    for attempt in 1..=ATTEMPTS {
        let current = current_role(http, base, publisher, trusted).await?;
        let body = sign(current).await?;
        let resp = http
            .post(format!("{base}/api/v1/publishers/{publisher}/{path}"))
            .bearer_auth(&opts.token)
            .json(&body)
            .send()
            .await?;
        if resp.status() == reqwest::StatusCode::CONFLICT && attempt < ATTEMPTS {
            eprintln!(
                "the index changed while signing (attempt {attempt}); signing again on fresh metadata"
            );
            continue;
        }
        return checked(resp).await;
    }
    unreachable!("the last attempt returns")
}

/// The publisher's current role, accepted only if it carries a signature by one of
/// `trusted` (the publisher's own keys): a server must not be able to slip targets into what the publisher signs.
pub(super) async fn current_role(
    http: &reqwest::Client,
    base: &str,
    publisher: &str,
    trusted: &[PublicKey],
) -> anyhow::Result<Option<Signed<Targets>>> {
    let resp = http
        .get(format!("{base}/api/v1/publishers/{publisher}/role"))
        .send()
        .await?;
    if resp.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    let resp = resp.error_for_status()?;
    let role: Signed<Targets> = serde_json::from_slice(&resp.bytes().await?)
        .context("the server's role metadata is not TUF targets metadata")?;
    delegations_for(publisher, trusted, 1)?
        .verify_role(&role, publisher)
        .map_err(|e| {
            anyhow::anyhow!(
                "refusing to build on role metadata that none of these keys signed: {e} \
                 (after `marketplace publisher rotate-key`, sign with the new key; a role \
                 still signed by the old one moves with `marketplace resign --old-key OLD_PUBKEY`)"
            )
        })?;
    Ok(Some(role))
}

/// The publisher a token belongs to.
pub(super) async fn whoami(
    http: &reqwest::Client,
    base: &str,
    token: &str,
) -> anyhow::Result<String> {
    let who = checked(
        http.get(format!("{base}/api/v1/publishers/me"))
            .bearer_auth(token)
            .send()
            .await?,
    )
    .await?;
    Ok(who["publisher"]
        .as_str()
        .context("the server did not say which publisher the token belongs to")?
        .to_owned())
}

pub(super) fn publics(keys: &[SigningKey]) -> Vec<PublicKey> {
    keys.iter().map(SigningKey::public).collect()
}

/// The JSON body of a successful response, or the server's error message.
pub(super) async fn checked(resp: reqwest::Response) -> anyhow::Result<serde_json::Value> {
    let status = resp.status();
    let body: serde_json::Value = resp.json().await.unwrap_or(serde_json::Value::Null);
    if !status.is_success() {
        let msg = body["error"]["message"].as_str().unwrap_or("no details");
        bail!("the server refused ({status}): {msg}");
    }
    Ok(body)
}
