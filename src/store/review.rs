//! Publishing with review: plugin listings, versions uploaded for review with their
//! history, and reviewers (tokens stored hashed). The rules (which status may follow
//! which, what a field may hold) are `review`'s; the store keeps rows and applies a
//! change only from the statuses the caller allows, in one transaction, so two
//! reviewers (or a reviewer and a withdrawing publisher) on two replicas cannot both
//! win.
//!
//! The SQL is the same text on both backends (`$N` parameters, which sqlx binds by
//! number on SQLite too), so one macro writes both implementations; only the writing
//! transaction (SQLite's `BEGIN IMMEDIATE`, PostgreSQL's advisory lock) and the change
//! feed's bump differ.

use super::StoreError;

/// A plugin's listing as stored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListingRow {
    /// The plugin's stable id (`ids::plugin`).
    pub id: String,
    pub publisher: String,
    pub name: String,
    pub display_name: String,
    pub description_short: String,
    pub description: String,
    pub category_ids: Vec<String>,
    pub tags: Vec<String>,
    /// Artwork URL.
    pub image: String,
    pub repository_url: String,
    pub license: String,
    pub author_name: String,
    pub author_url: String,
    pub documentation_links: Vec<LinkRow>,
    /// Feature blocks: title and body.
    pub features: Vec<(String, String)>,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LinkRow {
    pub id: String,
    pub title: String,
    pub url_name: String,
    pub url: String,
}

/// A version uploaded for review (without its bytes: [`Store::review_definition`]).
///
/// [`Store::review_definition`]: super::Store::review_definition
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReviewVersionRow {
    /// The version's stable id (`ids::version`).
    pub id: String,
    pub listing_id: String,
    pub publisher: String,
    pub name: String,
    /// As the definition writes it.
    pub version: String,
    /// Without a leading `v`: the version's identity.
    pub canonical: String,
    pub hash: String,
    pub image: String,
    pub release_notes: String,
    /// `review::Status` as text.
    pub status: String,
    pub created_at: i64,
    pub uploaded_at: i64,
    pub submitted_at: Option<i64>,
    pub reviewed_at: Option<i64>,
    pub reviewer: Option<String>,
    pub rejection_reason: Option<String>,
    pub feedback: String,
    /// When these exact bytes entered the signed index, read from the published
    /// versions (never written here).
    pub published_at: Option<i64>,
}

/// One entry of a version's review history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewEventRow {
    pub action: String,
    /// `publisher:NAME` or `reviewer:NAME`.
    pub actor: String,
    pub hash: String,
    pub feedback: String,
    pub at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewerRow {
    pub name: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

/// What [`Store::upload_review_version`](super::Store::upload_review_version) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upload {
    /// Stored as a draft (new, or replacing the bytes of a draft or of a version whose
    /// reviewer asked for changes).
    Stored(ReviewVersionRow),
    /// The version exists in a status that keeps its bytes; nothing changed.
    Locked(ReviewVersionRow),
}

/// A change of a version's status, applied only from `from`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub from: Vec<String>,
    pub to: String,
    /// The history's action word (`submitted`, `approved`, ...).
    pub action: String,
    pub actor: String,
    pub at: i64,
    /// A reviewer's decision: who, the rejection reason if any, and the feedback
    /// (replacing the previous decision's).
    pub review: Option<ReviewDecision>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewDecision {
    pub reviewer: String,
    pub rejection_reason: Option<String>,
    pub feedback: String,
}

/// What [`Store::transition`](super::Store::transition) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transitioned {
    Done(ReviewVersionRow),
    /// The version's status is not one the transition starts from; nothing changed.
    Refused(ReviewVersionRow),
}

/// A listing's columns, in the order `create_listing` binds them (a macro, so that
/// `concat!` can build statements from it).
macro_rules! listing_columns {
    () => {
        "id, publisher, name, display_name, description_short, description, category_ids, tags, image, repository_url, license, author_name, author_url, documentation_links, features, created_at, updated_at"
    };
}

/// A version under review with its listing's names and, from the published versions,
/// when these exact bytes entered the index.
macro_rules! version_select {
    () => {
        "SELECT rv.id, rv.listing_id, l.publisher, l.name, rv.version, rv.canonical, rv.hash, rv.image, rv.release_notes, rv.status, rv.created_at, rv.uploaded_at, rv.submitted_at, rv.reviewed_at, rv.reviewer, rv.rejection_reason, rv.feedback,
        (SELECT pv.published_at FROM plugin_versions pv
           JOIN plugins p ON p.id = pv.plugin_id
           JOIN publishers u ON u.id = p.publisher_id
          WHERE u.name = l.publisher AND p.name = l.name
            AND pv.canonical = rv.canonical AND pv.hash = rv.hash) AS published_at
   FROM review_versions rv JOIN listings l ON l.id = rv.listing_id"
    };
}

pub(crate) fn json_list<T: serde::Serialize>(items: &[T]) -> String {
    serde_json::to_string(items).expect("lists of strings serialize")
}

/// A stored JSON list, or the column's name when it is not one (a row written by hand).
fn parse_list<T: serde::de::DeserializeOwned>(column: &str, text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| {
        StoreError::Database(sqlx::Error::Decode(
            format!("listings.{column} is not the JSON list it should be: {e}").into(),
        ))
    })
}

pub(crate) fn listing_from<R: sqlx::Row>(row: &R) -> Result<ListingRow, StoreError>
where
    for<'r> &'r str: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let text = |c: &str| row.try_get::<String, _>(c);
    let links: Vec<[String; 4]> = parse_list("documentation_links", &text("documentation_links")?)?;
    let features: Vec<[String; 2]> = parse_list("features", &text("features")?)?;
    Ok(ListingRow {
        id: text("id")?,
        publisher: text("publisher")?,
        name: text("name")?,
        display_name: text("display_name")?,
        description_short: text("description_short")?,
        description: text("description")?,
        category_ids: parse_list("category_ids", &text("category_ids")?)?,
        tags: parse_list("tags", &text("tags")?)?,
        image: text("image")?,
        repository_url: text("repository_url")?,
        license: text("license")?,
        author_name: text("author_name")?,
        author_url: text("author_url")?,
        documentation_links: links
            .into_iter()
            .map(|[id, title, url_name, url]| LinkRow {
                id,
                title,
                url_name,
                url,
            })
            .collect(),
        features: features.into_iter().map(|[t, b]| (t, b)).collect(),
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

pub(crate) fn version_from<R: sqlx::Row>(row: &R) -> Result<ReviewVersionRow, StoreError>
where
    for<'r> &'r str: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database>,
    for<'r> Option<i64>: sqlx::Decode<'r, R::Database>,
{
    let text = |c: &str| row.try_get::<String, _>(c);
    Ok(ReviewVersionRow {
        id: text("id")?,
        listing_id: text("listing_id")?,
        publisher: text("publisher")?,
        name: text("name")?,
        version: text("version")?,
        canonical: text("canonical")?,
        hash: text("hash")?,
        image: text("image")?,
        release_notes: text("release_notes")?,
        status: text("status")?,
        created_at: row.try_get("created_at")?,
        uploaded_at: row.try_get("uploaded_at")?,
        submitted_at: row.try_get("submitted_at")?,
        reviewed_at: row.try_get("reviewed_at")?,
        reviewer: row.try_get("reviewer")?,
        rejection_reason: row.try_get("rejection_reason")?,
        feedback: text("feedback")?,
        published_at: row.try_get("published_at")?,
    })
}

/// The review store's methods for one backend: `$store` with its `pool`, `$begin`
/// opening a writing transaction and `$bump` telling catalog readers (a listing
/// changes what catalog pages show).
macro_rules! review_store {
    ($store:ty, $conn:ty, $begin:path, $bump:path) => {
        impl $store {
            async fn review_version_in(
                conn: &mut $conn,
                id: &str,
            ) -> Result<Option<crate::store::review::ReviewVersionRow>, StoreError> {
                let row = sqlx::query(concat!(
                    crate::store::review::version_select!(),
                    " WHERE rv.id = $1"
                ))
                .bind(id)
                .fetch_optional(&mut *conn)
                .await?;
                row.as_ref()
                    .map(crate::store::review::version_from)
                    .transpose()
            }

            #[allow(clippy::too_many_arguments)]
            async fn record_review_event(
                conn: &mut $conn,
                version_id: &str,
                action: &str,
                actor: &str,
                hash: &str,
                feedback: &str,
                at: i64,
            ) -> Result<(), StoreError> {
                sqlx::query(
                    "INSERT INTO review_events (version_id, action, actor, hash, feedback, at)
                     VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(version_id)
                .bind(action)
                .bind(actor)
                .bind(hash)
                .bind(feedback)
                .bind(at)
                .execute(&mut *conn)
                .await?;
                Ok(())
            }

            /// Stores a new listing; false when the plugin has one already.
            pub(crate) async fn create_listing(
                &self,
                row: &crate::store::review::ListingRow,
            ) -> Result<bool, StoreError> {
                let mut tx = $begin(&self.pool).await?;
                let done = crate::store::review::bind_listing!(
                    sqlx::query(concat!(
                        "INSERT INTO listings (",
                        crate::store::review::listing_columns!(),
                        ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
                         ON CONFLICT (id) DO NOTHING"
                    )),
                    row
                )
                .execute(&mut *tx)
                .await?;
                $bump(&mut tx, crate::store::Domain::Catalog).await?;
                tx.commit().await?;
                Ok(done.rows_affected() == 1)
            }

            /// Replaces a listing's editable fields; false when it has none.
            pub(crate) async fn update_listing(
                &self,
                row: &crate::store::review::ListingRow,
            ) -> Result<bool, StoreError> {
                let mut tx = $begin(&self.pool).await?;
                // Every column is bound as for an insert; the listing's names and
                // creation identify the row.
                let done = crate::store::review::bind_listing!(
                    sqlx::query(
                        "UPDATE listings SET display_name = $4, description_short = $5, description = $6,
                            category_ids = $7, tags = $8, image = $9, repository_url = $10, license = $11,
                            author_name = $12, author_url = $13, documentation_links = $14, features = $15,
                            updated_at = $17
                          WHERE id = $1 AND publisher = $2 AND name = $3 AND created_at = $16",
                    ),
                    row
                )
                .execute(&mut *tx)
                .await?;
                $bump(&mut tx, crate::store::Domain::Catalog).await?;
                tx.commit().await?;
                Ok(done.rows_affected() == 1)
            }

            pub(crate) async fn listing(
                &self,
                id: &str,
            ) -> Result<Option<crate::store::review::ListingRow>, StoreError> {
                let row = sqlx::query(concat!(
                    "SELECT ",
                    crate::store::review::listing_columns!(),
                    " FROM listings WHERE id = $1"
                )).bind(id).fetch_optional(&self.pool).await?;
                row.as_ref()
                    .map(crate::store::review::listing_from)
                    .transpose()
            }

            /// Every listing (of `publisher`, when given), by publisher and name.
            pub(crate) async fn listings(
                &self,
                publisher: Option<&str>,
            ) -> Result<Vec<crate::store::review::ListingRow>, StoreError> {
                let rows = sqlx::query(concat!(
                    "SELECT ",
                    crate::store::review::listing_columns!(),
                    " FROM listings WHERE ($1 IS NULL OR publisher = $1) ORDER BY publisher, name"
                ))
                    .bind(publisher)
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map(crate::store::review::listing_from).collect()
            }

            /// Deletes a listing and every version under review with it; false when
            /// there was none.
            pub(crate) async fn delete_listing(&self, id: &str) -> Result<bool, StoreError> {
                let mut tx = $begin(&self.pool).await?;
                sqlx::query(
                    "DELETE FROM review_events WHERE version_id IN
                       (SELECT id FROM review_versions WHERE listing_id = $1)",
                )
                .bind(id)
                .execute(&mut *tx)
                .await?;
                sqlx::query("DELETE FROM review_versions WHERE listing_id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                let done = sqlx::query("DELETE FROM listings WHERE id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                $bump(&mut tx, crate::store::Domain::Catalog).await?;
                tx.commit().await?;
                Ok(done.rows_affected() == 1)
            }

            /// Stores `row` (its status ignored) with `definition` as a draft: a new
            /// version, or new bytes for one that is a draft or whose reviewer asked
            /// for changes. Any other existing version is left as it is.
            pub(crate) async fn upload_review_version(
                &self,
                row: &crate::store::review::ReviewVersionRow,
                definition: &[u8],
                actor: &str,
            ) -> Result<crate::store::review::Upload, StoreError> {
                use crate::store::review::Upload;
                let mut tx = $begin(&self.pool).await?;
                let current = Self::review_version_in(&mut tx, &row.id).await?;
                if let Some(current) = current {
                    if !matches!(current.status.as_str(), "draft" | "changes_requested") {
                        return Ok(Upload::Locked(current));
                    }
                    sqlx::query(
                        "UPDATE review_versions SET version = $2, definition = $3, hash = $4, image = $5,
                            release_notes = $6, status = 'draft', uploaded_at = $7
                          WHERE id = $1",
                    )
                    .bind(&row.id)
                    .bind(&row.version)
                    .bind(definition)
                    .bind(&row.hash)
                    .bind(&row.image)
                    .bind(&row.release_notes)
                    .bind(row.uploaded_at)
                    .execute(&mut *tx)
                    .await?;
                } else {
                    sqlx::query(
                        "INSERT INTO review_versions (id, listing_id, version, canonical, definition, hash,
                            image, release_notes, status, created_at, uploaded_at)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'draft', $9, $9)",
                    )
                    .bind(&row.id)
                    .bind(&row.listing_id)
                    .bind(&row.version)
                    .bind(&row.canonical)
                    .bind(definition)
                    .bind(&row.hash)
                    .bind(&row.image)
                    .bind(&row.release_notes)
                    .bind(row.uploaded_at)
                    .execute(&mut *tx)
                    .await?;
                }
                Self::record_review_event(
                    &mut tx, &row.id, "uploaded", actor, &row.hash, "", row.uploaded_at,
                )
                .await?;
                let stored = Self::review_version_in(&mut tx, &row.id)
                    .await?
                    .ok_or_else(|| {
                        StoreError::Database(sqlx::Error::RowNotFound)
                    })?;
                tx.commit().await?;
                Ok(Upload::Stored(stored))
            }

            pub(crate) async fn review_version(
                &self,
                id: &str,
            ) -> Result<Option<crate::store::review::ReviewVersionRow>, StoreError> {
                let mut conn = self.pool.acquire().await?;
                let conn: &mut $conn = &mut conn;
                Self::review_version_in(conn, id).await
            }

            /// The version of listing `listing_id` whose canonical version is `canonical`.
            pub(crate) async fn review_version_at(
                &self,
                listing_id: &str,
                canonical: &str,
            ) -> Result<Option<crate::store::review::ReviewVersionRow>, StoreError> {
                let row = sqlx::query(concat!(
                    crate::store::review::version_select!(),
                    " WHERE rv.listing_id = $1 AND rv.canonical = $2"
                ))
                    .bind(listing_id)
                    .bind(canonical)
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref()
                    .map(crate::store::review::version_from)
                    .transpose()
            }

            /// The exact bytes uploaded for a version.
            pub(crate) async fn review_definition(
                &self,
                id: &str,
            ) -> Result<Option<Vec<u8>>, StoreError> {
                Ok(
                    sqlx::query_scalar("SELECT definition FROM review_versions WHERE id = $1")
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?,
                )
            }

            /// Versions under review (of one listing, in one status, when given), oldest
            /// upload first.
            pub(crate) async fn review_versions(
                &self,
                listing_id: Option<&str>,
                status: Option<&str>,
            ) -> Result<Vec<crate::store::review::ReviewVersionRow>, StoreError> {
                let rows = sqlx::query(concat!(
                    crate::store::review::version_select!(),
                    " WHERE ($1 IS NULL OR rv.listing_id = $1) AND ($2 IS NULL OR rv.status = $2)
                      ORDER BY rv.created_at, rv.id"
                ))
                    .bind(listing_id)
                    .bind(status)
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map(crate::store::review::version_from).collect()
            }

            /// Applies `change` to version `id` if its status is one `change` starts
            /// from, with its history entry, in one transaction.
            pub(crate) async fn transition(
                &self,
                id: &str,
                change: &crate::store::review::Transition,
            ) -> Result<Option<crate::store::review::Transitioned>, StoreError> {
                use crate::store::review::Transitioned;
                let mut tx = $begin(&self.pool).await?;
                let Some(current) = Self::review_version_in(&mut tx, id).await? else {
                    return Ok(None);
                };
                if !change.from.contains(&current.status) {
                    return Ok(Some(Transitioned::Refused(current)));
                }
                let feedback = match &change.review {
                    Some(r) => {
                        sqlx::query(
                            "UPDATE review_versions SET status = $2, reviewed_at = $3, reviewer = $4,
                                rejection_reason = $5, feedback = $6 WHERE id = $1",
                        )
                        .bind(id)
                        .bind(&change.to)
                        .bind(change.at)
                        .bind(&r.reviewer)
                        .bind(&r.rejection_reason)
                        .bind(&r.feedback)
                        .execute(&mut *tx)
                        .await?;
                        r.feedback.as_str()
                    }
                    None => {
                        // A submission starts a new review: the previous decision's
                        // feedback stays in the history, not on the version.
                        sqlx::query(
                            "UPDATE review_versions SET status = $2,
                                submitted_at = CASE WHEN $2 = 'pending' THEN $3 ELSE submitted_at END
                              WHERE id = $1",
                        )
                        .bind(id)
                        .bind(&change.to)
                        .bind(change.at)
                        .execute(&mut *tx)
                        .await?;
                        ""
                    }
                };
                Self::record_review_event(
                    &mut tx, id, &change.action, &change.actor, &current.hash, feedback, change.at,
                )
                .await?;
                let done = Self::review_version_in(&mut tx, id)
                    .await?
                    .ok_or_else(|| StoreError::Database(sqlx::Error::RowNotFound))?;
                tx.commit().await?;
                Ok(Some(Transitioned::Done(done)))
            }

            /// A version's history, oldest first.
            pub(crate) async fn review_events(
                &self,
                version_id: &str,
            ) -> Result<Vec<crate::store::review::ReviewEventRow>, StoreError> {
                use sqlx::Row;
                let rows = sqlx::query(
                    "SELECT action, actor, hash, feedback, at FROM review_events
                      WHERE version_id = $1 ORDER BY at, id",
                )
                .bind(version_id)
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|r| {
                        Ok(crate::store::review::ReviewEventRow {
                            action: r.try_get("action")?,
                            actor: r.try_get("actor")?,
                            hash: r.try_get("hash")?,
                            feedback: r.try_get("feedback")?,
                            at: r.try_get("at")?,
                        })
                    })
                    .collect()
            }

            /// Adds a reviewer with a token, or gives a revoked one a new token.
            pub(crate) async fn add_reviewer(
                &self,
                name: &str,
                token_sha256: &str,
                now: i64,
            ) -> Result<(), StoreError> {
                let mut tx = $begin(&self.pool).await?;
                let done = sqlx::query(
                    "INSERT INTO reviewers (name, token_sha256, created_at) VALUES ($1, $2, $3)
                     ON CONFLICT (name) DO UPDATE SET token_sha256 = excluded.token_sha256,
                        created_at = excluded.created_at, revoked_at = NULL
                      WHERE reviewers.revoked_at IS NOT NULL",
                )
                .bind(name)
                .bind(token_sha256)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::ReviewerExists(name.to_owned()));
                }
                tx.commit().await?;
                Ok(())
            }

            /// Every reviewer, by name.
            pub(crate) async fn reviewers(
                &self,
            ) -> Result<Vec<crate::store::review::ReviewerRow>, StoreError> {
                use sqlx::Row;
                let rows = sqlx::query(
                    "SELECT name, created_at, revoked_at FROM reviewers ORDER BY name",
                )
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|r| {
                        Ok(crate::store::review::ReviewerRow {
                            name: r.try_get("name")?,
                            created_at: r.try_get("created_at")?,
                            revoked_at: r.try_get("revoked_at")?,
                        })
                    })
                    .collect()
            }

            /// Revokes a reviewer's token; false when there is no active reviewer `name`.
            pub(crate) async fn revoke_reviewer(
                &self,
                name: &str,
                now: i64,
            ) -> Result<bool, StoreError> {
                let done = sqlx::query(
                    "UPDATE reviewers SET revoked_at = $2 WHERE name = $1 AND revoked_at IS NULL",
                )
                .bind(name)
                .bind(now)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            /// The active reviewer a token belongs to.
            pub(crate) async fn reviewer_for_token(
                &self,
                token_sha256: &str,
            ) -> Result<Option<String>, StoreError> {
                Ok(sqlx::query_scalar(
                    "SELECT name FROM reviewers WHERE token_sha256 = $1 AND revoked_at IS NULL",
                )
                .bind(token_sha256)
                .fetch_optional(&self.pool)
                .await?)
            }
        }
    };
}

/// `query` with a listing's 17 columns bound in `listing_columns!`'s order.
macro_rules! bind_listing {
    ($query:expr, $row:expr) => {{
        let row: &crate::store::review::ListingRow = $row;
        let (links, features) = crate::store::review::listing_lists(row);
        $query
            .bind(&row.id)
            .bind(&row.publisher)
            .bind(&row.name)
            .bind(&row.display_name)
            .bind(&row.description_short)
            .bind(&row.description)
            .bind(crate::store::review::json_list(&row.category_ids))
            .bind(crate::store::review::json_list(&row.tags))
            .bind(&row.image)
            .bind(&row.repository_url)
            .bind(&row.license)
            .bind(&row.author_name)
            .bind(&row.author_url)
            .bind(links)
            .bind(features)
            .bind(row.created_at)
            .bind(row.updated_at)
    }};
}

pub(crate) use {bind_listing, listing_columns, review_store, version_select};

/// The links and feature blocks of a listing as their columns store them.
pub(crate) fn listing_lists(row: &ListingRow) -> (String, String) {
    let links: Vec<[&str; 4]> = row
        .documentation_links
        .iter()
        .map(|l| [&*l.id, &*l.title, &*l.url_name, &*l.url])
        .collect();
    let features: Vec<[&str; 2]> = row.features.iter().map(|(t, b)| [&**t, &**b]).collect();
    (json_list(&links), json_list(&features))
}
