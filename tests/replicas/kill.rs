//! Three replicas behind nginx on one PostgreSQL and one bucket, under 30 s of load:
//! catalog pages and searches, `/tuf/` refreshes, `/v2/` blob pulls (redirected to the
//! bucket, `--blob-redirect`), and two
//! publishers publishing through the CLI. One replica is SIGKILLed at 10 s, while it
//! holds mirror jobs, and started again at 20 s. Nothing may fail at the balancer,
//! every publish lands, no timestamp version is ever served with two contents, one
//! replica at a time holds the re-signing lease, the killed replica's jobs finish on
//! another, python-tuf downloads every target of the
//! final index, and `mirror verify` finds the bucket whole.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::process::Child;
use std::sync::{Arc, Mutex};

use super::*;
use common::hostile::{Act, Hostile};
use common::nginx::Nginx;
use common::publishing::setup_on;

const LOAD: Duration = Duration::from_secs(30);
const KILL_AT: Duration = Duration::from_secs(10);
const RESTART_AT: Duration = Duration::from_secs(20);
/// Images whose layer arrives one byte per 10 ms (14 s a pull): more than the other
/// two replicas have mirror slots, so the killed one surely holds some.
const SLOW_IMAGES: usize = 6;
const SLOW_LAYER: usize = 1400;

struct Replica {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

/// `serve` on `listen` with `args`, its log (info) in `log`.
fn start_replica(
    data: &Path,
    listen: &str,
    args: &[String],
    env: &[(&str, String)],
    log: &Path,
) -> Replica {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(["serve", "--listen", listen, "--data-dir"])
        .arg(data)
        .args(args)
        .env("MARKETPLACE_LOG", "info,sqlx=warn")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("marketplace listening on http://")
        .unwrap_or_else(|| panic!("{line:?}: {}", std::fs::read_to_string(log).unwrap()))
        .parse()
        .unwrap();
    Replica {
        child,
        addr,
        log: log.to_owned(),
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Images a replica's log says it started (`mirroring`) and finished (`mirrored`).
fn mirror_log(log: &Path) -> (BTreeSet<String>, BTreeSet<String>) {
    let text = std::fs::read_to_string(log).unwrap();
    let image = |l: &str| {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix("image="))
            .map(str::to_owned)
    };
    let pick = |what: &str| {
        text.lines()
            .filter(|l| l.contains(&format!(" {what} image=")))
            .filter_map(image)
            .collect::<BTreeSet<_>>()
    };
    (pick("mirroring"), pick("mirrored"))
}

/// What the load saw.
#[derive(Default)]
struct Seen {
    failures: Vec<String>,
    reads: usize,
    /// Every timestamp served: version → the sha256 of each content seen under it.
    timestamps: BTreeMap<u64, BTreeSet<String>>,
    published: Vec<String>,
    /// Blob pulls whose bytes arrived whole and right.
    blobs: usize,
}

async fn read_loop(
    base: String,
    blob: String,
    layer: String,
    until: Instant,
    seen: Arc<Mutex<Seen>>,
) {
    let http = reqwest::Client::new();
    let no_follow = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut i = 0usize;
    while Instant::now() < until {
        i += 1;
        let path = match i % 4 {
            0 => "/".to_owned(),
            1 => "/api/v1/plugins?q=edge".to_owned(),
            2 => "/tuf/metadata/timestamp.json".to_owned(),
            _ => blob.clone(),
        };
        let result = async {
            let mut r = no_follow
                .get(format!("{base}{path}"))
                .send()
                .await
                .map_err(|e| e.to_string())?;
            // Blobs: the replica's 307 through the balancer, then the bytes from the
            // bucket.
            if path == blob {
                if r.status() != 307 {
                    return Err(format!("{}, not a redirect to the bucket", r.status()));
                }
                let to = r.headers()["location"].to_str().unwrap().to_owned();
                r = http.get(to).send().await.map_err(|e| e.to_string())?;
            }
            let status = r.status();
            let body = r.bytes().await.map_err(|e| e.to_string())?;
            if status != 200 {
                let body = String::from_utf8_lossy(&body);
                return Err(format!(
                    "{status}: {}",
                    body.chars().take(300).collect::<String>()
                ));
            }
            Ok(body)
        }
        .await;
        let mut s = seen.lock().unwrap();
        s.reads += 1;
        match result {
            Err(e) => s.failures.push(format!("GET {path}: {e}")),
            Ok(body) if path == "/tuf/metadata/timestamp.json" => {
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let version = v["signed"]["version"].as_u64().unwrap();
                s.timestamps
                    .entry(version)
                    .or_default()
                    .insert(sha256(&body));
            }
            Ok(body) if path == blob => {
                if sha256(&body) == layer {
                    s.blobs += 1;
                } else {
                    s.failures.push(format!("GET {path}: other bytes"))
                }
            }
            Ok(_) => {}
        }
    }
}

/// Publishes new versions of `edge-PUBLISHER` through the CLI until `until`.
fn publish_loop(
    dir: PathBuf,
    publisher: &'static str,
    key: PathBuf,
    token: String,
    base: String,
    until: Instant,
    seen: Arc<Mutex<Seen>>,
) {
    let mut n = 0;
    while Instant::now() < until {
        n += 1;
        let version = format!("1.0.{n}");
        let def = definition("gateway", &format!("edge-{publisher}"), &version);
        let file = dir.join(format!("{publisher}-{n}.yaml"));
        std::fs::write(&file, &def.bytes).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_marketplace"))
            .arg("publish")
            .arg(&file)
            .args(["--server", &base, "--token", &token, "--key"])
            .arg(&key)
            .output()
            .unwrap();
        let mut s = seen.lock().unwrap();
        if out.status.success() {
            s.published
                .push(format!("{publisher}/edge-{publisher}/{version}.yaml"));
        } else {
            s.failures.push(format!(
                "publish {publisher} {version}: {}",
                common::output_text(&out)
            ));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_lose_nothing_when_one_is_killed_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let pg = common::pg::shared();
    let db = pg.fresh().await;
    let garage = common::garage::shared();
    garage.create_bucket("replicas");

    // The signed index, publishers and keys, made once; the replicas share the keys
    // as a mounted Secret would be shared (`--keys-dir`), and nothing else on disk.
    let m = setup_on(&dir.path().join("init"), &[], Some(&db));
    let keys = m.data.join("keys");
    let upstream = Upstream::start(&dir.path().join("upstream"), None);
    let (layout, index) = oci::two_platform(&dir.path().join("image"), "v1", 300_000);
    let index_digest = oci::digest(&index);
    upstream.push(&layout.dir, "v1", "acme/tool");
    let slow = Hostile::start();
    let upstreams = upstreams_file(dir.path(), &[&upstream.addr, &slow.addr]);

    let mut args: Vec<String> = [
        "--database",
        &db,
        "--keys-dir",
        keys.to_str().unwrap(),
        "--mirror",
        "on",
        "--upstreams",
        upstreams.to_str().unwrap(),
        "--mirror-jobs",
        "2",
        "--mirror-lease",
        "3s",
        "--trust-forwarded-for",
        // Blob bytes come from the bucket, never through a replica: a replica killed
        // mid-stream would cut the download it was sending (a balancer cannot resend
        // what it already started to pass on), which clients then resume with Range.
        "--blob-redirect",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(s3_args(&garage, "replicas"));
    let env = garage.env();
    let mut replicas: Vec<Replica> = (0..3)
        .map(|i| {
            let data = dir.path().join(format!("r{i}"));
            start_replica(
                &data,
                "127.0.0.1:0",
                &args,
                &env,
                &dir.path().join(format!("r{i}.log")),
            )
        })
        .collect();
    let nginx = Nginx::start(&replicas.iter().map(|r| r.addr).collect::<Vec<_>>());
    let base = nginx.url();

    // An image to pull during the load, mirrored before it starts.
    let c = Client::new(&base);
    let image = format!("{}/acme/tool@{index_digest}", upstream.addr);
    let def = with_image(&definition("gateway", "tool", "1.0.0"), &image);
    assert_eq!(
        c.publish_signed(&m.acme_token, &def, &[&m.acme]).await.0,
        201
    );
    let name = format!("{}/acme/tool", upstream.addr.replace(':', "_"));
    until_ok(
        &format!("{base}/v2/{name}/manifests/{index_digest}"),
        Duration::from_secs(60),
    )
    .await;
    let layer = layout.largest();
    let blob = format!("/v2/{name}/blobs/{layer}");

    // Slow images, published as the load starts: every mirror slot fills.
    let mut slow_images = BTreeSet::new();
    for i in 0..SLOW_IMAGES {
        let repo = format!("slow/s{i}");
        let (digest, layer) = slow.image(&repo, SLOW_LAYER);
        slow.act(
            &format!("/v2/{repo}/blobs/{layer}"),
            Act::Trickle(Duration::from_millis(10)),
        );
        let def = with_image(
            &definition("gateway", &format!("slow-{i}"), "1.0.0"),
            &format!("{}/{repo}@{digest}", slow.addr),
        );
        assert_eq!(
            c.publish_as("beta", &m.beta_token, &def, &[&m.beta])
                .await
                .0,
            201
        );
        slow_images.insert(format!("{}/{repo}@{digest}", slow.addr));
    }

    let started = Instant::now();
    let until = started + LOAD;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        tasks.push(tokio::spawn(read_loop(
            base.clone(),
            blob.clone(),
            layer.clone(),
            until,
            seen.clone(),
        )));
    }
    for (publisher, key, token) in [
        ("acme", &m.acme, &m.acme_token),
        ("beta", &m.beta, &m.beta_token),
    ] {
        let key_file = dir.path().join(format!("{publisher}.pem"));
        key.save_new(&key_file).unwrap();
        let (dir, token, base, seen) = (
            dir.path().to_owned(),
            token.clone(),
            base.clone(),
            seen.clone(),
        );
        tasks.push(tokio::task::spawn_blocking(move || {
            publish_loop(dir, publisher, key_file, token, base, until, seen)
        }));
    }

    // SIGKILL replica 0 at 10 s: what it was mirroring then is left to the others.
    tokio::time::sleep_until((started + KILL_AT).into()).await;
    // Until then exactly one replica took the re-signing lease (each tried at start).
    let takers: Vec<_> = replicas
        .iter()
        .filter(|r| {
            std::fs::read_to_string(&r.log)
                .unwrap()
                .contains("re-signing lease taken")
        })
        .map(|r| r.addr)
        .collect();
    assert_eq!(takers.len(), 1, "replicas re-signing: {takers:?}");
    let victim = replicas.remove(0);
    let victim_addr = victim.addr;
    let victim_log = victim.log.clone();
    drop(victim);
    let (started_jobs, finished_jobs) = mirror_log(&victim_log);
    let held: BTreeSet<String> = started_jobs.difference(&finished_jobs).cloned().collect();
    assert!(
        !held.is_empty() && held.is_subset(&slow_images),
        "the killed replica held no slow mirror job: {}",
        std::fs::read_to_string(&victim_log).unwrap()
    );
    tokio::time::sleep_until((started + RESTART_AT).into()).await;
    let again = start_replica(
        &dir.path().join("r0"),
        &victim_addr.to_string(),
        &args,
        &env,
        &dir.path().join("r0-again.log"),
    );
    for t in tasks {
        t.await.unwrap();
    }

    let seen = std::mem::take(&mut *seen.lock().unwrap());
    eprintln!(
        "load: {} reads ({} blob pulls), {} publishes, {} timestamp versions seen, {} failures; the killed replica held {held:?}",
        seen.reads,
        seen.blobs,
        seen.published.len(),
        seen.timestamps.len(),
        seen.failures.len()
    );
    assert_eq!(
        seen.failures,
        Vec::<String>::new(),
        "failed at the balancer"
    );
    assert!(seen.reads > 200, "only {} reads", seen.reads);
    assert!(seen.blobs > 50, "only {} blob pulls", seen.blobs);
    assert!(
        seen.published.len() >= 10,
        "only {} publishes",
        seen.published.len()
    );
    let twice: Vec<_> = seen
        .timestamps
        .iter()
        .filter(|(_, c)| c.len() > 1)
        .collect();
    assert!(
        twice.is_empty(),
        "timestamp versions served with two contents: {twice:?}"
    );
    assert!(
        seen.timestamps.len() > 5,
        "timestamps seen: {:?}",
        seen.timestamps.keys()
    );

    // The killed replica's jobs finish, on another replica.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let done: BTreeSet<String> = replicas.iter().flat_map(|r| mirror_log(&r.log).1).collect();
        if held.is_subset(&done) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "jobs {held:?} of the killed replica not finished by another; finished: {done:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // python-tuf refreshes from the final index and downloads every target.
    let root = dir.path().join("1.root.json");
    std::fs::write(
        &root,
        reqwest::get(format!("{base}/tuf/metadata/1.root.json"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    let targets: Vec<&str> = seen.published.iter().map(String::as_str).collect();
    let report = common::python_tuf(&base, &root, &dir.path().join("py"), &targets);
    for t in &targets {
        assert!(
            report["targets"][t].is_object(),
            "python-tuf lacks {t}: {report}"
        );
    }

    // The bucket is whole.
    let mut verify_args = s3_args(&garage, "replicas");
    verify_args.extend(["--database".into(), db.clone()]);
    let (ok, out) = mirror_cli(&dir.path().join("r1"), &garage, &verify_args, &["verify"]);
    assert!(ok && out.contains("0 corrupt, 0 missing"), "{out}");
    drop(again);
    drop(nginx);
}
