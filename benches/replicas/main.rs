//! Replicas benchmark: the S3 blob store and several replicas against their peers, in one
//! run, with real parts: PostgreSQL (the tests' `common::pg`), Garage (`common::garage`),
//! nginx as the balancer (`common::nginx`), Debian's `docker-registry` as the upstream.
//!
//! 1. **Blob GET from the bucket**: an image with one layer of `BENCH_BLOB_MIB` (default
//!    200) MiB is mirrored by a replica into Garage. Then `BENCH_GETS` rounds (default
//!    5), alternating: the layer in one stream with `curl` to `/dev/null` from our `/v2/`
//!    (streamed through), straight from Garage (a presigned URL, no marketplace in the
//!    path), and through a `--blob-redirect` replica (`curl -L`: our 307, then Garage).
//!    Target: median ratio streamed / straight **≥ 0.8**; redirect is reported. The
//!    replica's peak memory (`VmHWM`) after mirroring and streaming: **≤ 128 MiB**.
//! 2. **Throughput, 3 replicas vs 1**, both behind nginx: `BENCH_REQUESTS` (default
//!    20,000) closed-loop requests on 16 connections for `/tuf/metadata/timestamp.json`
//!    and for the catalog page `/`, also with the one replica alone behind nginx while
//!    two more run idle. Reported as req/s and the ratio 3 / 1 (on 2 cores no gain is
//!    expected; the point is no loss).
//! 3. **A write on one replica, seen on another**: `BENCH_WRITES` (default 50) publishes
//!    through replica A (the code `marketplace publish` runs); after each 201, replica B
//!    is asked until its `timestamp.json` lists the new snapshot and its JSON API has the
//!    plugin. Target: p99 **≤ 1 s**.
//!
//! `cargo bench --bench replicas`. Needs what `.ci/run` installs (PostgreSQL, Garage,
//! nginx, docker-registry, skopeo) and `curl`.

use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[path = "../../tests/common/nginx.rs"]
#[allow(dead_code)] // the tests use the rest
mod balancer;
#[path = "../../tests/common/garage.rs"]
#[allow(dead_code)] // the tests use the rest
mod garage;
#[allow(dead_code)] // the tests' helpers; the benchmark uses a few
#[path = "../../tests/common/oci.rs"]
mod oci;
#[path = "../../tests/common/pg.rs"]
#[allow(dead_code)] // the tests use the rest
mod pg;
#[path = "../common/server.rs"]
#[allow(dead_code)] // the other benchmarks use the rest
mod server;

use marketplace::blob::{BlobStore, S3BlobStore, S3Location};
use marketplace::definition::Definition;
use marketplace::trust::SigningKey;
use marketplace::trust::publisher::plan::{Change, Limits};
use marketplace::trust::publisher::uploader::PublisherClient;
use server::{Server, curl, env_number, median};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

const TARGET_STREAMED_VS_STRAIGHT: f64 = 0.8;
const TARGET_PROPAGATION_P99: Duration = Duration::from_secs(1);
/// Far below the layer's 200 MiB: a part or two of a multipart upload (8 MiB each) and
/// a few read chunks are all a blob may cost.
const TARGET_PEAK_MIB: f64 = 128.0;
const YEAR: Duration = Duration::from_secs(365 * 86_400);
const BUCKET: &str = "bench-replicas";

fn main() -> ExitCode {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    server::exit_status(runtime.block_on(run()))
}

/// The marketplace CLI; its stdout, or an error with its output.
fn cli(args: &[&str]) -> Result<String, BoxError> {
    let out = Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(args)
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "marketplace {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(String::from_utf8(out.stdout)?)
}

async fn run() -> Result<bool, BoxError> {
    let mib = env_number("BENCH_BLOB_MIB", 200);
    let gets = env_number("BENCH_GETS", 5);
    let requests = env_number("BENCH_REQUESTS", 20_000);
    let writes = env_number("BENCH_WRITES", 50);
    let dir = tempfile::tempdir()?;

    // The shared parts: PostgreSQL, a bucket, the signed index and one publisher.
    let postgres = pg::Postgres::start();
    let db = postgres.fresh().await;
    let garage = garage::Garage::start();
    garage.create_bucket(BUCKET);
    let env = garage.env();
    let root = dir.path().join("root.pem");
    SigningKey::generate()?.save_new(&root)?;
    let keys = dir.path().join("keys");
    let init_dir = dir.path().join("init");
    let init = init_dir.to_str().ok_or("path")?;
    cli(&[
        "repo",
        "init",
        "--database",
        &db,
        "--data-dir",
        init,
        "--keys-dir",
        keys.to_str().ok_or("path")?,
        "--root-key",
        root.to_str().ok_or("path")?,
    ])?;
    let acme = SigningKey::generate()?;
    let token = cli(&[
        "publisher",
        "add",
        "acme",
        "--key",
        &acme.public().hex(),
        "--database",
        &db,
        "--data-dir",
        init,
    ])?
    .lines()
    .last()
    .ok_or("no token")?
    .trim()
    .to_owned();

    let started = Instant::now();
    let (layout, index) = oci::image(&dir.path().join("image"), "v1", &["amd64"], mib << 20);
    let index_digest = oci::digest(&index);
    let layer = layout.largest();
    let layer_bytes = layout.size(&layer);
    let upstream = oci::Upstream::start(&dir.path().join("upstream"), None);
    upstream.push(&layout.dir, "v1", "acme/tool");
    println!(
        "marketplace replicas benchmark: one layer of {:.1} MiB (image built and pushed in {:.1} s)",
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
    let common: Vec<String> = [
        "--database",
        &db,
        "--keys-dir",
        keys.to_str().ok_or("path")?,
        "--blob-store",
        &format!("s3://{BUCKET}/blobs"),
        "--blob-endpoint",
        &garage.endpoint,
        "--blob-region",
        &garage.region,
        "--blob-path-style",
        "--mirror",
        "on",
        "--upstreams",
        upstreams.to_str().ok_or("path")?,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let replica = |i: usize, extra: &[&str]| -> Result<Server, BoxError> {
        let mut args: Vec<&str> = common.iter().map(String::as_str).collect();
        args.extend(extra);
        Server::start_env(
            &dir.path().join(format!("r{i}")),
            Some("warn"),
            None,
            &args,
            &env,
        )
    };

    // 1. The layer, mirrored into the bucket by replica 0.
    let a = replica(0, &[])?;
    let client = PublisherClient::connect(&a.base, &token).await?;
    let image = format!("{}/acme/tool@{index_digest}", upstream.addr);
    let def = Definition::parse(
        oci::pin_image(include_str!("../../catalog/gateway.yaml"), &image).as_bytes(),
    )?;
    publish(&client, &acme, &def).await?;
    let name = format!("{}/acme/tool", upstream.addr.replace(':', "_"));
    let t = Instant::now();
    let manifest = format!("{}/v2/{name}/manifests/{index_digest}", a.base);
    while reqwest::Client::new()
        .head(&manifest)
        .send()
        .await?
        .status()
        != 200
    {
        if t.elapsed() > Duration::from_secs(600) {
            return Err("the image was not mirrored within 10 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "mirrored into the bucket in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    drop(upstream);
    let redirecting = replica(1, &["--blob-redirect"])?;
    let mut location = S3Location::parse(&format!("s3://{BUCKET}/blobs"))?;
    location.endpoint = Some(garage.endpoint.clone());
    location.region = Some(garage.region.clone());
    location.path_style = true;
    let s3 = S3BlobStore::with_access_key(&location, &garage.key_id, &garage.secret)?;
    let straight = s3
        .presign(&layer.parse()?, Duration::from_secs(3600))
        .await?
        .ok_or("no presigned URL")?
        .to_string();
    let streamed = format!("{}/v2/{name}/blobs/{layer}", a.base);
    let redirected = format!("{}/v2/{name}/blobs/{layer}", redirecting.base);
    for url in [&streamed, &straight, &redirected] {
        curl(url, layer_bytes)?; // warm-up: connections, lazy init
    }
    let (mut s, mut g, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..gets {
        // Alternating which goes first: the page cache under Garage favours the second.
        if round % 2 == 0 {
            s.push(curl(&streamed, layer_bytes)?);
            g.push(curl(&straight, layer_bytes)?);
        } else {
            g.push(curl(&straight, layer_bytes)?);
            s.push(curl(&streamed, layer_bytes)?);
        }
        r.push(curl(&redirected, layer_bytes)?);
    }
    let ratios: Vec<f64> = s.iter().zip(&g).map(|(a, b)| a / b).collect();
    let blob_ratio = median(ratios);
    let redirect_ratio = median(r.iter().zip(&g).map(|(a, b)| a / b).collect());
    println!(
        "\nblob GET, one stream of {:.1} MiB, {gets} round(s), median MiB/s:",
        layer_bytes as f64 / 1_048_576.0
    );
    println!(
        "  streamed through ours {:.0}, straight from Garage {:.0}, redirected by ours {:.0}",
        median(s.clone()),
        median(g.clone()),
        median(r.clone())
    );
    drop(redirecting);
    // Both directions streamed: the mirror's upload into the bucket and five downloads
    // through replica A never held the layer.
    let peak_mib = vm_hwm_kib(a.pid())? as f64 / 1024.0;

    // 2. Throughput behind nginx: one replica, then three.
    let one = balancer::Nginx::start(&[addr(&a.base)?]);
    let tuf_one = load(&one.url(), "/tuf/metadata/timestamp.json", requests).await?;
    let page_one = load(&one.url(), "/", requests).await?;
    drop(one);
    let b = replica(2, &[])?;
    let c = replica(3, &[])?;
    // The same single replica while two more run idle: what the extra processes cost
    // apart from spreading the requests.
    let one_of_three = balancer::Nginx::start(&[addr(&a.base)?]);
    let tuf_idle = load(
        &one_of_three.url(),
        "/tuf/metadata/timestamp.json",
        requests,
    )
    .await?;
    let page_idle = load(&one_of_three.url(), "/", requests).await?;
    drop(one_of_three);
    let three = balancer::Nginx::start(&[addr(&a.base)?, addr(&b.base)?, addr(&c.base)?]);
    let tuf_three = load(&three.url(), "/tuf/metadata/timestamp.json", requests).await?;
    let page_three = load(&three.url(), "/", requests).await?;
    drop(three);
    println!("\nthroughput behind nginx, {requests} requests on 16 connections, req/s:");
    println!(
        "  /tuf/metadata/timestamp.json: 1 replica {tuf_one:.0}, 1 of 3 running {tuf_idle:.0}, 3 replicas {tuf_three:.0} ({:.2}x)",
        tuf_three / tuf_one
    );
    println!(
        "  catalog page /:               1 replica {page_one:.0}, 1 of 3 running {page_idle:.0}, 3 replicas {page_three:.0} ({:.2}x)",
        page_three / page_one
    );

    // 3. A publish through A, seen on B.
    let http = reqwest::Client::new();
    let mut seen = Vec::with_capacity(writes);
    for n in 0..writes {
        let yaml = include_str!("../../catalog/gateway.yaml").replacen(
            "name: gateway",
            &format!("name: bench-{n}"),
            1,
        );
        let def = Definition::parse(yaml.as_bytes())?;
        let answer = publish(&client, &acme, &def).await?;
        let committed = Instant::now();
        let snapshot = answer["snapshot_version"]
            .as_u64()
            .ok_or("no snapshot_version")?;
        loop {
            let ts: serde_json::Value = http
                .get(format!("{}/tuf/metadata/timestamp.json", b.base))
                .send()
                .await?
                .json()
                .await?;
            let listed = ts["signed"]["meta"]["snapshot.json"]["version"].as_u64();
            let plugin = http
                .get(format!("{}/api/v1/plugins/acme/bench-{n}", b.base))
                .send()
                .await?
                .status();
            if listed >= Some(snapshot) && plugin == 200 {
                break;
            }
            if committed.elapsed() > Duration::from_secs(30) {
                return Err(format!("bench-{n} not seen on B after 30 s").into());
            }
        }
        seen.push(committed.elapsed());
    }
    seen.sort();
    let at = |q: f64| seen[((seen.len() as f64 * q) as usize).min(seen.len() - 1)];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "\na publish on A seen on B (timestamp and JSON API), {writes} publishes: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms(at(0.5)),
        ms(at(0.99)),
        ms(*seen.last().ok_or("no writes")?)
    );

    let checks = [
        (
            format!(
                "blob GET, streamed through / straight from Garage: {blob_ratio:.2}x (target ≥ {TARGET_STREAMED_VS_STRAIGHT}); redirected / straight: {redirect_ratio:.2}x (reported)"
            ),
            blob_ratio >= TARGET_STREAMED_VS_STRAIGHT,
        ),
        (
            format!(
                "replica A's peak memory (VmHWM) after mirroring and streaming the {:.0} MiB layer: {peak_mib:.1} MiB (target ≤ {TARGET_PEAK_MIB} MiB)",
                layer_bytes as f64 / 1_048_576.0
            ),
            peak_mib <= TARGET_PEAK_MIB,
        ),
        (
            format!(
                "write on one replica seen on another, p99 {:.1} ms (target ≤ {} ms)",
                ms(at(0.99)),
                TARGET_PROPAGATION_P99.as_millis()
            ),
            at(0.99) <= TARGET_PROPAGATION_P99,
        ),
    ];
    println!();
    let mut all = true;
    for (line, ok) in checks {
        println!("{line}  [{}]", if ok { "PASS" } else { "FAIL" });
        all &= ok;
    }
    drop((a, b, c));
    Ok(all)
}

/// `http://ADDR` as a socket address.
fn addr(base: &str) -> Result<std::net::SocketAddr, BoxError> {
    Ok(base.trim_start_matches("http://").parse()?)
}

/// Publishes `def` as acme through `client`; the server's answer.
async fn publish(
    client: &PublisherClient,
    key: &SigningKey,
    def: &Definition,
) -> Result<serde_json::Value, BoxError> {
    let done = client
        .update(
            "definitions",
            &[key.public()],
            &Change::Add(vec![(def, false)]),
            &[key],
            YEAR,
            Limits::default(),
            serde_json::json!({ "definition": std::str::from_utf8(&def.bytes)? }),
        )
        .await?;
    Ok(done.answer)
}

/// `total` GETs of `path` on 16 keep-alive connections, each sending its next request
/// as soon as the last answer is read; every answer must be 200. Requests per second.
async fn load(base: &str, path: &str, total: usize) -> Result<f64, BoxError> {
    let url = format!("{base}{path}");
    let left = Arc::new(AtomicUsize::new(total));
    let mut clients = Vec::new();
    for _ in 0..16 {
        let c = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()?;
        c.get(&url).send().await?.bytes().await?; // the connection, opened before the clock
        clients.push(c);
    }
    let t = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|c| {
            let (url, left) = (url.clone(), left.clone());
            tokio::spawn(async move {
                while left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
                {
                    let r = c.get(&url).send().await.map_err(|e| e.to_string())?;
                    let status = r.status();
                    r.bytes().await.map_err(|e| e.to_string())?;
                    if status != 200 {
                        return Err(format!("{url}: {status}"));
                    }
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    Ok(total as f64 / t.elapsed().as_secs_f64())
}

/// The peak resident memory (`VmHWM`) of process `pid`, in KiB.
fn vm_hwm_kib(pid: u32) -> Result<u64, BoxError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .ok_or("no VmHWM")?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .ok_or("no VmHWM value")?
        .parse()?)
}
