//! Registry benchmark: the image mirror and `/v2/` blob downloads against their peers,
//! in one run.
//!
//! 1. Builds an image offline with one layer of `BENCH_BLOB_MIB` (default 200) MiB of
//!    incompressible bytes and pushes it with `skopeo` into Debian's `docker-registry`
//!    on loopback (the upstream).
//! 2. **Mirror**, `BENCH_ROUNDS` times (default 3): a fresh data directory whose store
//!    pins the image, `marketplace serve --mirror on` with the upstream in its upstreams
//!    file; the time is the job's own (`mirrored ... seconds=` in the server's log).
//!    Alternating with it, the peer: `skopeo copy --all --preserve-digests` from the
//!    upstream into a fresh second `docker-registry` (registry to registry). Target:
//!    the median of the rounds' ratios (ours / skopeo) **≤ 1.1**.
//! 3. **Blob GET**: the layer in one stream with `curl` to `/dev/null`, from our `/v2/`,
//!    from the upstream `docker-registry`, and from nginx serving our stored file
//!    (`sendfile`), `BENCH_GETS` rounds (default 5) alternating after a warm-up. Targets:
//!    median ratios **≥ 1.0× docker-registry** and **≥ 0.9× nginx**.
//! 4. **Memory**: the server's VmRSS sampled every 5 ms during our downloads, against
//!    before them. Target: growth **≤ 32 MiB** (a blob is never held in memory).
//!
//! Needs `docker-registry`, `skopeo`, `nginx-light` and `curl` (Debian packages).

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[path = "../common/nginx.rs"]
mod nginx;
#[allow(dead_code)] // the tests' helpers; the benchmark uses a few
#[path = "../../tests/common/oci.rs"]
mod oci;
#[path = "../common/server.rs"]
#[allow(dead_code)] // the other benchmarks use the rest
mod server;

use marketplace::definition::Definition;
use marketplace::store::Store;
use nginx::Nginx;
use server::{Server, curl, env_number, median};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

const TARGET_MIRROR_RATIO: f64 = 1.1;
const TARGET_VS_REGISTRY: f64 = 1.0;
const TARGET_VS_NGINX: f64 = 0.9;
const TARGET_RSS_GROWTH_MIB: f64 = 32.0;

fn main() -> ExitCode {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    server::exit_status(runtime.block_on(run()))
}

async fn run() -> Result<bool, BoxError> {
    let mib = env_number("BENCH_BLOB_MIB", 200);
    let rounds = env_number("BENCH_ROUNDS", 3);
    let gets = env_number("BENCH_GETS", 5);
    let dir = tempfile::tempdir()?;

    let started = Instant::now();
    let (layout, index) = oci::image(&dir.path().join("image"), "v1", &["amd64"], mib << 20);
    let index_digest = oci::digest(&index);
    let layer = layout.largest();
    let layer_bytes = layout.size(&layer);
    let upstream = oci::Upstream::start(&dir.path().join("upstream"), None);
    oci::skopeo(&[
        "copy",
        "--all",
        "--preserve-digests",
        "--dest-tls-verify=false",
        &format!("oci:{}:v1", layout.dir.display()),
        &format!("docker://{}/acme/tool:v1", upstream.addr),
    ]);
    println!(
        "marketplace registry benchmark: one layer of {:.1} MiB (image built and pushed in {:.1} s)",
        layer_bytes as f64 / 1_048_576.0,
        started.elapsed().as_secs_f64()
    );
    let upstreams = dir.path().join("upstreams.yaml");
    std::fs::write(
        &upstreams,
        format!(
            "otherHosts: skip\nupstreams:\n  - host: {}\n    insecure: true\n",
            upstream.addr
        ),
    )?;
    let image = format!("{}/acme/tool@{index_digest}", upstream.addr);

    // Mirror against skopeo, alternating which goes first.
    println!(
        "\nmirror, {rounds} round(s): ours (the job's time) against skopeo copy registry to registry"
    );
    let mut ratios = Vec::new();
    let mut last = None;
    for round in 0..rounds {
        let data = dir.path().join(format!("data-{round}"));
        let dst = dir.path().join(format!("dst-{round}"));
        let (mine, theirs, server) = if round % 2 == 0 {
            let (mine, server) = mirror_once(&data, &image, &upstreams).await?;
            (mine, skopeo_copy(&dst, &image)?, server)
        } else {
            let theirs = skopeo_copy(&dst, &image)?;
            let (mine, server) = mirror_once(&data, &image, &upstreams).await?;
            (mine, theirs, server)
        };
        println!(
            "  round {}: ours {mine:.2} s, skopeo {theirs:.2} s, ratio {:.2}",
            round + 1,
            mine / theirs
        );
        ratios.push(mine / theirs);
        // Only the last server is kept, for the downloads.
        last = Some((server, data));
    }
    let mirror_ratio = median(ratios);
    let (server, data) = last.ok_or("no rounds")?;

    // One stream of the layer from each, alternating.
    let ours_url = format!(
        "{}/v2/{}/acme/tool/blobs/{layer}",
        server.base,
        upstream.addr.replace(':', "_")
    );
    let registry_url = format!("http://{}/v2/acme/tool/blobs/{layer}", upstream.addr);
    let stored = data
        .join("blobs/sha256")
        .join(&layer[7..9])
        .join(&layer[7..]);
    let nginx = Nginx::start(
        dir.path(),
        "",
        &[format!(
            "location = /blob {{ alias {}; }}",
            stored.display()
        )],
    )?;
    let nginx_url = format!("{}/blob", nginx.bases[0]);
    let sampler = RssSampler::start(server.pid());
    for url in [&ours_url, &registry_url, &nginx_url] {
        curl(url, layer_bytes)?; // warm-up: page cache, connections, lazy init
    }
    let baseline = sampler.now_mib()?;
    sampler.reset_peak();
    let (mut ours, mut registry, mut nginx_speed) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..gets {
        ours.push(curl(&ours_url, layer_bytes)?);
        registry.push(curl(&registry_url, layer_bytes)?);
        nginx_speed.push(curl(&nginx_url, layer_bytes)?);
    }
    let peak = sampler.peak_mib();
    drop(sampler);
    let (o, r, n) = (median(ours), median(registry), median(nginx_speed));
    let growth = peak - baseline;

    println!(
        "\nblob GET, one stream of {:.1} MiB, {gets} round(s), median MiB/s:",
        layer_bytes as f64 / 1_048_576.0
    );
    println!("  ours {o:.0}, docker-registry {r:.0}, nginx (sendfile) {n:.0}");
    let checks = [
        (
            format!(
                "mirror time, ours / skopeo copy: {mirror_ratio:.2} (target ≤ {TARGET_MIRROR_RATIO})"
            ),
            mirror_ratio <= TARGET_MIRROR_RATIO,
        ),
        (
            format!(
                "blob GET, ours / docker-registry: {:.2}x (target ≥ {TARGET_VS_REGISTRY})",
                o / r
            ),
            o / r >= TARGET_VS_REGISTRY,
        ),
        (
            format!(
                "blob GET, ours / nginx: {:.2}x (target ≥ {TARGET_VS_NGINX})",
                o / n
            ),
            o / n >= TARGET_VS_NGINX,
        ),
        (
            format!(
                "server VmRSS while streaming: {baseline:.1} MiB before, {peak:.1} MiB peak, +{growth:.1} MiB (target ≤ +{TARGET_RSS_GROWTH_MIB})"
            ),
            growth <= TARGET_RSS_GROWTH_MIB,
        ),
    ];
    println!();
    let mut all = true;
    for (line, ok) in checks {
        println!("{line}  [{}]", if ok { "PASS" } else { "FAIL" });
        all &= ok;
    }
    drop(nginx);
    drop(server);
    Ok(all)
}

/// The peer: `skopeo copy` of `image` into a fresh registry under `dir`; seconds.
fn skopeo_copy(dir: &Path, image: &str) -> Result<f64, BoxError> {
    let dst = oci::Upstream::start(dir, None);
    let t = Instant::now();
    oci::skopeo(&[
        "copy",
        "--all",
        "--preserve-digests",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        &format!("docker://{image}"),
        &format!("docker://{}/acme/tool:v1", dst.addr),
    ]);
    Ok(t.elapsed().as_secs_f64())
}

/// A data directory whose store pins `image`, served with the mirror on until the image
/// is mirrored; the job's own time, from the server's log line.
async fn mirror_once(
    data: &Path,
    image: &str,
    upstreams: &Path,
) -> Result<(f64, Server), BoxError> {
    std::fs::create_dir_all(data)?;
    let yaml = oci::pin_image(include_str!("../../catalog/gateway.yaml"), image);
    let def = Definition::parse(yaml.as_bytes())?;
    let store = Store::open(&data.join("marketplace.db")).await?;
    store
        .insert_version("acme", &def, marketplace::clock::now())
        .await?;
    store.close().await;
    let log = data.join("server.log");
    let server = Server::start_args(
        data,
        Some("info,sqlx=warn"),
        Some(&log),
        &[
            "--mirror",
            "on",
            "--mirror-jobs",
            "1",
            "--upstreams",
            upstreams.to_str().ok_or("path")?,
        ],
    )?;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(line) = text
            .lines()
            .find(|l| l.contains(" mirrored") && l.contains(image))
        {
            let seconds = line
                .split("seconds=")
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .and_then(|s| s.parse::<f64>().ok())
                .ok_or_else(|| format!("no seconds in {line:?}"))?;
            return Ok((seconds, server));
        }
        if text.contains("mirror failed") {
            return Err(format!("the mirror failed: {text}").into());
        }
        if Instant::now() > deadline {
            return Err("the image was not mirrored within 10 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Samples a process's VmRSS every 5 ms on a thread, keeping the peak.
struct RssSampler {
    pid: u32,
    peak_kib: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl RssSampler {
    fn start(pid: u32) -> RssSampler {
        let peak_kib = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (peak_kib.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Ok(kib) = rss_kib(pid) {
                    p.fetch_max(kib, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        RssSampler {
            pid,
            peak_kib,
            stop,
        }
    }

    fn now_mib(&self) -> Result<f64, BoxError> {
        Ok(rss_kib(self.pid)? as f64 / 1024.0)
    }

    fn reset_peak(&self) {
        self.peak_kib.store(0, Ordering::Relaxed);
    }

    fn peak_mib(&self) -> f64 {
        self.peak_kib.load(Ordering::Relaxed) as f64 / 1024.0
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn rss_kib(pid: u32) -> Result<u64, BoxError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or("no VmRSS")?;
    Ok(line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?)
}
