//! One round of following an upstream: verify its index, judge each publisher, fetch
//! the new definitions, then (under the signing lock) sign and store the local index
//! that serves the followed publishers' roles, all in one transaction.

use std::collections::{HashMap, HashSet};

use super::download::{Wanted, fetch_all};
use super::{PublisherReport, Report, Status, Upstream, UpstreamError};
use crate::definition::{BUILTIN_PUBLISHER, Definition};
use crate::store::{FollowedPublisher, PublisherRecord, Store, UpstreamRound};
use crate::trust::client::{
    self, ClientError, Fetcher, Limits, Listed, PublisherTargets, RoleFile, TrustedState,
};
use crate::trust::server::state::{Signer, current};
use crate::trust::server::upstream::{
    Change, UpstreamDelegation, check_delegation, listed_versions, sign_round,
};

/// An upstream publisher this round may follow, once its roles are compared with what
/// is served here.
struct Candidate {
    report: PublisherReport,
    delegation: UpstreamDelegation,
    roles: Vec<RoleFile>,
    listed: Vec<Listed>,
}

/// How a round judges what it fetched.
#[derive(Debug, Clone, Copy)]
pub struct Mode {
    /// The time metadata expiry is checked at (now, online; a bundle's creation time).
    pub verify_at: i64,
    /// Any publisher that does not verify fails the whole round (a bundle: a tampered
    /// one changes nothing), where online it is held back alone.
    pub strict: bool,
}

/// Follows `upstream` once: verifies its index and applies it. The report is stored
/// with the upstream (a failed round's too) and returned.
pub async fn follow(
    store: &Store,
    signer: &Signer,
    fetcher: &Fetcher,
    upstream: &Upstream,
    now: i64,
) -> Result<Report, UpstreamError> {
    let mode = Mode {
        verify_at: now,
        strict: false,
    };
    follow_with(store, signer, fetcher, upstream, mode, now).await
}

/// [`follow`] in `mode`.
pub async fn follow_with(
    store: &Store,
    signer: &Signer,
    fetcher: &Fetcher,
    upstream: &Upstream,
    mode: Mode,
    now: i64,
) -> Result<Report, UpstreamError> {
    let mut report = Report {
        upstream: upstream.key().to_owned(),
        at: now,
        ..Default::default()
    };
    match round(store, signer, fetcher, upstream, &mut report, mode, now).await {
        Ok(()) => Ok(report),
        Err(e) => {
            report.error = Some(e.to_string());
            let json = serde_json::to_string(&report).unwrap_or_default();
            let trusted = store.upstream(upstream.key()).await?;
            let root = trusted.map_or_else(|| upstream.root.clone(), |t| t.root);
            store
                .record_upstream_failure(upstream.key(), &root, &json, now)
                .await?;
            Err(e)
        }
    }
}

async fn round(
    store: &Store,
    signer: &Signer,
    fetcher: &Fetcher,
    upstream: &Upstream,
    report: &mut Report,
    mode: Mode,
    now: i64,
) -> Result<(), UpstreamError> {
    let url = upstream.key();
    let started = std::time::Instant::now();
    let ms = |t: std::time::Instant| t.elapsed().as_millis() as u64;
    let trusted = store.upstream(url).await?;
    let root = trusted.as_ref().map_or(&upstream.root, |t| &t.root);
    let state = TrustedState {
        root,
        timestamp: trusted.as_ref().and_then(|t| t.timestamp.as_deref()),
        snapshot: trusted.as_ref().and_then(|t| t.snapshot.as_deref()),
    };
    let index = client::refresh(
        fetcher,
        &upstream.url,
        state,
        &Limits::default(),
        mode.verify_at,
    )
    .await?;
    report.phases.metadata = ms(started);
    report.upstream_root = index.root.typed.signed.version.get();
    report.upstream_snapshot = index.snapshot.typed.signed.version.get();

    let local: HashMap<String, PublisherRecord> = store
        .publisher_list()
        .await?
        .into_iter()
        .map(|p| (p.name.clone(), p))
        .collect();
    let delegations = index
        .targets
        .typed
        .signed
        .delegations
        .clone()
        .unwrap_or_else(tough::schema::Delegations::new);
    let mut candidates = Vec::new();
    let mut held: HashSet<String> = HashSet::new();
    for p in index.publishers {
        let mut entry = PublisherReport {
            name: p.name.clone(),
            status: Status::Followed,
            reason: None,
            definitions: 0,
            added: 0,
            yanked: 0,
        };
        let record = local.get(&p.name);
        let clash = if p.name == BUILTIN_PUBLISHER {
            Some("the built-in publisher of this marketplace has the name".to_owned())
        } else if let Err(e) = crate::trust::server::publishers::check_name(&p.name) {
            Some(e.to_string())
        } else {
            record
                .filter(|r| r.origin.as_deref() != Some(url))
                .map(|r| match &r.origin {
                    Some(other) => format!("a publisher followed from {other} has the name"),
                    None => "a publisher of this marketplace has the name".to_owned(),
                })
        };
        if let Some(reason) = clash {
            entry.status = Status::Clash;
            entry.reason = Some(reason);
            report.publishers.push(entry);
            continue;
        }
        let targets: PublisherTargets = match p.outcome {
            Ok(t) => t,
            Err(e) => {
                hold(&mut entry, &e);
                held.insert(p.name);
                report.publishers.push(entry);
                continue;
            }
        };
        entry.definitions = targets.listed.len();
        let selected = targets.listed.iter().any(|l| {
            plugin_of(&l.name).is_some_and(|plugin| upstream.filter.selects(&p.name, plugin))
        });
        // A publisher with nothing published yet is followed when everything is.
        let empty_and_all = targets.listed.is_empty() && upstream.filter.is_all();
        if !(selected || empty_and_all) {
            entry.status = Status::NotSelected;
            report.publishers.push(entry);
            continue;
        }
        if record.is_some_and(|r| r.suspended_at.is_some())
            && store.suspended_delegation(&p.name).await?.is_some()
        {
            entry.status = Status::SuspendedHere;
            entry.reason = Some("`marketplace publisher resume` lifts it".into());
            report.publishers.push(entry);
            continue;
        }
        let delegation = match check_delegation(&delegations, &p.name) {
            Ok(d) => d,
            Err(reason) => {
                entry.status = Status::HeldBack;
                entry.reason = Some(reason);
                held.insert(p.name);
                report.publishers.push(entry);
                continue;
            }
        };
        candidates.push(Candidate {
            report: entry,
            delegation,
            roles: targets.roles,
            listed: targets.listed,
        });
    }

    // Definitions new to this server, and yanks of those it has.
    let known: HashMap<(String, String), bool> = store
        .upstream_versions(url)
        .await?
        .into_iter()
        .map(|(p, h, y)| ((p, h), y))
        .collect();
    let mut wanted = Vec::new();
    let mut yanked = Vec::new();
    for c in &candidates {
        for l in &c.listed {
            let hash = format!("sha256:{}", hex::encode(l.target.hashes.sha256.as_ref()));
            let upstream_yanked = is_yanked(l);
            match known.get(&(c.report.name.clone(), hash.clone())) {
                Some(false) if upstream_yanked => yanked.push((c.report.name.clone(), hash)),
                Some(_) => {}
                None => {
                    if upstream_yanked {
                        yanked.push((c.report.name.clone(), hash));
                    }
                    wanted.push(Wanted {
                        publisher: c.report.name.clone(),
                        listed: l.clone(),
                    });
                }
            }
        }
    }
    let consistent = index.root.typed.signed.consistent_snapshot;
    let phase = std::time::Instant::now();
    let fetched = fetch_all(fetcher, &upstream.url, consistent, wanted)
        .await
        .map_err(|e| ClientError::new(client::Failure::Unreachable, e))?;
    let mut versions: Vec<(String, Definition, String)> = Vec::new();
    let mut failed: HashMap<String, String> = HashMap::new();
    for (publisher, def) in fetched {
        match def {
            Ok((def, signers)) => versions.push((publisher, def, signers)),
            Err(reason) => {
                failed.entry(publisher).or_insert(reason);
            }
        }
    }

    report.phases.definitions = ms(phase);
    let phase = std::time::Instant::now();
    let _guard = signer.lock.lock().await;
    let state = current(store).await?.ok_or(UpstreamError::NotInitialized)?;
    let served = listed_versions(&state);
    let mut change = Change::default();
    let mut followed = Vec::new();
    for mut c in candidates {
        let name = c.report.name.clone();
        let verdict = match failed.get(&name) {
            Some(reason) => Err(reason.clone()),
            None => new_roles(store, &served, &c.roles).await?,
        };
        match verdict {
            Ok(files) => {
                c.report.added = versions.iter().filter(|(p, ..)| *p == name).count();
                c.report.yanked = yanked.iter().filter(|(p, _)| *p == name).count();
                change.files.extend(files);
                followed.push(FollowedPublisher {
                    name: name.clone(),
                    public_keys: c.delegation.keys.iter().map(|k| k.hex()).collect(),
                    threshold: c.delegation.threshold,
                });
                change.delegate.push(c.delegation);
            }
            Err(reason) => {
                c.report.status = Status::HeldBack;
                c.report.reason = Some(reason);
                held.insert(name);
            }
        }
        report.publishers.push(c.report);
    }
    versions.retain(|(p, ..)| !held.contains(p));
    yanked.retain(|(p, _)| !held.contains(p));
    // Followed before, neither followed nor held back now: the upstream dropped it (or
    // the filter no longer selects it).
    let following: HashSet<&str> = followed.iter().map(|f| f.name.as_str()).collect();
    let mut gone = Vec::new();
    for r in local.values() {
        let ours = r.origin.as_deref() == Some(url) && r.suspended_at.is_none();
        if ours && !following.contains(r.name.as_str()) && !held.contains(&r.name) {
            gone.push(r.name.clone());
            change.remove.push(r.name.clone());
            match report.publishers.iter_mut().find(|p| p.name == r.name) {
                Some(p) => p.status = Status::Gone,
                None => report.publishers.push(PublisherReport {
                    name: r.name.clone(),
                    status: Status::Gone,
                    reason: Some("the upstream no longer delegates to it".into()),
                    definitions: 0,
                    added: 0,
                    yanked: 0,
                }),
            }
        }
    }
    report.publishers.sort_by(|a, b| a.name.cmp(&b.name));
    if mode.strict && !held.is_empty() {
        let why: Vec<String> = report
            .publishers
            .iter()
            .filter(|p| p.status == Status::HeldBack)
            .map(|p| format!("{}: {}", p.name, p.reason.as_deref().unwrap_or("")))
            .collect();
        return Err(UpstreamError::HeldBack(why.join("; ")));
    }
    let files = sign_round(&signer.keys, &state, &change, now).await?;
    report.snapshot = files
        .iter()
        .find(|f| f.role == "snapshot")
        .map(|f| f.version);
    // The write's own time is known only after it: the stored report counts up to it.
    report.phases.store = ms(phase);
    let round = UpstreamRound {
        url: url.to_owned(),
        root: index.root.bytes,
        timestamp: index.timestamp.bytes,
        snapshot: index.snapshot.bytes,
        publishers: followed,
        gone,
        versions,
        yanked,
        files,
        report: serde_json::to_string(report).unwrap_or_default(),
        now,
    };
    store.follow_upstream(&round).await?;
    report.phases.store = ms(phase);
    Ok(())
}

/// The role files of a publisher new to this server; `Err` when one would roll back a
/// version served here or differs from the same version served here (clients that
/// trusted it would refuse the whole index).
async fn new_roles(
    store: &Store,
    served: &HashMap<String, u64>,
    roles: &[RoleFile],
) -> Result<Result<Vec<RoleFile>, String>, UpstreamError> {
    let mut new = Vec::new();
    for r in roles {
        match served.get(&r.name) {
            None => new.push(r.clone()),
            Some(&v) if r.version > v => new.push(r.clone()),
            Some(&v) if r.version < v => {
                return Ok(Err(format!(
                    "{} v{} is older than the v{v} served here (a rollback)",
                    r.name, r.version
                )));
            }
            Some(&v) => {
                let here = store.metadata(&r.name, v).await?;
                if here.is_none_or(|m| m.bytes != r.bytes) {
                    return Ok(Err(format!(
                        "{} v{v} differs from the v{v} served here",
                        r.name
                    )));
                }
            }
        }
    }
    Ok(Ok(new))
}

fn hold(entry: &mut PublisherReport, e: &ClientError) {
    entry.status = Status::HeldBack;
    entry.reason = Some(e.message.clone());
}

/// `NAME` of a target `PUBLISHER/NAME/FILE`.
fn plugin_of(target: &str) -> Option<&str> {
    target.split('/').nth(1)
}

fn is_yanked(l: &Listed) -> bool {
    l.target
        .custom
        .get("yanked")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}
