//! `marketplace yank PUBLISHER/NAME@VERSION --server URL --key KEY`

use anyhow::{Context, bail};
use clap::Args;

use super::publish::{PublisherOptions, publics, sign_and_post};
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
    let trusted = publics(&keys);
    let done = sign_and_post(
        &a.publisher,
        &http,
        publisher,
        &trusted,
        "yank",
        async |current| {
            let Some(current) = current else {
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
            Ok(serde_json::json!({ "role": String::from_utf8(role).expect("signed JSON is UTF-8") }))
        },
    )
    .await?;
    println!("yanked {target} (role version {})", done["role_version"]);
    Ok(())
}
