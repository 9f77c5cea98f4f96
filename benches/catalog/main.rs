//! Catalog latency and memory benchmark against the real `marketplace` binary.
//!
//! 1. Seeds a temporary data directory with generated plugin definitions (through the
//!    library: `Definition::parse` + `Store::insert_version`, exactly what the server
//!    reads).
//! 2. Starts `marketplace serve --listen 127.0.0.1:0 --data-dir <dir>` as a child process.
//! 3. Sends sequential keep-alive requests per scenario and reports p50/p90/p99/max;
//!    then the same scenarios again over 16 concurrent keep-alive connections, reporting
//!    requests per second.
//!    Last, it publishes new plugins through a second `Store` on the database file (as
//!    another process would) and times the all-matching search right after each one:
//!    what a request costs when the catalog just changed.
//! 4. Reads the server's VmRSS / VmHWM from `/proc/<pid>/status`.
//! 5. Compares against the targets and exits non-zero when one fails.
//!
//! All of it runs twice in one run: on SQLite (the data directory's file), then on
//! PostgreSQL (a throwaway server the benchmark starts from Debian's binaries, the
//! tests' `common::pg`; `serve --database`). PostgreSQL's concurrent throughput must be
//! at least 0.7× SQLite's, scenario by scenario, measured in the same run.
//!
//! `cargo bench --bench catalog`; `BENCH_PLUGINS` (default 10000), `BENCH_REQUESTS`
//! (default 2000, per scenario, one connection) and `BENCH_CONCURRENT_REQUESTS` (default
//! 20000, per scenario, 16 connections: a few seconds each, since a ratio of two
//! sub-second windows moved by a tenth with the machine's other load) make it smaller
//! for a smoke test. See benches/README.md.

use std::process::ExitCode;
use std::time::Instant;

mod generate;
mod load;
#[path = "../../tests/common/pg.rs"]
#[allow(dead_code)] // the tests use the rest
mod pg;
#[path = "../common/server.rs"]
mod server;

use generate::*;
use load::{Req, Stats, fetch};
use server::{Server, env_number};

/// Every scenario's p99 over one connection must be at or below this.
const TARGET_P99_MS: f64 = 20.0;
/// Every scenario's throughput over [`CONNECTIONS`] connections must be at least this.
const TARGET_CONCURRENT_RPS: f64 = 1000.0;
/// Concurrent keep-alive connections in the second run.
const CONNECTIONS: usize = 16;
/// The server's resident set after the load must be at or below this (MiB).
const TARGET_RSS_MIB: f64 = 150.0;
/// PostgreSQL's throughput on 16 connections, per scenario, against SQLite's.
const TARGET_POSTGRES_RATIO: f64 = 0.7;
/// A search word every generated plugin matches: each one is named `plugin-NNNNN`.
const EVERY_PLUGIN_WORD: &str = "plugin";

struct Load {
    plugins: usize,
    requests: usize,
    concurrent: usize,
    writes: usize,
}

fn main() -> ExitCode {
    let load = Load {
        plugins: env_number("BENCH_PLUGINS", 10_000),
        requests: env_number("BENCH_REQUESTS", 2_000),
        concurrent: env_number("BENCH_CONCURRENT_REQUESTS", 20_000),
        writes: env_number("BENCH_WRITES", 50),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("building the tokio runtime");
    server::exit_status(runtime.block_on(both(&load)))
}

/// SQLite, then PostgreSQL, then PostgreSQL's throughput against SQLite's.
async fn both(load: &Load) -> Result<bool, BoxError> {
    println!("=== SQLite ===");
    let sqlite = run(load, None).await?;
    println!("\n=== PostgreSQL ===");
    let postgres = {
        let pg = pg::Postgres::start();
        let url = pg.fresh().await;
        run(load, Some(&url)).await?
    };
    println!("\nPostgreSQL against SQLite, {CONNECTIONS} connections (same run):");
    println!(
        "{:<28} {:>10} {:>10} {:>7}  target",
        "scenario", "sqlite/s", "postgres/s", "ratio"
    );
    let mut ok = sqlite.ok && postgres.ok;
    for (a, b) in sqlite.concurrent.iter().zip(&postgres.concurrent) {
        let ratio = b.rate() / a.rate();
        let met = ratio >= TARGET_POSTGRES_RATIO;
        ok &= met;
        println!(
            "{:<28} {:>10.0} {:>10.0} {:>7.2}  >= {TARGET_POSTGRES_RATIO}  {}",
            a.name,
            a.rate(),
            b.rate(),
            ratio,
            verdict(met)
        );
    }
    Ok(ok)
}

/// One backend's results.
struct Outcome {
    ok: bool,
    concurrent: Vec<Stats>,
}

type BoxError = Box<dyn std::error::Error>;

/// Returns whether every target was met. The temporary directory and the server process
/// are cleaned up when this returns or unwinds (the server guard drops first).
async fn run(load: &Load, database: Option<&str>) -> Result<Outcome, BoxError> {
    let Load {
        plugins,
        requests,
        concurrent,
        writes,
    } = *load;
    println!(
        "marketplace catalog benchmark: {plugins} plugins, {requests} requests per scenario on one connection, {concurrent} on {CONNECTIONS}"
    );

    // --- 1. seed --------------------------------------------------------------------
    let data_dir = tempfile::Builder::new()
        .prefix("marketplace-bench-")
        .tempdir()?;
    let db = match database {
        Some(url) => marketplace::db::Database::parse(url)?,
        None => marketplace::db::Database::Sqlite(
            data_dir.path().join(marketplace::server::DATABASE_FILE),
        ),
    };
    let seeded = seed(&db, plugins).await?;
    println!(
        "seeded {} plugins / {} versions in {:.2} s ({:.0} versions/s; YAML generate+parse {:.2} s, inserts {:.2} s); database {:.1} MiB",
        seeded.plugins,
        seeded.versions,
        seeded.total.as_secs_f64(),
        seeded.versions as f64 / seeded.total.as_secs_f64(),
        seeded.parse.as_secs_f64(),
        seeded.insert.as_secs_f64(),
        database_size(&db, data_dir.path()).await? as f64 / MIB,
    );

    // --- 2. start the real server ---------------------------------------------------
    let started = Instant::now();
    let server = match database {
        Some(url) => Server::start_args(data_dir.path(), Some("warn"), None, &["--database", url])?,
        None => Server::start(data_dir.path())?,
    };
    println!(
        "server pid {} listening on {} (ready in {} ms)",
        server.pid(),
        server.base,
        started.elapsed().as_millis()
    );

    let client = load::client()?;

    // Sanity check: the server sees the seeded catalog.
    let listing: serde_json::Value = get_json(
        &client,
        &format!("{}/api/v1/plugins?per_page=1", server.base),
    )
    .await?;
    let total = listing["total"]
        .as_i64()
        .ok_or("`total` missing from /api/v1/plugins")?;
    println!("server lists {total} plugins (seeded + built-in)");
    if total < plugins as i64 {
        return Err(format!("server lists {total} plugins, expected at least {plugins}").into());
    }
    let last_page = ((total + 23) / 24).max(1) as usize;
    let every: serde_json::Value = get_json(
        &client,
        &format!(
            "{}/api/v1/plugins?q={EVERY_PLUGIN_WORD}&per_page=1",
            server.base
        ),
    )
    .await?;
    let matched = every["total"].as_i64().unwrap_or(0);
    if matched < plugins as i64 {
        return Err(format!(
            "searching `{EVERY_PLUGIN_WORD}` matches {matched} plugins, expected every one of {plugins}"
        )
        .into());
    }

    // --- 3. scenarios -------------------------------------------------------------
    // Stable ids of every listed plugin, as Fundament's catalog client sends them.
    let ids: Vec<String> = {
        let store = marketplace::store::Store::connect(&db, 2).await?;
        let names = store.listed_names().await?;
        store.close().await;
        names
            .iter()
            .map(|(p, n)| marketplace::ids::plugin(p, n))
            .collect()
    };
    let scenarios = scenarios(requests, last_page, &ids);
    let warmup = (requests / 5).clamp(20, 300);
    let started = Instant::now();
    for s in &scenarios {
        for path in s.paths.iter().cycle().skip(requests / 2).take(warmup) {
            fetch(&client, &server.base, path).await?;
        }
    }
    println!(
        "warm-up: {} requests per scenario in {:.2} s",
        warmup,
        started.elapsed().as_secs_f64()
    );

    let mut results = Vec::new();
    for s in &scenarios {
        let r = load::sequential(&client, &server.base, s.name, &s.paths).await?;
        println!(
            "  {:<28} done: {} requests in {:.2} s, p99 {:.2} ms",
            r.name,
            r.count,
            r.wall.as_secs_f64(),
            r.p99
        );
        results.push(r);
    }
    // The server's database pool opens connections as concurrent requests need them,
    // and each new connection prepares its statements once: on PostgreSQL that is a
    // new backend process per connection. Without this pass the first scenario on 16
    // connections pays for all of it inside its timed window.
    let started = Instant::now();
    for s in &scenarios {
        load::concurrent(
            &server.base,
            s.name,
            &s.paths,
            CONNECTIONS,
            warmup * CONNECTIONS,
        )
        .await?;
    }
    println!(
        "warm-up on {CONNECTIONS} connections: {} requests per scenario in {:.2} s",
        warmup * CONNECTIONS,
        started.elapsed().as_secs_f64()
    );
    let mut concurrent_results = Vec::new();
    for s in &scenarios {
        let r = load::concurrent(&server.base, s.name, &s.paths, CONNECTIONS, concurrent).await?;
        println!(
            "  {:<28} done: {} requests on {CONNECTIONS} connections in {:.2} s, {:.0} req/s",
            r.name,
            r.count,
            r.wall.as_secs_f64(),
            r.rate()
        );
        concurrent_results.push(r);
    }
    let written = after_writes(&db, &client, &server.base, plugins, writes).await?;

    // --- 4. memory ------------------------------------------------------------------
    let mem = read_memory(server.pid())?;

    // Stop the server before the data directory goes away.
    drop(server);
    drop(data_dir);

    // --- 5. report ------------------------------------------------------------------
    Ok(Outcome {
        ok: report(&results, &concurrent_results, &written, &mem),
        concurrent: concurrent_results,
    })
}

/// Bytes the database takes: the SQLite files, or PostgreSQL's `pg_database_size`.
async fn database_size(
    db: &marketplace::db::Database,
    data_dir: &std::path::Path,
) -> Result<u64, BoxError> {
    match db {
        marketplace::db::Database::Sqlite(_) => Ok(db_size(data_dir)),
        marketplace::db::Database::Postgres(options) => {
            use sqlx::ConnectOptions;
            let mut conn = options.connect().await?;
            let size: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
                .fetch_one(&mut conn)
                .await?;
            Ok(size.max(0) as u64)
        }
    }
}

// ---------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------

struct Scenario {
    name: &'static str,
    paths: Vec<Req>,
}

/// Request paths are generated up front so formatting is not timed.
fn scenarios(requests: usize, last_page: usize, ids: &[String]) -> Vec<Scenario> {
    let vocab: Vec<&str> = WORDS.iter().chain(TAGS).copied().collect();
    let word = |i: usize| vocab[(i * 7) % vocab.len()];
    let tag = |i: usize| TAGS[(i * 11) % TAGS.len()];
    let make = |name, f: &dyn Fn(usize) -> String| Scenario {
        name,
        paths: (0..requests).map(|i| Req::from(f(i))).collect(),
    };
    vec![
        make("page /?q=word", &|i| format!("/?q={}", word(i))),
        make("page /?q=word+filters", &|i| {
            format!(
                "/?q={}&tag={}&no_internet=on&sort=updated&page=2",
                word(i),
                tag(i)
            )
        }),
        make("api ?q=word&per_page=24", &|i| {
            format!("/api/v1/plugins?q={}&per_page=24", word(i))
        }),
        make("page /?q=every", &|_| format!("/?q={EVERY_PLUGIN_WORD}")),
        make("api ?q=every&page=1..10", &|i| {
            format!("/api/v1/plugins?q={EVERY_PLUGIN_WORD}&page={}", 1 + i % 10)
        }),
        make("api ?page=n", &|i| {
            // Spread over the whole range, deep pages included.
            let n = 1 + (i * 37) % last_page;
            format!("/api/v1/plugins?page={n}")
        }),
        make("page / (unfiltered)", &|_| "/".to_owned()),
        Scenario {
            // Spread over every listed plugin: found by id in one lookup, wherever
            // the plugin sorts.
            name: "catalog.v1 GetPlugin by id",
            paths: (0..requests)
                .map(|i| Req {
                    path: "/catalog.v1.CatalogService/GetPlugin".to_owned(),
                    json: Some(format!(
                        r#"{{"pluginId":"{}"}}"#,
                        ids[(i * 7919) % ids.len()]
                    )),
                })
                .collect(),
        },
    ]
}

/// `writes` times: a new plugin is published through a second store on the server's
/// database file (its own connections, as another process would), then the search that
/// matches every plugin is timed and must count the new plugin. Each answer is the first
/// after a change to the catalog.
async fn after_writes(
    db: &marketplace::db::Database,
    client: &reqwest::Client,
    base: &str,
    plugins: usize,
    writes: usize,
) -> Result<Stats, BoxError> {
    let store = marketplace::store::Store::connect(db, 4).await?;
    let path = format!("/api/v1/plugins?q={EVERY_PLUGIN_WORD}&per_page=24");
    let url = format!("{base}{path}");
    let mut expected = get_json(client, &url).await?["total"]
        .as_i64()
        .ok_or("`total` missing")?;
    let mut rng = Rng(0x00c0_ffee);
    let mut times = Vec::with_capacity(writes);
    let mut bytes = 0;
    let started = Instant::now();
    for k in 0..writes {
        let base_plugin = PluginBase::new(plugins + 1 + k, plugins + writes, &mut rng);
        let yaml = plugin_yaml(&base_plugin, "v1.0.0", &mut rng);
        let def = marketplace::definition::Definition::parse(yaml.as_bytes())
            .map_err(|e| format!("generated definition is invalid: {e}"))?;
        store
            .insert_version(&base_plugin.publisher, &def, unix_now())
            .await?;
        expected += 1;
        let (elapsed, len) = fetch(client, base, &Req::from(path.clone())).await?;
        let total = get_json(client, &url).await?["total"].as_i64();
        if total != Some(expected) {
            return Err(format!(
                "after write {k}: the server counts {total:?}, expected {expected}"
            )
            .into());
        }
        times.push(elapsed);
        bytes += len;
    }
    let wall = started.elapsed();
    store.close().await;
    Ok(Stats::new("api ?q=every after a write", times, bytes, wall))
}

async fn get_json(client: &reqwest::Client, url: &str) -> Result<serde_json::Value, BoxError> {
    let response = client.get(url).send().await?;
    let status = response.status();
    if status != reqwest::StatusCode::OK {
        return Err(format!("GET {url}: expected 200, got {status}").into());
    }
    Ok(response.json().await?)
}

// ---------------------------------------------------------------------------------
// Memory and report
// ---------------------------------------------------------------------------------

const MIB: f64 = 1024.0 * 1024.0;

struct Memory {
    rss_mib: f64,
    hwm_mib: f64,
}

/// VmRSS (now) and VmHWM (peak) of the server, from /proc.
fn read_memory(pid: u32) -> Result<Memory, BoxError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |key: &str| -> Result<f64, BoxError> {
        let line = status
            .lines()
            .find(|l| l.starts_with(key))
            .ok_or_else(|| format!("{key} missing from /proc/{pid}/status"))?;
        let kib: f64 = line[key.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .map_err(|e| format!("parsing {line:?}: {e}"))?;
        Ok(kib * 1024.0 / MIB)
    };
    Ok(Memory {
        rss_mib: field("VmRSS:")?,
        hwm_mib: field("VmHWM:")?,
    })
}

fn verdict(ok: bool) -> &'static str {
    if ok { "PASS" } else { "FAIL" }
}

/// One table of scenarios; `target` judges a row and words its last column.
fn table(rows: &[Stats], target_heading: &str, target: impl Fn(&Stats) -> (bool, String)) -> bool {
    let mut all_ok = true;
    println!(
        "{:<28} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}  {target_heading}",
        "scenario", "count", "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms", "req/s", "body KiB",
    );
    println!("{}", "-".repeat(120));
    for r in rows {
        let (ok, verdict) = target(r);
        all_ok &= ok;
        println!(
            "{:<28} {:>6} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.0} {:>9.1}  {verdict}",
            r.name,
            r.count,
            r.mean,
            r.p50,
            r.p90,
            r.p99,
            r.max,
            r.rate(),
            r.avg_kib,
        );
    }
    println!("{}", "-".repeat(120));
    all_ok
}

fn report(results: &[Stats], concurrent: &[Stats], written: &Stats, mem: &Memory) -> bool {
    let mut all_ok = true;
    println!("\none connection, sequential:");
    all_ok &= table(results, "p99 target", |r| {
        let ok = r.p99 <= TARGET_P99_MS;
        (ok, format!("<= {TARGET_P99_MS} ms  {}", verdict(ok)))
    });
    println!("\n{CONNECTIONS} connections, concurrent:");
    all_ok &= table(concurrent, "req/s target", |r| {
        let ok = r.rate() >= TARGET_CONCURRENT_RPS;
        (ok, format!(">= {TARGET_CONCURRENT_RPS}  {}", verdict(ok)))
    });
    println!(
        "\nafter a write by another process (one connection; no target, the cost of a change):"
    );
    println!(
        "{:<28} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "scenario", "count", "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms"
    );
    let r = written;
    println!(
        "{:<28} {:>6} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
        r.name, r.count, r.mean, r.p50, r.p90, r.p99, r.max
    );
    println!("{}", "-".repeat(120));
    let rss_ok = mem.rss_mib <= TARGET_RSS_MIB;
    all_ok &= rss_ok;
    println!(
        "server memory after load: VmRSS {:.1} MiB (target <= {TARGET_RSS_MIB} MiB: {}), VmHWM (peak) {:.1} MiB",
        mem.rss_mib,
        verdict(rss_ok),
        mem.hwm_mib
    );
    all_ok
}
