//! Following an upstream marketplace: what this server trusts of it (its newest verified
//! root, timestamp and snapshot, as a TUF client keeps them) and one round of following
//! it stored in one transaction: the publishers it delegates with their keys, their
//! definitions, yanks, the upstream's role files and the local metadata that serves
//! them. A round that fails to commit leaves everything as the previous round left it.
//!
//! The SQL is the same text on both backends (`$N` parameters), so one macro writes both
//! implementations over each backend's own writing helpers.

use crate::definition::Definition;
use crate::store::StoredMetadata;

/// What the server trusts of an upstream, and how its last round went.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpstreamRow {
    pub url: String,
    /// The newest upstream root verified (the configured one until the first round).
    pub root: Vec<u8>,
    pub timestamp: Option<Vec<u8>>,
    pub snapshot: Option<Vec<u8>>,
    pub last_attempt_at: Option<i64>,
    pub last_success_at: Option<i64>,
    /// The last round's report, JSON (`upstream::Report`); empty before the first.
    pub report: String,
}

/// What a mirrored image consists of and its tags (`tag`, `digest`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MirroredImage {
    pub content: Vec<crate::store::Content>,
    pub tags: Vec<(String, String)>,
}

/// A publisher the upstream delegates to, with the keys and threshold of that
/// delegation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowedPublisher {
    pub name: String,
    /// Hex ed25519 public keys.
    pub public_keys: Vec<String>,
    pub threshold: u64,
}

/// One round of following an upstream, written all together or not at all.
#[derive(Debug, Default)]
pub struct UpstreamRound {
    pub url: String,
    /// The upstream metadata verified this round: what the next round starts from.
    pub root: Vec<u8>,
    pub timestamp: Vec<u8>,
    pub snapshot: Vec<u8>,
    /// Publishers the upstream delegates to and this server follows: created or
    /// updated (keys, threshold) with `origin` = `url`, and no longer suspended.
    pub publishers: Vec<FollowedPublisher>,
    /// Publishers followed from `url` that the upstream no longer delegates to (it
    /// suspended or removed them): suspended here too.
    pub gone: Vec<String>,
    /// New definitions: publisher, definition (with its extras), signing key ids.
    pub versions: Vec<(String, Definition, String)>,
    /// Versions the upstream yanked: publisher and hash.
    pub yanked: Vec<(String, String)>,
    /// The upstream's role files new to this server, and this server's targets,
    /// snapshot and timestamp that serve them. Empty when nothing changed.
    pub files: Vec<StoredMetadata>,
    /// This round's report (JSON).
    pub report: String,
    pub now: i64,
}

/// The upstream store's methods for one backend: `$store` with its `pool`, `$begin`
/// opening a writing transaction, `$bump` telling catalog readers, and the backend's
/// `write`, `bulk` and `tuf` modules (versions, yanks, metadata written inside a
/// transaction; `bulk`: plugins new to the store in multi-row statements).
macro_rules! upstream_store {
    ($store:ty, $begin:path, $bump:path, $write:path, $bulk:path, $tuf:path) => {
        impl $store {
            /// What this server trusts of the upstream at `url`.
            pub(crate) async fn upstream(
                &self,
                url: &str,
            ) -> Result<Option<crate::store::UpstreamRow>, StoreError> {
                use sqlx::Row;
                let row = sqlx::query(
                    "SELECT url, root, timestamp, snapshot, last_attempt_at, last_success_at, report
                     FROM upstreams WHERE url = $1",
                )
                .bind(url)
                .fetch_optional(&self.pool)
                .await?;
                Ok(row.map(|r| crate::store::UpstreamRow {
                    url: r.get("url"),
                    root: r.get("root"),
                    timestamp: r.get("timestamp"),
                    snapshot: r.get("snapshot"),
                    last_attempt_at: r.get("last_attempt_at"),
                    last_success_at: r.get("last_success_at"),
                    report: r.get("report"),
                }))
            }

            /// Every version of the publishers followed from `url`: publisher, hash, and
            /// whether it is yanked here.
            pub(crate) async fn upstream_versions(
                &self,
                url: &str,
            ) -> Result<Vec<(String, String, bool)>, StoreError> {
                Ok(sqlx::query_as(
                    "SELECT pub.name, v.hash, v.yanked FROM plugin_versions v
                     JOIN plugins p ON p.id = v.plugin_id
                     JOIN publishers pub ON pub.id = p.publisher_id
                     WHERE pub.origin = $1",
                )
                .bind(url)
                .fetch_all(&self.pool)
                .await?)
            }

            /// What a mirrored image consists of (every manifest and blob) and its tags;
            /// `None` unless the image is mirrored.
            pub(crate) async fn mirrored_content(
                &self,
                host: &str,
                repository: &str,
                digest: &str,
            ) -> Result<Option<crate::store::MirroredImage>, StoreError> {
                use sqlx::Row;
                let id: Option<i64> = sqlx::query_scalar(
                    "SELECT id FROM mirror_images
                     WHERE host = $1 AND repository = $2 AND digest = $3 AND status = 'mirrored'",
                )
                .bind(host)
                .bind(repository)
                .bind(digest)
                .fetch_optional(&self.pool)
                .await?;
                let Some(id) = id else {
                    return Ok(None);
                };
                let rows = sqlx::query(
                    "SELECT digest, kind, media_type, size, subject, artifact_type, annotations
                     FROM mirror_content WHERE image_id = $1 ORDER BY digest",
                )
                .bind(id)
                .fetch_all(&self.pool)
                .await?;
                let content = rows
                    .iter()
                    .map(|r| crate::store::Content {
                        digest: r.get("digest"),
                        kind: if r.get::<String, _>("kind") == "manifest" {
                            crate::store::ContentKind::Manifest
                        } else {
                            crate::store::ContentKind::Blob
                        },
                        media_type: r.get("media_type"),
                        size: r.get::<i64, _>("size").try_into().unwrap_or(0),
                        subject: r.get("subject"),
                        artifact_type: r.get("artifact_type"),
                        annotations: r.get("annotations"),
                    })
                    .collect();
                let tags: Vec<(String, String)> = sqlx::query_as(
                    "SELECT tag, digest FROM mirror_tags WHERE image_id = $1 ORDER BY tag",
                )
                .bind(id)
                .fetch_all(&self.pool)
                .await?;
                Ok(Some(crate::store::MirroredImage { content, tags }))
            }

            /// Records a round that failed before anything could be applied: when, and
            /// its report; what is trusted stays. `root` is the configured root, kept
            /// for an upstream never followed yet.
            pub(crate) async fn record_upstream_failure(
                &self,
                url: &str,
                root: &[u8],
                report: &str,
                now: i64,
            ) -> Result<(), StoreError> {
                sqlx::query(
                    "INSERT INTO upstreams (url, root, last_attempt_at, report) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (url) DO UPDATE SET last_attempt_at = $3, report = $4",
                )
                .bind(url)
                .bind(root)
                .bind(now)
                .bind(report)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            /// Stores one round of following an upstream in one transaction. A
            /// metadata version that exists already (a publish landed meanwhile) fails
            /// it whole (`MetadataExists`); the next round starts again from there.
            pub(crate) async fn follow_upstream(
                &self,
                round: &crate::store::UpstreamRound,
            ) -> Result<(), StoreError> {
                use $bulk as bulk;
                use $write as write;
                use $tuf as tuf;
                let mut tx = $begin(&self.pool).await?;
                let mut catalog_changed = !round.gone.is_empty();
                for p in &round.publishers {
                    let threshold = i64::try_from(p.threshold).unwrap_or(i64::MAX);
                    // Never a publisher registered here: the caller leaves clashing
                    // names out, and this keeps a race with `publisher add` harmless.
                    let changed = sqlx::query(
                        "INSERT INTO publishers (name, created_at, public_keys, threshold, origin)
                         VALUES ($1, $2, $3, $4, $5)
                         ON CONFLICT (name) DO UPDATE SET public_keys = $3, threshold = $4,
                             suspended_at = NULL, origin = $5
                         WHERE (publishers.origin = $5 OR publishers.public_keys = '')
                           AND (publishers.public_keys <> $3 OR publishers.threshold <> $4
                                OR publishers.suspended_at IS NOT NULL)",
                    )
                    .bind(&p.name)
                    .bind(round.now)
                    .bind(p.public_keys.join(" "))
                    .bind(threshold)
                    .bind(&round.url)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                    catalog_changed |= changed > 0;
                }
                for name in &round.gone {
                    sqlx::query(
                        "UPDATE publishers SET suspended_at = $1
                         WHERE name = $2 AND origin = $3 AND suspended_at IS NULL",
                    )
                    .bind(round.now)
                    .bind(name)
                    .bind(&round.url)
                    .execute(&mut *tx)
                    .await?;
                }
                // A cold round brings thousands of plugins: those new to the store go in
                // multi-row statements; new versions of known plugins one by one, with
                // the immutability check.
                let existing: std::collections::HashSet<(String, String)> = if round.versions.is_empty() {
                    Default::default()
                } else {
                    sqlx::query_as(
                        "SELECT pub.name, p.name FROM plugins p
                         JOIN publishers pub ON pub.id = p.publisher_id WHERE pub.origin = $1",
                    )
                    .bind(&round.url)
                    .fetch_all(&mut *tx)
                    .await?
                    .into_iter()
                    .collect()
                };
                let (new, old) = crate::store::upstream::new_plugins(&round.versions, &existing);
                bulk::insert_new_plugins(&mut tx, &new, round.now).await?;
                for (publisher, def, signers) in old {
                    write::publish_in(&mut tx, publisher, def, signers, round.now).await?;
                }
                for (publisher, hash) in &round.yanked {
                    write::yank_in(&mut tx, publisher, std::slice::from_ref(hash), round.now)
                        .await?;
                }
                if catalog_changed {
                    $bump(&mut tx, crate::store::Domain::Catalog).await?;
                }
                tuf::put_metadata_in(&mut tx, &round.files).await?;
                sqlx::query(
                    "INSERT INTO upstreams (url, root, timestamp, snapshot, last_attempt_at, last_success_at, report)
                     VALUES ($1, $2, $3, $4, $5, $5, $6)
                     ON CONFLICT (url) DO UPDATE SET root = $2, timestamp = $3, snapshot = $4,
                         last_attempt_at = $5, last_success_at = $5, report = $6",
                )
                .bind(&round.url)
                .bind(&round.root)
                .bind(&round.timestamp)
                .bind(&round.snapshot)
                .bind(round.now)
                .bind(&round.report)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }
        }
    };
}

pub(crate) use upstream_store;

/// New versions of plugins the store does not have yet, by plugin: what a cold round
/// writes with multi-row statements (`write::insert_new_plugins`) instead of a dozen
/// statements per version.
pub(crate) struct NewPlugin<'a> {
    pub publisher: &'a str,
    pub name: &'a str,
    /// Its versions with their signing key ids.
    pub versions: Vec<(&'a Definition, &'a str)>,
    /// The version its summary comes from (the latest listed; yanks are applied after).
    pub latest: &'a Definition,
}

/// Groups `versions` by plugin; those of plugins in `existing` (publisher, name) are
/// returned apart, for the one-by-one path that checks immutability.
pub(crate) fn new_plugins<'a>(
    versions: &'a [(String, Definition, String)],
    existing: &std::collections::HashSet<(String, String)>,
) -> (Vec<NewPlugin<'a>>, Vec<&'a (String, Definition, String)>) {
    let mut groups: std::collections::BTreeMap<(&str, &str), Vec<(&Definition, &str)>> =
        Default::default();
    let mut old = Vec::new();
    for v in versions {
        let (publisher, def, signers) = v;
        if existing.contains(&(publisher.clone(), def.name().to_owned())) {
            old.push(v);
        } else {
            groups
                .entry((publisher.as_str(), def.name()))
                .or_default()
                .push((def, signers.as_str()));
        }
    }
    let mut new = Vec::new();
    for ((publisher, name), mut versions) in groups {
        // Two entries for one version would be one upstream target listed twice.
        versions.sort_by(|a, b| a.0.version.cmp(&b.0.version));
        versions.dedup_by(|a, b| a.0.version == b.0.version);
        let listed: Vec<(String, bool)> = versions
            .iter()
            .map(|(d, _)| (d.version.to_string(), false))
            .collect();
        let latest = crate::store::latest_listed(&listed)
            .and_then(|v| versions.iter().find(|(d, _)| d.version.to_string() == v))
            .map_or(versions[versions.len() - 1].0, |(d, _)| *d);
        new.push(NewPlugin {
            publisher,
            name,
            versions,
            latest,
        });
    }
    (new, old)
}

/// Rows per multi-row statement: under both backends' parameter limits for the widest
/// (12 columns of `plugin_versions`).
pub(crate) const BULK_ROWS: usize = 400;
