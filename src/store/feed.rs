//! Versions newest first, for the Atom feeds of new versions: the whole catalog, one
//! publisher's or one plugin's. Suspended publishers' versions are left out, as
//! listings leave them out; yanked versions stay, marked, so a reader learns of a yank.
//!
//! The SQL is the same text on both backends (`$N` parameters), so one macro writes both
//! implementations.

/// Which versions a feed lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedScope {
    Catalog,
    Publisher(String),
    Plugin { publisher: String, name: String },
}

/// One published version as a feed lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedVersion {
    pub publisher: String,
    pub name: String,
    /// The plugin's display name and description (its latest listed version's).
    pub display_name: String,
    pub description: String,
    /// As the author wrote it.
    pub version: String,
    pub published_at: i64,
    pub yanked: bool,
    /// `None` when not yanked, or yanked before the time was kept (migration 0014).
    pub yanked_at: Option<i64>,
}

/// Writes `feed` for a backend's store type.
macro_rules! feed_store {
    ($store:ty) => {
        impl $store {
            /// The newest `limit` versions in `scope`, newest first.
            pub(crate) async fn feed(
                &self,
                scope: &crate::store::FeedScope,
                limit: i64,
            ) -> Result<Vec<crate::store::FeedVersion>, StoreError> {
                use crate::store::FeedScope;
                let (publisher, name) = match scope {
                    FeedScope::Catalog => ("", ""),
                    FeedScope::Publisher(p) => (p.as_str(), ""),
                    FeedScope::Plugin { publisher, name } => (publisher.as_str(), name.as_str()),
                };
                let rows: Vec<(
                    String,
                    String,
                    String,
                    String,
                    String,
                    i64,
                    bool,
                    Option<i64>,
                )> = sqlx::query_as(
                    "SELECT pub.name, p.name, p.display_name, p.description, v.version,
                                v.published_at, v.yanked, v.yanked_at
                         FROM plugin_versions v
                         JOIN plugins p ON p.id = v.plugin_id
                         JOIN publishers pub ON pub.id = p.publisher_id
                         WHERE pub.suspended_at IS NULL
                           AND ($1 = '' OR pub.name = $1) AND ($2 = '' OR p.name = $2)
                         ORDER BY v.published_at DESC, v.id DESC LIMIT $3",
                )
                .bind(publisher)
                .bind(name)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|r| crate::store::FeedVersion {
                        publisher: r.0,
                        name: r.1,
                        display_name: r.2,
                        description: r.3,
                        version: r.4,
                        published_at: r.5,
                        yanked: r.6,
                        yanked_at: r.7,
                    })
                    .collect())
            }
        }
    };
}

pub(crate) use feed_store;
