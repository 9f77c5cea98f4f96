//! `marketplace yank PUBLISHER/NAME@VERSION --server URL --key KEY`

use anyhow::Context;
use clap::Args;

use super::publish::{PublisherOptions, publics, report_retries, roles_note};
use crate::definition::parse_version;
use crate::trust::SigningKey;
use crate::trust::publisher::plan::Change;

#[derive(Debug, Args)]
pub struct YankArgs {
    /// What to yank, e.g. acme/my-plugin@1.2.0 (a leading `v` is accepted).
    target: String,
    #[command(flatten)]
    publisher: PublisherOptions,
}

pub fn run(args: YankArgs) -> anyhow::Result<()> {
    super::publish::runtime()?.block_on(yank(args))
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
    let (keys, mut client) = a.publisher.connect().await?;
    if client.publisher() != publisher {
        anyhow::bail!(
            "the token belongs to publisher {}, not {publisher}",
            client.publisher()
        );
    }
    let key_refs: Vec<&SigningKey> = keys.iter().collect();
    let done = client
        .update(
            "yank",
            &publics(&keys),
            &Change::Yank(vec![target.clone()]),
            &key_refs,
            a.publisher.expires,
            a.publisher.limits(),
            serde_json::json!({}),
        )
        .await
        .with_context(|| format!("yanking {target}"))?;
    report_retries(&done);
    println!(
        "yanked {target} (role version {}{})",
        done.answer["role_version"],
        roles_note(&done.answer)
    );
    super::publish::warn_expiring(&mut client).await;
    Ok(())
}
