//! `serve --upstream`: the background task that follows the upstream marketplace every
//! interval. Of several servers on one database only the holder of the
//! [`FOLLOW_LEASE`] follows, so replicas do not download the same definitions twice (a
//! race would be harmless: the store refuses the loser's metadata versions).

use std::sync::Arc;
use std::time::Duration;

use crate::store::Store;
use crate::trust::server::state::Signer;
use crate::upstream::{Report, Status, Upstream, UpstreamError};

const FOLLOW_LEASE: &str = "upstream";
/// A request to the upstream that takes longer than this fails the round.
const REQUEST_DEADLINE: Duration = Duration::from_secs(60);

pub(super) async fn run(
    store: Store,
    signer: Arc<Signer>,
    upstream: Upstream,
    every: Duration,
    holder: String,
) {
    let fetcher = match crate::trust::client::Fetcher::new(REQUEST_DEADLINE) {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(error = %e, "no HTTP client for following the upstream");
            return;
        }
    };
    tracing::info!(upstream = %upstream.url, filter = %upstream.filter, every = %crate::clock::human_duration(every.as_secs() as i64), "following an upstream marketplace");
    // The lease outlives a round by a margin, and is renewed at each.
    let lease = (every.as_secs() as i64).saturating_mul(2).max(120);
    let mut tick = tokio::time::interval(every.max(Duration::from_secs(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<Report> = None;
    loop {
        tick.tick().await;
        match store.take_lease(FOLLOW_LEASE, &holder, lease).await {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                tracing::error!(error = %e, "taking the upstream lease failed; retrying next round");
                continue;
            }
        }
        let now = crate::clock::now();
        match crate::upstream::follow(&store, &signer, &fetcher, &upstream, now).await {
            Ok(report) => {
                log(&report, last.as_ref());
                last = Some(report);
            }
            Err(UpstreamError::Conflict) => {
                tracing::info!(
                    "a publish landed during the upstream round; following again next round"
                );
            }
            Err(e) => {
                tracing::warn!(upstream = %upstream.url, error = %e, "following the upstream failed; what was followed before is served unchanged");
            }
        }
    }
}

/// Logs a round: what changed at info, each publisher held back or clashing at warn
/// when its state is new (the built-in publisher's name always clashes: debug).
fn log(report: &Report, last: Option<&Report>) {
    let followed = report.with(Status::Followed).len();
    let added: usize = report.publishers.iter().map(|p| p.added).sum();
    let yanked: usize = report.publishers.iter().map(|p| p.yanked).sum();
    if report.snapshot.is_some() {
        tracing::info!(
            followed,
            added,
            yanked,
            snapshot = report.snapshot,
            upstream_snapshot = report.upstream_snapshot,
            "followed the upstream"
        );
    } else {
        tracing::debug!(followed, "the upstream has nothing new");
    }
    for p in &report.publishers {
        let before = last.and_then(|l| l.publishers.iter().find(|q| q.name == p.name));
        if before.is_some_and(|b| b.status == p.status && b.reason == p.reason) {
            continue;
        }
        let reason = p.reason.as_deref().unwrap_or("");
        match p.status {
            Status::HeldBack => {
                tracing::warn!(publisher = %p.name, reason, "upstream publisher held back; what was served before stays")
            }
            Status::Clash if p.name == crate::definition::BUILTIN_PUBLISHER => {
                tracing::debug!(publisher = %p.name, "the upstream's built-in publisher is left out")
            }
            Status::Clash => {
                tracing::warn!(publisher = %p.name, reason, "upstream publisher left out: its name is taken here")
            }
            Status::Gone => {
                tracing::info!(publisher = %p.name, "the upstream no longer delegates to this publisher; suspended here")
            }
            Status::SuspendedHere | Status::NotSelected | Status::Followed => {}
        }
    }
}
