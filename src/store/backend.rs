//! The server's storage interface: traits named by what the domains do, each implemented
//! by every backend (`sqlite/`, `postgres/`; SQL lives only there). [`Backend`] is the enum of
//! backends; it implements every trait by forwarding to the one that runs, and
//! [`Store`](super::Store) gets a public method for each operation it passes through
//! unchanged. Operations marked `@internal` are wrapped by `Store` instead (it adds the
//! catalog cache, or tells metadata readers after a commit).
//!
//! One macro writes the three from one list, so a new operation cannot be declared in
//! the trait and forgotten in the forwarding (or the reverse).

use std::collections::HashSet;
use std::sync::Arc;

use super::cache::CatalogCache;
use super::postgres::PgStore;
use super::sqlite::SqliteStore;
use super::{
    Content, Definition, Domain, Facets, FeedScope, FeedVersion, Inserted, LinkKind, ListedPlugin,
    ListingRow, MirrorJob, MirrorStatus, MirroredImage, OperatorRow, Page, PluginQuery,
    PluginRecord, PluginRef, PluginSummary, PublisherRecord, Referrer, ReviewEventRow,
    ReviewVersionRow, ReviewerRow, ServedManifest, Store, StoreError, StoredMetadata, Transition,
    Transitioned, Upload, UpstreamRound, UpstreamRow, VersionRecord,
};

/// The backend a [`Store`] runs on.
#[derive(Clone)]
pub(crate) enum Backend {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

macro_rules! store_traits {
    ($(
        $(#[$tmeta:meta])*
        trait $trait:ident {
            $(
                $(#[$mmeta:meta])*
                $(@$internal:ident)?
                fn $name:ident(&self $(, $arg:ident : $ty:ty)* $(,)?) -> $ret:ty;
            )*
        }
    )*) => {
        $(
            $(#[$tmeta])*
            pub(crate) trait $trait {
                $(
                    $(#[$mmeta])*
                    fn $name(&self $(, $arg: $ty)*)
                        -> impl std::future::Future<Output = Result<$ret, StoreError>> + Send;
                )*
            }

            // Each backend implements the trait with its inherent methods of the same
            // names: a missing or differently typed one fails to compile here.
            impl $trait for SqliteStore {
                $(
                    async fn $name(&self $(, $arg: $ty)*) -> Result<$ret, StoreError> {
                        SqliteStore::$name(self $(, $arg)*).await
                    }
                )*
            }

            impl $trait for PgStore {
                $(
                    async fn $name(&self $(, $arg: $ty)*) -> Result<$ret, StoreError> {
                        PgStore::$name(self $(, $arg)*).await
                    }
                )*
            }

            impl $trait for Backend {
                $(
                    async fn $name(&self $(, $arg: $ty)*) -> Result<$ret, StoreError> {
                        match self {
                            Backend::Sqlite(s) => $trait::$name(s $(, $arg)*).await,
                            Backend::Postgres(s) => $trait::$name(s $(, $arg)*).await,
                        }
                    }
                )*
            }

            impl Store {
                $(
                    store_traits!(@forward $trait $(@$internal)? $(#[$mmeta])*
                        fn $name(&self $(, $arg: $ty)*) -> $ret);
                )*
            }
        )*
    };
    (@forward $trait:ident @internal $($rest:tt)*) => {};
    (@forward $trait:ident $(#[$mmeta:meta])*
        fn $name:ident(&self $(, $arg:ident : $ty:ty)*) -> $ret:ty) => {
        $(#[$mmeta])*
        pub async fn $name(&self $(, $arg: $ty)*) -> Result<$ret, StoreError> {
            $trait::$name(&self.db $(, $arg)*).await
        }
    };
}

store_traits! {
    /// Reading the catalog: plugins, versions, definitions, listings and search.
    trait Catalog {
        fn plugin(&self, publisher: &str, name: &str) -> Option<PluginRecord>;
        /// Every version of a plugin, newest first (semantic version order).
        fn versions(&self, plugin_id: i64) -> Vec<VersionRecord>;
        /// The stored definition of one version; `version` may be written with or without `v`.
        fn definition(&self, plugin_id: i64, version: &str) -> Option<(VersionRecord, Definition)>;
        /// The bytes of a stored version by its hash, yanked or not: a pinned hash stays
        /// downloadable.
        fn definition_by_hash(&self, publisher: &str, name: &str, hash: &str) -> Option<Vec<u8>>;
        /// Every stored version of a publisher's plugins with its yanked flag, oldest first.
        fn publisher_definitions(&self, publisher: &str) -> Vec<(Definition, bool)>;
        /// Listed plugins with any of these names, for resolving dependency links.
        fn plugins_named(&self, names: &[&str]) -> Vec<PluginRef>;
        /// Listed plugins whose latest version depends on (`kind` = dependency) or suggests a
        /// plugin called `name`.
        fn linking_to(&self, name: &str, kind: LinkKind) -> Vec<PluginRef>;
        /// One plugin if listings show it.
        fn listed_plugin(&self, publisher: &str, name: &str) -> Option<ListedPlugin>;
        /// One plugin if listings show it, with its latest listed version's hash, bytes
        /// and extras, in one statement; `Store::listed_detail` parses and keeps it.
        @internal fn listed_detail(&self, publisher: &str, name: &str) -> Option<super::detail::DetailRow>;
        /// Publisher and name of every plugin listings show, by publisher then name: what
        /// ids computed from names are looked up in.
        fn listed_names(&self) -> Vec<(String, String)>;
        /// The newest `limit` versions in `scope`, newest first, yanked ones marked;
        /// suspended publishers' left out (the Atom feeds).
        fn feed(&self, scope: &FeedScope, limit: i64) -> Vec<FeedVersion>;
        /// One page of a catalog listing with the number of matches. Served from the catalog
        /// cache when this exact query was answered at the current generation; otherwise the
        /// missing parts (every match's id in order, then the page's rows) are read in one
        /// transaction and kept.
        @internal fn list_page(&self, q: &PluginQuery, cache: &CatalogCache) -> Page<PluginSummary>;
        /// Every plugin `q` matches, in its listing order (its page fields are ignored): the
        /// ranking is the one pages use, from the same cache; the rows are read each time.
        @internal fn listed(&self, q: &PluginQuery, cache: &CatalogCache) -> Vec<ListedPlugin>;
        /// Tags of listed plugins with their counts (most used first, at most 50) and the
        /// publishers that are not suspended; cached per generation like listings.
        @internal fn facets_in(&self, cache: &CatalogCache) -> Arc<Facets>;
    }

    /// The signed index: versions as published, and the signed metadata that lists
    /// them, written together.
    trait SignedIndex {
        /// Stores a validated definition under `publisher`, creating publisher and plugin on
        /// first use. Storing the same bytes again is a no-op; other bytes under an existing
        /// version are refused, because published versions are immutable.
        fn insert_version(&self, publisher: &str, def: &Definition, now: i64) -> Inserted;
        /// Stores published definitions together with the signed metadata that publishes
        /// them, in one transaction: all or nothing. A metadata version that already exists
        /// (a concurrent publish won) or a changed definition fails the whole commit.
        @internal fn publish(
            &self,
            publisher: &str,
            defs: &[Definition],
            signer_key_ids: &[String],
            files: &[StoredMetadata],
            now: i64,
        ) -> ();
        /// Marks the publisher's versions with these hashes yanked and stores the signed
        /// metadata that says so, in one transaction. Yanked versions stay downloadable by
        /// hash; listings move to the newest version still listed.
        @internal fn yank(
            &self,
            publisher: &str,
            hashes: &[String],
            files: &[StoredMetadata],
            now: i64,
        ) -> ();
        /// Records which publisher key ids signed the publisher's versions that have none yet.
        fn record_signers(&self, publisher: &str, key_ids: &[String]) -> ();
        /// A given version of a role's metadata.
        fn metadata(&self, role: &str, version: u64) -> Option<StoredMetadata>;
        /// The newest version of a role's metadata.
        fn latest_metadata(&self, role: &str) -> Option<StoredMetadata>;
        /// The newest version of every role (root, targets, snapshot, timestamp, each
        /// publisher), without the bytes: for the index status page.
        fn metadata_overview(&self) -> Vec<StoredMetadata>;
        /// Stores new metadata versions all together or not at all. A version that already
        /// exists is refused (`MetadataExists`), which is how two concurrent writers of the
        /// same role are told apart: one wins, the other must start again from fresh metadata.
        @internal fn put_metadata(&self, files: &[StoredMetadata]) -> ();
    }

    /// Publishers: keys, threshold, tokens (hashed) and suspension.
    trait Publishers {
        /// Registers a publisher with its keys and first token. A name already in use is
        /// refused, except a publisher known only from definitions and without keys.
        fn add_publisher(
            &self,
            name: &str,
            public_keys: &[String],
            threshold: u64,
            token_sha256: &str,
            now: i64,
        ) -> ();
        /// Sets the keys of a publisher that may not exist yet (the built-in publisher).
        fn set_publisher_keys(&self, name: &str, public_keys: &[String], threshold: u64) -> ();
        /// Replaces the keys and threshold of a registered publisher (key rotation). Uploads
        /// are checked against these from now on; the signed delegation follows when the
        /// publisher re-signs its role with them.
        fn replace_publisher_keys(&self, name: &str, public_keys: &[String], threshold: u64) -> ();
        /// Issues another token for an existing publisher.
        fn add_token(&self, name: &str, token_sha256: &str, now: i64) -> ();
        /// Revokes every active token of a publisher; returns how many were active.
        fn revoke_tokens(&self, name: &str, now: i64) -> u64;
        /// The publisher an active token belongs to.
        fn publisher_for_token(&self, token_sha256: &str) -> Option<String>;
        fn publisher(&self, name: &str) -> Option<PublisherRecord>;
        /// Publishers with keys (those that can publish), by name.
        fn publisher_list(&self) -> Vec<PublisherRecord>;
        /// Suspends a publisher: stores the signed metadata that removes its delegation and
        /// keeps the removed delegation (`delegation`, JSON) for [`Store::resume_publisher`],
        /// in one transaction.
        @internal fn suspend_publisher(
            &self,
            name: &str,
            delegation: &str,
            files: &[StoredMetadata],
            now: i64,
        ) -> ();
        /// The delegation kept when `name` was suspended; `None` when it is not suspended.
        fn suspended_delegation(&self, name: &str) -> Option<String>;
        /// Resumes a suspended publisher with the metadata that restores its delegation.
        @internal fn resume_publisher(&self, name: &str, files: &[StoredMetadata]) -> ();
    }

    /// The image mirror: jobs, what each mirrored image serves, cosign keys.
    trait Mirror {
        /// Enqueues the images of versions stored before mirroring existed (or by a build
        /// without it); returns how many versions were linked.
        fn enqueue_unlinked_images(&self, now: i64) -> usize;
        /// Claims up to `limit` jobs that are due: pending, failed with their next attempt
        /// reached, or mirroring under a lease that ran out (the worker died). Each claimed
        /// job is leased until `lease_until`. With `hosts`, only jobs on those hosts.
        fn claim_mirror_jobs(
            &self,
            now: i64,
            lease_until: i64,
            limit: i64,
            hosts: Option<&[String]>,
        ) -> Vec<MirrorJob>;
        /// Extends a running job's lease; false if the job is no longer ours.
        fn renew_mirror_lease(&self, id: i64, until: i64) -> bool;
        /// Gives jobs back unfinished (a server shutting down): due again at once, for
        /// whichever server looks next.
        fn release_mirror_jobs(&self, ids: &[i64], now: i64) -> ();
        /// Replaces the cosign public keys (id, PEM) registered for `publisher`.
        fn set_cosign_keys(&self, publisher: &str, keys: &[(String, String)], now: i64) -> ();
        /// The cosign keys (id, PEM) of every publisher whose published versions pin image
        /// `id`: when there are any, the image is served only with a signature by one.
        fn cosign_keys_for_image(&self, id: i64) -> Vec<(String, String)>;
        /// Records a finished mirror: what the image consists of and its tags replace what
        /// was recorded before, and the image becomes servable, in one transaction.
        /// `verified_by` is the cosign key that verified its signature, if a policy applied.
        fn record_mirrored(
            &self,
            id: i64,
            content: &[Content],
            tags: &[(String, String)],
            verified_by: Option<&str>,
            now: i64,
        ) -> ();
        /// Records a failed attempt: `error` for everyone, `detail` for the operator. The
        /// job is due again at `next_attempt_at`.
        fn record_mirror_failure(
            &self,
            id: i64,
            error: &str,
            detail: &str,
            next_attempt_at: i64,
            now: i64,
        ) -> ();
        /// Makes failed jobs due now (all of them, or those whose repository or digest
        /// contains `filter`); returns how many.
        fn retry_mirrors(&self, filter: Option<&str>, now: i64) -> u64;
        /// Queues every image that records one of `digests` for a new mirror (damaged
        /// content): not served until mirrored again. Returns how many.
        fn remirror_images_with(&self, digests: &[String], now: i64) -> u64;
        /// Every mirrored image's status, by host, repository and digest.
        fn mirror_statuses(&self) -> Vec<MirrorStatus>;
        /// Images and their bytes per status, for metrics and the CLI; every status is
        /// listed, with zeros, so a metric never disappears.
        fn mirror_counts(&self) -> Vec<(String, i64, i64)>;
        /// Whether any mirrored image lives in `host`/`repository`.
        fn served_repository(&self, host: &str, repository: &str) -> bool;
        /// A manifest `host`/`repository` serves, by digest.
        fn served_manifest(
            &self,
            host: &str,
            repository: &str,
            digest: &str,
        ) -> Option<ServedManifest>;
        /// A blob `host`/`repository` serves (manifests count as blobs too, as in any
        /// registry), with its size.
        fn served_blob(&self, host: &str, repository: &str, digest: &str) -> Option<u64>;
        /// The digest a tag of `host`/`repository` points at.
        fn served_tag(&self, host: &str, repository: &str, tag: &str) -> Option<String>;
        /// Every tag `host`/`repository` serves, sorted, after `last` and at most `limit`.
        fn served_tags(
            &self,
            host: &str,
            repository: &str,
            last: Option<&str>,
            limit: i64,
        ) -> Vec<String>;
        /// Manifests of `host`/`repository` whose subject is `digest`.
        fn referrers(&self, host: &str, repository: &str, digest: &str) -> Vec<Referrer>;
        /// Every digest a mirrored (or mirroring) image records: what `mirror gc` keeps.
        fn referenced_digests(&self) -> HashSet<String>;
    }

    /// The change feed: a generation per [`Domain`] that every write to the domain
    /// bumps in its own transaction. Readers that keep copies (the catalog cache,
    /// `/tuf/`'s newest timestamp and root) compare it to the one they read with.
    trait ChangeFeed {
        fn generation(&self, domain: Domain) -> i64;
    }

    /// Leases on work that server processes sharing the database do one at a time
    /// (re-signing the index): a named claim with a holder and an end, in the
    /// database's clock.
    trait Leases {
        /// Takes or renews lease `name` for `holder` for `seconds`: true when `holder`
        /// holds it now (it was free, had run out, or was already `holder`'s).
        fn take_lease(&self, name: &str, holder: &str, seconds: i64) -> bool;
        /// Gives lease `name` back if `holder` holds it, so another may take it at once.
        fn release_lease(&self, name: &str, holder: &str) -> ();
    }

    /// Publishing with review: listings, versions under review, reviewers. The store
    /// applies a status change only from the statuses the caller names (`review` owns
    /// the rules).
    trait Reviews {
        /// Stores a new listing; false when the plugin has one already.
        fn create_listing(&self, row: &ListingRow) -> bool;
        /// Replaces a listing's editable fields; false when it has none.
        fn update_listing(&self, row: &ListingRow) -> bool;
        fn listing(&self, id: &str) -> Option<ListingRow>;
        /// Every listing (of `publisher`, when given), by publisher and name.
        fn listings(&self, publisher: Option<&str>) -> Vec<ListingRow>;
        /// Deletes a listing with its versions under review; false when there was none.
        fn delete_listing(&self, id: &str) -> bool;
        /// Stores a version as a draft: new, or new bytes for a draft or a version whose
        /// reviewer asked for changes; any other existing version is left `Locked`.
        fn upload_review_version(
            &self,
            row: &ReviewVersionRow,
            definition: &[u8],
            actor: &str,
        ) -> Upload;
        fn review_version(&self, id: &str) -> Option<ReviewVersionRow>;
        /// The version of a listing whose canonical version (no leading `v`) is `canonical`.
        fn review_version_at(&self, listing_id: &str, canonical: &str) -> Option<ReviewVersionRow>;
        /// The exact bytes uploaded for a version.
        fn review_definition(&self, id: &str) -> Option<Vec<u8>>;
        /// Versions under review (of one listing, in one status, when given), oldest first.
        fn review_versions(
            &self,
            listing_id: Option<&str>,
            status: Option<&str>,
        ) -> Vec<ReviewVersionRow>;
        /// Applies a status change with its history entry if the version's status is one
        /// the change starts from; `None` when there is no such version.
        fn transition(&self, id: &str, change: &Transition) -> Option<Transitioned>;
        /// A version's history, oldest first.
        fn review_events(&self, version_id: &str) -> Vec<ReviewEventRow>;
        /// Adds a reviewer, or gives a revoked one a new token.
        fn add_reviewer(&self, name: &str, token_sha256: &str, now: i64) -> ();
        fn reviewers(&self) -> Vec<ReviewerRow>;
        /// Revokes a reviewer's token; false when no active reviewer has that name.
        fn revoke_reviewer(&self, name: &str, now: i64) -> bool;
        /// The active reviewer a token belongs to.
        fn reviewer_for_token(&self, token_sha256: &str) -> Option<String>;
    }

    /// Following an upstream marketplace (`serve --upstream`, `bundle import`).
    trait Upstreams {
        /// What this server trusts of the upstream at `url`, and its last round.
        fn upstream(&self, url: &str) -> Option<UpstreamRow>;
        /// Every version of the publishers followed from `url`: publisher, hash, and
        /// whether it is yanked here.
        fn upstream_versions(&self, url: &str) -> Vec<(String, String, bool)>;
        /// What a mirrored image consists of and its tags; `None` unless mirrored.
        fn mirrored_content(&self, host: &str, repository: &str, digest: &str) -> Option<MirroredImage>;
        /// Records a round that failed before anything could be applied; what is
        /// trusted stays (`root` starts the row of an upstream never followed).
        fn record_upstream_failure(&self, url: &str, root: &[u8], report: &str, now: i64) -> ();
        /// Stores one round of following an upstream in one transaction; a metadata
        /// version that exists already fails it whole (`MetadataExists`).
        @internal fn follow_upstream(&self, round: &UpstreamRound) -> ();
    }

    /// Operators of the admin API and their tokens.
    trait Operators {
        /// Adds an operator, or gives a revoked one a new token (`OperatorExists` while
        /// one with that name is active).
        fn add_operator(&self, name: &str, token_sha256: &str, now: i64) -> ();
        fn operators(&self) -> Vec<OperatorRow>;
        /// Revokes an operator's token; false when no active operator has that name.
        fn revoke_operator(&self, name: &str, now: i64) -> bool;
        /// The active operator a token belongs to.
        fn operator_for_token(&self, token_sha256: &str) -> Option<String>;
    }

    /// What opening and readiness need.
    trait Maintenance {
        /// Cheap round trip, for readiness checks.
        fn ping(&self) -> ();
        /// Recomputes the requirement flags of plugins a migration marked stale (the
        /// approval rule changed) from each one's latest listed definition, leaving
        /// `updated_at` alone: the plugin did not change, the reading of it did. Returns how
        /// many were recomputed. A definition that no longer parses keeps its flags and its
        /// mark, and is logged on every open until an operator removes it.
        @internal fn refresh_stale_approvals(&self) -> usize;
        /// Records, for each version stored before the column existed, whether Fundament can
        /// install it. Returns how many were checked. A definition that no longer parses
        /// stays unchecked and is logged on every open until an operator removes it.
        @internal fn check_installability(&self) -> usize;
    }
}
