//! `marketplace publisher add|list|rotate-key|cosign-keys|new-token|revoke-token|suspend|resume`,
//! on the data directory or (`--server`) through the admin API: the same `admin`
//! operations and answers either way.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::admin::Operator;
use crate::admin::publishers::{self as admin, InIndex, Keys, NewPublisher, PublisherStatus};
use crate::store::Store;
use crate::trust::PublicKey;

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
    #[command(flatten)]
    server: super::remote::ServerArgs,
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
    /// The keys as the admin operations take them: hex, each file read here; the
    /// cosign PEM files read here too (`None` when none is given: those registered stay).
    fn keys(&self) -> anyhow::Result<Keys> {
        let public_keys = self
            .keys
            .iter()
            .map(|k| {
                PublicKey::parse(k)
                    .map(|k| k.hex())
                    .with_context(|| format!("--key {k}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let cosign_keys = if self.cosign_keys.is_empty() {
            None
        } else {
            Some(read_pems(&self.cosign_keys)?)
        };
        Ok(Keys {
            public_keys,
            threshold: self.threshold,
            cosign_keys,
        })
    }
}

/// `T of N key(s)` and one key id per line.
fn describe(threshold: u64, key_ids: &[String]) -> String {
    let mut out = format!("{threshold} of {} key(s)", key_ids.len());
    for id in key_ids {
        out.push_str(&format!("\n  key id {id}"));
    }
    out
}

fn print_cosign(name: &str, ids: &[String], indent: &str) {
    for id in ids {
        println!(
            "{indent}cosign key {id}: {name}'s images are served only when signed by a registered key"
        );
    }
}

pub fn run(args: PublisherArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        if let Some(remote) = args.server.remote()? {
            return command(&Target::Remote(remote), args.command).await;
        }
        let store = args.database.open(&args.data_dir).await?;
        let keys_dir = args.keys.dir(&args.data_dir);
        let result = command(
            &Target::Local {
                store: &store,
                keys_dir: &keys_dir,
            },
            args.command,
        )
        .await;
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

/// Where a command acts: on the database (and keys) directly, or through a server's
/// admin API.
enum Target<'a> {
    Local {
        store: &'a Store,
        keys_dir: &'a std::path::Path,
    },
    Remote(super::remote::Remote),
}

/// A publisher's path in the admin API.
fn at(name: &str, what: &str) -> String {
    format!("publishers/{name}/{what}")
}

async fn command(target: &Target<'_>, command: PublisherCommand) -> anyhow::Result<()> {
    use reqwest::Method;
    let now = crate::clock::now();
    let who = Operator::local();
    match command {
        PublisherCommand::Add { name, keys: set } => {
            let new = NewPublisher {
                name,
                keys: set.keys()?,
            };
            let added = match target {
                Target::Local { store, .. } => admin::add(store, &who, &new, now).await?,
                Target::Remote(r) => r.call(Method::POST, "publishers", Some(&new)).await?,
            };
            println!(
                "publisher {} added: {}",
                added.name,
                describe(added.threshold, &added.key_ids)
            );
            print_cosign(&added.name, &added.cosign_key_ids, "  ");
            println!("API token (shown once; the server keeps only its hash):");
            println!("{}", added.token);
        }
        PublisherCommand::List => {
            let list = match target {
                Target::Local { store, .. } => admin::list(store, now).await?,
                Target::Remote(r) => r.get::<Items<PublisherStatus>>("publishers").await?.items,
            };
            if list.is_empty() {
                println!("no publishers");
            }
            for p in list {
                print_listed(&p, now);
            }
        }
        PublisherCommand::RotateKey { name, keys: set } => {
            let keys = set.keys()?;
            let done = match target {
                Target::Local { store, .. } => {
                    admin::rotate_key(store, &who, &name, &keys, now).await?
                }
                Target::Remote(r) => r.call(Method::PUT, &at(&name, "keys"), Some(&keys)).await?,
            };
            println!(
                "publisher {name} now signs with {}",
                describe(done.threshold, &done.key_ids)
            );
            print_cosign(&name, &done.cosign_key_ids, "  ");
            if done.delegated {
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
            let pems = read_pems(&cosign_keys)?;
            let done = match target {
                Target::Local { store, .. } => {
                    admin::set_cosign_keys(store, &who, &name, &pems, now).await?
                }
                Target::Remote(r) => {
                    let body = serde_json::json!({ "cosign_keys": pems });
                    r.call(Method::PUT, &at(&name, "cosign-keys"), Some(&body))
                        .await?
                }
            };
            if done.cosign_key_ids.is_empty() {
                println!("{name}'s images no longer need a cosign signature");
            }
            print_cosign(&name, &done.cosign_key_ids, "");
        }
        PublisherCommand::NewToken { name } => {
            let done = match target {
                Target::Local { store, .. } => {
                    admin::new_token_for(store, &who, &name, now).await?
                }
                Target::Remote(r) => {
                    r.call::<(), _>(Method::POST, &at(&name, "tokens"), None)
                        .await?
                }
            };
            println!("API token for {name} (shown once):");
            println!("{}", done.token);
        }
        PublisherCommand::RevokeToken { name } => {
            let done = match target {
                Target::Local { store, .. } => {
                    admin::revoke_tokens(store, &who, &name, now).await?
                }
                Target::Remote(r) => {
                    r.call::<(), _>(Method::DELETE, &at(&name, "tokens"), None)
                        .await?
                }
            };
            println!("revoked {} token(s) of {name}", done.revoked);
        }
        PublisherCommand::Suspend { name } => {
            let v = suspension(target, &who, &name, true, now).await?;
            println!(
                "publisher {name} suspended: targets v{v} no longer delegates to it; workers drop its plugins at their next round"
            );
        }
        PublisherCommand::Resume { name } => {
            let v = suspension(target, &who, &name, false, now).await?;
            println!("publisher {name} resumed: targets v{v} delegates to it again");
        }
    }
    Ok(())
}

/// Suspends or resumes `name`; the `targets.json` version that says so.
async fn suspension(
    target: &Target<'_>,
    who: &Operator,
    name: &str,
    suspend: bool,
    now: i64,
) -> anyhow::Result<u64> {
    let done: admin::Suspension = match target {
        Target::Local { store, keys_dir } => {
            let keys = online_keys(keys_dir)?;
            admin::set_suspended(store, &keys, who, name, suspend, now).await?
        }
        Target::Remote(r) => {
            let what = if suspend { "suspend" } else { "resume" };
            r.call::<(), _>(reqwest::Method::POST, &at(name, what), None)
                .await?
        }
    };
    Ok(done.targets_version)
}

/// One line of `publisher list`.
fn print_listed(p: &PublisherStatus, now: i64) {
    let index = match (p.index, &p.origin) {
        (InIndex::Suspended, Some(_)) => {
            "SUSPENDED: not delegated (upstream dropped it, or `publisher suspend`)"
        }
        (InIndex::Suspended, None) => "SUSPENDED: not delegated; `publisher resume` restores it",
        (InIndex::Missing, _) => "not yet in the index",
        (InIndex::Current, _) => "index up to date",
        (InIndex::Stale, _) => "index names old keys until the publisher re-signs",
    };
    let expiry = match &p.earliest_role {
        None => String::new(),
        Some(r) if r.expired => {
            format!("\tEXPIRED: role {} since {}", r.role, date(r.expires_at))
        }
        Some(r) if r.expiring_soon => format!(
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
        p.key_ids.join(",")
    );
}

#[derive(serde::Deserialize)]
struct Items<T> {
    items: Vec<T>,
}

/// Cosign public keys (PEM text) from files, as the admin operations take them.
fn read_pems(paths: &[PathBuf]) -> anyhow::Result<Vec<String>> {
    paths
        .iter()
        .map(|path| {
            std::fs::read_to_string(path)
                .with_context(|| format!("--cosign-key {}", path.display()))
        })
        .collect()
}
