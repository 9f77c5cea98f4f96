//! `marketplace publisher add|list|rotate-key|new-token|revoke-token`

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::store::Store;
use crate::trust::PublicKey;
use crate::trust::server::publishers::{self, Delegation, new_token, token_hash};

#[derive(Debug, Args)]
pub struct PublisherArgs {
    #[arg(
        long,
        env = "MARKETPLACE_DATA_DIR",
        default_value = "./data",
        global = true
    )]
    data_dir: PathBuf,
    #[command(flatten)]
    database: super::database::DatabaseArgs,
    #[command(flatten)]
    keys: super::storage::KeysDirArgs,
    #[command(subcommand)]
    command: PublisherCommand,
}

#[derive(Debug, Subcommand)]
enum PublisherCommand {
    /// Register a publisher with its public key(s) and print its first API token.
    ///
    /// The publisher signs its own definitions; `NAME/*/*` is delegated to these keys in
    /// the signed index with the publisher's first publish.
    Add {
        name: String,
        #[command(flatten)]
        keys: KeySet,
    },
    /// List publishers with their key ids, threshold and active tokens.
    List,
    /// Replace a publisher's keys (a lost or compromised key, or routine rotation).
    ///
    /// Uploads signed by the old keys are refused at once. The signed index keeps
    /// delegating to the old keys until the publisher re-signs its role with the new ones
    /// (`marketplace resign --old-key OLD`), so clients never see a role that fails to
    /// verify.
    RotateKey {
        name: String,
        #[command(flatten)]
        keys: KeySet,
    },
    /// Set the cosign keys a publisher's images must be signed by (replacing those
    /// registered; none given: no signature required), for a publisher followed from an
    /// upstream too: images mirrored from then on are served only with a signature by one.
    CosignKeys {
        name: String,
        /// A cosign public key (PEM, as `cosign generate-key-pair` writes it); repeat for
        /// several.
        #[arg(long = "cosign-key")]
        cosign_keys: Vec<PathBuf>,
    },
    /// Issue an additional API token for a publisher (printed once).
    NewToken { name: String },
    /// Revoke every API token of a publisher.
    RevokeToken { name: String },
    /// Remove a publisher's delegation from the signed index, without the publisher.
    ///
    /// targets.json is re-signed without it (new snapshot and timestamp): TUF clients stop
    /// loading its roles, so an expired or compromised role affects no one; sync workers
    /// drop its plugins at their next round, the catalog stops listing them, and its
    /// uploads are refused. Installations already running are not touched. Nothing the
    /// publisher signed is changed: `resume` restores the delegation as it was.
    Suspend { name: String },
    /// Restore a suspended publisher's delegation exactly as it was removed.
    Resume { name: String },
}

/// A publisher's public keys and how many of them must sign.
#[derive(Debug, Args)]
struct KeySet {
    /// Ed25519 public key: 64 hex digits or a .pub file; repeat for several.
    #[arg(long = "key", value_name = "PUBKEY", required = true)]
    keys: Vec<String>,
    /// Signatures required on the publisher's metadata; defaults to 1.
    #[arg(long, default_value_t = 1)]
    threshold: u64,
    /// A cosign public key (PEM, as `cosign generate-key-pair` writes `cosign.pub`) the
    /// publisher signs its images with; repeat for several. Once registered, the
    /// publisher's images are served only with a cosign signature by one of them.
    /// Replaces the registered ones when given.
    #[arg(long = "cosign-key", value_name = "PEM_FILE")]
    cosign_keys: Vec<PathBuf>,
}

impl KeySet {
    fn parse(&self) -> anyhow::Result<Vec<PublicKey>> {
        let keys = self
            .keys
            .iter()
            .map(|k| PublicKey::parse(k).with_context(|| format!("--key {k}")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(keys)
    }

    /// The cosign keys as (id, PEM), each checked before anything is stored.
    fn cosign(&self) -> anyhow::Result<Vec<(String, String)>> {
        read_cosign(&self.cosign_keys)
    }

    /// Registers the cosign keys given, if any, and says so.
    async fn store_cosign(
        &self,
        store: &Store,
        name: &str,
        cosign: &[(String, String)],
        now: i64,
    ) -> anyhow::Result<()> {
        if self.cosign_keys.is_empty() {
            return Ok(());
        }
        store.set_cosign_keys(name, cosign, now).await?;
        for (id, _) in cosign {
            println!(
                "  cosign key {id}: {name}'s images are served only when signed by a registered key"
            );
        }
        Ok(())
    }

    /// `T of N key(s)` and one key id per line.
    fn describe(&self, keys: &[PublicKey]) -> String {
        let mut out = format!("{} of {} key(s)", self.threshold, keys.len());
        for k in keys {
            out.push_str(&format!("\n  key id {}", k.key_id()));
        }
        out
    }
}

pub fn run(args: PublisherArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let store = args.database.open(&args.data_dir).await?;
        let keys_dir = args.keys.dir(&args.data_dir);
        let result = command(&store, &keys_dir, args.command).await;
        store.close().await;
        result
    })
}

fn date(ts: i64) -> String {
    jiff::Timestamp::from_second(ts).map_or_else(|_| ts.to_string(), |t| t.to_string())
}

/// The server's online keys (the targets key signs suspensions).
fn online_keys(
    keys_dir: &std::path::Path,
) -> anyhow::Result<crate::trust::server::state::OnlineKeys> {
    crate::trust::server::state::OnlineKeys::load(keys_dir)?.ok_or_else(|| {
        anyhow::anyhow!(
            "no online keys in {}; run `marketplace repo init` first (or give --keys-dir)",
            keys_dir.display()
        )
    })
}

async fn command(
    store: &Store,
    keys_dir: &std::path::Path,
    command: PublisherCommand,
) -> anyhow::Result<()> {
    let now = crate::clock::now();
    match command {
        PublisherCommand::Add { name, keys: set } => {
            let keys = set.parse()?;
            let cosign = set.cosign()?;
            let token = publishers::add(store, &name, &keys, set.threshold, now).await?;
            println!("publisher {name} added: {}", set.describe(&keys));
            set.store_cosign(store, &name, &cosign, now).await?;
            println!("API token (shown once; the server keeps only its hash):");
            println!("{token}");
        }
        PublisherCommand::List => {
            let list = store.publisher_list().await?;
            if list.is_empty() {
                println!("no publishers");
            }
            let targets = crate::trust::server::state::current(store)
                .await?
                .map(|s| s.targets.signed.signed);
            let roles = crate::trust::server::state::publisher_roles(store).await?;
            let earliest = crate::trust::expiry::earliest_by_publisher(&roles);
            for p in list {
                let parsed: Vec<Option<PublicKey>> = p
                    .public_keys
                    .iter()
                    .map(|k| PublicKey::parse(k).ok())
                    .collect();
                let ids: Vec<String> = parsed
                    .iter()
                    .map(|k| k.as_ref().map_or("<invalid key>".into(), PublicKey::key_id))
                    .collect();
                let keys: Vec<PublicKey> = parsed.into_iter().flatten().collect();
                let index = match (
                    p.suspended_at,
                    publishers::delegation(targets.as_ref(), &p.name, &keys, p.threshold),
                ) {
                    (Some(_), _) if p.origin.is_some() => {
                        "SUSPENDED: not delegated (upstream dropped it, or `publisher suspend`)"
                    }
                    (Some(_), _) => "SUSPENDED: not delegated; `publisher resume` restores it",
                    (None, Delegation::Missing) => "not yet in the index",
                    (None, Delegation::Current) => "index up to date",
                    (None, Delegation::Stale) => {
                        "index names old keys until the publisher re-signs"
                    }
                };
                let expiry = match earliest.get(p.name.as_str()) {
                    None => String::new(),
                    Some(r) if r.expired(now) => {
                        format!("\tEXPIRED: role {} since {}", r.role, date(r.expires_at))
                    }
                    Some(r) if r.expiring_soon(now) => format!(
                        "\tEXPIRES SOON: role {} on {} (in {})",
                        r.role,
                        date(r.expires_at),
                        crate::clock::human_duration(r.expires_at - now)
                    ),
                    Some(r) => format!("\troles valid until {}", date(r.expires_at)),
                };
                let origin = p
                    .origin
                    .as_ref()
                    .map_or_else(String::new, |o| format!("\tfollowed from {o}"));
                println!(
                    "{}\tthreshold {}\ttokens {}\tkeys {}\t{index}{expiry}{origin}",
                    p.name,
                    p.threshold,
                    p.active_tokens,
                    ids.join(",")
                );
            }
        }
        PublisherCommand::RotateKey { name, keys: set } => {
            local_only(store, &name).await?;
            let keys = set.parse()?;
            let cosign = set.cosign()?;
            let delegated = publishers::rotate(store, &name, &keys, set.threshold).await?;
            println!("publisher {name} now signs with {}", set.describe(&keys));
            set.store_cosign(store, &name, &cosign, now).await?;
            if delegated {
                println!(
                    "uploads signed by the old keys are refused from now on; the signed index \
                     names the new keys once {name} runs `marketplace resign --key NEW_KEY \
                     --old-key OLD_PUBKEY`"
                );
            } else {
                println!("{name} has published nothing yet; its first publish uses the new keys");
            }
        }
        PublisherCommand::CosignKeys { name, cosign_keys } => {
            let cosign = read_cosign(&cosign_keys)?;
            store.set_cosign_keys(&name, &cosign, now).await?;
            if cosign.is_empty() {
                println!("{name}'s images no longer need a cosign signature");
            }
            for (id, _) in &cosign {
                println!(
                    "cosign key {id}: {name}'s images are served only when signed by a registered key"
                );
            }
        }
        PublisherCommand::NewToken { name } => {
            local_only(store, &name).await?;
            let token = new_token();
            store.add_token(&name, &token_hash(&token), now).await?;
            println!("API token for {name} (shown once):");
            println!("{token}");
        }
        PublisherCommand::RevokeToken { name } => {
            let n = store.revoke_tokens(&name, now).await?;
            println!("revoked {n} token(s) of {name}");
        }
        PublisherCommand::Suspend { name } => {
            let keys = online_keys(keys_dir)?;
            let v = crate::trust::server::suspend::suspend(store, &keys, &name, now).await?;
            println!(
                "publisher {name} suspended: targets v{v} no longer delegates to it; workers drop its plugins at their next round"
            );
        }
        PublisherCommand::Resume { name } => {
            let keys = online_keys(keys_dir)?;
            let v = crate::trust::server::suspend::resume(store, &keys, &name, now).await?;
            println!("publisher {name} resumed: targets v{v} delegates to it again");
        }
    }
    Ok(())
}

/// Cosign public keys (id, PEM) from PEM files, each checked.
fn read_cosign(paths: &[PathBuf]) -> anyhow::Result<Vec<(String, String)>> {
    paths
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--cosign-key {}", path.display()))?;
            let key = crate::mirror::signature::CosignKey::parse(&text)
                .map_err(|why| anyhow::anyhow!("--cosign-key {}: {why}", path.display()))?;
            Ok((key.id, key.pem))
        })
        .collect()
}

/// Refuses to change the keys or tokens of a publisher followed from an upstream: they
/// are the upstream's, and the next round would bring the upstream's keys back.
async fn local_only(store: &Store, name: &str) -> anyhow::Result<()> {
    if let Some(origin) = store.publisher(name).await?.and_then(|p| p.origin) {
        anyhow::bail!(
            "publisher {name} is followed from the upstream marketplace {origin}: its keys and tokens are the upstream's (it publishes there)"
        );
    }
    Ok(())
}
