//! Publish benchmark: one publish into a signed index of 10,000 definitions, end to end,
//! against the real `marketplace` binary, and the size of every metadata file.
//!
//! For each layout (10,000 definitions spread over 100 publishers; all of them in one
//! publisher):
//! 1. `marketplace repo init` and `marketplace publisher add` (the real CLI);
//! 2. seeds each publisher's definitions through the library's server-side `accept`
//!    (the same verification as the HTTP API) as one signed batch per publisher;
//! 3. starts `marketplace serve` and times sequential publishes through the library
//!    code `marketplace publish` runs (`trust::publisher::uploader`): fetch the current role and the
//!    bin the new target falls in, check the publisher's signatures, add the target,
//!    sign, upload definition and changed roles, wait for 201;
//! 4. downloads timestamp, snapshot, targets and the publisher's role and reports sizes
//!    (with the bins the role delegates, past 1,024 targets).
//!
//! Each layout runs on SQLite (the data directory's file), then with the server's store
//! in PostgreSQL (a throwaway server the benchmark starts, the tests' `common::pg`;
//! `--database`), side by side in the same run.
//!
//! `cargo bench --bench publish`; `BENCH_DEFINITIONS` (default 10000) and
//! `BENCH_PUBLISHES` (default 30) make it smaller. Exits non-zero when p50 > 100 ms on
//! SQLite or > 150 ms on PostgreSQL.

use std::process::ExitCode;
use std::time::{Duration, Instant};

#[path = "../catalog/generate.rs"]
#[allow(dead_code)] // the catalog benchmark uses the rest
mod generate;
#[path = "../../tests/common/pg.rs"]
#[allow(dead_code)] // the tests use the rest
mod pg;
#[path = "../common/seed.rs"]
mod seed;
#[path = "../common/server.rs"]
mod server;

use generate::{PluginBase, db_size, plugin_yaml};
use marketplace::definition::Definition;
use marketplace::trust::publisher::plan::{Change, Limits};
use marketplace::trust::publisher::uploader::PublisherClient;
use seed::{Publisher, Seeded, YEAR, seed};
use server::{Server, env_number};

type BoxError = Box<dyn std::error::Error>;

const TARGET_P50_MS: f64 = 100.0;
/// With the server's store in PostgreSQL.
const TARGET_POSTGRES_P50_MS: f64 = 150.0;

fn main() -> ExitCode {
    let definitions = env_number("BENCH_DEFINITIONS", 10_000);
    let publishes = env_number("BENCH_PUBLISHES", 30);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("building the tokio runtime");
    println!(
        "marketplace publish benchmark: {definitions} definitions, {publishes} timed publishes per layout\n"
    );
    let result = (|| {
        let mut ok = true;
        for publishers in [100.min(definitions), 1] {
            let (sqlite_ok, sqlite) =
                runtime.block_on(layout(definitions, publishers, publishes, None))?;
            let (postgres_ok, postgres) = runtime.block_on(async {
                let pg = pg::Postgres::start();
                let url = pg.fresh().await;
                layout(definitions, publishers, publishes, Some(&url)).await
            })?;
            println!(
                "PostgreSQL against SQLite, {publishers} publisher(s): p50 {postgres:.1} ms vs {sqlite:.1} ms ({:.2}x)\n",
                postgres / sqlite
            );
            ok &= sqlite_ok && postgres_ok;
        }
        if !ok {
            println!(
                "\na layout's p50 is above {TARGET_P50_MS} ms (SQLite) or {TARGET_POSTGRES_P50_MS} ms (PostgreSQL)"
            );
        }
        Ok(ok)
    })();
    server::exit_status(result)
}

/// Sets up the repository with `publishers` publishers sharing `definitions` (its store
/// in `database` when given), times `publishes` publishes by the first one; returns
/// whether p50 met the target, and p50 in milliseconds.
async fn layout(
    definitions: usize,
    publishers: usize,
    publishes: usize,
    database: Option<&str>,
) -> Result<(bool, f64), BoxError> {
    let (backend, target) = match database {
        Some(_) => ("PostgreSQL", TARGET_POSTGRES_P50_MS),
        None => ("SQLite", TARGET_P50_MS),
    };
    println!("== {definitions} definitions over {publishers} publisher(s), on {backend}");
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let Seeded {
        data,
        publishers: pubs,
        definitions: by_publisher,
        mut rng,
    } = seed(dir.path(), definitions, publishers, database).await?;
    println!("seeded in {:.1} s", started.elapsed().as_secs_f64());

    let server = match database {
        Some(url) => Server::start_args(&data, Some("warn"), None, &["--database", url])?,
        None => Server::start(&data)?,
    };
    let http = reqwest::Client::new();
    let who = &pubs[0];
    let client = PublisherClient::connect(&server.base, &who.token).await?;
    let mut times = Vec::with_capacity(publishes);
    for n in 0..publishes {
        let base = PluginBase::new(definitions + 1 + n, definitions + publishes, &mut rng);
        let yaml = plugin_yaml(&base, "v1.0.0", &mut rng);
        let def = Definition::parse(yaml.as_bytes()).map_err(|e| e.to_string())?;
        let t = Instant::now();
        publish_once(&client, who, &def).await?;
        times.push(t.elapsed());
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p50 = ms(times[times.len() / 2]);
    let p90 = ms(times[(times.len() * 9 / 10).min(times.len() - 1)]);
    println!(
        "publish by {} ({} targets before): p50 {p50:.1} ms, p90 {p90:.1} ms, max {:.1} ms  [{}]",
        who.name,
        by_publisher[0].len(),
        ms(*times.last().unwrap()),
        if p50 <= target { "PASS" } else { "FAIL" }
    );
    sizes(&http, &server.base, &who.name).await?;
    drop(server);
    if database.is_none() {
        println!(
            "database after the run: {:.1} MiB\n",
            db_size(&data) as f64 / 1_048_576.0
        );
    }
    Ok((p50 <= target, p50))
}

/// What `marketplace publish` does, minus process start, the token lookup and local
/// file reading: fetch the current role (and the bin the target falls in), check the
/// publisher's signatures, add, sign, upload, wait for 201.
async fn publish_once(
    client: &PublisherClient,
    who: &Publisher,
    def: &Definition,
) -> Result<(), BoxError> {
    client
        .update(
            "definitions",
            &[who.key.public()],
            &Change::Add(vec![(def, false)]),
            &[&who.key],
            YEAR,
            Limits::default(),
            serde_json::json!({ "definition": std::str::from_utf8(&def.bytes)? }),
        )
        .await?;
    Ok(())
}

/// Sizes of the metadata files a client downloads, as the server serves them now.
async fn sizes(http: &reqwest::Client, base: &str, publisher: &str) -> Result<(), BoxError> {
    let get = |path: String| {
        let req = http.get(format!("{base}/tuf/metadata/{path}"));
        async move { Ok::<_, BoxError>(req.send().await?.error_for_status()?.bytes().await?) }
    };
    let timestamp = get("timestamp.json".into()).await?;
    let ts: serde_json::Value = serde_json::from_slice(&timestamp)?;
    let snapshot_version = &ts["signed"]["meta"]["snapshot.json"]["version"];
    let snapshot = get(format!("{snapshot_version}.snapshot.json")).await?;
    let snap: serde_json::Value = serde_json::from_slice(&snapshot)?;
    let meta = &snap["signed"]["meta"];
    let targets = get(format!("{}.targets.json", meta["targets.json"]["version"])).await?;
    let role = get(format!(
        "{}.{publisher}.json",
        meta[format!("{publisher}.json")]["version"]
    ))
    .await?;
    let root = get("root.json".into()).await?;
    let kib = |n: usize| n as f64 / 1024.0;
    // The bins the publisher's role delegates now (older layouts' bins stay listed).
    let top: serde_json::Value = serde_json::from_slice(&role)?;
    let bins: Vec<usize> = top["signed"]["delegations"]["roles"]
        .as_array()
        .map(|roles| {
            roles
                .iter()
                .filter_map(|r| meta[format!("{}.json", r["name"].as_str()?)]["length"].as_u64())
                .map(|n| n as usize)
                .collect()
        })
        .unwrap_or_default();
    let bins_note = match bins.iter().max() {
        None => String::new(),
        Some(max) => format!(
            ", {} bins of {:.1} KiB on average, {:.1} KiB at most",
            bins.len(),
            kib(bins.iter().sum::<usize>()) / bins.len() as f64,
            kib(*max)
        ),
    };
    println!(
        "metadata sizes: root {:.1} KiB, timestamp {:.1} KiB, snapshot {:.1} KiB ({} roles), targets {:.1} KiB, {publisher} {:.1} KiB{bins_note}",
        kib(root.len()),
        kib(timestamp.len()),
        kib(snapshot.len()),
        meta.as_object().map_or(0, |m| m.len()),
        kib(targets.len()),
        kib(role.len()),
    );
    Ok(())
}
