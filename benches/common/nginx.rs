//! nginx (Debian `nginx-light`) as the static-file peer of the serve and registry
//! benchmarks: a child process (`daemon off`) with one listener per server block,
//! stopped when dropped.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::BoxError;

pub(crate) struct Nginx {
    child: Child,
    /// `http://127.0.0.1:PORT`, one per server block given to [`Nginx::start`].
    pub(crate) bases: Vec<String>,
}

impl Nginx {
    /// Starts nginx with `http` inside its `http` block and one `server` block per entry
    /// of `servers` (their insides; the listener is added). Settings that make nginx
    /// fast on static files are always on: fairness means nginx at its best.
    pub(crate) fn start(dir: &Path, http: &str, servers: &[String]) -> Result<Nginx, BoxError> {
        let prefix = dir.join("nginx");
        std::fs::create_dir_all(prefix.join("logs"))?;
        // Ports free right now; nginx binds them a moment later.
        let listeners: Vec<std::net::TcpListener> = servers
            .iter()
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
            .collect::<Result<_, _>>()?;
        let ports: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect::<Result<_, _>>()?;
        drop(listeners);
        let blocks: String = servers
            .iter()
            .zip(&ports)
            .map(|(inside, port)| {
                format!("    server {{\n        listen 127.0.0.1:{port} reuseport;\n        {inside}\n    }}\n")
            })
            .collect();
        let conf = format!(
            "worker_processes auto;
user root;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
events {{ worker_connections 4096; }}
http {{
    types {{ application/json json; application/yaml yaml; }}
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 65;
    keepalive_requests 1000000;
    open_file_cache max=20000 inactive=60s;
    open_file_cache_valid 60s;
    etag on;
    client_body_temp_path {prefix}/body;
    {http}
{blocks}}}
",
            prefix = prefix.display(),
        );
        let conf_path = prefix.join("nginx.conf");
        std::fs::write(&conf_path, conf)?;
        let child = Command::new("nginx")
            .arg("-p")
            .arg(&prefix)
            .arg("-c")
            .arg(&conf_path)
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting nginx (Debian package `nginx-light`): {e}"))?;
        let nginx = Nginx {
            child,
            bases: ports
                .iter()
                .map(|p| format!("http://127.0.0.1:{p}"))
                .collect(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        for port in ports {
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                if Instant::now() > deadline {
                    return Err(format!("nginx did not listen on port {port}").into());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(nginx)
    }
}

impl Drop for Nginx {
    /// SIGTERM, so the master stops its workers too (SIGKILL would leave them running).
    fn drop(&mut self) {
        let stopped = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if !stopped {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
