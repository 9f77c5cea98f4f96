//! Debian's nginx (`/usr/sbin/nginx`, installed by `.ci/run`) as the HTTP load balancer
//! in front of replicas, as a deployment would put one: round robin over loopback
//! upstreams, keepalive to them, and a request whose replica went away tried on
//! another. Its configuration, pid file, logs and temporary files all live in a
//! temporary directory, so it runs as root or not without touching `/var`; stopped
//! (with its worker) and removed when dropped.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `$NGINX_BIN` overrides: Debian installs it in `sbin`, not on every user's `PATH`.
fn binary() -> std::path::PathBuf {
    std::env::var_os("NGINX_BIN")
        .map(Into::into)
        .unwrap_or_else(|| "/usr/sbin/nginx".into())
}

pub struct Nginx {
    child: Child,
    dir: tempfile::TempDir,
    /// Where it listens, on loopback.
    pub addr: SocketAddr,
}

impl Nginx {
    /// nginx balancing over `upstreams`, listening on a free loopback port once this
    /// returns.
    pub fn start(upstreams: &[SocketAddr]) -> Nginx {
        assert!(!upstreams.is_empty(), "nginx needs at least one upstream");
        let dir = tempfile::tempdir().expect("a temporary directory for nginx");
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding a free loopback port");
        let addr = listener.local_addr().expect("a bound port");
        let d = dir.path().display();
        // `max_fails=0`: never mark a replica down. With nginx's default (down for 10 s
        // after one failure), a replica killed and started again would get no traffic
        // for those seconds, and a 503 from each of the others in the same window would
        // leave no live upstream (a 502 to the client); a dead replica costs one refused
        // connection on loopback instead. ingress-nginx's default is the same.
        let servers: String = upstreams
            .iter()
            .map(|u| format!("        server {u} max_fails=0;\n"))
            .collect();
        // As root nginx starts its worker as `nobody` unless told otherwise, and
        // `nobody` cannot enter the temporary directory (mode 0700) to buffer a request
        // body; not as root, `user` is ignored with a warning, so it is left out.
        let user = if super::pg::is_root() {
            "user root;\n"
        } else {
            ""
        };
        // Retries (`proxy_next_upstream`): a request is tried on another upstream when
        // the connection failed or timed out, or the upstream answered 502 or 503, up
        // to 3 upstreams. Without `non_idempotent`: a POST (a publish) moves on only
        // while it has not been sent, that is when its replica refused or did not
        // accept the connection (a killed replica) – always safe, nothing reached a
        // backend. One that was sent and then lost its replica, or was answered 502/503,
        // goes back to the client as that 502/503, because the replica may have
        // committed it before dying; the CLI then signs again on fresh metadata and
        // retries (`UploadError::retry_reason`), which a blind re-send by nginx would
        // only turn into a 409 for a publish that in fact succeeded.
        // `proxy_request_buffering on`: the whole body is read before a replica is
        // chosen, so it can be sent again to the next (with it off nginx streams the
        // body and cannot retry once it started). `proxy_buffering off`: downloads
        // stream through as replicas send them. `Connection ""` with HTTP/1.1 keeps the
        // `keepalive` connections to replicas open.
        let conf = format!(
            "{user}daemon off;
master_process on;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{}}
http {{
    log_format upstreams '$remote_addr \"$request\" $status upstream=$upstream_addr upstream_status=$upstream_status $request_time';
    access_log {d}/access.log upstreams;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    upstream marketplace {{
{servers}        keepalive 16;
    }}
    server {{
        listen {addr};
        client_max_body_size 64m;
        location / {{
            proxy_pass http://marketplace;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_next_upstream error timeout http_502 http_503;
            proxy_next_upstream_tries 3;
            proxy_connect_timeout 1s;
            proxy_buffering off;
            proxy_request_buffering on;
        }}
    }}
}}
"
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("writing nginx.conf");
        let stderr = std::fs::File::create(dir.path().join("stderr.log"))
            .expect("creating nginx's stderr file");
        drop(listener);
        let bin = binary();
        let child = Command::new(&bin)
            // `-p`: relative paths resolve in the directory; `-e`: errors before the
            // configuration is read go there too, not to the compiled-in log.
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "starting nginx ({}): {e}: run `bash .ci/run` once (it installs Debian's nginx)",
                    bin.display()
                )
            });
        let mut nginx = Nginx { child, dir, addr };
        nginx.wait_ready();
        nginx
    }

    /// Waits until it accepts connections (about 10 ms); its logs in the panic if it
    /// exits or takes 20 s.
    fn wait_ready(&mut self) {
        let started = Instant::now();
        while TcpStream::connect(self.addr).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("nginx exited ({status}) before listening:\n{}", self.logs());
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "nginx did not listen on {} within 20 s:\n{}",
                self.addr,
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Its stderr, error log and access log (one line per request, with the upstreams
    /// tried and their statuses), for failure messages.
    pub fn logs(&self) -> String {
        let read = |name: &str| {
            std::fs::read_to_string(self.dir.path().join(name))
                .unwrap_or_else(|e| format!("(none: {e})"))
        };
        format!(
            "== stderr\n{}== error.log\n{}== access.log\n{}",
            read("stderr.log"),
            read("error.log"),
            read("access.log")
        )
    }

    /// The directory holding its configuration and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Nginx {
    /// SIGTERM, a fast shutdown in which the master stops its worker too (SIGKILL to
    /// the master alone would leave the worker running, holding the port); after 5 s,
    /// SIGKILL to the worker and the master. (Not a process group of its own: then a
    /// Ctrl-C of `cargo test` would not reach it.)
    fn drop(&mut self) {
        let pid = self.child.id();
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for worker in children(pid) {
            let _ = Command::new("kill")
                .args(["-KILL", &worker.to_string()])
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The processes whose parent is `pid` (nginx's worker), from `/proc/PID/stat`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let child: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // `PID (COMM) STATE PPID ...`; COMM may hold spaces and parentheses.
            let ppid: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == pid).then_some(child)
        })
        .collect()
}
