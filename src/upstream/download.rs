//! The definitions a round needs: each target new to this server downloaded from the
//! upstream, checked against the length and hash its publisher signed, parsed as
//! published bytes, and checked to be the plugin and version its target name says, with
//! the extras its target carries. A failure is its publisher's alone.

use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use crate::definition::{Definition, MAX_DEFINITION_BYTES};
use crate::trust::client::{Fetcher, Listed, target_url};
use crate::trust::metadata::{target_extras, target_name};

/// Downloads in flight.
const PARALLEL_DOWNLOADS: usize = 16;

/// A target to download: its publisher and listing.
pub(super) struct Wanted {
    pub publisher: String,
    pub listed: Listed,
}

/// A downloaded target: the definition, or why its publisher is held back.
pub(super) type Fetched = (String, Result<(Definition, String), String>);

/// Downloads every wanted target (bounded parallelism), then parses them on every core.
/// A network failure (unreachable, timeout) fails the round: it says nothing about the
/// publisher.
pub(super) async fn fetch_all(
    fetcher: &Fetcher,
    base: &url::Url,
    consistent: bool,
    wanted: Vec<Wanted>,
) -> Result<Vec<Fetched>, String> {
    let downloads = futures_util::stream::iter(wanted.into_iter().map(|w| async move {
        let bytes = fetch_one(fetcher, base, consistent, &w.listed).await;
        (w, bytes)
    }))
    .buffer_unordered(PARALLEL_DOWNLOADS)
    .collect::<Vec<_>>()
    .await;
    let mut fetched = Vec::with_capacity(downloads.len());
    for (w, bytes) in downloads {
        match bytes {
            Ok(Ok(bytes)) => fetched.push((w, Ok(bytes))),
            Ok(Err(judged)) => fetched.push((w, Err(judged))),
            Err(network) => return Err(network),
        }
    }
    // YAML parsing is CPU work: one blocking task per core, each over its share.
    let lanes = std::thread::available_parallelism().map_or(2, |n| n.get());
    let per = fetched.len().div_ceil(lanes).max(1);
    let mut tasks = Vec::new();
    let mut rest = fetched;
    while !rest.is_empty() {
        let chunk: Vec<_> = rest.drain(..per.min(rest.len())).collect();
        tasks.push(tokio::task::spawn_blocking(move || {
            chunk
                .into_iter()
                .map(|(w, bytes)| {
                    let def = bytes.and_then(|b| definition(&w, b));
                    (w.publisher, def)
                })
                .collect::<Vec<Fetched>>()
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.extend(t.await.map_err(|e| format!("parsing definitions: {e}"))?);
    }
    Ok(out)
}

/// One target's bytes: `Err` for a network failure, `Ok(Err)` for bytes that are not
/// what the publisher signed (or missing).
async fn fetch_one(
    fetcher: &Fetcher,
    base: &url::Url,
    consistent: bool,
    listed: &Listed,
) -> Result<Result<Vec<u8>, String>, String> {
    let name = &listed.name;
    let t = &listed.target;
    let Some(url) = target_url(base, consistent, name, t) else {
        return Ok(Err(format!("{name}: no URL can be formed for it")));
    };
    if t.length > MAX_DEFINITION_BYTES as u64 {
        return Ok(Err(format!(
            "{name}: signed length {} is over the {MAX_DEFINITION_BYTES} bytes a definition may have",
            t.length
        )));
    }
    let bytes = match fetcher.get(url, t.length as usize).await {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            return Ok(Err(format!(
                "{name} is listed but the upstream does not serve it"
            )));
        }
        Err(crate::trust::client::FetchError::TooLarge(n)) => {
            return Ok(Err(format!("{name}: longer than the {n} bytes signed")));
        }
        Err(e) => return Err(format!("downloading {name}: {e}")),
    };
    if bytes.len() as u64 != t.length || Sha256::digest(&bytes)[..] != *t.hashes.sha256.as_ref() {
        return Ok(Err(format!(
            "{name}: the bytes served are not the ones its publisher signed (length or sha256 differ)"
        )));
    }
    Ok(Ok(bytes))
}

/// The parsed definition with the key ids that signed its role.
fn definition(w: &Wanted, bytes: Vec<u8>) -> Result<(Definition, String), String> {
    let name = &w.listed.name;
    let def = Definition::parse_published(&bytes).map_err(|e| format!("{name}: {e}"))?;
    if target_name(&w.publisher, &def) != *name {
        return Err(format!(
            "{name} holds {} {}, not the plugin and version its name says",
            def.name(),
            def.version_text()
        ));
    }
    let extras = target_extras(&w.listed.target, def.name()).map_err(|e| format!("{name}: {e}"))?;
    let def = def
        .with_extras(extras)
        .map_err(|e| format!("{name}: {e}"))?;
    Ok((def, w.listed.signers.clone()))
}
