//! Shared by the benchmarks: the real `marketplace serve` as a child process, and
//! numeric settings from the environment.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::BoxError;

const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
const LISTEN_PREFIX: &str = "marketplace listening on ";

/// The running `marketplace serve` child; killed when dropped, including on panic.
pub(crate) struct Server {
    child: Child,
    pub(crate) base: String,
}

impl Server {
    /// Logging only warnings and errors, to the benchmark's stderr.
    pub(crate) fn start(data_dir: &Path) -> Result<Server, BoxError> {
        Server::start_with(data_dir, Some("warn"), None)
    }

    /// `log` sets `MARKETPLACE_LOG` (`None`: the server's default level); the log goes
    /// to `log_file` when given, else to the benchmark's stderr.
    pub(crate) fn start_with(
        data_dir: &Path,
        log: Option<&str>,
        log_file: Option<&Path>,
    ) -> Result<Server, BoxError> {
        Server::start_args(data_dir, log, log_file, &[])
    }

    /// [`Server::start_with`] with more `serve` arguments (they override the
    /// environment, so `--mirror on` turns the mirror on).
    pub(crate) fn start_args(
        data_dir: &Path,
        log: Option<&str>,
        log_file: Option<&Path>,
        args: &[&str],
    ) -> Result<Server, BoxError> {
        Server::start_env(data_dir, log, log_file, args, &[])
    }

    /// [`Server::start_args`] with environment variables (a bucket's credentials).
    pub(crate) fn start_env(
        data_dir: &Path,
        log: Option<&str>,
        log_file: Option<&Path>,
        args: &[&str],
        env: &[(&str, String)],
    ) -> Result<Server, BoxError> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_marketplace"));
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env_remove("MARKETPLACE_LOG")
            // The built-ins pin images on the internet: benchmarks stay on loopback.
            .env("MARKETPLACE_MIRROR", "off")
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        if let Some(level) = log {
            cmd.env("MARKETPLACE_LOG", level);
        }
        match log_file {
            Some(path) => cmd.stderr(std::fs::File::create(path)?),
            None => cmd.stderr(Stdio::inherit()),
        };
        let mut child = cmd.spawn()?;
        let stdout = child.stdout.take().ok_or("child stdout was not captured")?;
        // Guard from here on: any early return kills the child.
        let mut server = Server {
            child,
            base: String::new(),
        };

        // Read the address line on a thread so a silent server cannot hang the bench;
        // the thread keeps draining stdout afterwards.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            for _ in lines {}
        });
        let line = match rx.recv_timeout(STARTUP_TIMEOUT) {
            Ok(Some(Ok(line))) => line,
            Ok(Some(Err(e))) => return Err(format!("reading the server's stdout: {e}").into()),
            Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = server.child.wait()?;
                return Err(format!("server exited before printing its address ({status})").into());
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(format!("server printed no address within {STARTUP_TIMEOUT:?}").into());
            }
        };
        let base = line
            .trim()
            .strip_prefix(LISTEN_PREFIX)
            .ok_or_else(|| format!("unexpected first line from the server: {line:?}"))?;
        server.base = base.trim_end_matches('/').to_owned();
        Ok(server)
    }

    #[allow(dead_code)] // the publish benchmark does not read memory
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU time (user and system) the server has used so far.
    #[allow(dead_code)] // only the sync benchmark splits CPU time by process
    pub(crate) fn cpu_time(&self) -> Result<Duration, BoxError> {
        cpu_time(&format!("/proc/{}/stat", self.pid()))
    }
}

/// CPU time (user and system, all threads) of the process whose `/proc/PID/stat` is at
/// `path`; `/proc/self/stat` for this one. The kernel counts in USER_HZ ticks, which
/// Linux fixes at 100 per second for this file whatever the kernel's own tick rate.
#[allow(dead_code)] // only the sync benchmark splits CPU time by process
pub(crate) fn cpu_time(path: &str) -> Result<Duration, BoxError> {
    let stat = std::fs::read_to_string(path)?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let rest = stat
        .rsplit_once(')')
        .ok_or_else(|| format!("{path}: no command name"))?
        .1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after `)`.
    let ticks = |i: usize| -> Result<u64, BoxError> {
        Ok(fields
            .get(i)
            .ok_or_else(|| format!("{path}: too few fields"))?
            .parse()?)
    };
    Ok(Duration::from_millis((ticks(11)? + ticks(12)?) * 10))
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A positive whole number from the environment, or `default`.
pub(crate) fn env_number(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .unwrap_or_else(|| panic!("{name}={v:?} is not a positive whole number")),
        _ => default,
    }
}

/// The exit status every benchmark reports: 0 when every target was met, 1 when one was
/// missed (the last line reads `RESULT: FAIL`), 2 when the benchmark itself failed.
pub fn exit_status(result: Result<bool, BoxError>) -> std::process::ExitCode {
    match result {
        Ok(true) => {
            println!("\nRESULT: PASS");
            std::process::ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("\nRESULT: FAIL");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("benchmark error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

/// The median of `v` (the upper one of an even count).
#[allow(dead_code)] // the registry and replicas benchmarks
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One download of `url` to /dev/null with curl, following a redirect; MiB/s. The whole
/// blob must arrive.
#[allow(dead_code)] // the registry and replicas benchmarks
pub(crate) fn curl(url: &str, expected: u64) -> Result<f64, BoxError> {
    let out = Command::new("curl")
        .args([
            "-sSL",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{size_download} %{time_total}",
            url,
        ])
        .output()
        .map_err(|e| format!("curl (Debian package curl): {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let parts: Vec<&str> = text.split_whitespace().collect();
    match parts.as_slice() {
        [code, size, time] if *code == "200" && size.parse::<u64>().ok() == Some(expected) => {
            let seconds: f64 = time.parse()?;
            Ok(expected as f64 / 1_048_576.0 / seconds)
        }
        _ => Err(format!("{url}: {text} {}", String::from_utf8_lossy(&out.stderr)).into()),
    }
}
