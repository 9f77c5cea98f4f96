//! Per-organization sideloads and the local API's tokens, kept in the worker's
//! database. A sideload passes the same `Definition::parse` as `marketplace validate`
//! (and its companion document, when it has one, the same checks as a publisher's);
//! versions are immutable like published ones, so a changed file needs a new version.

use super::store::{SyncStore, SyncStoreError};
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
        let version = def.version.to_string();
        let mut tx = crate::db::begin_write(&self.pool).await?;
        // A version's content is its bytes and the extras beside them: either changed
        // is another version's worth of change.
        let existing: Option<(String, String)> = sqlx::query_as(
            "SELECT hash, extras FROM sideloads WHERE org = ? AND name = ? AND version = ?",
        )
        .bind(org)
        .bind(def.name())
        .bind(&version)
        .fetch_optional(&mut *tx)
        .await?;
        match existing {
            Some((hash, extras)) if hash == def.hash && extras == extras_json(def) => {
                return Ok(Added::Unchanged);
            }
            Some(_) if on_conflict == OnConflict::Replace => {
                sqlx::query(
                    "UPDATE sideloads SET hash = ?, summary = ?, definition = ?, extras = ?, created_at = ?,
                     token_id = ? WHERE org = ? AND name = ? AND version = ?",
                )
                .bind(&def.hash)
                .bind(super::store::summary_json(def))
                .bind(&def.bytes)
                .bind(extras_json(def))
                .bind(now)
                .bind(token_id)
                .bind(org)
                .bind(def.name())
                .bind(&version)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                return Ok(Added::Replaced);
            }
            Some(_) => {
                return Err(SideloadError::Conflict {
                    name: def.name().to_owned(),
                    version,
                });
            }
            None => {}
        }
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sideloads WHERE org = ?")
            .bind(org)
            .fetch_one(&mut *tx)
            .await?;
        if count >= MAX_SIDELOADS_PER_ORG {
            return Err(SideloadError::TooMany);
        }
        sqlx::query(
            "INSERT INTO sideloads (org, name, version, hash, summary, definition, extras, created_at, token_id)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(org)
        .bind(def.name())
        .bind(&version)
        .bind(&def.hash)
        .bind(super::store::summary_json(def))
        .bind(&def.bytes)
        .bind(extras_json(def))
        .bind(now)
        .bind(token_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Added::New)
    }

    /// The organization's sideloads, by name and version.
    pub async fn sideloads(&self, org: &str) -> Result<Vec<SideloadRecord>, SyncStoreError> {
        Ok(sqlx::query_as(
            "SELECT name, version, hash, created_at, token_id FROM sideloads WHERE org = ? ORDER BY name, version",
        )
        .bind(org)
        .fetch_all(&self.pool)
        .await?)
    }

    /// (name, version, hash, summary JSON) of every sideload of `org`, for its view.
    pub async fn sideload_rows(
        &self,
        org: &str,
    ) -> Result<Vec<(String, String, String, String)>, SyncStoreError> {
        Ok(
            sqlx::query_as("SELECT name, version, hash, summary FROM sideloads WHERE org = ?")
                .bind(org)
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// The bytes of one sideloaded version.
    pub async fn sideload_bytes(
        &self,
        org: &str,
        name: &str,
        version: &str,
    ) -> Result<Option<Vec<u8>>, SyncStoreError> {
        Ok(sqlx::query_scalar(
            "SELECT definition FROM sideloads WHERE org = ? AND name = ? AND version = ?",
        )
        .bind(org)
        .bind(name)
        .bind(version)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Removes one version, or every version of `name` when `version` is `None`;
    /// returns how many were removed.
    pub async fn delete_sideloads(
        &self,
        org: &str,
        name: &str,
        version: Option<&str>,
    ) -> Result<u64, SyncStoreError> {
        Ok(sqlx::query(
            "DELETE FROM sideloads WHERE org = ?1 AND name = ?2 AND (?3 IS NULL OR version = ?3)",
        )
        .bind(org)
        .bind(name)
        .bind(version)
        .execute(&self.pool)
        .await?
        .rows_affected())
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
        sqlx::query("INSERT INTO tokens (id, sha256, org, created_at) VALUES (?, ?, ?, ?)")
            .bind(&id)
            .bind(token::hash(&token))
            .bind(org)
            .bind(now)
            .execute(&self.pool)
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
        let row: Option<(String, Option<String>)> =
            sqlx::query_as("SELECT id, org FROM tokens WHERE sha256 = ? AND revoked_at IS NULL")
                .bind(token::hash(token))
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(|(id, org)| (id, org.map_or(Scope::Reader, Scope::Org))))
    }

    pub async fn tokens(&self) -> Result<Vec<TokenRecord>, SyncStoreError> {
        Ok(sqlx::query_as(
            "SELECT id, org, created_at, revoked_at FROM tokens ORDER BY created_at, id",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Revokes a token by id; whether a live token was revoked.
    pub async fn revoke_token(&self, id: &str, now: i64) -> Result<bool, SyncStoreError> {
        Ok(
            sqlx::query("UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL")
                .bind(now)
                .bind(id)
                .execute(&self.pool)
                .await?
                .rows_affected()
                == 1,
        )
    }
}
