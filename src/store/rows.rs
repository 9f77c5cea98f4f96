//! How both backends turn a result row into the store's types: the columns are named
//! the same on SQLite and PostgreSQL, so the mapping is written once, as `FromRow`
//! shapes read by name. A row that does not decode is a bug in the query beside it
//! (its columns are the query's own), so these panic as `Row::get` would.

use sqlx::{FromRow, Row};

use super::{ImageMirror, MirrorStatus, PluginRef, StoredMetadata};

fn read<'r, T: FromRow<'r, R>, R: Row>(r: &'r R) -> T {
    T::from_row(r).unwrap_or_else(|e| panic!("a store query's row does not decode: {e}"))
}

/// The mirror columns a version's query joins in (`m.status AS mirror_status`, …).
#[derive(FromRow)]
pub(crate) struct MirrorColumns {
    mirror_status: Option<String>,
    mirror_size: Option<i64>,
    mirror_error: Option<String>,
    mirror_next: Option<i64>,
    mirror_signature_key: Option<String>,
}

/// Where a version's image stands in the mirror; `None` before it was enqueued.
pub(crate) fn image_mirror<'r, R: Row>(r: &'r R) -> Option<ImageMirror>
where
    MirrorColumns: FromRow<'r, R>,
{
    let m: MirrorColumns = read(r);
    m.mirror_status.map(|status| {
        let failed = status == "failed";
        ImageMirror {
            next_attempt_at: m.mirror_next.filter(|_| failed),
            error: m.mirror_error.filter(|_| failed),
            size: m.mirror_size,
            verified_by: m.mirror_signature_key,
            status,
        }
    })
}

#[derive(FromRow)]
pub(crate) struct VersionColumns {
    signer_key_ids: String,
    not_installable: Option<String>,
}

/// Why Fundament cannot install a version; `None` when it can (or was not checked).
pub(crate) fn not_installable<'r, R: Row>(r: &'r R) -> Option<String>
where
    VersionColumns: FromRow<'r, R>,
{
    read::<VersionColumns, R>(r)
        .not_installable
        .filter(|s| !s.is_empty())
}

/// The key ids that signed a version (stored space-separated).
pub(crate) fn signers<'r, R: Row>(r: &'r R) -> Vec<String>
where
    VersionColumns: FromRow<'r, R>,
{
    read::<VersionColumns, R>(r)
        .signer_key_ids
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// A plugin found by name: `publisher`, `name`, `display_name` columns.
pub(crate) fn plugin_ref<R: Row>(r: R) -> PluginRef
where
    for<'r> PluginRef: FromRow<'r, R>,
{
    read(&r)
}

#[derive(FromRow)]
pub(crate) struct MetadataColumns {
    role: String,
    version: i64,
    bytes: Vec<u8>,
    sha256: String,
    expires_at: i64,
    created_at: i64,
}

/// A `tuf_metadata` row.
pub(crate) fn metadata_row<R: Row>(r: R) -> StoredMetadata
where
    for<'r> MetadataColumns: FromRow<'r, R>,
{
    let m: MetadataColumns = read(&r);
    StoredMetadata {
        role: m.role,
        version: m.version.try_into().unwrap_or(0),
        bytes: m.bytes,
        sha256: m.sha256,
        expires_at: m.expires_at,
        created_at: m.created_at,
    }
}

#[derive(FromRow)]
pub(crate) struct StatusColumns {
    host: String,
    repository: String,
    digest: String,
    status: String,
    attempts: i64,
    next_attempt_at: i64,
    last_error: Option<String>,
    last_error_detail: Option<String>,
    size: Option<i64>,
    signature_key: Option<String>,
    updated_at: i64,
}

/// A mirror job's status row (the columns of `STATUS_COLUMNS` in each backend).
pub(crate) fn status_row<'r, R: Row>(r: &'r R) -> MirrorStatus
where
    StatusColumns: FromRow<'r, R>,
{
    let s: StatusColumns = read(r);
    MirrorStatus {
        next_attempt_at: (s.status == "failed").then_some(s.next_attempt_at),
        host: s.host,
        repository: s.repository,
        digest: s.digest,
        status: s.status,
        attempts: s.attempts,
        last_error: s.last_error,
        last_error_detail: s.last_error_detail,
        size: s.size,
        verified_by: s.signature_key,
        updated_at: s.updated_at,
    }
}
