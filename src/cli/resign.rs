//! `marketplace resign --server URL --key KEY [--old-key PUBKEY]`: the publisher's
//! current targets, re-signed as the next role version. Renews the role before it
//! expires, and after `marketplace publisher rotate-key` moves it onto the new keys.

use anyhow::Context;
use clap::Args;

use super::publish::{PublisherOptions, publics, sign_and_post, whoami};
use crate::trust::publish::build_resign;
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
    tokio::runtime::Runtime::new()
        .context("starting the async runtime")?
        .block_on(resign(args))
}

async fn resign(a: ResignArgs) -> anyhow::Result<()> {
    let (keys, http) = a.publisher.connect()?;
    let key_refs: Vec<&SigningKey> = keys.iter().collect();
    let mut trusted = publics(&keys);
    for k in &a.old_keys {
        trusted.push(PublicKey::parse(k).with_context(|| format!("--old-key {k}"))?);
    }
    let publisher = whoami(&http, a.publisher.base(), &a.publisher.token).await?;

    let mut count = 0;
    let done = sign_and_post(
        &a.publisher,
        &http,
        &publisher,
        &trusted,
        "role",
        async |current| {
            let current = current.with_context(|| {
                format!("{publisher} has published nothing; there is no role to re-sign")
            })?;
            count = current.signed.targets.len();
            let role = build_resign(
                &publisher,
                &current,
                &key_refs,
                keys.len() as u64,
                a.publisher.expires,
                crate::clock::now(),
            )
            .await?;
            Ok(serde_json::json!({ "role": String::from_utf8(role).expect("signed JSON is UTF-8") }))
        },
    )
    .await?;
    println!(
        "re-signed {publisher}'s {count} target(s) with key(s) {} (role version {})",
        publics(&keys)
            .iter()
            .map(PublicKey::key_id)
            .collect::<Vec<_>>()
            .join(", "),
        done["role_version"]
    );
    Ok(())
}
