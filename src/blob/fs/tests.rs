use std::time::Duration;

use futures_util::TryStreamExt;

use super::*;
use crate::blob::{once, read_small};

fn chunks(bytes: &[u8], size: usize) -> ByteStream {
    let parts: Vec<Result<Bytes, std::io::Error>> = bytes
        .chunks(size)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Box::pin(futures_util::stream::iter(parts))
}

async fn body(blob: Blob) -> Vec<u8> {
    let parts: Vec<Bytes> = blob.body.try_collect().await.unwrap();
    parts.concat()
}

fn tmp_files(root: &Path) -> usize {
    std::fs::read_dir(root.join("tmp")).unwrap().count()
}

fn sample(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

#[tokio::test]
async fn a_blob_is_stored_under_its_digest_and_read_back_whole_or_in_part() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsBlobStore::open(dir.path()).unwrap();
    let data = sample(3 * READ_CHUNK + 123);
    let digest = Digest::of(&data);
    let n = store
        .put(&digest, Some(data.len() as u64), chunks(&data, 10_000))
        .await
        .unwrap();
    assert_eq!(n, data.len() as u64);
    assert_eq!(store.stat(&digest).await.unwrap(), Some(n));
    let stored = dir
        .path()
        .join("sha256")
        .join(&digest.hex()[..2])
        .join(digest.hex());
    assert_eq!(std::fs::read(&stored).unwrap(), data);
    assert_eq!(tmp_files(dir.path()), 0);

    let whole = store.open(&digest, None).await.unwrap().unwrap();
    assert_eq!((whole.size, whole.range.clone()), (n, 0..n));
    assert_eq!(body(whole).await, data);
    let part = store
        .open(&digest, Some(READ_CHUNK as u64 - 5..READ_CHUNK as u64 + 5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(body(part).await, data[READ_CHUNK - 5..READ_CHUNK + 5]);
    let empty = store.open(&digest, Some(7..7)).await.unwrap().unwrap();
    assert!(body(empty).await.is_empty());
    let err = store.open(&digest, Some(5..n + 1)).await.err().unwrap();
    assert!(matches!(err, BlobError::BadRange { .. }), "{err}");

    // Present already: the new body is not even read.
    let poisoned: ByteStream = Box::pin(futures_util::stream::once(async {
        Err(std::io::Error::other("must not be read"))
    }));
    assert_eq!(store.put(&digest, None, poisoned).await.unwrap(), n);

    let absent = Digest::of(b"absent");
    assert!(store.open(&absent, None).await.unwrap().is_none());
    assert_eq!(store.stat(&absent).await.unwrap(), None);
    assert!(store.delete(&digest).await.unwrap());
    assert!(!store.delete(&digest).await.unwrap());
    assert!(store.open(&digest, None).await.unwrap().is_none());
}

#[tokio::test]
async fn bytes_that_do_not_match_leave_nothing_under_the_digest() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsBlobStore::open(dir.path()).unwrap();
    let data = sample(100_000);
    let digest = Digest::of(&data);
    let mut tampered = data.clone();
    tampered[50_000] ^= 1;

    let err = store
        .put(&digest, None, chunks(&tampered, 4096))
        .await
        .unwrap_err();
    match err {
        BlobError::DigestMismatch { expected, actual } => {
            assert_eq!(expected, digest);
            assert_eq!(actual, Digest::of(&tampered));
        }
        other => panic!("{other}"),
    }
    // Longer than the manifest said: refused while streaming.
    let err = store
        .put(&digest, Some(99_999), chunks(&data, 4096))
        .await
        .unwrap_err();
    assert!(
        matches!(err, BlobError::TooLarge { limit: 99_999, .. }),
        "{err}"
    );
    // Shorter than the manifest said, with the right hash of what came: still refused.
    let err = store
        .put(&digest, Some(100_001), chunks(&data, 4096))
        .await
        .unwrap_err();
    assert!(matches!(err, BlobError::SizeMismatch { .. }), "{err}");
    // The upstream fails mid-stream.
    let failing: ByteStream = Box::pin(futures_util::stream::iter(vec![
        Ok(Bytes::from_static(b"half")),
        Err(std::io::Error::other("connection reset")),
    ]));
    let err = store.put(&digest, None, failing).await.unwrap_err();
    assert!(matches!(err, BlobError::Source(_)), "{err}");

    assert_eq!(store.stat(&digest).await.unwrap(), None);
    assert!(store.list().await.unwrap().is_empty());
    assert_eq!(
        tmp_files(dir.path()),
        0,
        "failed writes clean up after themselves"
    );
}

#[tokio::test]
async fn a_cancelled_write_removes_its_file_and_only_dead_writes_are_abandoned() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsBlobStore::open(dir.path()).unwrap();
    let digest = Digest::of(b"never finished");
    // A body that yields one chunk and then never ends.
    let stuck = || -> ByteStream {
        Box::pin(
            futures_util::stream::once(async { Ok(Bytes::from_static(b"never")) })
                .chain(futures_util::stream::pending()),
        )
    };
    let write = store.put(&digest, None, stuck());
    assert!(
        tokio::time::timeout(Duration::from_millis(200), write)
            .await
            .is_err()
    );
    // The writer thread notices the closed channel and removes its file.
    for _ in 0..100 {
        if tmp_files(dir.path()) == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(tmp_files(dir.path()), 0);

    // A write in progress is never abandoned, seen from this store or from another
    // opened on the same directory (as another process would).
    let live = tokio::spawn({
        let store = store.clone();
        let digest = digest.clone();
        async move { store.put(&digest, None, stuck()).await }
    });
    for _ in 0..100 {
        if tmp_files(dir.path()) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(tmp_files(dir.path()), 1);
    let other = FsBlobStore::open(dir.path()).unwrap();
    assert_eq!(other.abandoned().await.unwrap(), []);
    assert_eq!(store.abandoned().await.unwrap(), []);
    let name = std::fs::read_dir(dir.path().join("tmp"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name()
        .to_string_lossy()
        .into_owned();
    let live_one = Abandoned {
        name,
        size: 5,
        written_at: 0,
    };
    assert!(!other.remove_abandoned(&live_one).await.unwrap());
    assert_eq!(tmp_files(dir.path()), 1);

    // What a killed process leaves: its file, no lock. Listed, with its size, and
    // removed; anything outside `tmp/` is never touched.
    let left = dir
        .path()
        .join("tmp")
        .join(format!("{}.0123abcd", digest.hex()));
    std::fs::write(&left, b"partial").unwrap();
    let found = other.abandoned().await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (found[0].name.as_str(), found[0].size),
        (left.file_name().unwrap().to_str().unwrap(), 7)
    );
    for outside in ["../sha256", "", ".", ".."] {
        let bad = Abandoned {
            name: outside.into(),
            ..found[0].clone()
        };
        assert!(!other.remove_abandoned(&bad).await.unwrap(), "{outside:?}");
    }
    assert!(other.remove_abandoned(&found[0]).await.unwrap());
    assert!(!left.exists());
    assert!(!other.remove_abandoned(&found[0]).await.unwrap(), "gone");
    assert_eq!(tmp_files(dir.path()), 1, "the live write keeps its file");
    live.abort();
    assert_eq!(store.stat(&digest).await.unwrap(), None);
}

#[tokio::test]
async fn concurrent_writers_of_one_blob_both_succeed_with_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsBlobStore::open(dir.path()).unwrap();
    let data = sample(2_000_000);
    let digest = Digest::of(&data);
    let (a, b) = tokio::join!(
        store.put(&digest, Some(data.len() as u64), chunks(&data, 65_536)),
        store.put(&digest, Some(data.len() as u64), chunks(&data, 1_000)),
    );
    assert_eq!(a.unwrap(), data.len() as u64);
    assert_eq!(b.unwrap(), data.len() as u64);
    let listed = store.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].digest, digest);
    assert_eq!(listed[0].size, data.len() as u64);
    assert!(listed[0].written_at > 0);
    assert_eq!(
        read_small(&store, &digest, 2_000_000)
            .await
            .unwrap()
            .unwrap(),
        data
    );
    let err = read_small(&store, &digest, 1_000).await.unwrap_err();
    assert!(matches!(err, BlobError::TooLarge { .. }), "{err}");
}

#[tokio::test]
async fn listing_skips_what_is_not_a_blob() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsBlobStore::open(dir.path()).unwrap();
    let digest = Digest::of(b"x");
    store.put(&digest, Some(1), once(&b"x"[..])).await.unwrap();
    std::fs::write(dir.path().join("sha256").join("README"), b"hi").unwrap();
    std::fs::write(
        dir.path()
            .join("sha256")
            .join(&digest.hex()[..2])
            .join("junk"),
        b"hi",
    )
    .unwrap();
    let listed = store.list().await.unwrap();
    assert_eq!(
        listed.iter().map(|l| l.digest.clone()).collect::<Vec<_>>(),
        vec![digest]
    );
}
