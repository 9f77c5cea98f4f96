//! Sync benchmark: a cold sync of a 10,000-definition index and a warm round with
//! nothing changed, against the real `marketplace serve` on loopback, beside
//! python-tuf's ngclient downloading the same targets in the same run.
//!
//! 1. Seeds 10,000 generated definitions over 100 publishers (`benches/common/seed.rs`)
//!    and starts `marketplace serve`.
//! 2. Cold: a worker with an empty data directory (`Worker::open` + one round: TUF
//!    refresh, every target downloaded, verified, parsed, stored in one transaction),
//!    `BENCH_COLD_RUNS` times (default 3), each from nothing; the median is compared
//!    with the target. The first merged view built afterwards (what the local API
//!    does on its next request) is timed and reported apart. Then once through the
//!    CLI (`marketplace sync --once`, process start included).
//! 3. Warm: `BENCH_WARM_ROUNDS` (default 50) further rounds of the last worker with
//!    nothing changed.
//!    Then `BENCH_DETAIL_REQUESTS` (default 2000) calls of Fundament's
//!    `organization.v1` `GetPluginDetail` on the worker's local API, each by a plugin's
//!    stable id, spread over all of them: found by one lookup, wherever it sorts.
//! 4. Peer: `benches/sync/ngclient.py` refreshes with an empty cache and downloads every
//!    target (the python from `.venv`, or `MARKETPLACE_TEST_PYTHON`).
//!
//! 5. The cold runs again with the worker's state in PostgreSQL (`database:` in
//!    `sync.yaml`; a throwaway server the benchmark starts, the tests' `common::pg`, a
//!    new database each run), against the SQLite median of the same run.
//!
//! `cargo bench --bench sync`; `BENCH_DEFINITIONS` makes it smaller. Exits non-zero when
//! a target is missed: cold ≤ 1 s and at least 6× faster than ngclient, warm p50 ≤ 20 ms,
//! cold on PostgreSQL ≤ 1.5 s, `GetPluginDetail` p99 ≤ 20 ms.
//! Each cold run prints its phases (metadata, downloads, parsing, store) and the CPU
//! time the worker and the server spent on it.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

#[path = "../catalog/generate.rs"]
#[allow(dead_code)] // the catalog benchmark uses the rest
mod generate;
#[path = "../../tests/common/pg.rs"]
#[allow(dead_code)] // the tests use the rest
mod pg;
#[path = "../common/seed.rs"]
#[allow(dead_code)] // the publish benchmark uses the rest
mod seed;
#[path = "../common/server.rs"]
mod server;

use marketplace::sync::{Config, Worker};
use server::{Server, env_number};

type BoxError = Box<dyn std::error::Error>;

const COLD_TARGET: Duration = Duration::from_secs(1);
/// How many times faster than python-tuf's ngclient a cold sync must be.
const PEER_RATIO: f64 = 6.0;
const WARM_TARGET: Duration = Duration::from_millis(20);
/// A cold sync with the worker's state in PostgreSQL.
const COLD_POSTGRES_TARGET: Duration = Duration::from_millis(1500);
/// Fundament's `GetPluginDetail` by a plugin's stable id, p99 over one connection.
const DETAIL_TARGET: Duration = Duration::from_millis(20);

fn main() -> ExitCode {
    // `MARKETPLACE_LOG=marketplace=debug` shows each round's phases.
    if std::env::var_os("MARKETPLACE_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_env("MARKETPLACE_LOG"))
            .with_writer(std::io::stderr)
            .init();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("building the tokio runtime");
    server::exit_status(runtime.block_on(run()))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn run() -> Result<bool, BoxError> {
    let definitions = env_number("BENCH_DEFINITIONS", 10_000);
    let cold_runs = env_number("BENCH_COLD_RUNS", 3);
    let warm_rounds = env_number("BENCH_WARM_ROUNDS", 50);
    let detail_requests = env_number("BENCH_DETAIL_REQUESTS", 2_000);
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let seeded = seed::seed(dir.path(), definitions, 100.min(definitions), None).await?;
    println!(
        "marketplace sync benchmark: {definitions} definitions over {} publishers (seeded in {:.1} s)",
        seeded.publishers.len(),
        started.elapsed().as_secs_f64()
    );
    let server = Server::start(&seeded.data)?;
    let root = dir.path().join("root.json");
    let bytes = reqwest::get(format!("{}/tuf/metadata/1.root.json", server.base))
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    std::fs::write(&root, &bytes)?;
    let mut targets: Vec<String> = Vec::new();
    for (p, defs) in seeded.publishers.iter().zip(&seeded.definitions) {
        for d in defs {
            targets.push(format!("{}/{}/{}.yaml", p.name, d.name(), d.version));
        }
    }
    for d in marketplace::catalog::builtin::definitions()? {
        targets.push(format!("fundament/{}/{}.yaml", d.name(), d.version));
    }
    let total = targets.len();

    // Cold, in process, each run from an empty data directory.
    let mut colds = Vec::new();
    let mut worker = None;
    for run in 0..cold_runs {
        let folder = config(
            dir.path(),
            &format!("cold-{run}"),
            &server.base,
            &root,
            None,
        )?;
        let config = Config::load(&folder.join("sync.yaml"))?;
        let (cpu_self, cpu_server) = (server::cpu_time("/proc/self/stat")?, server.cpu_time()?);
        let t = Instant::now();
        let w = Worker::open(config).await?;
        let outcome = w.sync_all().await;
        let elapsed = t.elapsed();
        let cpu = (
            server::cpu_time("/proc/self/stat")? - cpu_self,
            server.cpu_time()? - cpu_server,
        );
        let done = match &outcome[0].1 {
            Ok(done) => done.clone(),
            Err(e) => return Err(format!("cold round failed: {e}").into()),
        };
        if done.definitions != total || done.downloaded != total {
            return Err(format!("cold round stored {} of {total}", done.definitions).into());
        }
        // What a process serving views does next: merge the new state into one view.
        let t = Instant::now();
        let view = w.view("bench").await?;
        let first_view = t.elapsed();
        if view.plugins().count() < total {
            return Err("the merged view lacks plugins".into());
        }
        let p = done.phases;
        println!(
            "cold sync run {}: {:.0} ms (metadata {:.0}, downloads {:.0}, parsing {:.0}, store {:.0}; \
             CPU: worker {:.0}, server {:.0}), then the first merged view: {:.0} ms",
            run + 1,
            ms(elapsed),
            ms(p.metadata),
            ms(p.downloads),
            ms(p.parsing),
            ms(p.store),
            ms(cpu.0),
            ms(cpu.1),
            ms(first_view)
        );
        colds.push(elapsed);
        worker = Some(w);
    }
    colds.sort();
    let cold = colds[colds.len() / 2];
    let cold_ok = cold <= COLD_TARGET;

    // Cold through the CLI, process start and migrations included.
    let cli_config = config(dir.path(), "cold-cli", &server.base, &root, None)?;
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(["sync", "--once", "--config"])
        .arg(cli_config.join("sync.yaml"))
        .output()?;
    let cli = t.elapsed();
    if !out.status.success() {
        return Err(format!(
            "marketplace sync --once: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }

    // Cold with the worker's state in PostgreSQL, each run into a new database.
    let pg = pg::Postgres::start();
    let mut pg_colds = Vec::new();
    for run in 0..cold_runs {
        let url = pg.fresh().await;
        let folder = config(
            dir.path(),
            &format!("cold-pg-{run}"),
            &server.base,
            &root,
            Some(&url),
        )?;
        let config = Config::load(&folder.join("sync.yaml"))?;
        let t = Instant::now();
        let w = Worker::open(config).await?;
        let outcome = w.sync_all().await;
        let elapsed = t.elapsed();
        let done = match &outcome[0].1 {
            Ok(done) => done.clone(),
            Err(e) => return Err(format!("cold round on PostgreSQL failed: {e}").into()),
        };
        if done.definitions != total || done.downloaded != total {
            return Err(format!("cold round stored {} of {total}", done.definitions).into());
        }
        let p = done.phases;
        println!(
            "cold sync run {} on PostgreSQL: {:.0} ms (metadata {:.0}, downloads {:.0}, parsing {:.0}, store {:.0})",
            run + 1,
            ms(elapsed),
            ms(p.metadata),
            ms(p.downloads),
            ms(p.parsing),
            ms(p.store)
        );
        w.store().close().await;
        pg_colds.push(elapsed);
    }
    pg_colds.sort();
    let pg_cold = pg_colds[pg_colds.len() / 2];
    let pg_cold_ok = pg_cold <= COLD_POSTGRES_TARGET;
    drop(pg);

    // Warm: nothing changed since the last cold run.
    let worker = worker.ok_or("no cold run")?;
    let source = worker.config().sources[0].clone();
    let mut warms = Vec::new();
    for _ in 0..warm_rounds {
        let t = Instant::now();
        let done = worker.sync_source(&source).await?;
        warms.push(t.elapsed());
        if !done.unchanged {
            return Err("a warm round saw a change".into());
        }
    }
    warms.sort();
    let warm = warms[warms.len() / 2];
    let warm_ok = warm <= WARM_TARGET;

    let worker = std::sync::Arc::new(worker);
    let detail = plugin_detail(worker.clone(), detail_requests).await?;
    let detail_ok = detail.1 <= DETAIL_TARGET;

    // The peer: python-tuf's ngclient, same targets, same server, same run.
    let list = dir.path().join("targets.txt");
    std::fs::write(&list, targets.join("\n"))?;
    let python = python();
    let peer = match &python {
        Some(py) => {
            let t = Instant::now();
            let out = Command::new(py)
                .arg(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/benches/sync/ngclient.py"
                ))
                .arg(&server.base)
                .arg(&root)
                .arg(dir.path().join("ngclient"))
                .arg(&list)
                .output()?;
            let wall = t.elapsed();
            if !out.status.success() {
                return Err(format!("ngclient: {}", String::from_utf8_lossy(&out.stderr)).into());
            }
            let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
            let secs = report["seconds"]
                .as_f64()
                .ok_or("ngclient printed no time")?;
            Some((Duration::from_secs_f64(secs), wall))
        }
        None => None,
    };

    println!("\n{total} targets (with the 8 built-ins every marketplace serves)");
    println!(
        "cold sync, median of {cold_runs}: {:.0} ms (target ≤ {} ms)  [{}]",
        ms(cold),
        ms(COLD_TARGET),
        if cold_ok { "PASS" } else { "FAIL" }
    );
    println!(
        "cold sync through the CLI, process start included: {:.0} ms",
        ms(cli)
    );
    println!(
        "cold sync with the worker on PostgreSQL, median of {cold_runs}: {:.0} ms, {:.2}x SQLite's (target ≤ {} ms)  [{}]",
        ms(pg_cold),
        pg_cold.as_secs_f64() / cold.as_secs_f64(),
        ms(COLD_POSTGRES_TARGET),
        if pg_cold_ok { "PASS" } else { "FAIL" }
    );
    println!(
        "warm round, {warm_rounds} rounds: p50 {:.2} ms, max {:.2} ms (target p50 ≤ {} ms)  [{}]",
        ms(warm),
        ms(*warms.last().unwrap()),
        ms(WARM_TARGET),
        if warm_ok { "PASS" } else { "FAIL" }
    );
    println!(
        "organization.v1 GetPluginDetail by id, {detail_requests} requests spread over every plugin: p50 {:.2} ms, p99 {:.2} ms (target p99 ≤ {} ms)  [{}]",
        ms(detail.0),
        ms(detail.1),
        ms(DETAIL_TARGET),
        if detail_ok { "PASS" } else { "FAIL" }
    );
    let peer_ok = match peer {
        Some((secs, wall)) => {
            let ok = secs.as_secs_f64() >= PEER_RATIO * cold.as_secs_f64();
            println!(
                "python-tuf ngclient, same targets: {:.0} ms ({:.0} ms with interpreter start); ours is {:.1}x faster (target ≥ {PEER_RATIO}x)  [{}]",
                ms(secs),
                ms(wall),
                secs.as_secs_f64() / cold.as_secs_f64(),
                if ok { "PASS" } else { "FAIL" }
            );
            ok
        }
        None => {
            println!("python-tuf not found (.venv/bin/python or MARKETPLACE_TEST_PYTHON)  [FAIL]");
            false
        }
    };
    Ok(cold_ok && warm_ok && peer_ok && pg_cold_ok && detail_ok)
}

/// p50 and p99 of `requests` calls of Fundament's `GetPluginDetail` on the worker's local
/// API (served on loopback, one keep-alive connection, a reader token), each for a
/// plugin's stable id, spread over every plugin the view offers.
async fn plugin_detail(
    worker: std::sync::Arc<Worker>,
    requests: usize,
) -> Result<(Duration, Duration), BoxError> {
    let (_, token) = worker
        .store()
        .create_token(&marketplace::sync::sideload::Scope::Reader, 0)
        .await?;
    let ids: Vec<String> = worker
        .view("bench")
        .await?
        .plugins()
        .map(|p| marketplace::ids::org_plugin(&p.name))
        .collect();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!(
        "http://{}/orgs/bench/organization.v1.PluginService/GetPluginDetail",
        listener.local_addr()?
    );
    let app = marketplace::api::worker::router(worker);
    let served = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::builder().no_proxy().build()?;
    let mut times = Vec::with_capacity(requests);
    for i in 0..requests.max(1) {
        let t = Instant::now();
        let response = client
            .post(&url)
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .body(format!(
                r#"{{"pluginId":"{}"}}"#,
                ids[(i * 7919) % ids.len()]
            ))
            .send()
            .await?;
        let status = response.status();
        let body = response.bytes().await?;
        times.push(t.elapsed());
        if !status.is_success() {
            return Err(format!(
                "GetPluginDetail answered {status}: {}",
                String::from_utf8_lossy(&body)
            )
            .into());
        }
    }
    served.abort();
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    Ok((at(0.5), at(0.99)))
}

/// `DIR/NAME/sync.yaml` for one source (the worker's state in `database` when given);
/// returns the folder.
fn config(
    dir: &Path,
    name: &str,
    url: &str,
    root: &Path,
    database: Option<&str>,
) -> Result<PathBuf, BoxError> {
    let folder = dir.join(name);
    std::fs::create_dir_all(&folder)?;
    let mut text = format!(
        "dataDir: data\nsources:\n  - name: bench\n    url: {url}\n    root: {}\n",
        root.display()
    );
    if let Some(database) = database {
        text.push_str(&format!("database: \"{database}\"\n"));
    }
    std::fs::write(folder.join("sync.yaml"), &text)?;
    let _ = Config::parse(&text, &folder)?;
    Ok(folder)
}

fn python() -> Option<PathBuf> {
    let path = std::env::var_os("MARKETPLACE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"));
    path.exists().then_some(path)
}
