//! The `marketplace` command line, run as a user would.

mod common;

use std::process::{Command, Output};

use common::assert_human;

fn marketplace(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(args)
        .output()
        .expect("binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const CATALOG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/catalog");

#[test]
fn validate_accepts_the_builtin_catalog() {
    let out = marketplace(&["validate", CATALOG]);
    // Each definition, and the companion documents beside some of them.
    let defs = marketplace::catalog::builtin::definitions().unwrap();
    let n = defs.len() + defs.iter().filter(|d| !d.extras.is_empty()).count();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("{n} valid, 0 invalid")));
}

#[test]
fn validate_reports_file_line_col_path_and_message_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    let good = std::fs::read_to_string(format!("{CATALOG}/gateway.yaml")).unwrap();
    // Break the image on its own line, leaving everything else valid.
    let image_line = good
        .lines()
        .position(|l| l.trim_start().starts_with("image:"))
        .unwrap();
    let broken: Vec<String> = good
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == image_line {
                "  image: ghcr.io/fundament-oss/plugins/gateway:v1".to_owned()
            } else {
                l.to_owned()
            }
        })
        .collect();
    std::fs::write(&bad, broken.join("\n")).unwrap();

    let out = marketplace(&[
        "validate",
        bad.to_str().unwrap(),
        &format!("{CATALOG}/gateway.yaml"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    let expected = format!(
        "{}:{}:10: spec.image: image `ghcr.io/fundament-oss/plugins/gateway:v1` is not pinned by digest",
        bad.display(),
        image_line + 1
    );
    assert!(text.starts_with(&expected), "got: {text}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 valid, 1 invalid"));

    let out = marketplace(&["validate", "--format", "json", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["invalid"], 1);
    let problem = &json["files"][0]["problems"][0];
    assert_eq!(problem["path"], "spec.image");
    assert_eq!(problem["line"], image_line as u64 + 1);
}

#[test]
fn validate_json_reports_the_hash_of_valid_files() {
    let file = format!("{CATALOG}/storage.yaml");
    let out = marketplace(&["validate", "--format", "json", &file]);
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(
        json["files"][0]["hash"],
        marketplace::definition::definition_hash(&bytes)
    );
    assert_eq!(json["files"][0]["name"], "storage");
}

#[test]
fn validate_fails_on_missing_paths_and_empty_folders() {
    let out = marketplace(&["validate", "/definitely/not/here.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("cannot read"));
    let empty = tempfile::tempdir().unwrap();
    let out = marketplace(&["validate", empty.path().to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "nothing validated is not success"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("no definition files found"));
}

#[test]
fn version_and_env_configuration() {
    let out = marketplace(&["--version"]);
    assert!(stdout(&out).contains(env!("CARGO_PKG_VERSION")));
    // MARKETPLACE_FORMAT selects the output format like --format does.
    let out = Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(["validate", &format!("{CATALOG}/backup.yaml")])
        .env("MARKETPLACE_FORMAT", "json")
        .output()
        .unwrap();
    assert!(serde_json::from_str::<serde_json::Value>(&stdout(&out)).is_ok());
}

#[test]
fn keys_generate_writes_a_private_pkcs8_key_and_its_public_half() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("publisher.pem");
    let out = marketplace(&["keys", "generate", "--out", key.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    let loaded = marketplace::trust::SigningKey::load(&key).expect("a valid 0600 PKCS#8 key");
    let public = loaded.public();
    assert!(
        text.contains(&format!("key id:      {}", public.key_id())),
        "{text}"
    );
    assert!(text.contains(&public.hex()));
    let pem = std::fs::read_to_string(&key).unwrap();
    assert!(
        !text.contains(pem.lines().nth(1).unwrap()),
        "private material never printed"
    );
    let pub_file = dir.path().join("publisher.pem.pub");
    let parsed = marketplace::trust::PublicKey::parse(pub_file.to_str().unwrap()).unwrap();
    assert_eq!(parsed, public);

    // A second run refuses to replace the key.
    let again = marketplace(&["keys", "generate", "--out", key.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("refusing to overwrite"));
    assert_eq!(std::fs::read_to_string(&key).unwrap(), pem);
}

#[test]
fn publisher_add_prints_a_token_once_and_stores_only_its_hash() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = data.to_str().unwrap();
    let key = marketplace::trust::SigningKey::generate().unwrap().public();
    let out = marketplace(&[
        "publisher",
        "add",
        "acme",
        "--key",
        &key.hex(),
        "--data-dir",
        d,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    let token = text.lines().last().unwrap().trim().to_owned();
    assert!(token.starts_with("mkt_") && token.len() == 68, "{text}");
    assert!(text.contains(&key.key_id()));

    // The database holds the hash, never the token itself.
    let db = std::fs::read(data.join("marketplace.db")).unwrap();
    let wal = std::fs::read(data.join("marketplace.db-wal")).unwrap_or_default();
    let hay = [db, wal].concat();
    assert!(
        !hay.windows(token.len()).any(|w| w == token.as_bytes()),
        "plain token stored"
    );
    let hash = marketplace::trust::server::publishers::token_hash(&token);
    assert!(hay.windows(hash.len()).any(|w| w == hash.as_bytes()));

    let list = stdout(&marketplace(&["publisher", "list", "--data-dir", d]));
    assert!(list.contains("acme\tthreshold 1\ttokens 1"), "{list}");
    for (args, needle) in [
        (
            vec![
                "publisher",
                "add",
                "acme",
                "--key",
                &key.hex(),
                "--data-dir",
                d,
            ],
            "already exists",
        ),
        (
            vec![
                "publisher",
                "add",
                "root",
                "--key",
                &key.hex(),
                "--data-dir",
                d,
            ],
            "reserved",
        ),
        (
            vec![
                "publisher",
                "add",
                "fundament",
                "--key",
                &key.hex(),
                "--data-dir",
                d,
            ],
            "built-in",
        ),
        (
            vec![
                "publisher",
                "add",
                "beta",
                "--key",
                "nothex",
                "--data-dir",
                d,
            ],
            "not an ed25519 public key",
        ),
        (
            vec![
                "publisher",
                "add",
                "beta",
                "--key",
                &key.hex(),
                "--threshold",
                "2",
                "--data-dir",
                d,
            ],
            "impossible",
        ),
        (
            vec!["publisher", "revoke-token", "nobody", "--data-dir", d],
            "no publisher",
        ),
    ] {
        let out = marketplace(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(needle),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        stdout(&marketplace(&[
            "publisher",
            "revoke-token",
            "acme",
            "--data-dir",
            d
        ]))
        .contains("revoked 1 token")
    );
    assert!(stdout(&marketplace(&["publisher", "list", "--data-dir", d])).contains("tokens 0"));
}

#[test]
fn sync_config_errors_are_worded_for_people() {
    let dir = tempfile::tempdir().unwrap();
    let levels = "abcdefghi".as_bytes();
    let mut bomb = vec![format!("  - &a [{}]", ["lol"; 9].join(", "))];
    for pair in levels.windows(2) {
        let (prev, next) = (pair[0] as char, pair[1] as char);
        bomb.push(format!(
            "  - &{next} [{}]",
            vec![format!("*{prev}"); 9].join(", ")
        ));
    }
    let cases = [
        (
            "alias bomb",
            format!("sources:\n{}\n", bomb.join("\n")),
            "line 2, column 8: sources[0]: expected a mapping",
        ),
        (
            "deep nesting",
            format!("sources: {}{}\n", "[".repeat(10_000), "]".repeat(10_000)),
            "nesting is deeper than 64 levels",
        ),
        (
            "two documents",
            "listen: 127.0.0.1:1\n---\nlisten: 127.0.0.1:2\n".to_owned(),
            "exactly one YAML document",
        ),
        (
            "duplicate key",
            "listen: a\nlisten: b\n".to_owned(),
            "line 2, column 1: duplicate key `listen`",
        ),
        (
            "YAML 1.1 boolean for a number",
            "sources:\n  - {name: a, url: http://h/, root: r.json, priority: yes}\n".to_owned(),
            "sources[0].priority: expected a whole number",
        ),
        (
            "null for a name",
            "sources:\n  - {name: ~, url: http://h/, root: r.json}\n".to_owned(),
            "sources[0].name: expected a value, found none",
        ),
        (
            "unknown field",
            "colour: blue\n".to_owned(),
            "unknown field `colour`",
        ),
    ];
    let file = dir.path().join("sync.yaml");
    for (what, text, phrase) in cases {
        let err = marketplace::sync::Config::parse(&text, dir.path()).unwrap_err();
        assert_human(&err);
        assert!(err.contains(phrase), "{what}: {err}");
        // What the command prints, through its own error reporting.
        std::fs::write(&file, &text).unwrap();
        let out = marketplace(&["sync", "--config", file.to_str().unwrap(), "--once"]);
        assert_eq!(out.status.code(), Some(1), "{what}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_human(&stderr);
        assert!(stderr.contains(phrase), "{what}: {stderr}");
    }
}

/// A printing command whose reader went away (`marketplace mirror status | head`)
/// ends by SIGPIPE, as Unix tools do, not with a panic message.
#[test]
fn a_closed_stdout_ends_a_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // A first start stores the built-ins and enqueues their images: lines to print.
    drop(common::Server::start(&data));
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(["mirror", "status", "--data-dir"])
        .arg(&data)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.signal(), Some(13), "{:?} {stderr}", out.status);
}
