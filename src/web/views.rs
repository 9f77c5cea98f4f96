//! View models: everything a template shows, already formatted, so templates hold no
//! logic beyond loops and conditions.

use askama::Template;

use std::collections::HashSet;

use crate::catalog::rbac::{Access, AccessLevel};
use crate::catalog::{CatalogParams, Link, MajorGroup, PluginDetail, PluginRefView};
use crate::definition::{Approval, MenuEntry};
use crate::store::{Facets, Page, PluginQuery, PluginSummary, Sort, StoredMetadata};
use crate::trust::bins::FoldedBins;

pub struct Badge {
    pub label: &'static str,
    /// CSS modifier: `warn` for things an admin must approve, `danger` for rooted-only.
    pub class: &'static str,
}

fn requirement_badges(internet: bool, privileged: bool, kube_system: bool) -> Vec<Badge> {
    let mut badges = Vec::new();
    if internet {
        badges.push(Badge {
            label: "Internet access",
            class: "warn",
        });
    }
    if privileged {
        badges.push(Badge {
            label: "Privileged",
            class: "danger",
        });
    }
    if kube_system {
        badges.push(Badge {
            label: "kube-system",
            class: "danger",
        });
    }
    badges
}

pub fn date(ts: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(ts)
        .ok()
        .and_then(|t| {
            t.format(time::macros::format_description!("[year]-[month]-[day]"))
                .ok()
        })
        .unwrap_or_default()
}

pub fn plugin_url(publisher: &str, name: &str) -> String {
    format!("/plugins/{publisher}/{name}")
}

pub struct Card {
    pub url: String,
    pub display_name: String,
    pub name: String,
    pub publisher: String,
    pub description: String,
    pub version: String,
    pub tags: Vec<String>,
    pub badges: Vec<Badge>,
    pub updated: String,
}

impl From<PluginSummary> for Card {
    fn from(p: PluginSummary) -> Self {
        Card {
            url: plugin_url(&p.publisher, &p.name),
            badges: requirement_badges(p.internet_access, p.privileged, p.kube_system_deployment),
            updated: date(p.updated_at),
            description: first_sentences(&p.description, 240),
            display_name: p.display_name,
            name: p.name,
            publisher: p.publisher,
            version: p.latest_version,
            tags: p.tags,
        }
    }
}

/// Cards show the start of a description, cut at a word boundary.
fn first_sentences(text: &str, max: usize) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() <= max {
        return text;
    }
    let cut: String = text.chars().take(max).collect();
    let cut = cut.rsplit_once(' ').map_or(cut.as_str(), |(a, _)| a);
    let cut = cut.trim_end_matches(|c: char| c.is_ascii_punctuation());
    format!("{cut}…")
}

#[derive(Template)]
#[template(path = "catalog.html")]
pub struct CatalogPage {
    pub q: String,
    pub tag: String,
    pub publisher: String,
    pub no_internet: bool,
    pub not_privileged: bool,
    pub no_kube_system: bool,
    pub sort: &'static str,
    pub sorts: [(&'static str, &'static str); 3],
    pub cards: Vec<Card>,
    pub total: i64,
    pub page: u32,
    pub pages: u32,
    pub prev_url: Option<String>,
    pub next_url: Option<String>,
    pub tags: Vec<(String, i64)>,
    pub publishers: Vec<String>,
    pub filtered: bool,
    /// The feed of the publisher the page is filtered by; empty when it is not.
    pub publisher_feed_url: String,
}

impl CatalogPage {
    pub fn new(
        params: &CatalogParams,
        q: &PluginQuery,
        page: Page<PluginSummary>,
        facets: &Facets,
    ) -> Self {
        let pages = u32::try_from((page.total + i64::from(q.per_page) - 1) / i64::from(q.per_page))
            .unwrap_or(u32::MAX)
            .max(1);
        let url_for = |n: u32| {
            let mut pairs: Vec<(&str, String)> = Vec::new();
            let text = params.q.clone().unwrap_or_default();
            if !text.trim().is_empty() {
                pairs.push(("q", text));
            }
            if let Some(t) = &q.tag {
                pairs.push(("tag", t.clone()));
            }
            if let Some(p) = &q.publisher {
                pairs.push(("publisher", p.clone()));
            }
            for (on, key) in [
                (q.no_internet, "no_internet"),
                (q.not_privileged, "not_privileged"),
                (q.no_kube_system, "no_kube_system"),
            ] {
                if on {
                    pairs.push((key, "on".into()));
                }
            }
            if q.sort != Sort::Relevance {
                pairs.push(("sort", sort_value(q.sort).into()));
            }
            if q.per_page != 24 {
                pairs.push(("per_page", q.per_page.to_string()));
            }
            pairs.push(("page", n.to_string()));
            format!(
                "/?{}",
                serde_urlencoded::to_string(&pairs).unwrap_or_default()
            )
        };
        CatalogPage {
            q: params.q.clone().unwrap_or_default(),
            tag: q.tag.clone().unwrap_or_default(),
            publisher: q.publisher.clone().unwrap_or_default(),
            publisher_feed_url: q
                .publisher
                .as_deref()
                .map(super::feed::publisher_path)
                .unwrap_or_default(),
            no_internet: q.no_internet,
            not_privileged: q.not_privileged,
            no_kube_system: q.no_kube_system,
            sort: sort_value(q.sort),
            sorts: [
                ("relevance", "Best match"),
                ("name", "Name"),
                ("updated", "Recently updated"),
            ],
            filtered: !q.terms.is_empty()
                || q.tag.is_some()
                || q.publisher.is_some()
                || q.no_internet
                || q.not_privileged
                || q.no_kube_system,
            cards: page.items.into_iter().map(Card::from).collect(),
            total: page.total,
            page: q.page,
            pages,
            prev_url: (q.page > 1).then(|| url_for(q.page - 1)),
            next_url: (q.page < pages).then(|| url_for(q.page + 1)),
            tags: facets.tags.clone(),
            publishers: facets.publishers.clone(),
        }
    }
}

fn sort_value(s: Sort) -> &'static str {
    match s {
        Sort::Relevance => "relevance",
        Sort::Name => "name",
        Sort::Updated => "updated",
    }
}

pub struct Requirement {
    pub title: &'static str,
    pub detail: String,
    pub class: &'static str,
}

pub struct AccessRow {
    pub resource: String,
    pub level: &'static str,
    pub class: &'static str,
}

pub struct LinkView {
    pub name: String,
    /// `(url, label)` of each catalog plugin with that name; empty when missing.
    pub targets: Vec<(String, String)>,
}

pub struct VersionRow {
    /// Short key id (first 12 hex digits) and the full one, of each signer.
    pub signers: Vec<(String, String)>,
    pub version: String,
    pub hash: String,
    pub date: String,
    pub yanked: bool,
    pub latest: bool,
    pub raw_url: String,
    /// Why Fundament cannot install this version; empty when it can.
    pub not_installable: String,
}

pub struct MajorView {
    pub major: u64,
    pub versions: Vec<VersionRow>,
}

pub struct MenuRow {
    pub crd: String,
    pub label: String,
    pub list: bool,
    pub detail: bool,
}

#[derive(Template)]
#[template(path = "plugin.html")]
pub struct PluginPage {
    pub suspended: bool,
    /// The upstream marketplace its publisher is followed from; empty when registered
    /// here.
    pub origin: String,
    /// Why Fundament cannot install the latest version (fields of the older design);
    /// empty when it can.
    pub not_installable: String,
    pub publisher: String,
    pub publisher_url: String,
    /// Atom feeds of the plugin's versions and of its publisher's.
    pub feed_url: String,
    pub publisher_feed_url: String,
    pub name: String,
    pub display_name: String,
    pub description: String,
    pub version: String,
    pub namespace: String,
    pub hash: String,
    pub published: String,
    pub author: String,
    pub license: String,
    pub icon: String,
    pub urls: Vec<(String, String)>,
    /// The listing's feature blocks: title and body.
    pub features: Vec<(String, String)>,
    /// The listing's artwork URL; empty shows the fallback (`initials`).
    pub artwork: String,
    pub initials: String,
    /// What the latest version asks for that the release before it did not: that
    /// release and one sentence per change.
    pub changes: Option<(String, Vec<String>)>,
    pub tags: Vec<String>,
    pub requirements: Vec<Requirement>,
    pub cluster_capabilities: Vec<String>,
    pub permission_capabilities: Vec<String>,
    pub access: Vec<AccessRow>,
    pub dependencies: Vec<LinkView>,
    pub suggested: Vec<LinkView>,
    pub required_by: Vec<(String, String)>,
    pub suggested_by: Vec<(String, String)>,
    pub organization_menu: Vec<MenuRow>,
    pub project_menu: Vec<MenuRow>,
    pub crds: Vec<String>,
    pub image: String,
    pub image_repository: String,
    pub image_digest: String,
    pub pull_policy: String,
    /// The latest version's image in the mirror: its status word and a sentence.
    pub mirror: Option<(String, String)>,
    pub raw_url: String,
    pub versions: Vec<MajorView>,
}

impl PluginPage {
    pub fn new(d: PluginDetail) -> Self {
        let def = &d.definition;
        let md = &def.manifest.metadata;
        let spec = &def.manifest.spec;
        let opt = |v: &Option<crate::definition::Located<String>>| {
            v.as_ref().map(|s| s.to_string()).unwrap_or_default()
        };
        let urls = [
            ("Homepage", &md.urls.homepage),
            ("Source code", &md.urls.repository),
            ("Documentation", &md.urls.documentation),
        ]
        .into_iter()
        .filter_map(|(label, u)| u.as_ref().map(|u| (label.to_owned(), u.to_string())))
        .collect();
        let page = PluginPage {
            features: Vec::new(),
            artwork: String::new(),
            initials: super::listing::initials(def.display_name()),
            changes: d
                .since_previous
                .as_ref()
                .map(|c| (c.from_version.clone(), c.lines())),
            suspended: d.suspended,
            origin: d.origin.clone().unwrap_or_default(),
            not_installable: d.latest.not_installable.clone().unwrap_or_default(),
            publisher_url: format!(
                "/?{}",
                serde_urlencoded::to_string([("publisher", &d.publisher)]).unwrap_or_default()
            ),
            feed_url: super::feed::plugin_path(&d.publisher, &d.name),
            publisher_feed_url: super::feed::publisher_path(&d.publisher),
            display_name: def.display_name().to_owned(),
            description: def.description().to_owned(),
            version: d.latest.version.clone(),
            namespace: d.namespace.clone(),
            hash: d.latest.hash.clone(),
            published: date(d.latest.published_at),
            author: opt(&md.author),
            license: opt(&md.license),
            icon: opt(&md.icon),
            urls,
            tags: def.tags().map(str::to_owned).collect(),
            requirements: requirement_rows(&d.requirements),
            cluster_capabilities: d.cluster_capabilities.clone(),
            permission_capabilities: spec
                .permissions
                .capabilities
                .iter()
                .map(|c| c.to_string())
                .collect(),
            access: d.access.iter().map(AccessRow::from).collect(),
            dependencies: d.dependencies.iter().map(LinkView::from).collect(),
            suggested: d.suggested_plugins.iter().map(LinkView::from).collect(),
            required_by: d.required_by.iter().map(plugin_link).collect(),
            suggested_by: d.suggested_by.iter().map(plugin_link).collect(),
            organization_menu: d.organization_menu().iter().map(MenuRow::from).collect(),
            project_menu: d.project_menu().iter().map(MenuRow::from).collect(),
            crds: spec.crds.iter().map(|c| c.to_string()).collect(),
            image: def.image.to_string(),
            image_repository: def.image.repository.clone(),
            image_digest: def.image.digest.clone(),
            pull_policy: match spec.image_pull_policy.as_str() {
                "" => "default".to_owned(),
                p => p.to_owned(),
            },
            mirror: d.latest.mirror.as_ref().map(super::mirror::status_text),
            raw_url: definition_url(&d, &d.latest.version),
            versions: d.versions.iter().map(|g| major_view(&d, g)).collect(),
            publisher: d.publisher.clone(),
            name: d.name.clone(),
        };
        match &d.listing {
            Some(listing) => super::listing::apply(page, listing),
            None => page,
        }
    }
}

fn definition_url(d: &PluginDetail, version: &str) -> String {
    format!(
        "/plugins/{}/{}/versions/{version}/definition.yaml",
        d.publisher, d.name
    )
}

/// What an admin approves, most permissive last.
fn requirement_rows(req: &Approval) -> Vec<Requirement> {
    let mut requirements = Vec::new();
    if req.internet_access {
        requirements.push(Requirement {
            title: "Internet access",
            detail: "The plugin connects to services outside the cluster.".into(),
            class: "warn",
        });
    }
    if req.privileged {
        requirements.push(Requirement {
            title: "Privileged containers",
            detail: "Runs privileged pods; only allowed on warranty-voided (rooted) clusters."
                .into(),
            class: "danger",
        });
    }
    if req.kube_system_deployment {
        requirements.push(Requirement { title: "Deploys into kube-system", detail: "Installs components in the kube-system namespace; only allowed on warranty-voided (rooted) clusters.".into(), class: "danger" });
    }
    requirements
}

/// `(url, label)` of a catalog plugin.
fn plugin_link(f: &PluginRefView) -> (String, String) {
    (
        plugin_url(&f.publisher, &f.name),
        format!("{} ({})", f.display_name, f.publisher),
    )
}

impl From<&Link> for LinkView {
    fn from(l: &Link) -> Self {
        LinkView {
            name: l.name.clone(),
            targets: l.found.iter().map(plugin_link).collect(),
        }
    }
}

impl From<&MenuEntry> for MenuRow {
    fn from(e: &MenuEntry) -> Self {
        MenuRow {
            crd: e.crd.to_string(),
            label: e.label.clone().unwrap_or_default(),
            list: e.list,
            detail: e.detail,
        }
    }
}

impl From<&Access> for AccessRow {
    fn from(a: &Access) -> Self {
        AccessRow {
            resource: a.resource.clone(),
            level: a.level.label(),
            class: match a.level {
                AccessLevel::Read => "ok",
                AccessLevel::ReadWrite => "warn",
                AccessLevel::Admin => "danger",
            },
        }
    }
}

fn major_view(d: &PluginDetail, g: &MajorGroup) -> MajorView {
    MajorView {
        major: g.major,
        versions: g
            .versions
            .iter()
            .map(|v| VersionRow {
                signers: v
                    .signers
                    .iter()
                    .map(|s| (s.chars().take(12).collect(), s.clone()))
                    .collect(),
                version: v.version.clone(),
                hash: v.hash.clone(),
                date: date(v.published_at),
                yanked: v.yanked,
                latest: v.version == d.latest.version,
                raw_url: definition_url(d, &v.version),
                not_installable: v.not_installable.clone().unwrap_or_default(),
            })
            .collect(),
    }
}

pub struct RoleRow {
    pub role: String,
    pub kind: String,
    /// One version, or the range over a publisher's bins.
    pub version: String,
    pub url: String,
    pub signed: String,
    pub expires: String,
    /// `ok`, `warn` (less than a tenth of its lifetime left) or `danger` (expired).
    pub class: &'static str,
    pub status: String,
}

#[derive(Template)]
#[template(path = "signed_index.html")]
pub struct SignedIndexPage {
    pub roles: Vec<RoleRow>,
}

impl SignedIndexPage {
    /// `roles`: the newest version of every stored role. `bins`: the hashed bins the
    /// publishers' roles delegate now; they are shown as one row per publisher, and bins
    /// of an older layout (still listed in the snapshot, never fetched) not at all.
    pub fn new(
        roles: Vec<StoredMetadata>,
        bins: &HashSet<String>,
        suspended: &HashSet<String>,
        now: i64,
    ) -> Self {
        let (roles, folded) = crate::trust::bins::fold(roles, bins);
        let mut rows: Vec<RoleRow> = roles
            .iter()
            .map(|m| role_row(m, suspended, now))
            .chain(folded.iter().map(|f| bins_row(f, suspended, now)))
            .collect();
        let order = |r: &RoleRow| {
            SERVER_ROLES
                .iter()
                .position(|x| *x == r.role)
                .unwrap_or(SERVER_ROLES.len())
        };
        rows.sort_by(|a, b| order(a).cmp(&order(b)).then(a.role.cmp(&b.role)));
        SignedIndexPage { roles: rows }
    }
}

/// The roles the server signs itself, in the order the page lists them.
const SERVER_ROLES: [&str; 4] = ["root", "targets", "snapshot", "timestamp"];

/// A server role, or a publisher's top role.
fn role_row(m: &StoredMetadata, suspended: &HashSet<String>, now: i64) -> RoleRow {
    let server_role = SERVER_ROLES.contains(&m.role.as_str());
    let suspended = !server_role && suspended.contains(&m.role);
    let (class, status) = expiry_status(server_role, suspended, m.created_at, m.expires_at, now);
    RoleRow {
        kind: match m.role.as_str() {
            "root" => "trust anchor (offline keys)",
            "targets" => "delegations to publishers",
            "snapshot" => "versions of all roles",
            "timestamp" => "freshness",
            _ => "publisher",
        }
        .to_owned(),
        url: match m.role.as_str() {
            "timestamp" => "/tuf/metadata/timestamp.json".to_owned(),
            role => format!("/tuf/metadata/{}.{role}.json", m.version),
        },
        version: m.version.to_string(),
        signed: datetime(m.created_at),
        expires: datetime(m.expires_at),
        class,
        status,
        role: m.role.clone(),
    }
}

/// A publisher's current bins, as one row.
fn bins_row(f: &FoldedBins, suspended: &HashSet<String>, now: i64) -> RoleRow {
    let suspended = suspended.contains(&f.publisher);
    let (class, status) = expiry_status(false, suspended, f.signed_at, f.expires_at, now);
    RoleRow {
        role: crate::trust::bins::bin_name(&f.publisher, "*"),
        kind: format!("{} hashed bins of {}", f.count, f.publisher),
        url: format!("/api/v1/publishers/{}/role", f.publisher),
        version: match (f.lowest_version, f.highest_version) {
            (low, high) if low != high => format!("{low}–{high}"),
            (low, _) => low.to_string(),
        },
        signed: datetime(f.signed_at),
        expires: datetime(f.expires_at),
        class,
        status,
    }
}

/// The row's class (`ok`, `warn`, `danger`) and status text.
fn expiry_status(
    server_role: bool,
    suspended: bool,
    signed_at: i64,
    expires_at: i64,
    now: i64,
) -> (&'static str, String) {
    let left = expires_at - now;
    let lifetime = (expires_at - signed_at).max(1);
    // The server re-signs its own roles at half their lifetime; a publisher's role is
    // the publisher's to renew, so it is flagged a month ahead.
    let soon = if server_role {
        left * 10 < lifetime
    } else {
        left < crate::trust::expiry::WARN_WITHIN
    };
    if suspended {
        ("danger", "suspended by the operator".to_owned())
    } else if left <= 0 {
        ("danger", "expired".to_owned())
    } else if soon {
        ("warn", format!("expires in {}", span(left)))
    } else {
        ("ok", format!("valid for {}", span(left)))
    }
}

fn datetime(ts: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(ts)
        .ok()
        .and_then(|t| {
            t.format(time::macros::format_description!(
                "[year]-[month]-[day] [hour]:[minute] UTC"
            ))
            .ok()
        })
        .unwrap_or_default()
}

/// A duration in the largest whole unit, for people.
fn span(secs: i64) -> String {
    match secs {
        s if s >= 2 * 86_400 => format!("{} days", s / 86_400),
        s if s >= 2 * 3600 => format!("{} hours", s / 3600),
        s if s >= 120 => format!("{} minutes", s / 60),
        s => format!("{s} seconds"),
    }
}
