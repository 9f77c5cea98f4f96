//! Replicas with real parts only: PostgreSQL (`common::pg`) as the store, Garage
//! (`common::garage`) as the S3-compatible blob store, Debian's nginx
//! (`common::nginx`) as the balancer, Debian's `docker-registry` as the upstream, and
//! `skopeo`, containerd's `ctr`, python-tuf and the `marketplace` CLI as clients. Here: images in a bucket
//! pulled back streamed and redirected, `mirror verify`/`gc` on the bucket, and three
//! replicas under load while one is killed and started again.

mod common;
#[path = "replicas/kill.rs"]
mod kill;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Server;
use common::garage::Garage;
use common::oci::{self, Upstream};
use common::publishing::{Client, definition, setup_with, with_image};

/// `serve`/`mirror` arguments for the bucket `bucket` of `garage`, path-style.
fn s3_args(garage: &Garage, bucket: &str) -> Vec<String> {
    vec![
        "--blob-store".into(),
        format!("s3://{bucket}/mirror"),
        "--blob-endpoint".into(),
        garage.endpoint.clone(),
        "--blob-region".into(),
        garage.region.clone(),
        "--blob-path-style".into(),
    ]
}

/// An upstreams file that lists `upstreams` (plain HTTP) and skips every other host.
fn upstreams_file(dir: &Path, upstreams: &[&str]) -> PathBuf {
    let path = dir.join("upstreams.yaml");
    let mut text = String::from("otherHosts: skip\nupstreams:\n");
    for host in upstreams {
        text.push_str(&format!("  - host: {host}\n    insecure: true\n"));
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// `marketplace mirror ARGS` with the bucket's credentials in the environment.
fn mirror_cli(data: &Path, garage: &Garage, extra: &[String], args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .arg("mirror")
        .arg("--data-dir")
        .arg(data)
        .args(extra)
        .args(args)
        .envs(garage.env())
        .output()
        .unwrap();
    (out.status.success(), common::output_text(&out))
}

/// Waits until `url` answers 200 to a HEAD.
async fn until_ok(url: &str, within: Duration) {
    let started = Instant::now();
    loop {
        let r = reqwest::Client::new().head(url).send().await.unwrap();
        if r.status() == 200 {
            return;
        }
        assert!(
            started.elapsed() < within,
            "{url}: {} after {within:?}",
            r.status()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn sha256(bytes: &[u8]) -> String {
    oci::digest(bytes)
}

#[tokio::test]
async fn images_mirror_into_a_bucket_and_pull_back_streamed_or_redirected() {
    let garage = common::garage::shared();
    garage.create_bucket("one-replica");
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(&dir.path().join("upstream"), None);
    let (layout, index) = oci::two_platform(&dir.path().join("image"), "v1", 400_000);
    let index_digest = oci::digest(&index);
    upstream.push(&layout.dir, "v1", "acme/tool");

    let m = setup_with(&dir.path().join("m"), &[]);
    let upstreams = upstreams_file(dir.path(), &[&upstream.addr]);
    let s3 = s3_args(&garage, "one-replica");
    let mut args: Vec<&str> = vec!["--mirror", "on", "--upstreams", upstreams.to_str().unwrap()];
    args.extend(s3.iter().map(String::as_str));
    let server = Server::start_env(&m.data, &args, &garage.env());
    let image = format!("{}/acme/tool@{index_digest}", upstream.addr);
    let def = with_image(&definition("gateway", "edge", "1.0.0"), &image);
    let c = Client::new(&server.url);
    assert_eq!(
        c.publish_signed(&m.acme_token, &def, &[&m.acme]).await.0,
        201
    );
    let name = format!("{}/acme/tool", upstream.addr.replace(':', "_"));
    until_ok(
        &format!("{}/v2/{name}/manifests/{index_digest}", server.url),
        Duration::from_secs(60),
    )
    .await;
    // Nothing went to the data directory: every blob is in the bucket.
    let on_disk = std::fs::read_dir(m.data.join("blobs/sha256")).map_or(0, |d| d.count());
    assert_eq!(on_disk, 0, "blobs written under the data directory");

    // Streamed through: skopeo pulls every platform back, digests preserved.
    let pull = |to: &str, from: &str| {
        let out = dir.path().join(to);
        oci::skopeo(&[
            "copy",
            "--all",
            "--preserve-digests",
            "--src-tls-verify=false",
            &format!(
                "docker://{}/{name}@{index_digest}",
                from.trim_start_matches("http://")
            ),
            &format!("oci:{}:pulled", out.display()),
        ]);
        oci::layout_blobs(&out)
    };
    let mut expected = layout.blobs.clone();
    expected.sort();
    assert_eq!(pull("streamed", &server.url), expected);
    drop(server);

    // Redirected: a GET is a 307 to a presigned URL of the bucket, which serves the
    // bytes; HEAD and ranges still answer here; skopeo follows the redirect.
    args.push("--blob-redirect");
    let server = Server::start_env(&m.data, &args, &garage.env());
    let layer = layout.largest();
    let blob_url = format!("{}/v2/{name}/blobs/{layer}", server.url);
    let no_follow = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = no_follow.get(&blob_url).send().await.unwrap();
    assert_eq!(r.status(), 307);
    assert_eq!(r.headers()["cache-control"], "no-store");
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.starts_with(&garage.endpoint), "{location}");
    assert!(location.contains("X-Amz-Signature="), "{location}");
    let bytes = reqwest::get(&location)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(sha256(&bytes), layer);
    let head = no_follow.head(&blob_url).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(
        head.headers()["content-length"],
        bytes.len().to_string().as_str()
    );
    let ranged = reqwest::Client::new()
        .get(&blob_url)
        .header("Range", "bytes=10-19")
        .send()
        .await
        .unwrap();
    assert_eq!(ranged.status(), 206, "the range travels with the redirect");
    assert_eq!(ranged.bytes().await.unwrap().as_ref(), &bytes[10..20]);
    assert_eq!(pull("redirected", &server.url), expected);
    // containerd's own client follows it too: every blob of every platform.
    let containerd = common::containerd::Containerd::start();
    containerd.ctr(&[
        "content",
        "fetch",
        "--plain-http",
        "--all-platforms",
        &format!(
            "{}/{name}@{index_digest}",
            server.url.trim_start_matches("http://")
        ),
    ]);
    assert_eq!(containerd.content(), expected);
    drop(server);

    // `mirror verify` and `gc` on the bucket.
    let (ok, out) = mirror_cli(&m.data, &garage, &s3, &["verify"]);
    assert!(ok && out.contains("0 corrupt, 0 missing"), "{out}");
    let (ok, out) = mirror_cli(&m.data, &garage, &s3, &["gc", "--min-age", "0s"]);
    assert!(ok && out.contains("0 blob(s)"), "{out}");
    // A blob damaged in the bucket (as a bad disk under the store would): named, then
    // removed and its image queued again by --repair.
    damage(
        &garage,
        "one-replica",
        &format!("mirror/sha256/{}", &layer[7..]),
    )
    .await;
    let (ok, out) = mirror_cli(&m.data, &garage, &s3, &["verify"]);
    assert!(!ok && out.contains(&format!("corrupt  {layer}")), "{out}");
    let (ok, out) = mirror_cli(&m.data, &garage, &s3, &["verify", "--repair"]);
    assert!(!ok && out.contains("1 image(s) queued"), "{out}");
    let (ok, out) = mirror_cli(
        &m.data,
        &garage,
        &s3,
        &["run", "--upstreams", upstreams.to_str().unwrap()],
    );
    assert!(ok, "{out}");
    let (ok, out) = mirror_cli(&m.data, &garage, &s3, &["verify"]);
    assert!(
        ok && out.contains("0 corrupt, 0 missing"),
        "after the repair: {out}"
    );
}

/// Overwrites `key` in `bucket` with other bytes, behind the blob store's back.
async fn damage(garage: &Garage, bucket: &str, key: &str) {
    use object_store::ObjectStoreExt;
    let store = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_endpoint(&garage.endpoint)
        .with_region(&garage.region)
        .with_access_key_id(&garage.key_id)
        .with_secret_access_key(&garage.secret)
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .build()
        .unwrap();
    let path = object_store::path::Path::from(key);
    let mut bytes = store
        .get(&path)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    bytes[0] ^= 0xff;
    store.put(&path, bytes.into()).await.unwrap();
}

#[test]
fn redirects_need_a_bucket_and_s3_settings_need_s3() {
    let dir = tempfile::tempdir().unwrap();
    let serve = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_marketplace"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .args(args)
            .env("MARKETPLACE_MIRROR", "off")
            .stdout(Stdio::null())
            .output()
            .unwrap()
    };
    let out = serve(&["--blob-redirect"]);
    assert!(!out.status.success());
    assert!(
        common::output_text(&out).contains("--blob-redirect needs an s3:// --blob-store"),
        "{}",
        common::output_text(&out)
    );
    let out = serve(&["--blob-region", "garage"]);
    assert!(
        common::output_text(&out).contains("apply to an s3:// --blob-store only"),
        "{}",
        common::output_text(&out)
    );
    let out = serve(&[
        "--blob-store",
        "s3://ok-bucket",
        "--blob-endpoint",
        "https://key:hunter2@s3.example",
    ]);
    let text = common::output_text(&out);
    assert!(
        !out.status.success() && text.contains("holds credentials") && !text.contains("hunter2"),
        "{text}"
    );
}
