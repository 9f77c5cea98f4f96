//! Catalog latency and memory benchmark against the real `marketplace` binary.
//!
//! 1. Seeds a temporary data directory with generated plugin definitions (through the
//!    library: `Definition::parse` + `Store::insert_version`, exactly what the server
//!    reads).
//! 2. Starts `marketplace serve --listen 127.0.0.1:0 --data-dir <dir>` as a child process.
//! 3. Sends sequential keep-alive requests per scenario and reports p50/p90/p99/max.
//! 4. Reads the server's VmRSS / VmHWM from `/proc/<pid>/status`.
//! 5. Compares against the targets and exits non-zero when one fails.
//!
//! `cargo bench --bench catalog`; `BENCH_PLUGINS` (default 10000) and `BENCH_REQUESTS`
//! (default 2000, per scenario) make it smaller for a smoke test. See benches/README.md.

use std::process::ExitCode;
use std::time::{Duration, Instant};

mod generate;
#[path = "../common/server.rs"]
mod server;

use generate::*;
use server::{Server, env_number};

/// Every scenario's p99 must be at or below this.
const TARGET_P99_MS: f64 = 20.0;
/// The server's resident set after the load must be at or below this (MiB).
const TARGET_RSS_MIB: f64 = 150.0;

fn main() -> ExitCode {
    let plugins = env_number("BENCH_PLUGINS", 10_000);
    let requests = env_number("BENCH_REQUESTS", 2_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("building the tokio runtime");
    match runtime.block_on(run(plugins, requests)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            println!("\nRESULT: FAIL (at least one target missed)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("benchmark error: {e}");
            ExitCode::from(2)
        }
    }
}

type BoxError = Box<dyn std::error::Error>;

/// Returns whether every target was met. The temporary directory and the server process
/// are cleaned up when this returns or unwinds (the server guard drops first).
async fn run(plugins: usize, requests: usize) -> Result<bool, BoxError> {
    println!("marketplace catalog benchmark: {plugins} plugins, {requests} requests per scenario");

    // --- 1. seed --------------------------------------------------------------------
    let data_dir = tempfile::Builder::new()
        .prefix("marketplace-bench-")
        .tempdir()?;
    let db_path = data_dir.path().join(marketplace::server::DATABASE_FILE);
    let seeded = seed(&db_path, plugins).await?;
    println!(
        "seeded {} plugins / {} versions in {:.2} s ({:.0} versions/s; YAML generate+parse {:.2} s, inserts {:.2} s); database {:.1} MiB",
        seeded.plugins,
        seeded.versions,
        seeded.total.as_secs_f64(),
        seeded.versions as f64 / seeded.total.as_secs_f64(),
        seeded.parse.as_secs_f64(),
        seeded.insert.as_secs_f64(),
        db_size(data_dir.path()) as f64 / MIB,
    );

    // --- 2. start the real server ---------------------------------------------------
    let started = Instant::now();
    let server = Server::start(data_dir.path())?;
    println!(
        "server pid {} listening on {} (ready in {} ms)",
        server.pid(),
        server.base,
        started.elapsed().as_millis()
    );

    let client = reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(1)
        .timeout(Duration::from_secs(30))
        .build()?;

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

    // --- 3. scenarios -------------------------------------------------------------
    let scenarios = scenarios(requests, last_page);
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
        let started = Instant::now();
        let mut times = Vec::with_capacity(s.paths.len());
        let mut bytes = 0usize;
        for path in &s.paths {
            let (elapsed, len) = fetch(&client, &server.base, path).await?;
            times.push(elapsed);
            bytes += len;
        }
        let r = Stats::new(s.name, times, bytes, started.elapsed());
        println!(
            "  {:<28} done: {} requests in {:.2} s, p99 {:.2} ms",
            r.name,
            r.count,
            r.wall.as_secs_f64(),
            r.p99
        );
        results.push(r);
    }

    // --- 4. memory ------------------------------------------------------------------
    let mem = read_memory(server.pid())?;

    // Stop the server before the data directory goes away.
    drop(server);
    drop(data_dir);

    // --- 5. report ------------------------------------------------------------------
    Ok(report(&results, &mem))
}

// ---------------------------------------------------------------------------------
// Server process
// ---------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------
// Load
// ---------------------------------------------------------------------------------

struct Scenario {
    name: &'static str,
    paths: Vec<String>,
}

/// Request paths are generated up front so formatting is not timed.
fn scenarios(requests: usize, last_page: usize) -> Vec<Scenario> {
    let vocab: Vec<&str> = WORDS.iter().chain(TAGS).copied().collect();
    let word = |i: usize| vocab[(i * 7) % vocab.len()];
    let tag = |i: usize| TAGS[(i * 11) % TAGS.len()];
    let make = |name, f: &dyn Fn(usize) -> String| Scenario {
        name,
        paths: (0..requests).map(f).collect(),
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
        make("api ?page=n", &|i| {
            // Spread over the whole range, deep pages included.
            let n = 1 + (i * 37) % last_page;
            format!("/api/v1/plugins?page={n}")
        }),
        make("page / (unfiltered)", &|_| "/".to_owned()),
    ]
}

/// One request: wall time from send to the last body byte; the status must be 200.
async fn fetch(
    client: &reqwest::Client,
    base: &str,
    path: &str,
) -> Result<(Duration, usize), BoxError> {
    let url = format!("{base}{path}");
    let started = Instant::now();
    let response = client.get(&url).send().await?;
    let status = response.status();
    let body = response.bytes().await?;
    let elapsed = started.elapsed();
    if status != reqwest::StatusCode::OK {
        let text = String::from_utf8_lossy(&body[..body.len().min(500)]).into_owned();
        return Err(format!("GET {path}: expected 200, got {status}: {text}").into());
    }
    Ok((elapsed, body.len()))
}

async fn get_json(client: &reqwest::Client, url: &str) -> Result<serde_json::Value, BoxError> {
    let response = client.get(url).send().await?;
    let status = response.status();
    if status != reqwest::StatusCode::OK {
        return Err(format!("GET {url}: expected 200, got {status}").into());
    }
    Ok(response.json().await?)
}

struct Stats {
    name: &'static str,
    count: usize,
    mean: f64,
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
    avg_kib: f64,
    wall: Duration,
}

impl Stats {
    fn new(name: &'static str, mut times: Vec<Duration>, bytes: usize, wall: Duration) -> Stats {
        times.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let count = times.len();
        // Nearest-rank percentile.
        let pct = |p: f64| ms(times[((p * count as f64).ceil() as usize).clamp(1, count) - 1]);
        Stats {
            name,
            count,
            mean: times.iter().map(|d| ms(*d)).sum::<f64>() / count as f64,
            p50: pct(0.50),
            p90: pct(0.90),
            p99: pct(0.99),
            max: ms(times[count - 1]),
            avg_kib: bytes as f64 / count as f64 / 1024.0,
            wall,
        }
    }
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

fn report(results: &[Stats], mem: &Memory) -> bool {
    let mut all_ok = true;
    println!();
    println!(
        "{:<28} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}  p99 target",
        "scenario", "count", "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms", "req/s", "body KiB",
    );
    println!("{}", "-".repeat(120));
    for r in results {
        let ok = r.p99 <= TARGET_P99_MS;
        all_ok &= ok;
        println!(
            "{:<28} {:>6} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.0} {:>9.1}  <= {TARGET_P99_MS} ms  {}",
            r.name,
            r.count,
            r.mean,
            r.p50,
            r.p90,
            r.p99,
            r.max,
            r.count as f64 / r.wall.as_secs_f64(),
            r.avg_kib,
            verdict(ok)
        );
    }
    println!("{}", "-".repeat(120));
    let rss_ok = mem.rss_mib <= TARGET_RSS_MIB;
    all_ok &= rss_ok;
    println!(
        "server memory after load: VmRSS {:.1} MiB (target <= {TARGET_RSS_MIB} MiB: {}), VmHWM (peak) {:.1} MiB",
        mem.rss_mib,
        verdict(rss_ok),
        mem.hwm_mib
    );
    if all_ok {
        println!("\nRESULT: PASS (all targets met)");
    }
    all_ok
}
