//! The operations of publishing with review, over the store. Callers say who acts
//! ([`Actor`]); a publisher sees and changes only its own listings and versions, and
//! what is not its own is reported as not found.

use std::cmp::Reverse;

use super::listing as rules;
use super::listings::{listing, visible};
use super::{Action, RejectionReason, ReviewError, Status, publisher_actor, reviewer_actor};
use crate::definition::{Definition, parse_version};
use crate::ids;
use crate::store::{
    ReviewDecision, ReviewEventRow, ReviewVersionRow, Store, Transition, Transitioned, Upload,
};

/// The largest manifest (Fundament's rule, and our definitions' limit).
pub const MAX_MANIFEST: usize = 1024 * 1024;
pub const MAX_RELEASE_NOTES: usize = 8_000;
pub const MAX_FEEDBACK: usize = 4_000;

/// Who acts: a publisher (its own plugins only) or a reviewer (every plugin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    Publisher(String),
    Reviewer(String),
}

impl Actor {
    fn recorded(&self) -> String {
        match self {
            Actor::Publisher(p) => publisher_actor(p),
            Actor::Reviewer(r) => reviewer_actor(r),
        }
    }

    pub(super) fn may_see(&self, publisher: &str) -> bool {
        match self {
            Actor::Publisher(p) => p == publisher,
            Actor::Reviewer(_) => true,
        }
    }

    pub(super) fn publisher(&self) -> Option<&str> {
        match self {
            Actor::Publisher(p) => Some(p),
            Actor::Reviewer(_) => None,
        }
    }
}

/// A version as its publisher and reviewers see it: under review, or published without
/// review (shown as approved, with its publication time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionView {
    pub row: ReviewVersionRow,
    /// Whether it went through review here (false: published directly).
    pub reviewed: bool,
}

impl VersionView {
    pub fn status(&self) -> Status {
        Status::parse(&self.row.status).unwrap_or(Status::Draft)
    }
}

/// What a reviewer decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approve {
        feedback: String,
    },
    RequestChanges {
        feedback: String,
    },
    Reject {
        reason: RejectionReason,
        feedback: String,
    },
}

pub(super) fn not_found(what: impl Into<String>) -> ReviewError {
    ReviewError::NotFound(what.into())
}

/// Every version of a listing: under review here, and published without review; newest
/// version first.
pub async fn versions(
    store: &Store,
    actor: &Actor,
    plugin_id: &str,
) -> Result<Vec<VersionView>, ReviewError> {
    let l = listing(store, actor, plugin_id).await?;
    let mut out: Vec<VersionView> = store
        .review_versions(Some(&l.row.id), None)
        .await?
        .into_iter()
        .map(|row| VersionView {
            row,
            reviewed: true,
        })
        .collect();
    out.extend(published_only(store, &l.row.publisher, &l.row.name, &out).await?);
    out.sort_by_key(|v| Reverse(parse_version(&v.row.version).ok()));
    Ok(out)
}

/// A listing's versions in the signed index that never went through review here.
async fn published_only(
    store: &Store,
    publisher: &str,
    name: &str,
    reviewed: &[VersionView],
) -> Result<Vec<VersionView>, ReviewError> {
    let Some(plugin) = store.plugin(publisher, name).await? else {
        return Ok(Vec::new());
    };
    Ok(store
        .versions(plugin.id)
        .await?
        .into_iter()
        .filter(|v| {
            let canonical = v.version_parsed.to_string();
            !reviewed
                .iter()
                .any(|r| r.row.canonical == canonical && r.row.hash == v.hash)
        })
        .map(|v| VersionView {
            row: ReviewVersionRow {
                id: ids::version(publisher, name, &v.version),
                listing_id: ids::plugin(publisher, name),
                publisher: publisher.to_owned(),
                name: name.to_owned(),
                canonical: v.version_parsed.to_string(),
                version: v.version,
                hash: v.hash,
                image: v.image,
                status: Status::Approved.as_str().to_owned(),
                created_at: v.published_at,
                uploaded_at: v.published_at,
                published_at: Some(v.published_at),
                ..Default::default()
            },
            reviewed: false,
        })
        .collect())
}

/// One version `actor` may see, by its id (also its submission's id).
pub async fn version(store: &Store, actor: &Actor, id: &str) -> Result<VersionView, ReviewError> {
    let id = rules::uuid("plugin_version_id", id)?;
    if let Some(row) = store.review_version(&id).await? {
        if actor.may_see(&row.publisher) {
            return Ok(VersionView {
                row,
                reviewed: true,
            });
        }
        return Err(not_found(format!("plugin version {id}")));
    }
    // Published without review: found among the visible plugins' versions.
    for (publisher, name) in visible(store, actor).await?.into_keys() {
        let found = published_only(store, &publisher, &name, &[]).await?;
        if let Some(v) = found.into_iter().find(|v| v.row.id == id) {
            return Ok(v);
        }
    }
    Err(not_found(format!("plugin version {id}")))
}

/// The exact bytes of `v` (found by [`version`], so visible to its caller).
pub async fn manifest(store: &Store, v: &VersionView) -> Result<Vec<u8>, ReviewError> {
    let bytes = if v.reviewed {
        store.review_definition(&v.row.id).await?
    } else {
        store
            .definition_by_hash(&v.row.publisher, &v.row.name, &v.row.hash)
            .await?
    };
    bytes.ok_or_else(|| not_found(format!("plugin version {}", v.row.id)))
}

/// `v`'s history, oldest first (none for a version published without review).
pub async fn history(store: &Store, v: &VersionView) -> Result<Vec<ReviewEventRow>, ReviewError> {
    Ok(store.review_events(&v.row.id).await?)
}

/// Uploads `manifest` as version `version` of a listing: a new draft, or new bytes for
/// a draft or a version sent back for changes. The manifest is validated as a publish
/// would, and its name and version must be the listing's and the request's.
pub async fn upload(
    store: &Store,
    publisher: &str,
    plugin_id: &str,
    version: &str,
    manifest: &[u8],
    release_notes: &str,
    now: i64,
) -> Result<ReviewVersionRow, ReviewError> {
    let actor = Actor::Publisher(publisher.to_owned());
    let l = listing(store, &actor, plugin_id).await?;
    rules::check_version(version)?;
    if manifest.is_empty() || manifest.len() > MAX_MANIFEST {
        return Err(ReviewError::Invalid {
            field: "manifest".into(),
            reason: format!(
                "is {} bytes; it must be 1 byte to {MAX_MANIFEST} bytes (1 MiB)",
                manifest.len()
            ),
        });
    }
    if release_notes.chars().count() > MAX_RELEASE_NOTES {
        return Err(ReviewError::Invalid {
            field: "release_notes".into(),
            reason: format!("at most {MAX_RELEASE_NOTES} characters are allowed"),
        });
    }
    let def = Definition::parse(manifest).map_err(ReviewError::Definition)?;
    if def.name() != l.row.name {
        return Err(ReviewError::Invalid {
            field: "manifest".into(),
            reason: format!(
                "metadata.name is `{}`, but this plugin is `{}`",
                def.name(),
                l.row.name
            ),
        });
    }
    let canonical = def.version.to_string();
    if parse_version(version)
        .map(|v| v.to_string())
        .ok()
        .as_deref()
        != Some(&canonical)
    {
        return Err(ReviewError::Invalid {
            field: "version".into(),
            reason: format!(
                "is {version}, but the manifest's metadata.version is {}",
                def.version_text()
            ),
        });
    }
    if let Some(plugin) = store.plugin(publisher, &l.row.name).await?
        && let Some((published, _)) = store.definition(plugin.id, &canonical).await?
    {
        return Err(ReviewError::Published(format!(
            "{publisher}/{} {} is in the signed index already (hash {}); published versions are immutable: upload a new version",
            l.row.name, published.version, published.hash
        )));
    }
    if !l.stored {
        // A plugin published without a listing gets the one drawn from its definition,
        // so its versions under review have a listing to belong to.
        store.create_listing(&l.row).await?;
    }
    let existing = store.review_version_at(&l.row.id, &canonical).await?;
    let row = ReviewVersionRow {
        id: existing.map_or_else(
            || ids::version(publisher, &l.row.name, def.version_text()),
            |e| e.id,
        ),
        listing_id: l.row.id.clone(),
        publisher: publisher.to_owned(),
        name: l.row.name.clone(),
        version: def.version_text().to_owned(),
        canonical,
        hash: def.hash.clone(),
        image: def.image.to_string(),
        release_notes: release_notes.to_owned(),
        status: Status::Draft.as_str().to_owned(),
        created_at: now,
        uploaded_at: now,
        ..Default::default()
    };
    match store
        .upload_review_version(&row, manifest, &actor.recorded())
        .await?
    {
        Upload::Stored(row) => Ok(row),
        Upload::Locked(row) => Err(wrong_status(
            &row,
            "uploaded again",
            &[Status::Draft, Status::ChangesRequested],
        )),
    }
}

fn wrong_status(row: &ReviewVersionRow, verb: &'static str, allowed: &[Status]) -> ReviewError {
    let allowed: Vec<String> = allowed.iter().map(ToString::to_string).collect();
    ReviewError::WrongStatus {
        what: format!("{}/{} {}", row.publisher, row.name, row.version),
        status: Status::parse(&row.status).unwrap_or(Status::Draft),
        verb,
        allowed: allowed.join(" or "),
    }
}

/// Submits or withdraws a version (its publisher), or decides on it (a reviewer).
pub async fn act(
    store: &Store,
    actor: &Actor,
    id: &str,
    action: Action,
    decision: Option<Decision>,
    now: i64,
) -> Result<ReviewVersionRow, ReviewError> {
    let id = rules::uuid(
        match actor {
            Actor::Publisher(_) => "plugin_version_id",
            Actor::Reviewer(_) => "submission_id",
        },
        id,
    )?;
    let missing = || not_found(format!("plugin version {id}"));
    let row = store.review_version(&id).await?.ok_or_else(missing)?;
    if !actor.may_see(&row.publisher) {
        return Err(missing());
    }
    let review = match (actor, decision) {
        (Actor::Reviewer(name), Some(d)) => Some(decide(name, d)?),
        _ => None,
    };
    let change = Transition {
        from: Status::before(action)
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect(),
        to: action.after().as_str().to_owned(),
        action: action.recorded().to_owned(),
        actor: actor.recorded(),
        at: now,
        review,
    };
    match store.transition(&id, &change).await? {
        None => Err(missing()),
        Some(Transitioned::Done(row)) => Ok(row),
        Some(Transitioned::Refused(row)) => {
            Err(wrong_status(&row, action.verb(), Status::before(action)))
        }
    }
}

fn feedback(text: &str, required: bool) -> Result<(), ReviewError> {
    let n = text.chars().count();
    if required && text.trim().is_empty() {
        return Err(ReviewError::Invalid {
            field: "feedback".into(),
            reason: "is required: say what the publisher should change".into(),
        });
    }
    if n > MAX_FEEDBACK {
        return Err(ReviewError::Invalid {
            field: "feedback".into(),
            reason: format!("is {n} characters; at most {MAX_FEEDBACK} are allowed"),
        });
    }
    Ok(())
}

fn decide(reviewer: &str, d: Decision) -> Result<ReviewDecision, ReviewError> {
    let (reason, text) = match d {
        Decision::Approve { feedback: f } => {
            feedback(&f, false)?;
            (None, f)
        }
        Decision::RequestChanges { feedback: f } => {
            feedback(&f, true)?;
            (None, f)
        }
        Decision::Reject {
            reason,
            feedback: f,
        } => {
            feedback(&f, false)?;
            (Some(reason.as_str().to_owned()), f)
        }
    };
    Ok(ReviewDecision {
        reviewer: reviewer.to_owned(),
        rejection_reason: reason,
        feedback: text,
    })
}

/// What `new` (a version of `row`'s plugin under review) asks for that the newest
/// published version does not; `None` for a plugin's first version.
pub async fn against_latest(
    store: &Store,
    row: &ReviewVersionRow,
    new: &Definition,
) -> Result<Option<crate::catalog::changes::Changes>, ReviewError> {
    let Some(plugin) = store.plugin(&row.publisher, &row.name).await? else {
        return Ok(None);
    };
    let Some(latest) = plugin.latest_version else {
        return Ok(None);
    };
    let Some((_, old)) = store.definition(plugin.id, &latest).await? else {
        return Ok(None);
    };
    Ok(Some(crate::catalog::changes::between(&old, new)))
}

/// Submissions in `status` (all when `None`), oldest first: versions submitted at
/// least once (a draft never submitted is its publisher's business).
pub async fn submissions(
    store: &Store,
    status: Option<Status>,
) -> Result<Vec<ReviewVersionRow>, ReviewError> {
    let mut rows = store
        .review_versions(None, status.map(Status::as_str))
        .await?;
    rows.retain(|r| r.submitted_at.is_some());
    Ok(rows)
}

/// The review gate of `serve --review required`: every definition of a publish that is
/// not in the signed index already (same bytes) must be approved with exactly these
/// bytes. Definitions that do not parse are left to the publish's own checks.
pub async fn check_approved(
    store: &Store,
    publisher: &str,
    definitions: &[&[u8]],
) -> Result<(), ReviewError> {
    for bytes in definitions {
        let Ok(def) = Definition::parse(bytes) else {
            continue;
        };
        let name = def.name();
        if store
            .definition_by_hash(publisher, name, &def.hash)
            .await?
            .is_some()
        {
            continue;
        }
        let listing_id = ids::plugin(publisher, name);
        let reviewed = store
            .review_version_at(&listing_id, &def.version.to_string())
            .await?;
        let why = match reviewed {
            Some(r) if r.status == Status::Approved.as_str() && r.hash == def.hash => continue,
            Some(r) if r.status == Status::Approved.as_str() => format!(
                "the approved bytes have hash {}; these differ, so they need a review of their own",
                r.hash
            ),
            Some(r) => format!(
                "its review status is {}",
                Status::parse(&r.status).unwrap_or(Status::Draft)
            ),
            None => "it was never submitted for review (`marketplace submit`)".into(),
        };
        return Err(ReviewError::NotApproved(format!(
            "{publisher}/{name} {} (definition hash {}) is not approved: {why}; this marketplace publishes reviewed versions only",
            def.version_text(),
            def.hash
        )));
    }
    Ok(())
}

/// `publisher`'s approved versions that are not in the signed index yet, with their
/// bytes: what `marketplace publish --approved` signs.
pub async fn approved_unpublished(
    store: &Store,
    publisher: &str,
) -> Result<Vec<(ReviewVersionRow, Vec<u8>)>, ReviewError> {
    let mut out = Vec::new();
    for row in store
        .review_versions(None, Some(Status::Approved.as_str()))
        .await?
    {
        if row.publisher != publisher || row.published_at.is_some() {
            continue;
        }
        if let Some(bytes) = store.review_definition(&row.id).await? {
            out.push((row, bytes));
        }
    }
    Ok(out)
}
