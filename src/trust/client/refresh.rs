//! The TUF client workflow (specification §5, python-tuf's `TrustedMetadataSet` as the
//! reference): root chain, timestamp, snapshot, top-level targets, then each publisher's
//! delegated roles, each publisher on its own.
//!
//! A failure up to the top-level targets fails the refresh: nothing below can be trusted.
//! A publisher's role or bin that is missing, oversized, malformed, wrongly signed, of
//! the wrong version or expired fails that publisher alone ([`Publisher::outcome`]); its
//! caller keeps that publisher's last good state. A network failure or timeout on any
//! file fails the refresh, since it says nothing about the publisher.

use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use tough::schema::{
    Delegations, Metafile, Role, RoleType, Root, Signed, Snapshot, Target, Targets, Timestamp,
};
use url::Url;

use super::{ClientError, Failure, FetchError, Fetcher, Limits, MAX_RESPONSE_BYTES};
use crate::trust::envelope::{self, EnvelopeError};

/// How many new root versions one refresh follows (python-tuf's default).
const MAX_ROOT_ROTATIONS: u64 = 256;
/// Publishers' roles fetched at once.
pub(super) const PARALLEL_ROLES: usize = 16;

/// What the client already trusts: the last verified root, timestamp and snapshot, as
/// the bytes it verified (only the root on a first refresh).
#[derive(Debug, Clone, Copy)]
pub struct TrustedState<'a> {
    pub root: &'a [u8],
    pub timestamp: Option<&'a [u8]>,
    pub snapshot: Option<&'a [u8]>,
}

/// A verified metadata file: its typed fields and its exact bytes.
#[derive(Debug, Clone)]
pub struct Verified<T> {
    pub typed: Signed<T>,
    pub bytes: Vec<u8>,
}

/// A marketplace's verified index.
#[derive(Debug)]
pub struct Index {
    pub root: Verified<Root>,
    pub timestamp: Verified<Timestamp>,
    pub snapshot: Verified<Snapshot>,
    pub targets: Verified<Targets>,
    /// Every publisher the targets role delegates to, in its order.
    pub publishers: Vec<Publisher>,
}

#[derive(Debug)]
pub struct Publisher {
    pub name: String,
    pub outcome: Result<PublisherTargets, ClientError>,
}

/// A publisher's verified targets.
#[derive(Debug, Default)]
pub struct PublisherTargets {
    pub listed: Vec<Listed>,
    /// The earliest expiry among its roles, and which role that is.
    pub expires_at: i64,
    pub expires_role: String,
    /// Its role and bins as served, top role first: what a marketplace following this
    /// one serves byte for byte.
    pub roles: Vec<RoleFile>,
}

/// A verified delegated role file: its name, the version the snapshot lists, its bytes.
#[derive(Debug, Clone)]
pub struct RoleFile {
    pub name: String,
    pub version: u64,
    pub bytes: Vec<u8>,
}

/// One target a verified role lists.
#[derive(Debug, Clone)]
pub struct Listed {
    /// `PUBLISHER/NAME/VERSION.yaml`.
    pub name: String,
    pub target: Target,
    /// Key ids (hex, sorted, space-separated) that validly signed the role listing it.
    pub signers: String,
}

/// Where a target's bytes are, as the TUF specification lays out consistent snapshots
/// (`DIR/HASH.FILE`): what python-tuf requests and what a static copy of `/tuf/` holds.
pub fn target_url(base: &Url, consistent: bool, name: &str, target: &Target) -> Option<Url> {
    let path = if consistent {
        let hash = hex::encode(target.hashes.sha256.as_ref());
        match name.rsplit_once('/') {
            Some((dir, file)) => format!("tuf/targets/{dir}/{hash}.{file}"),
            None => format!("tuf/targets/{hash}.{name}"),
        }
    } else {
        format!("tuf/targets/{name}")
    };
    base.join(&path).ok()
}

/// Refreshes the index at `base` (which ends in `/`) from `trusted`.
pub async fn refresh(
    fetch: &Fetcher,
    base: &Url,
    trusted: TrustedState<'_>,
    limits: &Limits,
    now: i64,
) -> Result<Index, ClientError> {
    let meta = base
        .join("tuf/metadata/")
        .map_err(|e| ClientError::new(Failure::InvalidMetadata, format!("{base}: {e}")))?;
    let c = Client {
        fetch,
        meta,
        limits,
        now,
    };
    let trusted_root = verified::<Root>("trusted root", trusted.root)?;
    trusted_root
        .verify_by_root(&trusted_root.typed.signed, RoleType::Root)
        .map_err(|e| bad_signature(&e))?;
    let original_roles = trusted_root.typed.signed.roles.clone();
    let root = c.update_root(trusted_root).await?;
    // TUF 5.3.11: after a rotation of the timestamp or snapshot keys, the old timestamp
    // and snapshot no longer prove anything (they may be what a fast-forward attack left).
    let rotated = [RoleType::Timestamp, RoleType::Snapshot]
        .iter()
        .any(|r| original_roles.get(r) != root.typed.signed.roles.get(r));
    let (old_timestamp, old_snapshot) = if rotated {
        (None, None)
    } else {
        (
            trusted
                .timestamp
                .map(|b| verified::<Timestamp>("trusted timestamp", b))
                .transpose()?,
            trusted
                .snapshot
                .map(|b| verified::<Snapshot>("trusted snapshot", b))
                .transpose()?,
        )
    };
    let root_signed = &root.typed.signed;
    c.unexpired("root", root_signed.expires)?;
    let timestamp = c.update_timestamp(root_signed, old_timestamp).await?;
    let snapshot = c
        .update_snapshot(root_signed, &timestamp.typed.signed, old_snapshot.as_ref())
        .await?;
    let consistent = root_signed.consistent_snapshot;
    let snap = &snapshot.typed.signed;
    let targets = c.top_targets(root_signed, snap, consistent).await?;
    let delegations = targets
        .typed
        .signed
        .delegations
        .clone()
        .unwrap_or_else(Delegations::new);
    let mut names = std::collections::HashSet::new();
    if let Some(twice) = delegations.roles.iter().find(|r| !names.insert(&r.name)) {
        // python-tuf refuses such targets metadata outright.
        return Err(ClientError::new(
            Failure::InvalidMetadata,
            format!("targets delegates to {} twice", twice.name),
        ));
    }
    // The futures are built first: a stream mapping borrowed roles to futures would not
    // be `Send` for every lifetime, which spawning the round requires.
    let pending: Vec<_> = delegations
        .roles
        .iter()
        .map(|role| c.publisher(role, &delegations, snap, consistent))
        .collect();
    let publishers: Vec<Result<Publisher, ClientError>> = futures_util::stream::iter(pending)
        .buffered(PARALLEL_ROLES)
        .collect()
        .await;
    Ok(Index {
        publishers: publishers.into_iter().collect::<Result<_, _>>()?,
        root: Verified {
            bytes: root.bytes,
            typed: root.envelope.typed,
        },
        timestamp,
        snapshot,
        targets,
    })
}

/// An envelope with the bytes it came from.
pub(super) struct Parsed<T> {
    pub(super) envelope: envelope::Envelope<T>,
    bytes: Vec<u8>,
}

impl<T> std::ops::Deref for Parsed<T> {
    type Target = envelope::Envelope<T>;
    fn deref(&self) -> &Self::Target {
        &self.envelope
    }
}

fn verified<T: Role + DeserializeOwned>(
    what: &str,
    bytes: &[u8],
) -> Result<Parsed<T>, ClientError> {
    Ok(Parsed {
        envelope: envelope::parse::<T>(what, bytes).map_err(|e| invalid(&e))?,
        bytes: bytes.to_vec(),
    })
}

fn invalid(e: &EnvelopeError) -> ClientError {
    ClientError::new(Failure::InvalidMetadata, e.to_string())
}

pub(super) fn bad_signature(e: &EnvelopeError) -> ClientError {
    ClientError::new(Failure::BadSignature, e.to_string())
}

pub(super) struct Client<'a> {
    fetch: &'a Fetcher,
    meta: Url,
    pub(super) limits: &'a Limits,
    now: i64,
}

/// A publisher-level verdict inside a refresh-level result: the outer error is the
/// network's (it fails the refresh), the inner one the publisher's.
pub(super) type Judged<T> = Result<Result<T, ClientError>, ClientError>;

impl Client<'_> {
    /// GETs `file` under the metadata URL: `None` when the server has no such file.
    async fn get(&self, file: &str, max: usize) -> Result<Option<Vec<u8>>, ClientError> {
        let url = self
            .meta
            .join(file)
            .map_err(|e| ClientError::new(Failure::InvalidMetadata, format!("{file}: {e}")))?;
        match self.fetch.get(url, max).await {
            Ok(found) => Ok(found),
            Err(e @ FetchError::TooLarge(_)) => Err(ClientError::new(
                Failure::InvalidMetadata,
                format!("{file}: {e}"),
            )),
            Err(e @ FetchError::Timeout(_)) => {
                Err(ClientError::new(Failure::Timeout, format!("{file}: {e}")))
            }
            Err(FetchError::Failed(e)) => Err(ClientError::new(
                Failure::Unreachable,
                format!("{file}: {e}"),
            )),
        }
    }

    pub(super) fn unexpired(
        &self,
        role: &str,
        expires: jiff::Timestamp,
    ) -> Result<(), ClientError> {
        if expires.as_second() <= self.now {
            return Err(ClientError::new(
                Failure::Expired,
                format!("{role} metadata expired at {expires}"),
            ));
        }
        Ok(())
    }

    /// TUF 5.3: follows `N+1.root.json` while the server has it, each new root signed
    /// by a threshold of the previous root's keys and of its own.
    async fn update_root(&self, mut root: Parsed<Root>) -> Result<Parsed<Root>, ClientError> {
        for _ in 0..MAX_ROOT_ROTATIONS {
            let next = root.typed.signed.version.get() + 1;
            let file = format!("{next}.root.json");
            let Some(bytes) = self.get(&file, self.limits.root).await? else {
                return Ok(root);
            };
            let new = verified::<Root>(&file, &bytes)?;
            new.verify_by_root(&root.typed.signed, RoleType::Root)
                .map_err(|e| bad_signature(&e))?;
            new.verify_by_root(&new.typed.signed, RoleType::Root)
                .map_err(|e| bad_signature(&e))?;
            let got = new.typed.signed.version.get();
            if got != next {
                return Err(ClientError::new(
                    Failure::InvalidMetadata,
                    format!("{file} says it is version {got}"),
                ));
            }
            root = new;
        }
        Err(ClientError::new(
            Failure::InvalidMetadata,
            format!("more than {MAX_ROOT_ROTATIONS} new root versions at once"),
        ))
    }

    /// TUF 5.4. An unchanged version keeps the trusted timestamp, as python-tuf does.
    async fn update_timestamp(
        &self,
        root: &Root,
        old: Option<Parsed<Timestamp>>,
    ) -> Result<Verified<Timestamp>, ClientError> {
        let bytes = self
            .get("timestamp.json", self.limits.timestamp)
            .await?
            .ok_or_else(|| {
                ClientError::new(Failure::InvalidMetadata, "the server has no timestamp.json")
            })?;
        let new = verified::<Timestamp>("timestamp", &bytes)?;
        new.verify_by_root(root, RoleType::Timestamp)
            .map_err(|e| bad_signature(&e))?;
        let snapshot_version = |t: &Timestamp| t.meta.get("snapshot.json").map(|m| m.version.get());
        let chosen = match old {
            Some(old) => {
                let (o, n) = (&old.typed.signed, &new.typed.signed);
                if n.version < o.version {
                    return Err(ClientError::new(
                        Failure::RolledBack,
                        format!(
                            "timestamp v{} is older than the trusted v{}",
                            n.version, o.version
                        ),
                    ));
                }
                if snapshot_version(n) < snapshot_version(o) {
                    return Err(ClientError::new(
                        Failure::RolledBack,
                        format!(
                            "timestamp v{} names snapshot v{}, older than the trusted v{}",
                            n.version,
                            snapshot_version(n).unwrap_or(0),
                            snapshot_version(o).unwrap_or(0)
                        ),
                    ));
                }
                if n.version == o.version { old } else { new }
            }
            None => new,
        };
        self.unexpired("timestamp", chosen.typed.signed.expires)?;
        Ok(Verified {
            bytes: chosen.bytes,
            typed: chosen.envelope.typed,
        })
    }

    /// TUF 5.5: the snapshot the timestamp names, by hash and length, never rolling back
    /// a role the trusted snapshot lists.
    async fn update_snapshot(
        &self,
        root: &Root,
        timestamp: &Timestamp,
        old: Option<&Parsed<Snapshot>>,
    ) -> Result<Verified<Snapshot>, ClientError> {
        let meta = timestamp.meta.get("snapshot.json").ok_or_else(|| {
            ClientError::new(Failure::InvalidMetadata, "timestamp names no snapshot.json")
        })?;
        let file = if root.consistent_snapshot {
            format!("{}.snapshot.json", meta.version)
        } else {
            "snapshot.json".to_owned()
        };
        let bytes = self
            .get(&file, cap(meta, self.limits.snapshot))
            .await?
            .ok_or_else(|| {
                ClientError::new(Failure::InvalidMetadata, format!("{file} is missing"))
            })?;
        matches_meta(&file, &bytes, meta)?;
        let new = verified::<Snapshot>("snapshot", &bytes)?;
        new.verify_by_root(root, RoleType::Snapshot)
            .map_err(|e| bad_signature(&e))?;
        let snap = &new.typed.signed;
        if snap.version != meta.version {
            return Err(ClientError::new(
                Failure::InvalidMetadata,
                format!("{file} says it is version {}", snap.version),
            ));
        }
        if let Some(old) = old {
            for (role, m) in &old.typed.signed.meta {
                match snap.meta.get(role) {
                    Some(n) if n.version >= m.version => {}
                    Some(n) => {
                        return Err(ClientError::new(
                            Failure::RolledBack,
                            format!(
                                "snapshot v{} lists {role} v{}, older than the trusted v{}",
                                snap.version, n.version, m.version
                            ),
                        ));
                    }
                    None => {
                        return Err(ClientError::new(
                            Failure::RolledBack,
                            format!("snapshot v{} no longer lists {role}", snap.version),
                        ));
                    }
                }
            }
        }
        self.unexpired("snapshot", snap.expires)?;
        Ok(Verified {
            bytes: new.bytes,
            typed: new.envelope.typed,
        })
    }

    /// Fetches the role `name` at the version the snapshot lists, checked against the
    /// snapshot's hash and length. Outer error: the network's; inner: the file's.
    pub(super) async fn fetch_listed<T: Role + DeserializeOwned>(
        &self,
        name: &str,
        snapshot: &Snapshot,
        consistent: bool,
        default_cap: usize,
    ) -> Judged<(Parsed<T>, Vec<u8>, u64)> {
        let Some(meta) = snapshot.meta.get(&format!("{name}.json")) else {
            return Ok(Err(ClientError::new(
                Failure::InvalidMetadata,
                format!("the snapshot does not list {name}"),
            )));
        };
        let file = if consistent {
            format!("{}.{name}.json", meta.version)
        } else {
            format!("{name}.json")
        };
        let bytes = match self.get(&file, cap(meta, default_cap)).await {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                return Ok(Err(ClientError::new(
                    Failure::InvalidMetadata,
                    format!("{file} is listed in the snapshot but missing"),
                )));
            }
            Err(e) if e.kind == Failure::InvalidMetadata => return Ok(Err(e)),
            Err(e) => return Err(e),
        };
        let judged = matches_meta(&file, &bytes, meta)
            .and_then(|()| verified::<T>(name, &bytes))
            .map(|parsed| {
                let bytes = parsed.bytes.clone();
                (parsed, bytes, meta.version.get())
            });
        Ok(judged)
    }

    /// TUF 5.6 for the top-level targets role: root's keys, the snapshot's version,
    /// unexpired, and no targets of its own (every target belongs to a publisher).
    async fn top_targets(
        &self,
        root: &Root,
        snapshot: &Snapshot,
        consistent: bool,
    ) -> Result<Verified<Targets>, ClientError> {
        let (parsed, bytes, version) = self
            .fetch_listed::<Targets>("targets", snapshot, consistent, self.limits.targets)
            .await??;
        parsed
            .verify_by_root(root, RoleType::Targets)
            .map_err(|e| bad_signature(&e))?;
        let targets = parsed.envelope.typed;
        if targets.signed.version.get() != version {
            return Err(ClientError::new(
                Failure::InvalidMetadata,
                format!(
                    "targets v{} is not the v{version} the snapshot lists",
                    targets.signed.version
                ),
            ));
        }
        self.unexpired("targets", targets.signed.expires)?;
        if let Some(name) = targets.signed.targets.keys().next() {
            return Err(ClientError::new(
                Failure::InvalidMetadata,
                format!(
                    "target {} is listed by targets instead of its publisher's role",
                    name.raw()
                ),
            ));
        }
        Ok(Verified {
            typed: targets,
            bytes,
        })
    }
}

/// The cap for a file the snapshot or timestamp describes: its signed length when given.
fn cap(meta: &Metafile, default: usize) -> usize {
    meta.length
        .map_or(default, |l| usize::try_from(l).unwrap_or(usize::MAX))
        .min(MAX_RESPONSE_BYTES)
}

/// Length and sha256, when the referring metadata gives them.
fn matches_meta(file: &str, bytes: &[u8], meta: &Metafile) -> Result<(), ClientError> {
    if meta.length.is_some_and(|l| l != bytes.len() as u64) {
        return Err(ClientError::new(
            Failure::Tampered,
            format!(
                "{file} is {} bytes, not the {} signed for it",
                bytes.len(),
                meta.length.unwrap_or(0)
            ),
        ));
    }
    if let Some(h) = &meta.hashes
        && Sha256::digest(bytes)[..] != *h.sha256
    {
        return Err(ClientError::new(
            Failure::Tampered,
            format!("{file} does not match the sha256 signed for it"),
        ));
    }
    Ok(())
}
