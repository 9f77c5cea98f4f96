//! `marketplace yank PUBLISHER/NAME@VERSION --server URL --key KEY`

use anyhow::{Context, bail};
use clap::Args;

use super::publish::{ATTEMPTS, PublisherOptions, checked, current_role};
use crate::definition::parse_version;
use crate::trust::SigningKey;
use crate::trust::publish::build_yank;

#[derive(Debug, Args)]
pub struct YankArgs {
    /// What to yank, e.g. acme/my-plugin@1.2.0 (a leading `v` is accepted).
    target: String,
    #[command(flatten)]
    publisher: PublisherOptions,
}

pub fn run(args: YankArgs) -> anyhow::Result<()> {
    tokio::runtime::Runtime::new()
        .context("starting the async runtime")?
        .block_on(yank(args))
}

async fn yank(a: YankArgs) -> anyhow::Result<()> {
    let (path, version) = a
        .target
        .split_once('@')
        .context("write the target as PUBLISHER/NAME@VERSION")?;
    let (publisher, name) = path
        .split_once('/')
        .context("write the target as PUBLISHER/NAME@VERSION")?;
    let version =
        parse_version(version).with_context(|| format!("`{version}` is not a semantic version"))?;
    let target = format!("{publisher}/{name}/{version}.yaml");
    let (keys, http) = a.publisher.connect()?;
    let key_refs: Vec<&SigningKey> = keys.iter().collect();
    let base = a.publisher.base();

    for attempt in 1..=ATTEMPTS {
        let Some(current) = current_role(&http, base, publisher, &keys).await? else {
            bail!("{publisher} has published nothing");
        };
        let role = build_yank(
            publisher,
            &current,
            std::slice::from_ref(&target),
            &key_refs,
            keys.len() as u64,
            a.publisher.expires,
            crate::clock::now(),
        )
        .await
        .with_context(|| format!("{target} is not in {publisher}'s published metadata"))?;
        let resp = http
            .post(format!("{base}/api/v1/publishers/{publisher}/yank"))
            .bearer_auth(&a.publisher.token)
            .json(&serde_json::json!({ "role": String::from_utf8(role).expect("signed JSON is UTF-8") }))
            .send()
            .await?;
        if resp.status() == reqwest::StatusCode::CONFLICT && attempt < ATTEMPTS {
            eprintln!(
                "the index changed while signing (attempt {attempt}); signing again on fresh metadata"
            );
            continue;
        }
        let done = checked(resp).await?;
        println!("yanked {target} (role version {})", done["role_version"]);
        return Ok(());
    }
    unreachable!("the last attempt returns")
}
