//! The S3 blob store against a real S3-compatible server (Garage, started by the test):
//! streamed writes checked before anything is visible, in one `PutObject` or as a
//! multipart upload completed only after the digest matched; ranged reads; listing,
//! re-hashing and deletion; presigned URLs a plain HTTP client can follow.

mod common;

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use marketplace::blob::{self, BlobError, BlobStore, ByteStream, Digest, S3BlobStore, S3Location};

fn digest(bytes: &[u8]) -> Digest {
    common::oci::digest(bytes).parse().unwrap()
}

/// A store on a fresh bucket of the shared Garage, under a prefix.
fn store(garage: &common::garage::Garage, bucket: &str) -> S3BlobStore {
    garage.create_bucket(bucket);
    let mut location = S3Location::parse(&format!("s3://{bucket}/mirror/blobs")).unwrap();
    location.endpoint = Some(garage.endpoint.clone());
    location.region = Some(garage.region.clone());
    location.path_style = true;
    S3BlobStore::with_access_key(&location, &garage.key_id, &garage.secret).unwrap()
}

/// `bytes` as a stream of chunks of `chunk` bytes, as a download arrives.
fn chunked(bytes: &[u8], chunk: usize) -> ByteStream {
    let pieces: Vec<Result<Bytes, std::io::Error>> = bytes
        .chunks(chunk)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    futures_util::stream::iter(pieces).boxed()
}

async fn read_all(store: &S3BlobStore, d: &Digest, range: Option<std::ops::Range<u64>>) -> Vec<u8> {
    let blob = store.open(d, range).await.unwrap().expect("stored");
    let mut out = Vec::new();
    let mut body = blob.body;
    while let Some(chunk) = body.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    out
}

#[tokio::test]
async fn small_and_multipart_blobs_round_trip_with_ranges_listing_and_deletion() {
    let garage = common::garage::shared();
    let store = store(&garage, "round-trip");
    store.check().await.unwrap();

    let small = common::oci::noise("small", 70_000);
    // Past one 8 MiB part: a multipart upload of three parts.
    let large = common::oci::noise("large", 20 * 1024 * 1024 + 13);
    let (ds, dl) = (digest(&small), digest(&large));
    assert_eq!(store.stat(&ds).await.unwrap(), None);
    assert_eq!(
        store
            .put(&ds, Some(small.len() as u64), chunked(&small, 4096))
            .await
            .unwrap(),
        small.len() as u64
    );
    // Unsized, as a download without Content-Length.
    assert_eq!(
        store
            .put(&dl, None, chunked(&large, 1 << 20))
            .await
            .unwrap(),
        large.len() as u64
    );
    assert_eq!(store.stat(&dl).await.unwrap(), Some(large.len() as u64));
    assert_eq!(read_all(&store, &ds, None).await, small);
    assert_eq!(read_all(&store, &dl, None).await, large);
    let r = 8 * 1024 * 1024 - 5..8 * 1024 * 1024 + 5;
    assert_eq!(
        read_all(&store, &dl, Some(r.clone())).await,
        &large[r.start as usize..r.end as usize]
    );
    assert_eq!(read_all(&store, &ds, Some(10..10)).await, Vec::<u8>::new());
    let past = store.open(&ds, Some(10..70_001)).await;
    assert!(
        matches!(past, Err(BlobError::BadRange { size: 70_000, .. })),
        "{:?}",
        past.err()
    );

    // A second put of a stored blob reads nothing of its body.
    let never =
        futures_util::stream::once(async { Err::<Bytes, _>(std::io::Error::other("read")) })
            .boxed();
    assert_eq!(
        store.put(&ds, None, never).await.unwrap(),
        small.len() as u64
    );

    let mut listed = store.list().await.unwrap();
    listed.sort_by_key(|l| l.size);
    assert_eq!(
        listed
            .iter()
            .map(|l| (l.digest.clone(), l.size))
            .collect::<Vec<_>>(),
        vec![
            (ds.clone(), small.len() as u64),
            (dl.clone(), large.len() as u64)
        ]
    );
    assert!(listed.iter().all(|l| l.written_at > 1_700_000_000));
    assert_eq!(blob::verify(&store, &dl).await.unwrap(), Some(true));

    assert!(store.delete(&ds).await.unwrap());
    assert!(!store.delete(&ds).await.unwrap());
    assert_eq!(store.open(&ds, None).await.unwrap().map(|b| b.size), None);
    assert_eq!(blob::verify(&store, &ds).await.unwrap(), None);
}

/// Wrong bytes never become visible under the digest: not a small blob, not a
/// multipart one (its upload is aborted, never completed), not a short or long one.
#[tokio::test]
async fn wrong_bytes_leave_nothing_visible() {
    let garage = common::garage::shared();
    let store = store(&garage, "wrong-bytes");
    let small = common::oci::noise("s", 1000);
    let large = common::oci::noise("l", 17 * 1024 * 1024);
    let claimed_small = digest(b"something else");
    let e = store
        .put(&claimed_small, None, chunked(&small, 100))
        .await
        .unwrap_err();
    assert!(matches!(e, BlobError::DigestMismatch { .. }), "{e}");
    let claimed_large = digest(&common::oci::noise("other", 10));
    let e = store
        .put(&claimed_large, None, chunked(&large, 1 << 20))
        .await
        .unwrap_err();
    assert!(matches!(e, BlobError::DigestMismatch { .. }), "{e}");
    // Right bytes, wrong declared size: refused as soon as it is exceeded, or at the end.
    let dl = digest(&large);
    let e = store
        .put(&dl, Some(9 * 1024 * 1024), chunked(&large, 1 << 20))
        .await
        .unwrap_err();
    assert!(matches!(e, BlobError::TooLarge { .. }), "{e}");
    let e = store
        .put(&dl, Some(large.len() as u64 + 1), chunked(&large, 1 << 20))
        .await
        .unwrap_err();
    assert!(matches!(e, BlobError::SizeMismatch { .. }), "{e}");
    // The upstream fails mid-transfer, after two parts went up.
    let mut pieces: Vec<Result<Bytes, std::io::Error>> = large
        .chunks(1 << 20)
        .take(16)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    pieces.push(Err(std::io::Error::other("connection reset")));
    let e = store
        .put(&dl, None, futures_util::stream::iter(pieces).boxed())
        .await
        .unwrap_err();
    assert!(matches!(e, BlobError::Source(_)), "{e}");
    // A caller that gives up mid-transfer (the job's deadline): the future is dropped.
    let stalled = chunked(&large[..12 << 20], 1 << 20).chain(futures_util::stream::pending());
    let cancelled = tokio::time::timeout(
        Duration::from_secs(3),
        store.put(&dl, None, stalled.boxed()),
    )
    .await;
    assert!(
        cancelled.is_err(),
        "the put waits for bytes that never come"
    );

    for d in [&claimed_small, &claimed_large, &dl] {
        assert_eq!(store.stat(d).await.unwrap(), None, "{d} is visible");
    }
    assert_eq!(store.list().await.unwrap(), vec![]);
    // And the right bytes still go in afterwards.
    store
        .put(&dl, Some(large.len() as u64), chunked(&large, 1 << 20))
        .await
        .unwrap();
    assert_eq!(blob::verify(&store, &dl).await.unwrap(), Some(true));
}

/// A presigned URL is a plain GET any HTTP client can make, ranges included, and it
/// stops working when it expires; without one the bucket refuses anonymous reads.
#[tokio::test]
async fn presigned_urls_serve_the_blob_until_they_expire() {
    let garage = common::garage::shared();
    let store = store(&garage, "presigned");
    let bytes = common::oci::noise("p", 300_000);
    let d = digest(&bytes);
    store.put(&d, None, chunked(&bytes, 65536)).await.unwrap();
    let url = store
        .presign(&d, Duration::from_secs(60))
        .await
        .unwrap()
        .expect("S3 presigns");
    assert!(url.as_str().starts_with(&garage.endpoint), "{url}");
    let http = reqwest::Client::new();
    let got = http.get(url.clone()).send().await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.bytes().await.unwrap().as_ref(), bytes.as_slice());
    let part = http
        .get(url.clone())
        .header("Range", "bytes=100-199")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), 206);
    assert_eq!(part.bytes().await.unwrap().as_ref(), &bytes[100..200]);

    // Refused: Garage answers 403 to an unsigned request, 400 "Date is too old" to an
    // expired signature.
    let mut unsigned = url.clone();
    unsigned.set_query(None);
    let status = http.get(unsigned).send().await.unwrap().status();
    assert!(status.is_client_error(), "{status}");
    let short = store
        .presign(&d, Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(http.get(short.clone()).send().await.unwrap().status(), 200);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let expired = http.get(short).send().await.unwrap();
    let status = expired.status();
    let body = expired.text().await.unwrap();
    assert!(
        status.is_client_error() && body.contains("too old"),
        "{status}: {body}"
    );
}

/// A wrong secret or a missing bucket stops at `check`, with the store's own words.
#[tokio::test]
async fn a_wrong_key_or_bucket_fails_the_check() {
    let garage = common::garage::shared();
    let mut location = S3Location::parse("s3://no-such-bucket/x").unwrap();
    location.endpoint = Some(garage.endpoint.clone());
    location.region = Some(garage.region.clone());
    location.path_style = true;
    let missing = S3BlobStore::with_access_key(&location, &garage.key_id, &garage.secret).unwrap();
    let e = missing.check().await.unwrap_err().to_string();
    assert!(e.contains("reaching the bucket"), "{e}");
    garage.create_bucket("wrong-key");
    location.bucket = "wrong-key".into();
    let wrong =
        S3BlobStore::with_access_key(&location, &garage.key_id, "0".repeat(64).as_str()).unwrap();
    let e = wrong.check().await.unwrap_err().to_string();
    assert!(e.contains("reaching the bucket"), "{e}");
    assert!(!e.contains(&garage.secret), "{e}");
}
