//! Upstream benchmark: following an upstream marketplace from cold, and a bundle of
//! images created and imported against `skopeo copy` of the same images into an OCI
//! layout, in one run.
//!
//! 1. **Follow**: seeds an upstream of `BENCH_DEFINITIONS` (default 10,000) generated
//!    definitions over 100 publishers (`benches/common/seed.rs`) and starts `marketplace
//!    serve` on it. `BENCH_COLD_RUNS` times (default 3), a fresh downstream (`repo
//!    init`) follows it once in process (`upstream::follow`: the TUF refresh, every
//!    publisher's roles, every definition downloaded, verified and parsed, the local
//!    index signed and everything stored in one transaction); the median is compared
//!    with the target **≤ 3 s** (metadata and definitions; no images).
//! 2. **Bundle**: `BENCH_IMAGES` images (default 4) of `BENCH_IMAGE_MIB` MiB each
//!    (default 256: 1 GiB in all) of incompressible bytes, pushed into Debian's
//!    `docker-registry` on loopback and mirrored by a connected marketplace whose
//!    publisher pins them. Then, `BENCH_ROUNDS` times (default 2), alternating: the
//!    peer, `skopeo copy --all --preserve-digests` of every image from the registry into
//!    one fresh OCI layout; `marketplace bundle create` (the CLI, process start
//!    included) into a fresh file; `marketplace bundle import` of it into a fresh
//!    marketplace. Throughput is the images' bytes over the time; targets: the medians
//!    of create and of import each **≥ 0.8×** skopeo's.
//!
//! `cargo bench --bench upstream`. Exits non-zero when a target is missed. Needs
//! `docker-registry` and `skopeo` (Debian packages).

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[path = "../catalog/generate.rs"]
#[allow(dead_code)] // the catalog benchmark uses the rest
mod generate;
#[allow(dead_code)] // the tests' helpers; the benchmark uses a few
#[path = "../../tests/common/oci.rs"]
mod oci;
#[path = "../common/seed.rs"]
#[allow(dead_code)] // the publish benchmark uses the rest
mod seed;
#[path = "../common/server.rs"]
#[allow(dead_code)] // the other benchmarks use the rest
mod server;

use marketplace::definition::Definition;
use marketplace::store::Store;
use marketplace::trust::SigningKey;
use marketplace::trust::server::state::{OnlineKeys, Signer};
use server::{Server, env_number};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

const FOLLOW_TARGET: Duration = Duration::from_secs(3);
const BUNDLE_RATIO: f64 = 0.8;

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("building the tokio runtime");
    server::exit_status(runtime.block_on(run()))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn run() -> Result<bool, BoxError> {
    let follow_ok = follow().await?;
    let bundle_ok = bundle().await?;
    Ok(follow_ok && bundle_ok)
}

/// `repo init` in `dir/data` with its own root key; the data directory.
fn init(dir: &Path) -> Result<std::path::PathBuf, BoxError> {
    std::fs::create_dir_all(dir)?;
    let data = dir.join("data");
    let root = dir.join("root.pem");
    SigningKey::generate()?.save_new(&root)?;
    seed::marketplace(&[
        "repo",
        "init",
        "--data-dir",
        data.to_str().ok_or("path")?,
        "--root-key",
        root.to_str().ok_or("path")?,
    ])?;
    Ok(data)
}

async fn follow() -> Result<bool, BoxError> {
    let definitions = env_number("BENCH_DEFINITIONS", 10_000);
    let runs = env_number("BENCH_COLD_RUNS", 3);
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let seeded = seed::seed(dir.path(), definitions, 100.min(definitions), None).await?;
    let publishers = seeded.publishers.len();
    println!(
        "marketplace upstream benchmark: follow {definitions} definitions over {publishers} publishers (seeded in {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    let upstream = Server::start(&seeded.data)?;
    let root = reqwest::get(format!("{}/tuf/metadata/1.root.json", upstream.base))
        .await?
        .error_for_status()?
        .bytes()
        .await?
        .to_vec();
    let fetcher = marketplace::trust::client::Fetcher::new(Duration::from_secs(60))?;
    let mut times = Vec::new();
    for run in 0..runs {
        let data = init(&dir.path().join(format!("down-{run}")))?;
        let store = Store::open(&data.join("marketplace.db")).await?;
        let keys = OnlineKeys::load(&marketplace::trust::server::repo::keys_dir(&data))?
            .ok_or("repo init wrote no keys")?;
        let signer = Signer::new(keys, Default::default());
        let up = marketplace::upstream::Upstream::new(
            &upstream.base,
            root.clone(),
            marketplace::upstream::Filter::all(),
        )?;
        let t = Instant::now();
        let report = marketplace::upstream::follow(
            &store,
            &signer,
            &fetcher,
            &up,
            marketplace::clock::now(),
        )
        .await?;
        let elapsed = t.elapsed();
        let followed = report.with(marketplace::upstream::Status::Followed).len();
        let added: usize = report.publishers.iter().map(|p| p.added).sum();
        if followed != publishers || added != definitions {
            return Err(format!(
                "the round followed {followed} publishers and {added} definitions, not {publishers} and {definitions}"
            )
            .into());
        }
        let p = report.phases;
        println!(
            "  cold follow run {}: {:.0} ms (metadata {}, definitions {}, sign and store {}; {followed} publishers, {added} definitions, local snapshot v{})",
            run + 1,
            elapsed.as_secs_f64() * 1000.0,
            p.metadata,
            p.definitions,
            p.store,
            report.snapshot.unwrap_or(0)
        );
        times.push(elapsed.as_secs_f64());
        store.close().await;
    }
    let m = median(times);
    let ok = m <= FOLLOW_TARGET.as_secs_f64();
    println!(
        "follow from cold, median: {:.0} ms (target ≤ {} ms) {}",
        m * 1000.0,
        FOLLOW_TARGET.as_millis(),
        if ok { "ok" } else { "MISSED" }
    );
    Ok(ok)
}

async fn bundle() -> Result<bool, BoxError> {
    let images = env_number("BENCH_IMAGES", 4).clamp(1, 8);
    let mib = env_number("BENCH_IMAGE_MIB", 256);
    let rounds = env_number("BENCH_ROUNDS", 2);
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let registry = oci::Upstream::start(&dir.path().join("registry"), None);
    let mut refs = Vec::new();
    for i in 0..images {
        // A platform of its own: the layer's bytes are drawn from its name, so no two
        // images share a layer.
        let arch = [
            "amd64", "arm64", "ppc64le", "s390x", "riscv64", "386", "mips64le", "arm",
        ][i % 8];
        let (layout, index) = oci::image(
            &dir.path().join(format!("image-{i}")),
            &format!("v{i}"),
            &[arch],
            mib << 20,
        );
        let digest = oci::digest(&index);
        registry.push(&layout.dir, &format!("v{i}"), &format!("acme/tool-{i}"));
        std::fs::remove_dir_all(&layout.dir)?;
        refs.push((format!("acme/tool-{i}"), digest));
    }
    println!(
        "\nbundle: {images} images of {mib} MiB (built and pushed in {:.1} s)",
        started.elapsed().as_secs_f64()
    );

    // The connected marketplace: acme pins every image; the mirror brings them in.
    let data = init(&dir.path().join("connected"))?;
    let key = SigningKey::generate()?;
    seed::marketplace(&[
        "publisher",
        "add",
        "acme",
        "--key",
        &key.public().hex(),
        "--data-dir",
        data.to_str().ok_or("path")?,
    ])?;
    let defs: Vec<Definition> = refs
        .iter()
        .enumerate()
        .map(|(i, (repo, digest))| {
            let yaml = oci::pin_image(
                include_str!("../../catalog/gateway.yaml"),
                &format!("{}/{repo}@{digest}", registry.addr),
            )
            .replacen("name: gateway", &format!("name: tool-{i}"), 1);
            Definition::parse(yaml.as_bytes()).map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    publish(&data, &key, &defs).await?;
    let upstreams = dir.path().join("upstreams.yaml");
    std::fs::write(
        &upstreams,
        format!(
            "otherHosts: skip\nupstreams:\n  - host: {}\n    insecure: true\n",
            registry.addr
        ),
    )?;
    let connected = Server::start_args(
        &data,
        Some("warn"),
        None,
        &[
            "--mirror",
            "on",
            "--upstreams",
            upstreams.to_str().ok_or("path")?,
        ],
    )?;
    let deadline = Instant::now() + Duration::from_secs(1800);
    for (repo, digest) in &refs {
        let url = format!(
            "{}/v2/{}/{repo}/manifests/{digest}",
            connected.base,
            registry.addr.replace(':', "_")
        );
        while reqwest::Client::new().head(&url).send().await?.status() != 200 {
            if Instant::now() > deadline {
                return Err(format!("{repo} was not mirrored in 30 minutes").into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let root = dir.path().join("connected-root.json");
    let bytes = reqwest::get(format!("{}/tuf/metadata/1.root.json", connected.base))
        .await?
        .bytes()
        .await?;
    std::fs::write(&root, &bytes)?;
    drop(connected);
    let d = data.to_str().ok_or("path")?;

    let (mut peer, mut create, mut import) = (Vec::new(), Vec::new(), Vec::new());
    let mut total = 0u64;
    for round in 0..rounds {
        let layout = dir.path().join(format!("skopeo-{round}"));
        let t = Instant::now();
        for (i, (repo, digest)) in refs.iter().enumerate() {
            oci::skopeo(&[
                "copy",
                "--all",
                "--preserve-digests",
                "--src-tls-verify=false",
                &format!("docker://{}/{repo}@{digest}", registry.addr),
                &format!("oci:{}:tool-{i}", layout.display()),
            ]);
        }
        let skopeo = t.elapsed().as_secs_f64();
        let bytes = dir_bytes(&layout.join("blobs"))?;
        std::fs::remove_dir_all(&layout)?;

        let out = dir.path().join(format!("bundle-{round}.tar"));
        let t = Instant::now();
        let printed = seed::marketplace(&[
            "bundle",
            "create",
            out.to_str().ok_or("path")?,
            "--data-dir",
            d,
        ])?;
        let created = t.elapsed().as_secs_f64();
        let included: u64 = printed
            .split(" blobs (")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no byte count in {printed:?}"))?;

        let site = init(&dir.path().join(format!("site-{round}")))?;
        let t = Instant::now();
        let printed = seed::marketplace(&[
            "bundle",
            "import",
            out.to_str().ok_or("path")?,
            "--upstream",
            "https://plugins.example.com",
            "--upstream-root",
            root.to_str().ok_or("path")?,
            "--data-dir",
            site.to_str().ok_or("path")?,
        ])?;
        let imported = t.elapsed().as_secs_f64();
        if !printed.contains(&format!("{images} images mirrored")) {
            return Err(format!("the import mirrored not every image: {printed}").into());
        }
        std::fs::remove_file(&out)?;
        std::fs::remove_dir_all(site.parent().ok_or("path")?)?;
        total = included;
        let mibs = |s: f64| included as f64 / s / 1_048_576.0;
        println!(
            "  round {}: skopeo copy {skopeo:.2} s ({:.0} MiB/s, {bytes} bytes), bundle create {created:.2} s ({:.0} MiB/s), bundle import {imported:.2} s ({:.0} MiB/s)",
            round + 1,
            bytes as f64 / skopeo / 1_048_576.0,
            mibs(created),
            mibs(imported)
        );
        peer.push(bytes as f64 / skopeo);
        create.push(included as f64 / created);
        import.push(included as f64 / imported);
    }
    let (peer, create, import) = (median(peer), median(create), median(import));
    let (c, i) = (create / peer, import / peer);
    let ok = c >= BUNDLE_RATIO && i >= BUNDLE_RATIO;
    println!(
        "bundle of {:.0} MiB, medians: skopeo {:.0} MiB/s; create {:.0} MiB/s ({c:.2}×), import {:.0} MiB/s ({i:.2}×) (target each ≥ {BUNDLE_RATIO}×) {}",
        total as f64 / 1_048_576.0,
        peer / 1_048_576.0,
        create / 1_048_576.0,
        import / 1_048_576.0,
        if ok { "ok" } else { "MISSED" }
    );
    Ok(ok)
}

/// Publishes `defs` as acme on `data` through the server side's `accept`, one signed
/// batch, as the HTTP API would.
async fn publish(data: &Path, key: &SigningKey, defs: &[Definition]) -> Result<(), BoxError> {
    use marketplace::trust::publisher::plan::{Change, Current, Limits, Plan, plan};
    let store = Store::open(&data.join("marketplace.db")).await?;
    let keys =
        OnlineKeys::load(&marketplace::trust::server::repo::keys_dir(data))?.ok_or("no keys")?;
    let signer = Signer::new(keys, Default::default());
    let now = marketplace::clock::now();
    let adding: Vec<(&Definition, bool)> = defs.iter().map(|d| (d, false)).collect();
    let Plan::Ready(upload) = plan(
        "acme",
        &Current::default(),
        &Change::Add(adding),
        &[key],
        seed::YEAR,
        now,
        Limits::default(),
    )
    .await?
    else {
        return Err("a first publish needs no bins fetched".into());
    };
    let upload = marketplace::trust::server::roleset::RoleUpload {
        top: upload.top,
        bins: upload.bins,
    };
    let bytes: Vec<&[u8]> = defs.iter().map(|d| d.bytes.as_slice()).collect();
    marketplace::trust::server::accept::accept(&store, &signer, "acme", &bytes, &upload, now)
        .await?;
    store.close().await;
    Ok(())
}

/// Bytes of every file under `dir`.
fn dir_bytes(dir: &Path) -> Result<u64, BoxError> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            dir_bytes(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}
