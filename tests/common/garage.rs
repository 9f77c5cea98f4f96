//! A throwaway single-node Garage (an S3-compatible object store; `garage` 2.5.0, built
//! once by `.ci/run` into `.venv/garage`): its metadata and data in a temporary
//! directory, every port on loopback picked free by the OS, one access key, buckets made
//! on demand; killed and removed when dropped. The S3 API is reached path-style
//! (`http://127.0.0.1:PORT/BUCKET/KEY`) with region `garage`.
//!
//! [`Garage::start`] (server listening, layout of one node applied, key made) takes
//! about 0.2 s on the 2-core CI machine (measured: 192 to 236 ms over 5 starts; most of
//! it the CLI's `layout assign` + `apply`, 120 ms; listening after 8 ms, healthy 8 ms
//! after the layout); each [`Garage::create_bucket`] about 0.1 s (two CLI calls).
//!
//! What Garage 2.5 does that tests may lean on, found by hand: presigned (query-string
//! SigV4) GETs work path-style, ranges included (206); an unsigned request is refused
//! with 403 (`AccessDenied`, "Garage does not support anonymous access yet"), but an
//! *expired* presigned URL with 400 (`InvalidRequest`, "Date is too old"), not AWS's
//! 403. Incomplete multipart uploads are listed by S3's `ListMultipartUploads`, counted
//! by `garage bucket info NAME` ("Unfinished uploads") and aborted by `garage bucket
//! cleanup-incomplete-uploads --older-than 0s NAME` (see [`Garage::cli`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// The server the tests of one binary share while any of them runs; the last to finish
/// stops it (statics are never dropped, so a plain static would leave it running).
static SHARED: Mutex<Weak<Garage>> = Mutex::new(Weak::new());

/// A server shared with the other tests of this binary running now: each test makes
/// buckets of its own ([`Garage::create_bucket`]) with names no other test uses.
pub fn shared() -> Arc<Garage> {
    let mut slot = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(garage) = slot.upgrade() {
        return garage;
    }
    let garage = Arc::new(Garage::start());
    *slot = Arc::downgrade(&garage);
    garage
}

/// The name of the one access key, allowed on every bucket [`Garage::create_bucket`] makes.
const KEY_NAME: &str = "test-key";

/// How long the server may take to listen and then to become healthy; far more than it
/// needs (well under a second), so that only a broken server fails it.
const STARTUP: Duration = Duration::from_secs(30);

pub struct Garage {
    child: Child,
    dir: tempfile::TempDir,
    /// `DIR/garage.toml`, given to every `garage` command with `-c`.
    config: PathBuf,
    /// The admin API, whose `/health` says when the node is up and its layout applied.
    admin: SocketAddr,
    /// The RPC port, which the CLI's layout commands connect to.
    rpc: SocketAddr,
    /// `http://127.0.0.1:PORT`: the S3 API, reached path-style (`/BUCKET/KEY`).
    pub endpoint: String,
    /// The region requests must be signed for (`s3_region` of the configuration).
    pub region: String,
    /// The access key's ID (`GK` and 24 hex digits) and secret (64 hex digits).
    pub key_id: String,
    pub secret: String,
}

/// `$GARAGE_BIN`, else the one `.ci/run` builds into `.venv/garage`, else `garage` on
/// `PATH`.
fn binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("GARAGE_BIN") {
        return PathBuf::from(bin);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/garage/bin/garage");
    if venv.is_file() {
        return venv;
    }
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("garage"))
                .find(|bin| bin.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "Garage is not installed (not at {}, nor on PATH, and GARAGE_BIN is unset): run `bash .ci/run` once",
                venv.display()
            )
        })
}

/// A loopback port free now, from the OS. The listener is returned, not dropped, so
/// that the ports of one server differ; the caller drops them just before Garage binds
/// them.
fn free_port() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a free loopback port");
    let port = listener.local_addr().expect("a bound port").port();
    (listener, port)
}

/// 32 random bytes in hex: the RPC secret nodes of a cluster share (the only node here,
/// and its own CLI, which talks to it over RPC).
fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("reading /dev/urandom");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Garage {
    /// A server of its own, set up and ready: one node with a layout, one key.
    pub fn start() -> Garage {
        let dir = tempfile::tempdir().expect("a temporary directory for Garage");
        let ((rpc_l, rpc), (s3_l, s3), (admin_l, admin)) = (free_port(), free_port(), free_port());
        let config = dir.path().join("garage.toml");
        let region = "garage";
        // `{:?}` quotes the paths as TOML basic strings. `compression_level = "none"`:
        // zstd would only spend the 2 cores on test blobs (mostly random bytes anyway).
        // No `root_domain`: tests use path-style requests only, so no vhost-style
        // bucket names need resolving. No `admin_token`: `/health` needs none, and the
        // CLI talks RPC.
        let toml = format!(
            r#"metadata_dir = {meta:?}
data_dir = {data:?}
db_engine = "lmdb"
replication_factor = 1
compression_level = "none"
rpc_bind_addr = "127.0.0.1:{rpc}"
rpc_public_addr = "127.0.0.1:{rpc}"
rpc_secret = "{secret}"

[s3_api]
api_bind_addr = "127.0.0.1:{s3}"
s3_region = "{region}"

[admin]
api_bind_addr = "127.0.0.1:{admin}"
"#,
            meta = dir
                .path()
                .join("meta")
                .to_str()
                .expect("a UTF-8 temporary path"),
            data = dir
                .path()
                .join("data")
                .to_str()
                .expect("a UTF-8 temporary path"),
            secret = random_hex(),
        );
        std::fs::write(&config, toml).expect("writing garage.toml");
        let log = std::fs::File::create(dir.path().join("garage.log"))
            .expect("creating Garage's log file");
        drop((rpc_l, s3_l, admin_l));
        let bin = binary();
        let child = Command::new(&bin)
            .arg("-c")
            .arg(&config)
            .arg("server")
            // Plain text in the log file the panics below show.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("duplicating the log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "starting Garage ({}): {e}: run `bash .ci/run` once (or fix GARAGE_BIN)",
                    bin.display()
                )
            });
        // Owned from here on, so a failed setup below still kills the server (Drop).
        let mut garage = Garage {
            child,
            dir,
            config,
            admin: SocketAddr::from(([127, 0, 0, 1], admin)),
            rpc: SocketAddr::from(([127, 0, 0, 1], rpc)),
            endpoint: format!("http://127.0.0.1:{s3}"),
            region: region.to_owned(),
            key_id: String::new(),
            secret: String::new(),
        };
        garage.set_up();
        garage
    }

    /// Waits for the server, gives its one node a role (a layout is what makes a fresh
    /// node store anything), waits until it says it is healthy, and makes the key.
    fn set_up(&mut self) {
        let started = Instant::now();
        // The admin API can listen before the RPC port does, and the CLI's layout
        // commands go through RPC (a busy machine showed "Connection refused" there).
        while TcpStream::connect(self.admin).is_err() || TcpStream::connect(self.rpc).is_err() {
            self.still_starting(started, "listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        // `node id -q` prints `HEX@127.0.0.1:PORT` alone on stdout (its advice on
        // connecting other nodes goes to stderr); `layout assign` takes the hex, whole
        // or a prefix. (`status` shows a 16-digit prefix in a table: harder to parse.)
        let node = self.cli(&["node", "id", "-q"]);
        let node = node
            .trim()
            .split('@')
            .next()
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| panic!("`garage node id -q` printed no node ID: {node:?}"))
            .to_owned();
        self.cli(&["layout", "assign", "-z", "dc1", "-c", "1G", &node]);
        self.cli(&["layout", "apply", "--version", "1"]);
        // 503 ("Quorum is not available") until the layout is in force, then 200.
        while !self.healthy() {
            self.still_starting(started, "become healthy after its layout was applied");
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = self.cli(&["key", "create", KEY_NAME]);
        // ==== ACCESS KEY INFORMATION ====
        // Key ID:              GK2a640f75b36a03fac0551953
        // Key name:            test-key
        // Secret key:          f4435f0fa53ffeb6e1388a3a33d08eac17818b5aef96fcef6c18992bf5955ab1
        let field = |name: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| panic!("no `{name}` in `garage key create`'s output: {out}"))
        };
        self.key_id = field("Key ID:");
        self.secret = field("Secret key:");
    }

    /// Panics, with the server's log, if it exited or `STARTUP` has passed since
    /// `started` before it could `what`.
    fn still_starting(&mut self, started: Instant, what: &str) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "Garage exited ({status}) before it could {what}:\n{}",
                self.log()
            );
        }
        assert!(
            started.elapsed() < STARTUP,
            "Garage did not {what} within {STARTUP:?}:\n{}",
            self.log()
        );
    }

    /// Whether the admin API's `GET /health` answers 200: the node is up and every
    /// partition has its quorum (one node here). A plain HTTP/1.0 exchange, so that
    /// the harness needs no HTTP client of its own.
    fn healthy(&self) -> bool {
        let Ok(mut conn) = TcpStream::connect(self.admin) else {
            return false;
        };
        let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
        let mut reply = String::new();
        conn.write_all(b"GET /health HTTP/1.0\r\nHost: garage\r\n\r\n")
            .is_ok()
            && conn.read_to_string(&mut reply).is_ok()
            && reply
                .lines()
                .next()
                .is_some_and(|status| status.split_whitespace().nth(1) == Some("200"))
    }

    /// The server's log so far (stdout and stderr), for failure messages.
    fn log(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("garage.log"))
            .unwrap_or_else(|e| format!("(no log: {e})"));
        // Its last lines: the reason is there, the start-up chatter before it is long.
        let start = log.len().saturating_sub(8000);
        let start = (start..log.len())
            .find(|&i| log.is_char_boundary(i))
            .unwrap_or(0);
        log[start..].to_owned()
    }

    /// `garage -c garage.toml ARGS` (the CLI, which talks to the server over RPC): its
    /// stdout, or what it printed on failing.
    pub fn try_cli(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(binary())
            .arg("-c")
            .arg(&self.config)
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running `garage {}`: {e}", args.join(" ")))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "`garage {}` failed ({}): {}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            ))
        }
    }

    /// [`Garage::try_cli`] that must succeed, e.g. `cli(&["bucket", "info", NAME])`
    /// (whose "Unfinished uploads" counts incomplete multipart uploads) or
    /// `cli(&["bucket", "cleanup-incomplete-uploads", "--older-than", "0s", NAME])`.
    pub fn cli(&self, args: &[&str]) -> String {
        self.try_cli(args)
            .unwrap_or_else(|e| panic!("{e}\nGarage's log:\n{}", self.log()))
    }

    /// Creates bucket `name` (3 to 63 lowercase letters, digits, `-`, `.`: S3's rules)
    /// and allows the key to read, write and own it (owner: it may delete objects and
    /// manage uploads). A name already taken panics: on the shared server that is two
    /// tests sharing one bucket by mistake.
    pub fn create_bucket(&self, name: &str) {
        if let Err(e) = self.try_cli(&["bucket", "create", name]) {
            if e.contains("BucketAlreadyExists") {
                panic!(
                    "bucket {name} exists already on this Garage: give each test a bucket name of its own ({e})"
                );
            }
            panic!("{e}\nGarage's log:\n{}", self.log());
        }
        self.cli(&[
            "bucket", "allow", "--read", "--write", "--owner", name, "--key", KEY_NAME,
        ]);
    }

    /// The key and region as the AWS variables a child process (`marketplace serve`,
    /// `marketplace mirror`) reads; the endpoint it is given as an argument.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", self.key_id.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret.clone()),
            ("AWS_REGION", self.region.clone()),
        ]
    }
}

impl Drop for Garage {
    /// SIGKILL: nothing in it is worth a clean shutdown, the directory goes next.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
