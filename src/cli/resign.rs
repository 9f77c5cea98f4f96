//! `marketplace resign --server URL --key KEY [--old-key PUBKEY]`: the publisher's
//! current targets, re-signed as the next role version. Renews the role before it
//! expires, and after `marketplace publisher rotate-key` moves it onto the new keys.

use anyhow::Context;
use clap::Args;

use super::publish::{PublisherOptions, publics, report_retries};
use crate::trust::publisher::plan::Change;
use crate::trust::{PublicKey, SigningKey};

#[derive(Debug, Args)]
pub struct ResignArgs {
    /// A public key (64 hex digits or a .pub file) whose signature on the current role
    /// is trusted too: the previous key after a rotation. Repeat for several.
    #[arg(long = "old-key", value_name = "PUBKEY")]
    old_keys: Vec<String>,
    #[command(flatten)]
    publisher: PublisherOptions,
}

pub fn run(args: ResignArgs) -> anyhow::Result<()> {
    super::publish::runtime()?.block_on(resign(args))
}

async fn resign(a: ResignArgs) -> anyhow::Result<()> {
    let (keys, mut client) = a.publisher.connect().await?;
    let key_refs: Vec<&SigningKey> = keys.iter().collect();
    let mut trusted = publics(&keys);
    for k in &a.old_keys {
        trusted.push(PublicKey::parse(k).with_context(|| format!("--old-key {k}"))?);
    }
    let done = client
        .update(
            "role",
            &trusted,
            &Change::Resign,
            &key_refs,
            a.publisher.expires,
            a.publisher.limits(),
            serde_json::json!({}),
        )
        .await?;
    report_retries(&done);
    let bins = match done.bins {
        0 => String::new(),
        n => format!(" in {n} bins"),
    };
    println!(
        "re-signed {}'s {} target(s){bins} with key(s) {} (role version {})",
        client.publisher(),
        done.targets,
        publics(&keys)
            .iter()
            .map(PublicKey::key_id)
            .collect::<Vec<_>>()
            .join(", "),
        done.answer["role_version"]
    );
    super::publish::warn_expiring(&mut client).await;
    Ok(())
}
