//! A throwaway containerd (Debian's `containerd` package, installed by `.ci/run`) with
//! its root, state and socket in a temporary directory, driven by its own client `ctr`:
//! the independent client that checks how our `/v2/` reaches containerd (redirects
//! included). containerd needs root; only its content store is used (`ctr content
//! fetch`), so no snapshotter, runtime or CRI is involved. Killed and removed when
//! dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Containerd {
    child: Child,
    dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Containerd {
    pub fn start() -> Containerd {
        assert!(
            super::pg::is_root(),
            "containerd needs root (the tests that drive it run as root in CI)"
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let socket = dir.path().join("containerd.sock");
        let config = dir.path().join("config.toml");
        // Only the content store and the image service are wanted: the CRI plugin (a
        // Kubernetes node's) stays off.
        std::fs::write(
            &config,
            format!(
                "version = 2\nroot = \"{d}/root\"\nstate = \"{d}/state\"\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n[grpc]\n  address = \"{}\"\n",
                socket.display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("containerd.log")).unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("containerd (Debian package containerd; run `bash .ci/run` once)");
        let c = Containerd { child, dir, socket };
        let started = Instant::now();
        while c.ctr_output(&["version"]).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "containerd did not answer: {}",
                c.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        c
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    fn ctr_output(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&self.socket)
            .args(["--namespace", "tests"])
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        let text = super::output_text(&out);
        if out.status.success() {
            Ok(text)
        } else {
            Err(text)
        }
    }

    /// `ctr ARGS`, which must succeed; its output.
    pub fn ctr(&self, args: &[&str]) -> String {
        self.ctr_output(args).unwrap_or_else(|e| {
            panic!(
                "ctr {}: {e}\ncontainerd's log: {}",
                args.join(" "),
                self.log()
            )
        })
    }

    /// The digests of every blob in the content store.
    pub fn content(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .ctr(&["content", "ls", "--quiet"])
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("sha256:"))
            .map(str::to_owned)
            .collect();
        all.sort();
        all
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
