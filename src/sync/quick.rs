//! The warm-round shortcut: when the marketplace's timestamp is the one already trusted,
//! nothing it vouches for can have changed, so the round ends after two small requests
//! instead of re-downloading every metadata file (TUF has no conditional fetch).
//!
//! It never adds trust: it only decides that there is nothing new to verify. Any doubt
//! (an error, a new root, a different timestamp, trusted metadata near expiry) falls
//! through to the full, verified round, which then reports the reason.

use tough::schema::{Signed, Timestamp};
use url::Url;

use super::store::Trusted;
use crate::trust::client::Fetcher;

/// Whether the marketplace offers exactly what `trusted` already holds.
pub async fn unchanged(fetcher: &Fetcher, base: &Url, trusted: &Trusted, now: i64) -> bool {
    // Past the earliest expiry, the full round must run (and refuse, if nothing was
    // re-signed): an unchanged but expired index is not current.
    if now >= trusted.versions.expires_at {
        return false;
    }
    let Ok(ours) = serde_json::from_slice::<Signed<Timestamp>>(&trusted.timestamp) else {
        return false;
    };
    let (Ok(next_root), Ok(timestamp)) = (
        base.join(&format!(
            "tuf/metadata/{}.root.json",
            trusted.versions.root + 1
        )),
        base.join("tuf/metadata/timestamp.json"),
    ) else {
        return false;
    };
    let (root, theirs) = tokio::join!(
        fetcher.get(next_root, crate::trust::client::MAX_RESPONSE_BYTES),
        // The full round's cap: a larger file falls through and is reported there.
        fetcher.get(timestamp, crate::trust::client::Limits::default().timestamp)
    );
    // A new root (rotation) goes through the full round, as TUF requires.
    if !matches!(root, Ok(None)) {
        return false;
    }
    let Ok(Some(bytes)) = theirs else {
        return false;
    };
    let Ok(theirs) = serde_json::from_slice::<Signed<Timestamp>>(&bytes) else {
        return false;
    };
    same(&ours, &theirs)
}

/// Same version, same snapshot (version, length and hashes), same expiry: the signed
/// content verified last round. Signatures are not compared: identical signed
/// content means nothing new is claimed, whoever signed it.
fn same(ours: &Signed<Timestamp>, theirs: &Signed<Timestamp>) -> bool {
    let (a, b) = (&ours.signed, &theirs.signed);
    let snapshot = |t: &Timestamp| {
        t.meta.get("snapshot.json").map(|m| {
            (
                m.version,
                m.length,
                m.hashes.as_ref().map(|h| h.sha256.to_vec()),
            )
        })
    };
    a.version == b.version
        && a.expires == b.expires
        && snapshot(a).is_some()
        && snapshot(a) == snapshot(b)
}
