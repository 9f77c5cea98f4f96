//! A throwaway PostgreSQL server from Debian's binaries (`postgresql`, installed by
//! `.ci/run`): `initdb` into a temporary directory, listening only on a unix socket
//! there, `fsync` off; stopped (fast shutdown) and removed when dropped. PostgreSQL
//! refuses to run as root, so as root it runs as the `postgres` user the Debian
//! package creates.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// The server the tests of one binary share while any of them runs; the last to finish
/// stops it (statics are never dropped, so a plain static would leave it running).
static SHARED: Mutex<Weak<Postgres>> = Mutex::new(Weak::new());
static NEXT_DATABASE: AtomicU64 = AtomicU64::new(0);

/// A server shared with the other tests of this binary running now.
pub fn shared() -> Arc<Postgres> {
    let mut slot = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(pg) = slot.upgrade() {
        return pg;
    }
    let pg = Arc::new(Postgres::start());
    *slot = Arc::downgrade(&pg);
    pg
}

pub struct Postgres {
    child: Child,
    dir: tempfile::TempDir,
    /// The `-c` settings it was started with, to start it again the same way.
    settings: Vec<String>,
    /// With [`Postgres::start_tls`]: the loopback port, and the CA that signed the
    /// server's certificate.
    pub tls: Option<(u16, PathBuf)>,
}

/// The newest installed server's `bin` directory (`$PG_BIN` overrides).
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is not installed (/usr/lib/postgresql): run `bash .ci/run` once")
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin)| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("no PostgreSQL server binaries under /usr/lib/postgresql")
        .1
}

/// Whether this process runs as root (servers that refuse root run as another user).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|v| v.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false)
}

/// `program` as the user PostgreSQL runs as: ourselves, or `postgres` when we are root
/// (`setpriv` executes in place, so the child's pid is the program's own).
fn command(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=postgres", "--regid=postgres", "--init-groups"])
            .arg(program);
        c
    } else {
        Command::new(program)
    }
}

impl Postgres {
    pub fn start() -> Postgres {
        Postgres::launch(false)
    }

    /// A server that also listens on a loopback TCP port and accepts connections there
    /// only over TLS (`hostssl` alone in `pg_hba.conf`), with a certificate for
    /// `127.0.0.1` signed by a CA of its own (made with `openssl`).
    pub fn start_tls() -> Postgres {
        Postgres::launch(true)
    }

    fn launch(tls: bool) -> Postgres {
        let bin = bin_dir();
        let dir = tempfile::tempdir().unwrap();
        if is_root() {
            let out = Command::new("chown")
                .arg("postgres:postgres")
                .arg(dir.path())
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        }
        let data = dir.path().join("data");
        let out = command(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut extra = vec!["listen_addresses=".to_owned()];
        let mut tls_info = None;
        if tls {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let ca = certificates(dir.path());
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
            )
            .unwrap();
            let certs = dir.path().join("certs");
            extra = vec![
                "listen_addresses=127.0.0.1".to_owned(),
                format!("port={port}"),
                "ssl=on".to_owned(),
                format!("ssl_cert_file={}", certs.join("server.crt").display()),
                format!("ssl_key_file={}", certs.join("server.key").display()),
            ];
            tls_info = Some((port, ca));
        }
        let pg = Postgres {
            child: spawn(dir.path(), &extra),
            dir,
            settings: extra,
            tls: tls_info,
        };
        pg.wait_ready();
        pg
    }

    fn wait_ready(&self) {
        let started = Instant::now();
        loop {
            let ready = Command::new(bin_dir().join("pg_isready"))
                .arg("-h")
                .arg(self.dir.path())
                .args(["-p", &self.port().to_string()])
                .arg("-q")
                .status()
                .unwrap();
            if ready.success() {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "PostgreSQL did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts a server stopped by [`Postgres::stop`] again, on the same data, socket
    /// and port.
    pub fn start_again(&mut self) {
        self.child = spawn(self.dir.path(), &self.settings);
        self.wait_ready();
    }

    /// Stops the server: fast shutdown, every client's connection closed.
    pub fn stop(&mut self) {
        // Fast shutdown: SIGINT ends the server and its backends cleanly.
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }

    /// The port its socket file is named after (5432 unless it listens on TCP).
    fn port(&self) -> u16 {
        self.tls.as_ref().map_or(5432, |(port, _)| *port)
    }

    /// A URL of a new, empty database of its own.
    pub async fn fresh(&self) -> String {
        let n = NEXT_DATABASE.fetch_add(1, Ordering::Relaxed);
        self.database(&format!("test{n}")).await
    }

    /// A URL of database `name` (created first unless it is `postgres`).
    pub async fn database(&self, name: &str) -> String {
        let url = |db: &str| {
            format!(
                "postgres://postgres@localhost:{}/{db}?host={}",
                self.port(),
                self.dir.path().display()
            )
        };
        if name != "postgres" {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&url("postgres")).await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
                .execute(&mut conn)
                .await
                .unwrap();
        }
        url(name)
    }
}

/// The server process on `dir`'s data directory and socket, with `settings` (`-c`).
fn spawn(dir: &Path, settings: &[String]) -> Child {
    let mut postgres = command(&bin_dir().join("postgres"));
    for setting in settings {
        postgres.args(["-c", setting]);
    }
    postgres
        .arg("-D")
        .arg(dir.join("data"))
        .arg("-k")
        .arg(dir)
        .args(["-c", "fsync=off"])
        .args(["-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A CA and a server certificate for 127.0.0.1 it signed, in `DIR/certs` (owned by
/// the server's user, key readable by it alone, as PostgreSQL requires); returns the
/// CA's path.
fn certificates(dir: &Path) -> PathBuf {
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&certs)
            .output()
            .expect("openssl (installed by .ci/run)");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    ]);
    openssl(&[
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
        certs.join("san.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(&[
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
        "1",
        "-extfile",
        "san.ext",
        "-out",
        "server.crt",
    ]);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        certs.join("server.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    if is_root() {
        let out = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&certs)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    certs.join("ca.crt")
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
    }
}
