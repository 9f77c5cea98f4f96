//! The local API's answers. Those from rows of the worker's database (`/status`, the
//! sideload list) are this surface's types, converted from the store's, so a column
//! added to or renamed in `sync.db` cannot change what clients read. The others wrap
//! the domain's views, offers and plans, which serialize themselves.

use axum::Json;
use serde::Serialize;

use crate::api::catalog::ChangesAnswer;
use crate::sync::view::{Clash, Offer, Origin};

use crate::sync::sideload::SideloadRecord;
use crate::sync::store::{PublisherFailure, TrustedVersions};
use crate::sync::worker::{NotInstallable, SourceReport, Status};

/// `GET /status`.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = WorkerStatus)]
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
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Source)]
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
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Trusted)]
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
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = FailingPublisher)]
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
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Sideload)]
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

/// `answer` as JSON with the keys of every object in sorted order: the order the
/// organization API's answers had when they were built as `serde_json` values, which
/// clients comparing recorded answers rely on.
pub(super) fn sorted<T: Serialize>(answer: &T) -> Json<serde_json::Value> {
    Json(serde_json::to_value(answer).expect("answers serialize"))
}

/// A plugin as an organization's list shows it.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = OrgPluginSummary)]
pub(super) struct PluginSummary<'a> {
    pub(super) name: &'a str,
    /// The publisher (`fundament` for built-ins); `null` for a sideload.
    pub(super) publisher: Option<&'a str>,
    pub(super) origin: Origin,
    /// The version to install per major, newest major first.
    pub(super) latest: Vec<&'a Offer>,
    /// Clashes over this name.
    pub(super) clashes: Vec<&'a Clash>,
}

/// `GET /orgs/{org}/plugins`.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct OrgPlugins<'a> {
    pub(super) org: &'a str,
    pub(super) plugins: Vec<PluginSummary<'a>>,
    /// Every name offered more than once, and how it was resolved.
    pub(super) clashes: &'a [Clash],
}

/// `GET /orgs/{org}/plugins/{name}`.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct OrgPlugin<'a> {
    pub(super) plugin: PluginSummary<'a>,
    /// Every version, newest first, yanked ones marked.
    pub(super) versions: Vec<&'a Offer>,
}

/// A version an installed one may upgrade to.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct Upgrade<'a> {
    #[serde(flatten)]
    pub(super) offer: &'a Offer,
    /// What it asks for that the installed version did not; `null` when the installed
    /// version's definition is not at hand.
    pub(super) changes: Option<ChangesAnswer>,
}

/// `GET /orgs/{org}/plugins/{name}/upgrades`.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct Upgrades<'a> {
    pub(super) name: &'a str,
    /// The version installed, as parsed.
    pub(super) from: String,
    /// Newest first.
    pub(super) upgrades: Vec<Upgrade<'a>>,
}

/// `GET /orgs/{org}/sideloads`.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct OrgSideloads {
    pub(super) org: String,
    pub(super) sideloads: Vec<SideloadItem>,
}

/// A sideload stored (or found already stored with the same bytes).
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct SideloadAdded {
    pub(super) org: String,
    pub(super) name: String,
    pub(super) version: String,
    pub(super) hash: String,
}
