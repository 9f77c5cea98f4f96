//! One listed plugin with its latest listed version's definition, read in one
//! statement: catalog.v1 `GetPlugin` asks for plugins one at a time, and on PostgreSQL
//! every statement is a round trip. [`Store::listed_detail`](super::Store::listed_detail)
//! keeps the answer per generation of the catalog.
//!
//! The SQL is the same text on both backends (`$N` parameters), so one macro writes both
//! implementations.

/// The row `listed_detail` reads: the listed plugin, then its latest version's hash,
/// bytes and extras (`None` when no version row has the listed version's text).
pub(crate) type DetailRow = (
    crate::store::ListedPlugin,
    Option<(String, Vec<u8>, Option<String>)>,
);

/// Writes `listed_detail` for a backend's store type.
macro_rules! detail_store {
    ($store:ty) => {
        impl $store {
            /// A plugin that listings show, with its latest listed version's stored
            /// definition, in one statement.
            pub(crate) async fn listed_detail(
                &self,
                publisher: &str,
                name: &str,
            ) -> Result<Option<crate::store::detail::DetailRow>, StoreError> {
                #[allow(clippy::type_complexity)]
                let row: Option<(
                    i64,
                    String,
                    String,
                    String,
                    String,
                    String,
                    String,
                    Option<i64>,
                    Option<String>,
                    Option<Vec<u8>>,
                    Option<String>,
                )> = sqlx::query_as(
                    // `latest_version` is written from the version's own text, as
                    // `plugin_versions.version` is, so the join finds that one row.
                    "SELECT p.id, pub.name, p.name, p.display_name, p.description,
                            p.latest_version, p.tags,
                            (SELECT MIN(f.published_at) FROM plugin_versions f
                              WHERE f.plugin_id = p.id AND f.yanked = FALSE),
                            v.hash, v.definition, v.extras
                     FROM plugins p JOIN publishers pub ON pub.id = p.publisher_id
                       LEFT JOIN plugin_versions v
                         ON v.plugin_id = p.id AND v.version = p.latest_version
                     WHERE pub.name = $1 AND p.name = $2 AND p.latest_version IS NOT NULL
                       AND pub.suspended_at IS NULL",
                )
                .bind(publisher)
                .bind(name)
                .fetch_optional(&self.pool)
                .await?;
                Ok(row.map(|r| {
                    let plugin = crate::store::ListedPlugin {
                        id: r.0,
                        publisher: r.1,
                        name: r.2,
                        display_name: r.3,
                        description: r.4,
                        latest_version: r.5,
                        tags: r.6.split_whitespace().map(str::to_owned).collect(),
                        // A listed plugin has a listed version, so the minimum is
                        // never NULL.
                        first_published_at: r.7.unwrap_or_default(),
                    };
                    let stored = match (r.8, r.9) {
                        (Some(hash), Some(bytes)) => Some((hash, bytes, r.10)),
                        _ => None,
                    };
                    (plugin, stored)
                }))
            }
        }
    };
}

pub(crate) use detail_store;
