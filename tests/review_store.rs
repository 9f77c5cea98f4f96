//! The review store's conformance suite (`store/review.rs`: one SQL text for both
//! backends): every body once on SQLite and once on PostgreSQL. Listings, versions under
//! review with their history, status changes applied only from the statuses the caller
//! allows (also from two stores at once), `published` read from the index, reviewers.

mod common;

use common::backends::conformance;
use common::with_version;
use marketplace::store::{
    LinkRow, ListingRow, ReviewDecision, ReviewVersionRow, Store, StoreError, Transition,
    Transitioned, Upload,
};

type Backend = common::backends::Backend<Store>;

conformance!(
    listings_are_created_once_replaced_whole_and_deleted_with_their_versions,
    versions_move_only_from_the_statuses_allowed_and_keep_their_history,
    two_reviewers_at_once_one_decision,
    published_is_read_from_the_index,
    reviewer_tokens_until_revoked,
);

fn listing(id: &str, name: &str) -> ListingRow {
    ListingRow {
        id: id.into(),
        publisher: "acme".into(),
        name: name.into(),
        display_name: "Edge".into(),
        category_ids: vec!["c1".into()],
        tags: vec!["edge".into(), "gateway".into()],
        documentation_links: vec![LinkRow {
            id: "l1".into(),
            title: "Guide".into(),
            url_name: "guide".into(),
            url: "https://example.com/guide".into(),
        }],
        features: vec![("Fast".into(), "Very.".into())],
        created_at: 100,
        updated_at: 100,
        ..Default::default()
    }
}

async fn with_publisher(store: &Store) {
    store
        .add_publisher("acme", &["ab".repeat(32)], 1, "tok", 1)
        .await
        .unwrap();
}

fn version(id: &str, listing_id: &str, v: &str, hash: &str) -> ReviewVersionRow {
    ReviewVersionRow {
        id: id.into(),
        listing_id: listing_id.into(),
        version: v.into(),
        canonical: v.trim_start_matches('v').into(),
        hash: hash.into(),
        image: "ghcr.io/acme/edge@sha256:00".into(),
        release_notes: "notes".into(),
        uploaded_at: 200,
        created_at: 200,
        ..Default::default()
    }
}

fn change(from: &[&str], to: &str, action: &str, at: i64, review: Option<&str>) -> Transition {
    Transition {
        from: from.iter().map(|s| s.to_string()).collect(),
        to: to.into(),
        action: action.into(),
        actor: match review {
            Some(r) => format!("reviewer:{r}"),
            None => "publisher:acme".into(),
        },
        at,
        review: review.map(|r| ReviewDecision {
            reviewer: r.into(),
            rejection_reason: None,
            feedback: format!("{action} by {r}"),
        }),
    }
}

async fn listings_are_created_once_replaced_whole_and_deleted_with_their_versions(b: Backend) {
    let store = &b.store;
    with_publisher(store).await;
    let row = listing("p1", "edge");
    assert!(store.create_listing(&row).await.unwrap());
    assert!(!store.create_listing(&row).await.unwrap(), "created once");
    assert_eq!(store.listing("p1").await.unwrap().as_ref(), Some(&row));
    let mut changed = row.clone();
    changed.display_name = "Edge Router".into();
    changed.tags.clear();
    changed.features = vec![("A".into(), "a".into()), ("B".into(), "b".into())];
    changed.updated_at = 150;
    assert!(store.update_listing(&changed).await.unwrap());
    assert_eq!(store.listing("p1").await.unwrap().as_ref(), Some(&changed));
    let mut other = listing("p2", "other");
    assert!(
        !store.update_listing(&other).await.unwrap(),
        "no such listing"
    );
    assert!(store.create_listing(&other).await.unwrap());
    other.publisher = "beta".into();
    let ids = |rows: Vec<ListingRow>| rows.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(ids(store.listings(None).await.unwrap()), ["p1", "p2"]);
    assert_eq!(
        ids(store.listings(Some("acme")).await.unwrap()),
        ["p1", "p2"]
    );
    assert!(store.listings(Some("beta")).await.unwrap().is_empty());
    // A listing of an unknown publisher is refused by the database.
    assert!(matches!(
        store.create_listing(&listing_of("nobody")).await,
        Err(StoreError::Database(_))
    ));

    let Upload::Stored(_) = store
        .upload_review_version(
            &version("v1", "p1", "1.0.0", "sha256:a"),
            b"one",
            "publisher:acme",
        )
        .await
        .unwrap()
    else {
        panic!("a new version is stored");
    };
    assert!(store.delete_listing("p1").await.unwrap());
    assert!(!store.delete_listing("p1").await.unwrap());
    assert_eq!(store.review_version("v1").await.unwrap(), None);
    assert!(store.review_events("v1").await.unwrap().is_empty());
}

fn listing_of(publisher: &str) -> ListingRow {
    ListingRow {
        publisher: publisher.into(),
        ..listing("p9", "x")
    }
}

async fn versions_move_only_from_the_statuses_allowed_and_keep_their_history(b: Backend) {
    let store = &b.store;
    with_publisher(store).await;
    store.create_listing(&listing("p1", "edge")).await.unwrap();
    let v = version("v1", "p1", "v1.0.0", "sha256:a");
    let Upload::Stored(row) = store
        .upload_review_version(&v, b"one", "publisher:acme")
        .await
        .unwrap()
    else {
        panic!("stored");
    };
    assert_eq!(
        (
            row.status.as_str(),
            row.publisher.as_str(),
            row.name.as_str()
        ),
        ("draft", "acme", "edge")
    );
    assert_eq!(row.published_at, None);
    // A draft takes new bytes.
    let again = ReviewVersionRow {
        hash: "sha256:b".into(),
        uploaded_at: 210,
        ..v.clone()
    };
    let Upload::Stored(row) = store
        .upload_review_version(&again, b"two", "publisher:acme")
        .await
        .unwrap()
    else {
        panic!("a draft takes new bytes");
    };
    assert_eq!((row.hash.as_str(), row.created_at), ("sha256:b", 200));
    assert_eq!(
        store.review_definition("v1").await.unwrap().unwrap(),
        b"two"
    );
    assert_eq!(
        store
            .review_version_at("p1", "1.0.0")
            .await
            .unwrap()
            .map(|r| r.id),
        Some("v1".to_owned())
    );

    // Submit, then a decision only from pending.
    let submit = change(
        &["draft", "changes_requested"],
        "pending",
        "submitted",
        220,
        None,
    );
    let Some(Transitioned::Done(row)) = store.transition("v1", &submit).await.unwrap() else {
        panic!("submitted");
    };
    assert_eq!(
        (row.status.as_str(), row.submitted_at),
        ("pending", Some(220))
    );
    assert!(matches!(
        store.transition("v1", &submit).await.unwrap(),
        Some(Transitioned::Refused(r)) if r.status == "pending"
    ));
    let approve = change(&["pending"], "approved", "approved", 230, Some("alice"));
    let Some(Transitioned::Done(row)) = store.transition("v1", &approve).await.unwrap() else {
        panic!("approved");
    };
    assert_eq!(row.status, "approved");
    assert_eq!(row.reviewer.as_deref(), Some("alice"));
    assert_eq!(
        (row.reviewed_at, row.feedback.as_str()),
        (Some(230), "approved by alice")
    );
    assert!(store.transition("nope", &approve).await.unwrap().is_none());
    // Approved bytes stay.
    assert!(matches!(
        store
            .upload_review_version(&version("v1", "p1", "v1.0.0", "sha256:c"), b"three", "publisher:acme")
            .await
            .unwrap(),
        Upload::Locked(r) if r.hash == "sha256:b" && r.status == "approved"
    ));
    assert_eq!(
        store.review_definition("v1").await.unwrap().unwrap(),
        b"two"
    );
    let history: Vec<(String, String, String)> = store
        .review_events("v1")
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.action, e.actor, e.hash))
        .collect();
    assert_eq!(
        history,
        [
            (
                "uploaded".into(),
                "publisher:acme".into(),
                "sha256:a".into()
            ),
            (
                "uploaded".into(),
                "publisher:acme".into(),
                "sha256:b".into()
            ),
            (
                "submitted".into(),
                "publisher:acme".into(),
                "sha256:b".into()
            ),
            (
                "approved".into(),
                "reviewer:alice".into(),
                "sha256:b".into()
            ),
        ]
    );
    let approved = store.review_versions(None, Some("approved")).await.unwrap();
    assert_eq!(approved.len(), 1);
    assert!(
        store
            .review_versions(None, Some("pending"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.review_versions(Some("p1"), None).await.unwrap().len(),
        1
    );
    assert!(
        store
            .review_versions(Some("p2"), None)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn two_reviewers_at_once_one_decision(b: Backend) {
    let (one, two) = (b.store.clone(), b.another().await);
    with_publisher(&one).await;
    one.create_listing(&listing("p1", "edge")).await.unwrap();
    for round in 0..5 {
        let id = format!("v{round}");
        let v = version(&id, "p1", &format!("1.{round}.0"), "sha256:a");
        one.upload_review_version(&v, b"x", "publisher:acme")
            .await
            .unwrap();
        let submit = change(&["draft"], "pending", "submitted", 220, None);
        one.transition(&id, &submit).await.unwrap();
        let approve = change(&["pending"], "approved", "approved", 230, Some("alice"));
        let reject = change(&["pending"], "rejected", "rejected", 231, Some("bob"));
        let (a, r) = tokio::join!(one.transition(&id, &approve), two.transition(&id, &reject));
        let done = [a.unwrap().unwrap(), r.unwrap().unwrap()]
            .into_iter()
            .filter(|t| matches!(t, Transitioned::Done(_)))
            .count();
        assert_eq!(done, 1, "round {round}: exactly one decision lands");
        let decisions = one
            .review_events(&id)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.action == "approved" || e.action == "rejected")
            .count();
        assert_eq!(decisions, 1);
    }
}

async fn published_is_read_from_the_index(b: Backend) {
    let store = &b.store;
    with_publisher(store).await;
    let def = with_version("gateway", "v2.0.0");
    store
        .create_listing(&listing("p1", def.name()))
        .await
        .unwrap();
    let same = version("v1", "p1", "v2.0.0", &def.hash);
    store
        .upload_review_version(&same, &def.bytes, "publisher:acme")
        .await
        .unwrap();
    let other = version("v2", "p1", "v2.0.1", "sha256:other");
    store
        .upload_review_version(&other, b"x", "publisher:acme")
        .await
        .unwrap();
    assert_eq!(
        store
            .review_version("v1")
            .await
            .unwrap()
            .unwrap()
            .published_at,
        None
    );
    store.insert_version("acme", &def, 500).await.unwrap();
    assert_eq!(
        store
            .review_version("v1")
            .await
            .unwrap()
            .unwrap()
            .published_at,
        Some(500),
        "the same bytes entered the index"
    );
    assert_eq!(
        store
            .review_version("v2")
            .await
            .unwrap()
            .unwrap()
            .published_at,
        None
    );
}

async fn reviewer_tokens_until_revoked(b: Backend) {
    let store = &b.store;
    store.add_reviewer("alice", "h1", 10).await.unwrap();
    assert!(matches!(
        store.add_reviewer("alice", "h2", 11).await,
        Err(StoreError::ReviewerExists(_))
    ));
    assert_eq!(
        store.reviewer_for_token("h1").await.unwrap().as_deref(),
        Some("alice")
    );
    assert_eq!(store.reviewer_for_token("h2").await.unwrap(), None);
    assert!(store.revoke_reviewer("alice", 12).await.unwrap());
    assert!(!store.revoke_reviewer("alice", 13).await.unwrap());
    assert_eq!(store.reviewer_for_token("h1").await.unwrap(), None);
    let listed = store.reviewers().await.unwrap();
    assert_eq!(
        (listed[0].name.as_str(), listed[0].revoked_at),
        ("alice", Some(12))
    );
    // A revoked reviewer gets a new token; the old one stays dead.
    store.add_reviewer("alice", "h3", 14).await.unwrap();
    assert_eq!(
        store.reviewer_for_token("h3").await.unwrap().as_deref(),
        Some("alice")
    );
    assert_eq!(store.reviewer_for_token("h1").await.unwrap(), None);
    assert_eq!(store.reviewers().await.unwrap()[0].revoked_at, None);
}
