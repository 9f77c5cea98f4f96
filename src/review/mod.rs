//! Publishing with review: a publisher's plugin listings, the versions it uploads as
//! drafts and submits, and reviewers' decisions (Fundament's
//! `registry.v1.PublicationService` and `admin.v1.ReviewService` sit on this module).
//!
//! Review decides *whether* a version the publisher signs may enter the signed index;
//! the marketplace never signs for a publisher. With `serve --review required`, the
//! publish API accepts a new target only when that exact name, version and definition
//! hash is approved here ([`check_approved`]).
//!
//! Status rules (nothing else is allowed, `WrongStatus` otherwise):
//! - upload: a new version, or new bytes for a `DRAFT` or `CHANGES_REQUESTED` one (it
//!   becomes a `DRAFT` again); a version in the signed index is never uploaded again;
//! - submit: `DRAFT` or `CHANGES_REQUESTED` → `PENDING`;
//! - withdraw: `DRAFT`, `PENDING` or `CHANGES_REQUESTED` → `WITHDRAWN`;
//! - approve, request changes, reject: `PENDING` → `APPROVED`, `CHANGES_REQUESTED`,
//!   `REJECTED`.
//!
//! A version is one submission: its id is also the submission's id, and its history
//! (every upload, submission and decision, with who and when) is kept.
//!
//! Layering: calls `store`, `definition`, `catalog` (curation, the published plugins);
//! knows nothing of HTTP.

pub mod listing;
mod listings;
mod ops;

pub use listing::{Feature, Link, ListingFields, Visibility};
pub use listings::*;
pub use ops::*;

use crate::definition::InvalidDefinition;
use crate::store::StoreError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Draft,
    Pending,
    ChangesRequested,
    Approved,
    Rejected,
    Withdrawn,
}

impl Status {
    pub const ALL: [Status; 6] = [
        Status::Draft,
        Status::Pending,
        Status::ChangesRequested,
        Status::Approved,
        Status::Rejected,
        Status::Withdrawn,
    ];

    /// As the store and our JSON write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Draft => "draft",
            Status::Pending => "pending",
            Status::ChangesRequested => "changes_requested",
            Status::Approved => "approved",
            Status::Rejected => "rejected",
            Status::Withdrawn => "withdrawn",
        }
    }

    pub fn parse(text: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// The statuses an action starts from.
    fn before(action: Action) -> &'static [Status] {
        match action {
            Action::Submit => &[Status::Draft, Status::ChangesRequested],
            Action::Withdraw => &[Status::Draft, Status::Pending, Status::ChangesRequested],
            Action::Approve | Action::RequestChanges | Action::Reject => &[Status::Pending],
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.as_str().to_uppercase())
    }
}

/// What a publisher or a reviewer does to a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Submit,
    Withdraw,
    Approve,
    RequestChanges,
    Reject,
}

impl Action {
    fn after(self) -> Status {
        match self {
            Action::Submit => Status::Pending,
            Action::Withdraw => Status::Withdrawn,
            Action::Approve => Status::Approved,
            Action::RequestChanges => Status::ChangesRequested,
            Action::Reject => Status::Rejected,
        }
    }

    /// The word the history records.
    fn recorded(self) -> &'static str {
        match self {
            Action::Submit => "submitted",
            Action::Withdraw => "withdrawn",
            Action::Approve => "approved",
            Action::RequestChanges => "changes_requested",
            Action::Reject => "rejected",
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Action::Submit => "submitted",
            Action::Withdraw => "withdrawn",
            Action::Approve => "approved",
            Action::RequestChanges => "sent back for changes",
            Action::Reject => "rejected",
        }
    }
}

/// Why a reviewer rejects a version (admin.v1's `RejectionReason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectionReason {
    IncompleteMetadata,
    Duplicate,
    SecurityConcerns,
    NamingGuidelines,
    OutOfScope,
    Other,
}

impl RejectionReason {
    pub const ALL: [RejectionReason; 6] = [
        RejectionReason::IncompleteMetadata,
        RejectionReason::Duplicate,
        RejectionReason::SecurityConcerns,
        RejectionReason::NamingGuidelines,
        RejectionReason::OutOfScope,
        RejectionReason::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RejectionReason::IncompleteMetadata => "incomplete_metadata",
            RejectionReason::Duplicate => "duplicate",
            RejectionReason::SecurityConcerns => "security_concerns",
            RejectionReason::NamingGuidelines => "naming_guidelines",
            RejectionReason::OutOfScope => "out_of_scope",
            RejectionReason::Other => "other",
        }
    }

    pub fn parse(text: &str) -> Option<RejectionReason> {
        let text = text.to_ascii_lowercase().replace('-', "_");
        RejectionReason::ALL
            .into_iter()
            .find(|r| r.as_str() == text)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// A request field breaks a rule; Fundament answers `invalid_argument` naming it.
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    /// The uploaded manifest is not a valid definition.
    #[error("manifest: {0}")]
    Definition(InvalidDefinition),
    /// Not found, or not the caller's to see (another publisher's listing or draft is
    /// reported exactly as one that does not exist).
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    /// The version's status does not allow the action.
    #[error("{what} is {status}; it can be {verb} only when {allowed}")]
    WrongStatus {
        what: String,
        status: Status,
        verb: &'static str,
        allowed: String,
    },
    /// Published versions are immutable, and a listing with published versions stays.
    #[error("{0}")]
    Published(String),
    /// The review gate: a new target that is not approved.
    #[error("{0}")]
    NotApproved(String),
    /// Something this marketplace does not offer yet.
    #[error("{0}")]
    Unimplemented(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How `serve` admits new targets into the signed index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReviewMode {
    /// A publisher's signed upload is published as it is (no review).
    #[default]
    Off,
    /// A new target is published only once a reviewer approved its exact bytes.
    Required,
}

/// The history's actor for a publisher.
pub fn publisher_actor(name: &str) -> String {
    format!("publisher:{name}")
}

/// The history's actor for a reviewer.
pub fn reviewer_actor(name: &str) -> String {
    format!("reviewer:{name}")
}
