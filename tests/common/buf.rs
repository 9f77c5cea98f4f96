//! `buf curl` (npm's `@bufbuild/buf`, installed by `.ci/run` under `.venv/npm`) as the
//! independent Connect client: it encodes requests from our `proto/` files and sends
//! binary protobuf (`application/proto`), as Fundament's Go components do.

use std::path::PathBuf;
use std::process::Command;

/// The `buf` binary: `$BUF`, or the one `.ci/run` installs. A missing buf fails the test:
/// a skipped independent check is a failing check.
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("BUF") {
        return PathBuf::from(path);
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/npm/node_modules/.bin/buf");
    assert!(
        path.exists(),
        "buf is not installed at {}: run `bash .ci/run` once, or set BUF",
        path.display()
    );
    path
}

/// What one `buf curl` call printed.
#[derive(Debug)]
pub struct Call {
    /// 0 on success; otherwise buf's exit code, the Connect code shifted left by three.
    pub exit: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Call {
    /// The response message as JSON (buf prints it with `--emit-defaults`).
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        assert_eq!(self.exit, 0, "buf curl failed: {}", self.stderr);
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("buf printed no JSON ({e}): {}", self.stdout))
    }

    /// The Connect error code buf reports (`not_found`, ...), from its exit code.
    #[track_caller]
    pub fn code(&self) -> &'static str {
        assert_ne!(self.exit, 0, "expected an error, got {}", self.stdout);
        match self.exit >> 3 {
            3 => "invalid_argument",
            5 => "not_found",
            6 => "already_exists",
            7 => "permission_denied",
            8 => "resource_exhausted",
            9 => "failed_precondition",
            12 => "unimplemented",
            13 => "internal",
            14 => "unavailable",
            16 => "unauthenticated",
            other => panic!("buf exit {} (code {other}): {}", self.exit, self.stderr),
        }
    }
}

/// Calls `url` (`BASE/package.Service/Method`) with `data` (JSON), extra `headers`.
pub fn curl(url: &str, data: &str, headers: &[&str]) -> Call {
    let mut cmd = Command::new(binary());
    cmd.arg("curl")
        .arg("--schema")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("proto"))
        .arg("--emit-defaults")
        .arg("--data")
        .arg(data);
    for h in headers {
        cmd.arg("--header").arg(h);
    }
    // buf keeps a cache; a per-run folder keeps parallel tests and CI runs apart.
    let cache = tempfile::tempdir().expect("temp dir");
    let out = cmd
        .arg(url)
        .env("BUF_CACHE_DIR", cache.path())
        .output()
        .expect("buf runs");
    Call {
        exit: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
