//! Real OCI parts for the mirror tests: Debian's `docker-registry` (distribution 2.8) as
//! the upstream, on a loopback port, optionally with TLS (a CA made here with `openssl`)
//! and basic auth; images built offline as OCI layouts (a two-platform index, a
//! cosign-style signature manifest); `skopeo` as the independent client.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// `alice` / `secret1` as a bcrypt htpasswd line (what `htpasswd -B` writes).
const HTPASSWD: &str = "alice:$2y$05$W25xvC.KibMks/hT.nmlK.aXDFasgr8bEJdJP3Hqm5CzEUqljB1r.\n";
pub const USER: &str = "alice";
pub const PASSWORD: &str = "secret1";

/// A running `docker-registry`, stopped when dropped.
pub struct Upstream {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The registry's storage folder (blobs under `docker/registry/v2/blobs`).
    pub storage: PathBuf,
    /// With TLS: a folder holding only `ca.crt`, for skopeo's `--*-cert-dir`.
    pub cert_dir: Option<PathBuf>,
}

/// TLS material for 127.0.0.1: a CA and a server certificate it signed.
pub struct Tls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Tls {
    pub fn make(dir: &Path) -> Tls {
        std::fs::create_dir_all(dir).unwrap();
        let run = |args: &[&str]| openssl(dir, args);
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "30",
            "-subj",
            "/CN=test-ca",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ]);
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "30",
            "-out",
            "server.crt",
            "-extfile",
            "server.ext",
        ]);
        Tls {
            ca: dir.join("ca.crt"),
            cert: dir.join("server.crt"),
            key: dir.join("server.key"),
        }
    }
}

impl Upstream {
    /// Starts a registry storing under `dir`; with `tls`, over HTTPS with basic auth
    /// (`USER`/`PASSWORD`).
    pub fn start(dir: &Path, tls: Option<&Tls>) -> Upstream {
        std::fs::create_dir_all(dir).unwrap();
        let storage = dir.join("storage");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n  maintenance:\n    uploadpurging:\n      enabled: false\nhttp:\n  addr: 127.0.0.1:0\n  secret: test-only\n",
            storage.display()
        );
        let mut cert_dir = None;
        if let Some(tls) = tls {
            std::fs::write(dir.join("htpasswd"), HTPASSWD).unwrap();
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\nauth:\n  htpasswd:\n    realm: test\n    path: {}\n",
                tls.cert.display(),
                tls.key.display(),
                dir.join("htpasswd").display()
            ));
            let certs = dir.join("certs");
            std::fs::create_dir_all(&certs).unwrap();
            std::fs::copy(&tls.ca, certs.join("ca.crt")).unwrap();
            cert_dir = Some(certs);
        }
        std::fs::write(dir.join("config.yml"), config).unwrap();
        let log = dir.join("registry.log");
        // The registry logs every request; a file never fills up as a pipe would.
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.join("config.yml"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("docker-registry runs (Debian package docker-registry)");
        let started = Instant::now();
        let addr = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(rest) = text.split("listening on ").nth(1) {
                break rest.split(['"', ',']).next().unwrap().trim().to_owned();
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "docker-registry did not start: {text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Upstream {
            child,
            addr,
            storage,
            cert_dir,
        }
    }

    /// The registry's file for a blob, to damage it as a faulty disk or a hostile
    /// registry would.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// Pushes the image tagged `tag` in the layout at `layout` to `repo:tag` here, with
    /// `skopeo copy --all --preserve-digests`.
    pub fn push(&self, layout: &Path, tag: &str, repo: &str) {
        let src = format!("oci:{}:{tag}", layout.display());
        let to = format!("docker://{}/{repo}:{tag}", self.addr);
        let dest = self.dest_args();
        let mut args: Vec<&str> = vec!["copy", "--all", "--preserve-digests"];
        args.extend(dest.iter().map(String::as_str));
        args.extend([src.as_str(), to.as_str()]);
        skopeo(&args);
    }

    /// skopeo's arguments to write to this registry.
    pub fn dest_args(&self) -> Vec<String> {
        match &self.cert_dir {
            None => vec!["--dest-tls-verify=false".into()],
            Some(certs) => vec![
                format!("--dest-cert-dir={}", certs.display()),
                format!("--dest-creds={USER}:{PASSWORD}"),
            ],
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `skopeo` (Debian package) with an accept-anything trust policy; panics with its
/// output when it fails.
pub fn skopeo(args: &[&str]) -> String {
    let o = Command::new("skopeo")
        .arg("--insecure-policy")
        .args(args)
        .output()
        .expect("skopeo runs (Debian package skopeo)");
    assert!(
        o.status.success(),
        "skopeo {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// An OCI image layout being written.
pub struct Layout {
    pub dir: PathBuf,
    /// Every blob written (manifests included), by digest.
    pub blobs: Vec<String>,
}

impl Layout {
    pub fn new(dir: &Path) -> Layout {
        std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
        std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        Layout {
            dir: dir.to_owned(),
            blobs: Vec::new(),
        }
    }

    pub fn blob(&mut self, bytes: &[u8]) -> String {
        let d = digest(bytes);
        std::fs::write(self.dir.join("blobs/sha256").join(&d[7..]), bytes).unwrap();
        if !self.blobs.contains(&d) {
            self.blobs.push(d.clone());
        }
        d
    }

    /// The size of a blob of this layout.
    pub fn size(&self, digest: &str) -> u64 {
        std::fs::metadata(self.dir.join("blobs/sha256").join(&digest[7..]))
            .unwrap()
            .len()
    }

    /// The largest blob (a layer), by digest.
    pub fn largest(&self) -> String {
        self.blobs
            .iter()
            .max_by_key(|d| self.size(d))
            .unwrap()
            .clone()
    }

    /// Writes `index.json` naming `manifest` (of `media_type`) as `tag`.
    pub fn tag(&self, tag: &str, media_type: &str, manifest: &[u8]) {
        let index = serde_json::json!({
            "schemaVersion": 2,
            "manifests": [{
                "mediaType": media_type,
                "digest": digest(manifest),
                "size": manifest.len(),
                "annotations": {"org.opencontainers.image.ref.name": tag},
            }],
        });
        std::fs::write(self.dir.join("index.json"), index.to_string()).unwrap();
    }
}

/// A definition's YAML pinning `image` (`repo@sha256:...`) instead of its own.
pub fn pin_image(yaml: &str, image: &str) -> String {
    yaml.lines()
        .map(|l| {
            if l.trim_start().starts_with("image:") {
                format!("  image: {image}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect()
}

/// A tar archive of one file, as a layer holds it.
fn tar(name: &str, data: &[u8]) -> Vec<u8> {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    let octal = |field: &mut [u8], value: usize| {
        let text = format!("{value:0width$o}\0", width = field.len() - 1);
        field.copy_from_slice(text.as_bytes());
    };
    octal(&mut h[100..108], 0o644);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], data.len());
    octal(&mut h[136..148], 0);
    h[148..156].copy_from_slice(b"        ");
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512 + 1024, 0);
    out
}

/// Bytes that do not compress, so a layer is as large as asked (xorshift: fast even in
/// a debug build, deterministic per seed).
pub fn noise(seed: &str, len: usize) -> Vec<u8> {
    let mut x = u64::from_le_bytes(Sha256::digest(seed.as_bytes())[..8].try_into().unwrap()) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A two-platform image (linux/amd64 and linux/arm64), each one layer of about
/// `layer_bytes`, written to `dir` and tagged `tag`. Returns the layout and the index.
pub fn two_platform(dir: &Path, tag: &str, layer_bytes: usize) -> (Layout, Vec<u8>) {
    image(dir, tag, &["amd64", "arm64"], layer_bytes)
}

/// An image index over one linux platform per entry of `arches`, each one layer of
/// about `layer_bytes`.
pub fn image(dir: &Path, tag: &str, arches: &[&str], layer_bytes: usize) -> (Layout, Vec<u8>) {
    let mut layout = Layout::new(dir);
    let mut entries = Vec::new();
    for &arch in arches {
        let archive = tar(&format!("hello-{arch}.txt"), &noise(arch, layer_bytes));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::none());
        gz.write_all(&archive).unwrap();
        let layer = gz.finish().unwrap();
        let config = serde_json::json!({
            "architecture": arch,
            "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": [digest(&archive)]},
        })
        .to_string()
        .into_bytes();
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": layout.blob(&config), "size": config.len()},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layout.blob(&layer), "size": layer.len()}],
        })
        .to_string()
        .into_bytes();
        entries.push(serde_json::json!({
            "mediaType": OCI_MANIFEST,
            "digest": layout.blob(&manifest),
            "size": manifest.len(),
            "platform": {"architecture": arch, "os": "linux"},
        }));
    }
    let index =
        serde_json::json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries})
            .to_string()
            .into_bytes();
    layout.blob(&index);
    layout.tag(tag, OCI_INDEX, &index);
    (layout, index)
}

/// A cosign-style signature of `image` (a digest), as cosign stores it: a manifest whose
/// layer is the simple-signing payload, its signature in an annotation, tagged
/// `sha256-<hex>.sig`. Returns the layout, the tag and the manifest.
pub fn signature(
    dir: &Path,
    repository: &str,
    image: &str,
    sign: impl Fn(&[u8]) -> String,
) -> (Layout, String, Vec<u8>) {
    let mut layout = Layout::new(dir);
    let payload = serde_json::json!({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": image},
            "type": "cosign container image signature",
        },
        "optional": null,
    })
    .to_string()
    .into_bytes();
    let config = br#"{"architecture":"","config":{},"created":"0001-01-01T00:00:00Z","history":[{"created":"0001-01-01T00:00:00Z"}],"os":"","rootfs":{"type":"layers","diff_ids":[]}}"#.to_vec();
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": layout.blob(&config), "size": config.len()},
        "layers": [{
            "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
            "digest": layout.blob(&payload),
            "size": payload.len(),
            "annotations": {"dev.cosignproject.cosign/signature": sign(&payload)},
        }],
    })
    .to_string()
    .into_bytes();
    layout.blob(&manifest);
    let tag = format!("sha256-{}.sig", &image[7..]);
    layout.tag(&tag, OCI_MANIFEST, &manifest);
    (layout, tag, manifest)
}

/// Damages a file as a faulty disk or a hostile registry would: one byte flipped.
pub fn flip_byte(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0xff;
    std::fs::write(path, &bytes).unwrap();
}

/// The digests of every blob in a layout folder.
pub fn layout_blobs(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir.join("blobs/sha256"))
        .unwrap()
        .map(|e| format!("sha256:{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    out.sort();
    out
}

/// Runs `openssl` (Debian package) in `dir`; panics with its output when it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let o = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// An ECDSA P-256 key pair as cosign makes them (`openssl` here): private PEM, public PEM.
pub fn cosign_key(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let private = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub"));
    let run = |args: &[&str]| openssl(dir, args);
    run(&[
        "ecparam",
        "-name",
        "prime256v1",
        "-genkey",
        "-noout",
        "-out",
        private.to_str().unwrap(),
    ]);
    run(&[
        "ec",
        "-in",
        private.to_str().unwrap(),
        "-pubout",
        "-out",
        public.to_str().unwrap(),
    ]);
    (private, public)
}

/// `payload` signed as `cosign sign` does (ECDSA over its sha256, DER), in base64.
pub fn cosign_sign(private: &Path, payload: &[u8]) -> String {
    let mut child = Command::new("openssl")
        .args(["dgst", "-sha256", "-sign"])
        .arg(private)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("openssl runs");
    child.stdin.take().unwrap().write_all(payload).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    base64_encode(&out.stdout)
}

/// Standard base64 with padding (what cosign annotations and Basic credentials use).
pub fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Pushes `manifest` (and its `blobs`) to `repo:reference` with the distribution API
/// itself: monolithic blob uploads, then the manifest. For artifacts skopeo does not copy.
pub async fn push_raw(
    addr: &str,
    repo: &str,
    reference: &str,
    media_type: &str,
    manifest: &[u8],
    blobs: &[&[u8]],
) {
    let http = reqwest::Client::new();
    for blob in blobs {
        let r = http
            .post(format!("http://{addr}/v2/{repo}/blobs/uploads/"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        let location = r.headers()["location"].to_str().unwrap().to_owned();
        let url = if location.starts_with("http") {
            location
        } else {
            format!("http://{addr}{location}")
        };
        let sep = if url.contains('?') { '&' } else { '?' };
        let r = http
            .put(format!("{url}{sep}digest={}", digest(blob)))
            .header("content-type", "application/octet-stream")
            .body(blob.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    }
    let r = http
        .put(format!("http://{addr}/v2/{repo}/manifests/{reference}"))
        .header("content-type", media_type)
        .body(manifest.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
}

/// An SBOM referrer of `subject` pushed to `addr/repo`, listed the way a registry
/// without the referrers API lists them: the OCI 1.1 tag schema (`sha256-<hex>` naming
/// an index).
pub struct Referrer {
    pub digest: String,
    pub manifest: Vec<u8>,
    pub sbom: Vec<u8>,
    pub artifact_type: &'static str,
}

pub async fn push_sbom_referrer(
    addr: &str,
    repo: &str,
    subject: &str,
    subject_size: usize,
) -> Referrer {
    let empty = b"{}".to_vec();
    let sbom = br#"{"spdxVersion":"SPDX-2.3","name":"tool"}"#.to_vec();
    let artifact_type = "application/vnd.example.sbom.v1";
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": digest(&empty), "size": 2},
        "layers": [{"mediaType": "application/spdx+json", "digest": digest(&sbom), "size": sbom.len()}],
        "subject": {"mediaType": OCI_INDEX, "digest": subject, "size": subject_size},
        "annotations": {"org.example.kind": "sbom"},
    })
    .to_string()
    .into_bytes();
    let referrer = digest(&manifest);
    push_raw(
        addr,
        repo,
        &referrer,
        OCI_MANIFEST,
        &manifest,
        &[&empty, &sbom],
    )
    .await;
    let listing = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [{
            "mediaType": OCI_MANIFEST,
            "digest": referrer,
            "size": manifest.len(),
            "artifactType": artifact_type,
            "annotations": {"org.example.kind": "sbom"},
        }],
    })
    .to_string()
    .into_bytes();
    let tag = format!("sha256-{}", &subject[7..]);
    push_raw(addr, repo, &tag, OCI_INDEX, &listing, &[]).await;
    Referrer {
        digest: referrer,
        manifest,
        sbom,
        artifact_type,
    }
}
