//! Per-organization sideloads and the local API's tokens, kept in the worker's
//! database. A sideload passes the same `Definition::parse` as `marketplace validate`
//! (and its companion document, when it has one, the same checks as a publisher's);
//! versions are immutable like published ones, so a changed file needs a new version.

use super::store::{Sideloads, SyncStore, SyncStoreError, Tokens};
use crate::definition::{Definition, InvalidDefinition};
use crate::token;

/// Sideloaded versions one organization may hold: enough for hand-inserted plugins,
/// small enough that an organization's view stays cheap to build per request.
pub const MAX_SIDELOADS_PER_ORG: i64 = 1_000;

const TOKEN_PREFIX: &str = "mst_";

#[derive(Debug, thiserror::Error)]
pub enum SideloadError {
    #[error("organization `{0}` is not a valid name (DNS-1123 label)")]
    BadOrg(String),
    #[error(transparent)]
    Invalid(#[from] InvalidDefinition),
    #[error(
        "{name} {version} is already sideloaded with other content; versions are immutable, so publish a new version"
    )]
    Conflict { name: String, version: String },
    #[error("the organization already holds {MAX_SIDELOADS_PER_ORG} sideloaded versions")]
    TooMany,
    #[error(transparent)]
    Store(#[from] SyncStoreError),
}

impl From<sqlx::Error> for SideloadError {
    fn from(e: sqlx::Error) -> Self {
        SideloadError::Store(e.into())
    }
}

/// One sideloaded version, as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SideloadRecord {
    pub name: String,
    pub version: String,
    pub hash: String,
    pub created_at: i64,
    /// The token that uploaded it.
    pub token_id: String,
}

/// Whether an upload stored something new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    New,
    /// The same bytes were already there.
    Unchanged,
    /// Other bytes were there and the caller asked to replace them (Fundament's
    /// `PutPluginDefinition` with `replace`).
    Replaced,
}

/// What to do when the version is already sideloaded with other bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    /// Refuse: versions are immutable (the JSON API; Fundament without `replace`).
    Refuse,
    /// Overwrite the stored bytes (Fundament's `replace`).
    Replace,
}

/// What a local API token may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Read the organization's view; add and remove its sideloads.
    Org(String),
    /// Read every organization's view (Fundament's own service account); write nothing.
    Reader,
}

impl Scope {
    pub fn may_read(&self, org: &str) -> bool {
        match self {
            Scope::Org(o) => o == org,
            Scope::Reader => true,
        }
    }

    pub fn may_write(&self, org: &str) -> bool {
        matches!(self, Scope::Org(o) if o == org)
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TokenRecord {
    pub id: String,
    /// `None` for a reader token.
    pub org: Option<String>,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

/// A sideload's extras as stored: JSON, or empty when it came without a companion.
fn extras_json(def: &Definition) -> String {
    if def.extras.is_empty() {
        String::new()
    } else {
        serde_json::to_string(&def.extras).expect("extras serialize")
    }
}

pub fn check_org(org: &str) -> Result<(), SideloadError> {
    if crate::definition::is_dns_label(org) {
        Ok(())
    } else {
        Err(SideloadError::BadOrg(org.chars().take(80).collect()))
    }
}

/// A sideload as the store writes it.
#[derive(Debug, Clone)]
pub struct NewSideload<'a> {
    pub org: &'a str,
    pub name: &'a str,
    pub version: String,
    pub hash: &'a str,
    pub summary: String,
    pub definition: &'a [u8],
    pub extras: String,
    pub created_at: i64,
    pub token_id: &'a str,
}

/// What [`Sideloads::put_sideload`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    Added(Added),
    /// Other content holds the version and the caller did not ask to replace it.
    Conflict,
    /// The organization holds as many versions as it may.
    Full,
}

/// What to do with a version, given the hash and extras stored for it (if any). Every
/// backend decides by this, inside its transaction.
pub(crate) fn verdict(
    existing: Option<(String, String)>,
    new: &NewSideload<'_>,
    replace: bool,
) -> Verdict {
    match existing {
        // A version's content is its bytes and the extras beside them: either changed
        // is another version's worth of change.
        Some((hash, extras)) if hash == new.hash && extras == new.extras => Verdict::Unchanged,
        Some(_) if replace => Verdict::Replace,
        Some(_) => Verdict::Conflict,
        None => Verdict::Insert,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Unchanged,
    Replace,
    Conflict,
    Insert,
}

impl SyncStore {
    /// Stores a validated definition for `org`; the same bytes and extras again change
    /// nothing, and other bytes or extras for a stored version are refused unless
    /// `on_conflict` replaces them.
    pub async fn add_sideload(
        &self,
        org: &str,
        def: &Definition,
        token_id: &str,
        now: i64,
        on_conflict: OnConflict,
    ) -> Result<Added, SideloadError> {
        check_org(org)?;
        let new = NewSideload {
            org,
            name: def.name(),
            version: def.version.to_string(),
            hash: &def.hash,
            summary: super::store::summary_json(def),
            definition: &def.bytes,
            extras: extras_json(def),
            created_at: now,
            token_id,
        };
        let replace = on_conflict == OnConflict::Replace;
        match self
            .put_sideload(&new, replace, MAX_SIDELOADS_PER_ORG)
            .await?
        {
            Stored::Added(added) => Ok(added),
            Stored::Conflict => Err(SideloadError::Conflict {
                name: new.name.to_owned(),
                version: new.version,
            }),
            Stored::Full => Err(SideloadError::TooMany),
        }
    }

    /// Creates a token; returns its id and the token itself, shown only this once.
    pub async fn create_token(
        &self,
        scope: &Scope,
        now: i64,
    ) -> Result<(String, String), SideloadError> {
        let org = match scope {
            Scope::Org(org) => {
                check_org(org)?;
                Some(org.as_str())
            }
            Scope::Reader => None,
        };
        let id = token::random_hex(6);
        let token = token::generate(TOKEN_PREFIX);
        self.insert_token(&id, &token::hash(&token), org, now)
            .await?;
        Ok((id, token))
    }

    /// The id and scope of a live token.
    pub async fn token_scope(
        &self,
        token: &str,
    ) -> Result<Option<(String, Scope)>, SyncStoreError> {
        if !token.starts_with(TOKEN_PREFIX) || token.len() > 128 {
            return Ok(None);
        }
        let row = self.live_token(&token::hash(token)).await?;
        Ok(row.map(|(id, org)| (id, org.map_or(Scope::Reader, Scope::Org))))
    }
}
