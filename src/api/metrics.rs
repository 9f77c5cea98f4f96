//! `/metrics` of the server (Prometheus text) and the HTTP metrics of both applications.
//!
//! Every request is counted and timed per surface and status class by a layer around
//! the whole application ([`layers::with_layers`](super::layers::with_layers)); the
//! surface is named from the matched route, so the label stays bounded whatever the
//! path. Publishes, yanks and re-signs are counted by outcome, refusals by their error
//! code. What describes stored state (the signed index's expiry, the mirror, the
//! upstream followed) is read from the store at each scrape.
//!
//! Layering: HTTP only; reads the store; counts in `crate::metrics`.

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::HttpError;
use crate::metrics::{CounterVec, Exposition, HistogramVec, Kind};

/// What the server counts while it runs.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Request latency by `surface` and `status` class.
    pub http: std::sync::Arc<HistogramVec>,
    /// Accepted writes of the publishing API by `action` (publish, yank, resign).
    pub publishes: CounterVec,
    /// Refused (or failed) writes by `action` and `reason` (the answer's error code).
    pub refusals: CounterVec,
}

impl Metrics {
    /// Counts a publishing write's outcome and passes it on.
    pub fn publishing<T>(
        &self,
        action: &'static str,
        outcome: Result<T, HttpError>,
    ) -> Result<T, HttpError> {
        match &outcome {
            Ok(_) => self.publishes.inc(&[action]),
            Err(e) => self.refusals.inc(&[action, e.code.as_str()]),
        }
        outcome
    }
}

/// Names a server route's surface for the request metrics.
pub fn server_surface(route: &str) -> &'static str {
    const PREFIXES: [(&str, &str); 12] = [
        ("/api/v1/plugins", "catalog_api"),
        ("/api/v1/publishers", "publishing"),
        ("/api/v1/review", "review"),
        ("/api/v1/upstream", "upstream"),
        ("/api/v1/admin", "admin"),
        ("/api/v1/openapi.json", "openapi"),
        ("/tuf/", "tuf"),
        ("/v2", "registry"),
        ("/catalog.v1.", "catalog_connect"),
        ("/registry.v1.", "publication_connect"),
        ("/admin.v1.", "review_connect"),
        ("/static/", "static"),
    ];
    if route.ends_with("/feed.atom") {
        return "feeds";
    }
    if matches!(route, "/healthz" | "/readyz" | "/metrics") {
        return "ops";
    }
    PREFIXES
        .iter()
        .find(|(prefix, _)| route.starts_with(prefix))
        .map_or("pages", |(_, surface)| surface)
}

/// Names a worker route's surface for the request metrics.
pub fn worker_surface(route: &str) -> &'static str {
    if route.contains("/organization.v1.") {
        "organization_connect"
    } else if matches!(route, "/healthz" | "/metrics") {
        "ops"
    } else {
        "worker_api"
    }
}

/// Times a request and counts it under its surface and status class. Latency runs to
/// the answer's head: a streamed body (a `/v2/` blob) is not waited for.
pub async fn record(
    req: Request,
    next: Next,
    http: std::sync::Arc<HistogramVec>,
    surface: fn(&str) -> &'static str,
) -> Response {
    let name = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |m| surface(m.as_str()));
    let started = std::time::Instant::now();
    let response = next.run(req).await;
    let class = crate::metrics::status_class(response.status().as_u16());
    http.observe(&[name, class], started.elapsed());
    response
}

/// The HTTP request histogram as exposed by both applications.
pub fn http_family(out: &mut Exposition, http: &HistogramVec) {
    out.histograms(
        "marketplace_http_request_duration_seconds",
        "HTTP requests by surface and status class: latency to the answer's head (its _count is the number of requests).",
        &["surface", "status"],
        http,
    );
}

/// Prometheus text: HTTP, publishing, the signed index's expiry, the mirror, the
/// upstream followed.
pub async fn metrics(State(state): State<AppState>) -> Result<Response, HttpError> {
    let now = crate::clock::now();
    let mut out = Exposition::new();
    http_family(&mut out, &state.metrics.http);
    out.counters(
        "marketplace_publishes_total",
        "Accepted writes of the publishing API by action (publish, yank, resign).",
        &["action"],
        &state.metrics.publishes,
    );
    out.counters(
        "marketplace_publish_refusals_total",
        "Refused or failed writes of the publishing API by action and reason (the answer's error code).",
        &["action", "reason"],
        &state.metrics.refusals,
    );

    // Seconds left before the earliest expiry of each kind of role (negative once
    // expired): what an alert on an index about to stop verifying watches.
    let roles = state.store.metadata_overview().await?;
    let mut earliest: std::collections::BTreeMap<&str, i64> = Default::default();
    for r in &roles {
        let kind = match r.role.as_str() {
            k @ ("root" | "timestamp" | "snapshot" | "targets") => k,
            _ => "delegated",
        };
        let at = earliest.entry(kind).or_insert(i64::MAX);
        *at = (*at).min(r.expires_at);
    }
    out.family(
        "marketplace_signed_index_expiry_seconds",
        Kind::Gauge,
        "Seconds until the earliest expiry among the signed index's roles of each kind (delegated: publishers' roles and their bins); negative once expired.",
    );
    for (kind, at) in &earliest {
        out.sample(
            "marketplace_signed_index_expiry_seconds",
            &[("role", kind)],
            (at - now) as f64,
        );
    }

    let counts = state.store.mirror_counts().await?;
    out.family(
        "marketplace_mirror_images",
        Kind::Gauge,
        "Images pinned by published definitions, by mirror status.",
    );
    for (status, n, _) in &counts {
        out.sample(
            "marketplace_mirror_images",
            &[("status", status)],
            *n as f64,
        );
    }
    let bytes = counts
        .iter()
        .find(|(s, ..)| s == "mirrored")
        .map_or(0, |(_, _, b)| *b);
    out.family(
        "marketplace_mirror_bytes",
        Kind::Gauge,
        "Bytes of mirrored images (manifests and blobs).",
    );
    out.sample("marketplace_mirror_bytes", &[], bytes as f64);

    if let Some(url) = &state.upstream {
        let row = state.store.upstream(url).await?;
        let at = |f: fn(&crate::store::UpstreamRow) -> Option<i64>| {
            row.as_ref().and_then(f).unwrap_or(0) as f64
        };
        out.family(
            "marketplace_upstream_last_success_timestamp_seconds",
            Kind::Gauge,
            "When the last round of following the upstream marketplace succeeded (Unix seconds; 0: never).",
        );
        out.sample(
            "marketplace_upstream_last_success_timestamp_seconds",
            &[("upstream", url)],
            at(|r| r.last_success_at),
        );
        out.family(
            "marketplace_upstream_last_attempt_timestamp_seconds",
            Kind::Gauge,
            "When the last round of following the upstream marketplace ran (Unix seconds; 0: never).",
        );
        out.sample(
            "marketplace_upstream_last_attempt_timestamp_seconds",
            &[("upstream", url)],
            at(|r| r.last_attempt_at),
        );
    }
    Ok(exposition(out))
}

/// The exposition as an answer.
pub fn exposition(out: Exposition) -> Response {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        out.finish(),
    )
        .into_response()
}

/// The sync worker's Prometheus text: its local API's requests, and per source the last
/// success, rounds by outcome, failing publishers and definitions; per organization the
/// definitions it is offered.
pub async fn worker_metrics(
    worker: &crate::sync::Worker,
    http: &HistogramVec,
) -> Result<Response, HttpError> {
    let mut out = Exposition::new();
    http_family(&mut out, http);
    out.counters(
        "marketplace_sync_rounds_total",
        "Sync rounds this process ran, by source and outcome (changed, unchanged, failed).",
        &["source", "outcome"],
        worker.rounds(),
    );
    let status = worker.status().await?;
    type Gauge = (
        &'static str,
        &'static str,
        fn(&crate::sync::worker::SourceReport) -> f64,
    );
    let gauges: [Gauge; 5] = [
        (
            "marketplace_sync_last_success_timestamp_seconds",
            "When the source's last round succeeded (Unix seconds; 0: never).",
            |s| s.status.last_success_at.unwrap_or(0) as f64,
        ),
        (
            "marketplace_sync_last_attempt_timestamp_seconds",
            "When the source's last round ran (Unix seconds; 0: never).",
            |s| s.status.last_attempt_at.unwrap_or(0) as f64,
        ),
        (
            "marketplace_sync_interval_seconds",
            "The source's configured interval between rounds.",
            |s| s.interval_seconds as f64,
        ),
        (
            "marketplace_sync_failing_publishers",
            "Publishers of the source whose roles fail verification (their last good definitions stay offered).",
            |s| s.status.failing_publishers.len() as f64,
        ),
        (
            "marketplace_sync_definitions",
            "Definitions the source offers, as of its last good round.",
            |s| s.status.definitions as f64,
        ),
    ];
    for (name, help, value) in gauges {
        out.family(name, Kind::Gauge, help);
        for s in &status.sources {
            out.sample(name, &[("source", &s.status.name)], value(s));
        }
    }
    out.family(
        "marketplace_sync_definitions_offered",
        Kind::Gauge,
        "Definitions (versions) each organization with a live token is offered: built-ins, sources and its sideloads merged.",
    );
    for (org, n) in worker.offered().await? {
        out.sample(
            "marketplace_sync_definitions_offered",
            &[("organization", &org)],
            n as f64,
        );
    }
    Ok(exposition(out))
}
