//! The definitions of one round: each listed target downloaded when its hash is new to
//! the source, checked against the hash and length its role signed, then parsed and
//! validated. Any failure fails the round (the caller keeps the previous state).
//!
//! Downloading and parsing are two passes rather than one task per target, because they
//! want different things. Downloads wait on the network: a few tasks (one per core),
//! each with its share of [`PARALLEL_DOWNLOADS`] requests in flight, pull from one
//! queue, which costs less than a spawned task per target. Parsing is pure CPU (YAML is
//! most of a cold round's work): one pass over the downloaded bytes on every core, apart
//! from the HTTP work, took about a third less CPU time in the sync benchmark than the
//! same parses interleaved with downloads. Both passes hold the same bytes the store
//! receives, so memory is what it was.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::task::JoinSet;
use tough::schema::Target;

use super::round::{Reason, RoundError};
use super::store::{SourceDefinition, summary_json};
use crate::definition::MAX_DEFINITION_BYTES;
use crate::trust::client::{self, FetchError, Fetcher, Listed};

/// Downloads in flight per source: enough to hide loopback and LAN latency.
const PARALLEL_DOWNLOADS: usize = 16;

/// Where target files are fetched from, as the verified root says.
pub(super) struct TargetSource {
    pub fetcher: Fetcher,
    pub base: url::Url,
    pub consistent: bool,
}

/// A listed target after the download pass: its stored fields, and its bytes when the
/// hash is new.
struct Downloaded {
    row: SourceDefinition,
    bytes: Option<Vec<u8>>,
}

/// Every listed target as the store takes it. `listed` pairs each target with its
/// publisher; `known` maps target names to the hash the store already holds.
pub(super) async fn collect(
    from: TargetSource,
    listed: Vec<(String, Listed)>,
    known: HashMap<String, (String, String)>,
) -> Result<(Vec<SourceDefinition>, std::time::Duration), RoundError> {
    let downloaded = download(Arc::new(from), listed, Arc::new(known)).await?;
    let started = std::time::Instant::now();
    let parsed = tokio::task::spawn_blocking(move || parse(downloaded))
        .await
        .map_err(|e| RoundError::new(Reason::Local, e.to_string()))??;
    Ok((parsed, started.elapsed()))
}

/// The download pass: bytes of every target whose hash is new, in listing order.
async fn download(
    from: Arc<TargetSource>,
    listed: Vec<(String, Listed)>,
    known: Arc<HashMap<String, (String, String)>>,
) -> Result<Vec<Downloaded>, RoundError> {
    use futures_util::{StreamExt, TryStreamExt};
    let lanes = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, PARALLEL_DOWNLOADS);
    let queue = Arc::new(Mutex::new(listed.into_iter().enumerate()));
    // Dropping the set (the first error below, or the round's deadline dropping this
    // future) aborts every lane, so no download outlives its round.
    let mut set = JoinSet::new();
    for _ in 0..lanes {
        let (queue, known, from) = (queue.clone(), known.clone(), from.clone());
        set.spawn(async move {
            let next = move || {
                queue
                    .lock()
                    .expect("the queue lock is never poisoned")
                    .next()
            };
            futures_util::stream::iter(std::iter::from_fn(next))
                .map(|(i, (publisher, listed))| {
                    let known = known
                        .get(&listed.name)
                        .map(|(h, e)| (h.as_str(), e.as_str()));
                    let from = &from;
                    async move { one(from, listed, publisher, known).await.map(|d| (i, d)) }
                })
                .buffer_unordered(PARALLEL_DOWNLOADS / lanes)
                .try_collect::<Vec<(usize, Downloaded)>>()
                .await
        });
    }
    let mut all = Vec::new();
    while let Some(lane) = set.join_next().await {
        all.extend(lane.map_err(|e| RoundError::new(Reason::Local, e.to_string()))??);
    }
    all.sort_unstable_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, d)| d).collect())
}

/// One listed target: its name and extras checked, then its bytes fetched unless `known`
/// already holds the signed hash with the same extras.
async fn one(
    from: &TargetSource,
    listed: Listed,
    publisher: String,
    known: Option<(&str, &str)>,
) -> Result<Downloaded, RoundError> {
    let Listed {
        name,
        target,
        signers: signer_key_ids,
    } = listed;
    let hash = format!("sha256:{}", hex::encode(target.hashes.sha256.as_ref()));
    // Checked before anything is fetched: the name becomes part of a URL.
    let shape = || invalid(&name, "not PUBLISHER/NAME/VERSION.yaml".into());
    let [_, plugin, file] = name.split('/').collect::<Vec<_>>()[..] else {
        return Err(shape());
    };
    let version = file.strip_suffix(".yaml").ok_or_else(shape)?;
    if !crate::definition::is_dns_label(plugin)
        || crate::definition::parse_version(version).is_err()
    {
        return Err(shape());
    }
    let (plugin, version) = (plugin.to_owned(), version.to_owned());
    // Signed beside the file and read as strictly: a remote index is input like any.
    let extras = match target.custom.get("extras") {
        None => String::new(),
        Some(_) => {
            let extras = crate::trust::metadata::target_extras(&target, &plugin)
                .map_err(|e| invalid(&name, e))?;
            serde_json::to_string(&extras).expect("extras serialize")
        }
    };
    let bytes = if known == Some((hash.as_str(), extras.as_str())) {
        None
    } else if target.length > MAX_DEFINITION_BYTES as u64 {
        return Err(invalid(
            &name,
            format!(
                "{} bytes, more than the {MAX_DEFINITION_BYTES} a definition may have",
                target.length
            ),
        ));
    } else {
        Some(fetch(from, &name, &target).await?)
    };
    let row = SourceDefinition {
        target: name,
        publisher,
        name: plugin,
        version,
        hash,
        yanked: target
            .custom
            .get("yanked")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false),
        signer_key_ids,
        extras,
        bytes: None,
    };
    Ok(Downloaded { row, bytes })
}

/// The parse pass, on every core: each downloaded file must be a valid definition of
/// what its path names. The first invalid file in listing order fails the round.
fn parse(mut downloaded: Vec<Downloaded>) -> Result<Vec<SourceDefinition>, RoundError> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let chunk = downloaded.len().div_ceil(threads).max(1);
    let mut parts = Vec::with_capacity(threads);
    while downloaded.len() > chunk {
        let rest = downloaded.split_off(chunk);
        parts.push(std::mem::replace(&mut downloaded, rest));
    }
    parts.push(downloaded);
    std::thread::scope(|scope| {
        // Each thread stops at its first invalid file; joined in order, the first error
        // met is the first in listing order.
        let handles: Vec<_> = parts
            .into_iter()
            .map(|part| {
                scope.spawn(|| part.into_iter().map(checked).collect::<Result<Vec<_>, _>>())
            })
            .collect();
        let mut rows = Vec::new();
        for handle in handles {
            rows.extend(handle.join().expect("a parse thread panicked")?);
        }
        Ok(rows)
    })
}

fn checked(d: Downloaded) -> Result<SourceDefinition, RoundError> {
    let Downloaded { mut row, bytes } = d;
    if let Some(bytes) = bytes {
        // Published bytes: a version of the older design stays offered to the JSON API,
        // marked, and is left out of Fundament's contract.
        let def = super::store::stored_definition(&bytes, &row.extras)
            .map_err(|e| invalid(&row.target, e.to_string()))?;
        if crate::trust::metadata::target_name(&row.publisher, &def) != row.target {
            return Err(invalid(
                &row.target,
                format!(
                    "the file describes {} {}, not what its path says",
                    def.name(),
                    def.version_text()
                ),
            ));
        }
        row.bytes = Some((bytes, summary_json(&def)));
    }
    Ok(row)
}

fn invalid(name: &str, why: String) -> RoundError {
    RoundError::new(Reason::InvalidDefinition, format!("{name}: {why}"))
}

/// Downloads one target by the TUF specification's consistent-snapshot name
/// (`PUBLISHER/NAME/HASH.VERSION.yaml`, what python-tuf asks for and any static copy of
/// `/tuf/` holds) and checks it against the hash and length its role signed.
async fn fetch(from: &TargetSource, name: &str, target: &Target) -> Result<Vec<u8>, RoundError> {
    use sha2::Digest;
    let url = client::target_url(&from.base, from.consistent, name, target).ok_or_else(|| {
        RoundError::new(
            Reason::InvalidMetadata,
            format!("{name}: not a usable path"),
        )
    })?;
    let max = usize::try_from(target.length).unwrap_or(usize::MAX);
    let bytes = match from.fetcher.get(url, max).await {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            return Err(RoundError::new(
                Reason::InvalidMetadata,
                format!("{name}: listed, but the marketplace has no such file"),
            ));
        }
        Err(FetchError::TooLarge(_)) => {
            return Err(RoundError::new(
                Reason::Tampered,
                format!(
                    "{name}: longer than the {} bytes signed for it",
                    target.length
                ),
            ));
        }
        Err(e @ FetchError::Timeout(_)) => {
            return Err(RoundError::new(Reason::Timeout, format!("{name}: {e}")));
        }
        Err(FetchError::Failed(e)) => {
            return Err(RoundError::new(Reason::Unreachable, format!("{name}: {e}")));
        }
    };
    if bytes.len() as u64 != target.length
        || sha2::Sha256::digest(&bytes)[..] != *target.hashes.sha256
    {
        return Err(RoundError::new(
            Reason::Tampered,
            format!("{name}: the bytes do not match the hash signed for them"),
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::BUILTIN_PUBLISHER;

    fn row(target: String, bytes: Option<Vec<u8>>) -> Downloaded {
        Downloaded {
            row: SourceDefinition {
                target,
                publisher: BUILTIN_PUBLISHER.to_owned(),
                name: String::new(),
                version: String::new(),
                hash: String::new(),
                yanked: false,
                signer_key_ids: String::new(),
                extras: String::new(),
                bytes: None,
            },
            bytes,
        }
    }

    fn builtins() -> Vec<Downloaded> {
        crate::catalog::builtin::definitions()
            .expect("the built-in definitions parse")
            .into_iter()
            .map(|d| {
                let target = crate::trust::metadata::target_name(BUILTIN_PUBLISHER, &d);
                row(target, Some(d.bytes.clone()))
            })
            .collect()
    }

    #[test]
    fn the_parse_pass_keeps_listing_order_and_summarizes_every_download() {
        let mut input = builtins();
        let known = input[0].row.target.clone();
        input[0].bytes = None; // a hash the store already holds: kept, not parsed
        let names: Vec<String> = input.iter().map(|d| d.row.target.clone()).collect();
        let rows = parse(input).expect("every built-in is valid");
        assert_eq!(
            rows.iter().map(|r| r.target.clone()).collect::<Vec<_>>(),
            names
        );
        assert_eq!(rows[0].target, known);
        assert!(rows[0].bytes.is_none());
        for r in &rows[1..] {
            let (_, summary) = r.bytes.as_ref().expect("downloaded rows keep their bytes");
            let summary: serde_json::Value = serde_json::from_str(summary).unwrap();
            assert!(
                summary["displayName"].is_string(),
                "{}: {summary}",
                r.target
            );
        }
    }

    #[test]
    fn the_first_invalid_file_in_listing_order_fails_the_pass() {
        let mut input = builtins();
        assert!(
            input.len() >= 4,
            "enough built-ins to spread over the threads"
        );
        let last = input.len() - 1;
        let second = input[1].row.target.clone();
        input[1].bytes = Some(b"apiVersion: [".to_vec());
        // Also wrong, later in the list: a file whose content names another target.
        input[last].bytes = input[0].bytes.clone();
        let err = parse(input).expect_err("an invalid file fails the pass");
        assert_eq!(err.reason, Reason::InvalidDefinition);
        assert!(err.message.starts_with(&format!("{second}: ")), "{err}");
    }
}
