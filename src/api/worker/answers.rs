//! The local API's answers that come from rows of the worker's database: `/status` and
//! the sideload list. They are this surface's types, converted from the store's, so a
//! column added to or renamed in `sync.db` cannot change what clients read. (Views,
//! offers and plans are the domain's answers and serialize themselves.)

use serde::Serialize;

use crate::sync::sideload::SideloadRecord;
use crate::sync::store::{PublisherFailure, TrustedVersions};
use crate::sync::worker::{NotInstallable, SourceReport, Status};

/// `GET /status`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct StatusBody {
    sources: Vec<SourceBody>,
    builtins: usize,
    plugins: usize,
    clashes: usize,
    not_installable: Vec<NotInstallable>,
}

impl From<Status> for StatusBody {
    fn from(s: Status) -> Self {
        StatusBody {
            sources: s.sources.into_iter().map(SourceBody::from).collect(),
            builtins: s.builtins,
            plugins: s.plugins,
            clashes: s.clashes,
            not_installable: s.not_installable,
        }
    }
}

/// A source in `/status`: its state, then its settings.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SourceBody {
    name: String,
    url: String,
    last_attempt_at: Option<i64>,
    last_success_at: Option<i64>,
    last_reason: Option<String>,
    last_error: Option<String>,
    consecutive_failures: u64,
    trusted: Option<TrustedBody>,
    definitions: u64,
    failing_publishers: Vec<FailureBody>,
    priority: i64,
    interval_seconds: u64,
}

impl From<SourceReport> for SourceBody {
    fn from(r: SourceReport) -> Self {
        let s = r.status;
        SourceBody {
            name: s.name,
            url: s.url,
            last_attempt_at: s.last_attempt_at,
            last_success_at: s.last_success_at,
            last_reason: s.last_reason,
            last_error: s.last_error,
            consecutive_failures: s.consecutive_failures,
            trusted: s.trusted.map(TrustedBody::from),
            definitions: s.definitions,
            failing_publishers: s
                .failing_publishers
                .into_iter()
                .map(FailureBody::from)
                .collect(),
            priority: r.priority,
            interval_seconds: r.interval_seconds,
        }
    }
}

/// The metadata versions a source's last good round trusted, and their expiry.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TrustedBody {
    root: u64,
    timestamp: u64,
    snapshot: u64,
    targets: u64,
    timestamp_expires_at: i64,
    expires_at: i64,
    expires_role: String,
}

impl From<TrustedVersions> for TrustedBody {
    fn from(t: TrustedVersions) -> Self {
        TrustedBody {
            root: t.root,
            timestamp: t.timestamp,
            snapshot: t.snapshot,
            targets: t.targets,
            timestamp_expires_at: t.timestamp_expires_at,
            expires_at: t.expires_at,
            expires_role: t.expires_role,
        }
    }
}

/// A publisher whose roles fail verification (its last good definitions stay).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FailureBody {
    publisher: String,
    reason: String,
    message: String,
    since: i64,
    consecutive_failures: i64,
}

impl From<PublisherFailure> for FailureBody {
    fn from(f: PublisherFailure) -> Self {
        FailureBody {
            publisher: f.publisher,
            reason: f.reason,
            message: f.message,
            since: f.since,
            consecutive_failures: f.consecutive_failures,
        }
    }
}

/// One sideloaded version in `GET /orgs/{org}/sideloads`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SideloadItem {
    name: String,
    version: String,
    hash: String,
    created_at: i64,
    /// The token that uploaded it.
    token_id: String,
}

impl From<SideloadRecord> for SideloadItem {
    fn from(r: SideloadRecord) -> Self {
        SideloadItem {
            name: r.name,
            version: r.version,
            hash: r.hash,
            created_at: r.created_at,
            token_id: r.token_id,
        }
    }
}
