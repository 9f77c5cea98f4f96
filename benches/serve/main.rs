//! Serve benchmark: `/tuf/` files from the real `marketplace serve` against nginx serving
//! a static export of the same index, both under `wrk -t2 -c64`.
//!
//! 1. Seeds 10,000 generated definitions over 20 publishers (`benches/common/seed.rs`),
//!    so that one publisher's role is about 300 KiB as served, and writes the static
//!    copy with `marketplace repo export`. Every metadata file over 1 KiB in the copy
//!    gets a `.gz` beside it (best compression), for nginx's `gzip_static`.
//! 2. Starts `marketplace serve` at its default log level (`MARKETPLACE_LOG` unset unless
//!    `BENCH_SERVER_LOG` sets it), its log going to a file, and nginx (`nginx-light`)
//!    with a generated configuration: `worker_processes auto`, `sendfile`, keep-alive
//!    without a request limit, `open_file_cache`, `access_log off`, and two listeners
//!    on the same copy: one with `gzip_static on` (the figure compared) and one
//!    compressing on the fly (`gzip on`, level 1, `gzip_min_length 1024`), shown for
//!    information.
//! 3. Checks that both servers return the same bytes for each file (decompressed where
//!    gzip was asked for), then runs `wrk -t2 -c64 -dNs` against `timestamp.json`, one
//!    target and the ~300 KiB role (with `Accept-Encoding: gzip` on both sides),
//!    alternating ours and nginx's for `BENCH_ROUNDS` rounds after a 2 s warm-up of
//!    each; the verdict is the median of the rounds' ratios (ours / nginx).
//!
//! `cargo bench --bench serve`; `BENCH_SECONDS` (default 2) per wrk run, `BENCH_ROUNDS`
//! (default 5), `BENCH_DEFINITIONS` (default 10000). Target: each file ≥ 0.5× nginx's
//! req/s. Exit 1 on a miss, 2 when the benchmark itself failed.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

#[path = "../catalog/generate.rs"]
#[allow(dead_code)] // the catalog benchmark uses the rest
mod generate;
#[path = "../common/nginx.rs"]
mod nginx;
#[path = "../common/seed.rs"]
#[allow(dead_code)] // the publish benchmark uses the rest
mod seed;
#[path = "../common/server.rs"]
#[allow(dead_code)] // the other benchmarks use the rest
mod server;

use nginx::Nginx;
use server::{Server, env_number};

type BoxError = Box<dyn std::error::Error>;

const TARGET_RATIO: f64 = 0.5;
const PUBLISHERS: usize = 20;
const CONNECTIONS: usize = 64;
const THREADS: usize = 2;

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("building the tokio runtime");
    server::exit_status(runtime.block_on(run()))
}

/// One file measured on both servers.
struct Case {
    label: String,
    /// Path under `/tuf/`, the same on both servers.
    path: String,
    gzip: bool,
}

async fn run() -> Result<bool, BoxError> {
    let definitions = env_number("BENCH_DEFINITIONS", 10_000);
    let seconds = env_number("BENCH_SECONDS", 2);
    let rounds = env_number("BENCH_ROUNDS", 5);
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let seeded = seed::seed(dir.path(), definitions, PUBLISHERS.min(definitions), None).await?;
    println!(
        "marketplace serve benchmark: {definitions} definitions over {} publishers (seeded in {:.1} s)",
        seeded.publishers.len(),
        started.elapsed().as_secs_f64()
    );
    let export = dir.path().join("export");
    seed::marketplace(&[
        "repo",
        "export",
        "--data-dir",
        seeded.data.to_str().ok_or("non-UTF-8 temp path")?,
        export.to_str().ok_or("non-UTF-8 temp path")?,
    ])?;
    let precompressed = precompress(&export.join("metadata"))?;

    let log_file = dir.path().join("server.log");
    let server = Server::start_with(
        &seeded.data,
        std::env::var("BENCH_SERVER_LOG").ok().as_deref(),
        Some(&log_file),
    )?;
    let location = format!("location /tuf/ {{ alias {}/; }}", export.display());
    // gzip_static: precompressed files, as ours are; the second listener compresses on
    // every request instead (for information).
    let nginx = Nginx::start(
        dir.path(),
        "gzip on; gzip_types application/json; gzip_min_length 1024; gzip_vary on;",
        &[
            format!("gzip_static on; {location}"),
            format!("gzip_static off; {location}"),
        ],
    )?;
    let nginx_base = format!("{}/tuf", nginx.bases[0]);
    let nginx_fly_base = format!("{}/tuf", nginx.bases[1]);
    let http = reqwest::Client::new();

    // The three files: timestamp.json, a target of the first publisher, its role.
    let base = format!("{}/tuf", server.base);
    let timestamp: serde_json::Value = serde_json::from_slice(
        &fetch(&http, &format!("{base}/metadata/timestamp.json"), false)
            .await?
            .0,
    )?;
    let snapshot_version = &timestamp["signed"]["meta"]["snapshot.json"]["version"];
    let snapshot: serde_json::Value = serde_json::from_slice(
        &fetch(
            &http,
            &format!("{base}/metadata/{snapshot_version}.snapshot.json"),
            false,
        )
        .await?
        .0,
    )?;
    let publisher = &seeded.publishers[0].name;
    let role_version = &snapshot["signed"]["meta"][format!("{publisher}.json")]["version"];
    let role_path = format!("metadata/{role_version}.{publisher}.json");
    let role: serde_json::Value =
        serde_json::from_slice(&fetch(&http, &format!("{base}/{role_path}"), false).await?.0)?;
    let (target_name, target) = role["signed"]["targets"]
        .as_object()
        .and_then(|t| t.iter().next())
        .ok_or("the publisher's role lists no target")?;
    let (dir_part, file) = target_name
        .rsplit_once('/')
        .ok_or("target name is not P/NAME/FILE")?;
    let hash = target["hashes"]["sha256"]
        .as_str()
        .ok_or("target without sha256")?;
    let cases = [
        Case {
            label: "timestamp.json".into(),
            path: "metadata/timestamp.json".into(),
            gzip: false,
        },
        Case {
            label: format!("target {target_name}"),
            path: format!("targets/{dir_part}/{hash}.{file}"),
            gzip: false,
        },
        Case {
            label: format!("role {publisher}.json, gzip"),
            path: role_path.clone(),
            gzip: true,
        },
    ];

    // Same bytes from both, and the sizes on the wire.
    let mut pass = true;
    println!("\nfiles (identical bytes from both servers, decompressed where gzip was asked):");
    for case in &cases {
        let ours = fetch(&http, &format!("{base}/{}", case.path), case.gzip).await?;
        let theirs = fetch(&http, &format!("{}/{}", nginx_base, case.path), case.gzip).await?;
        let fly = fetch(
            &http,
            &format!("{}/{}", nginx_fly_base, case.path),
            case.gzip,
        )
        .await?;
        if ours.0 != theirs.0 || ours.0 != fly.0 {
            return Err(format!("{}: the servers return different bytes", case.path).into());
        }
        if case.gzip && !(theirs.2 && fly.2) {
            return Err(format!("{}: nginx did not send gzip", case.path).into());
        }
        if case.gzip && !ours.2 {
            // A server from before gzip support: measured all the same, and failed.
            println!("  {}: ours sends no gzip  [FAIL]", case.path);
            pass = false;
        }
        println!(
            "  {:<40} {:>9.1} KiB{}",
            case.path,
            ours.0.len() as f64 / 1024.0,
            if case.gzip {
                format!(
                    ", gzip: ours {:.1} KiB, nginx gzip_static {:.1} KiB, on the fly {:.1} KiB",
                    ours.1 as f64 / 1024.0,
                    theirs.1 as f64 / 1024.0,
                    fly.1 as f64 / 1024.0
                )
            } else {
                String::new()
            }
        );
    }
    println!(
        "  ({precompressed} metadata files over 1 KiB precompressed for gzip_static)\n\nwrk -t{THREADS} -c{CONNECTIONS} -d{seconds}s, {rounds} round(s) alternating; median req/s of each, and the median of the rounds' ratios:"
    );

    // Warm-up, not counted: both servers' caches filled, and ours past the moments
    // after its start when the database log is fresh and it reads metadata again on
    // each request (`store::Stamp`).
    for case in &cases {
        wrk(&format!("{base}/{}", case.path), case.gzip, 2)?;
        wrk(&format!("{}/{}", nginx_base, case.path), case.gzip, 2)?;
    }
    println!(
        "{:<42} {:>11} {:>11} {:>7}",
        "file", "ours", "nginx", "ratio"
    );
    for case in &cases {
        let (mut ours, mut theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let o = wrk(&format!("{base}/{}", case.path), case.gzip, seconds)?;
            let n = wrk(&format!("{}/{}", nginx_base, case.path), case.gzip, seconds)?;
            ours.push(o);
            theirs.push(n);
            ratios.push(o / n);
        }
        // The ratio of each back-to-back pair, then the median: the machine's load
        // changes from one second to the next, and each pair shares most of it.
        let ratio = median(ratios);
        let ok = ratio >= TARGET_RATIO;
        pass &= ok;
        println!(
            "{:<42} {:>11.0} {:>11.0} {:>6.2}x  [{}]",
            case.label,
            median(ours),
            median(theirs),
            ratio,
            if ok { "PASS" } else { "FAIL" }
        );
    }
    // For information: nginx compressing the role on every request instead.
    let role_case = &cases[2];
    let fly = median(
        (0..rounds)
            .map(|_| {
                wrk(
                    &format!("{}/{}", nginx_fly_base, role_case.path),
                    true,
                    seconds,
                )
            })
            .collect::<Result<Vec<_>, _>>()?,
    );
    println!(
        "{:<42} {:>11} {:>11.0}   (nginx gzip on the fly, level 1; for information)",
        role_case.label, "", fly
    );
    println!("target: each ≥ {TARGET_RATIO}× nginx (gzip_static)");

    drop(nginx);
    drop(server);
    let log = std::fs::read_to_string(&log_file).unwrap_or_default();
    println!(
        "server log during the run: {} lines, {:.1} KiB (level: {})",
        log.lines().count(),
        log.len() as f64 / 1024.0,
        std::env::var("BENCH_SERVER_LOG").unwrap_or_else(|_| "default".into())
    );
    Ok(pass)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The decoded body, its size on the wire and whether it came gzip-encoded. reqwest is
/// built without decompression, so the encoding is handled here.
async fn fetch(
    http: &reqwest::Client,
    url: &str,
    gzip: bool,
) -> Result<(Vec<u8>, usize, bool), BoxError> {
    let mut req = http.get(url);
    if gzip {
        req = req.header("accept-encoding", "gzip");
    }
    let res = req.send().await?.error_for_status()?;
    let encoded = res
        .headers()
        .get("content-encoding")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    let wire = res.bytes().await?;
    if !encoded {
        return Ok((wire.to_vec(), wire.len(), false));
    }
    let mut decoded = Vec::new();
    flate2::read::GzDecoder::new(&wire[..]).read_to_end(&mut decoded)?;
    Ok((decoded, wire.len(), true))
}

/// Requests per second from one `wrk` run; every response must be 2xx.
fn wrk(url: &str, gzip: bool, seconds: usize) -> Result<f64, BoxError> {
    let mut cmd = Command::new("wrk");
    cmd.args([
        format!("-t{THREADS}"),
        format!("-c{CONNECTIONS}"),
        format!("-d{seconds}s"),
    ]);
    if gzip {
        cmd.args(["-H", "Accept-Encoding: gzip"]);
    }
    let out = cmd
        .arg(url)
        .output()
        .map_err(|e| format!("running wrk (Debian package `wrk`): {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("wrk {url}: {text}{}", String::from_utf8_lossy(&out.stderr)).into());
    }
    if text.contains("Non-2xx") {
        return Err(format!("wrk {url}: some responses were not 2xx:\n{text}").into());
    }
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("wrk {url}: no Requests/sec in its output:\n{text}").into())
}

/// Writes `NAME.gz` beside every file over 1 KiB in `dir`; returns how many.
fn precompress(dir: &Path) -> Result<usize, BoxError> {
    let mut n = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let bytes = std::fs::read(&path)?;
        if bytes.len() <= 1024 {
            continue;
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut gz, &bytes)?;
        let mut name = path.clone().into_os_string();
        name.push(".gz");
        std::fs::write(PathBuf::from(name), gz.finish()?)?;
        n += 1;
    }
    Ok(n)
}
