//! The exact JSON of every answer built from the stores' rows, for a fixed state: the
//! catalog API's list, detail and versions (mirrored, failed, mirroring, pending and
//! not-yet-enqueued images, a version of the older design), `marketplace mirror status
//! --json`, and the worker's `/status` (a trusted source with a failing publisher, a
//! failing source, one never synced), sideload list and offers (whose summaries its
//! database stores as JSON).
//!
//! These answers are interfaces: a column added to or renamed in a store must not change
//! them. Each body is compared byte for byte (key order, casing, `null` or absent) with
//! `tests/fixtures/api_shapes/NAME.json`, which holds it indented (only whitespace
//! outside strings is added, so key order survives). The files were recorded from the
//! code before the answers got their own types. `MARKETPLACE_RECORD_SHAPES=1` rewrites
//! them, for a new answer, a change of interface made on purpose or a changed built-in
//! (the details carry its manifest); review the diff.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use common::publishing::definition;
use common::{NOW, fixture, get, output_text, with_version};
use http_body_util::BodyExt;
use marketplace::AppState;
use marketplace::catalog::builtin;
use marketplace::definition::Definition;
use marketplace::store::{Content, ContentKind, Store};
use marketplace::sync::sideload::OnConflict;
use marketplace::sync::store::{
    LastGood as _, PublisherFailure, SourceDefinition, Sources as _, Trusted, TrustedVersions,
    summary_json,
};
use marketplace::sync::{Config, Scope, Worker};
use tower::ServiceExt;

/// The cosign key id a mirrored image's signature verified with (64 hex digits).
const COSIGN_KEY: &str = "3f1c2a9be0d84c7a5b6e9f0d1c2b3a4958677685a4b3c2d1e0f9a8b7c6d5e4f3";
const SIGNER: &str = "9a7e3c1b5d2f4e6a8c0b1d3f5e7a9c2b4d6f8e0a1c3b5d7f9e2a4c6b8d0f1e3a";

/// `body` indented: a newline and two spaces per level after `{`, `[` and `,`, a space
/// after `:`; nothing else changes, so the keys keep their order.
fn indented(body: &str) -> String {
    let (mut out, mut depth) = (String::new(), 0usize);
    let (mut in_string, mut escaped) = (false, false);
    let mut chars = body.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                if matches!(chars.peek(), Some('}' | ']')) {
                    out.push(chars.next().unwrap());
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth -= 1;
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            _ => out.push(c),
        }
    }
    out.push('\n');
    out
}

/// `body` is exactly the recorded answer `name`.
#[track_caller]
fn assert_shape(name: &str, body: &str) {
    serde_json::from_str::<serde_json::Value>(body)
        .unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {body}"));
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/api_shapes")
        .join(format!("{name}.json"));
    let actual = indented(body);
    if std::env::var_os("MARKETPLACE_RECORD_SHAPES").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (record it first)", path.display()));
    if actual != expected {
        let line = actual
            .lines()
            .zip(expected.lines())
            .position(|(a, e)| a != e)
            .unwrap_or_else(|| actual.lines().count().min(expected.lines().count()));
        panic!(
            "{name} changed shape at line {}:\n  now:      {:?}\n  recorded: {:?}\nwhole answer now:\n{actual}",
            line + 1,
            actual.lines().nth(line),
            expected.lines().nth(line)
        );
    }
}

/// A fixture of the older definition design under another name, as a server that ran
/// before Fundament's design holds it.
fn legacy(name: &str, renamed: &str) -> Definition {
    let text = std::fs::read_to_string(fixture("legacy", &format!("{name}.yaml")))
        .unwrap()
        .replacen(&format!("name: {name}"), &format!("name: {renamed}"), 1);
    Definition::parse_published(text.as_bytes()).unwrap()
}

/// The server's database in `dir`: the built-ins, a second cert-manager, `old-storage`
/// of the older design, and the mirror in every state. cert-manager's image is mirrored
/// (signature verified), gateway's failed, storage's (shared by old-storage) is being
/// mirrored, the others are pending; external-dns's version is unlinked, as versions
/// stored before the mirror existed are until `serve` enqueues them.
async fn catalog(dir: &Path) -> PathBuf {
    let db = dir.join("marketplace.db");
    let store = Store::open(&db).await.unwrap();
    builtin::load(&store, NOW).await.unwrap();
    store
        .insert_version(
            "fundament",
            &with_version("cert-manager", "v2.0.0"),
            NOW + 10,
        )
        .await
        .unwrap();
    store
        .insert_version("fundament", &legacy("storage", "old-storage"), NOW + 20)
        .await
        .unwrap();
    store
        .record_signers("fundament", &[SIGNER.to_owned()])
        .await
        .unwrap();
    let jobs = store
        .claim_mirror_jobs(NOW + 30, NOW + 90, 100, None)
        .await
        .unwrap();
    let job = |name: &str| {
        jobs.iter()
            .find(|j| j.repository == format!("fundament-oss/plugins/{name}"))
            .unwrap_or_else(|| panic!("no job for {name}"))
            .id
    };
    let content = |digest: &str, kind, size| Content {
        digest: format!("sha256:{}", digest.repeat(64)),
        kind,
        media_type: "application/vnd.oci.image.manifest.v1+json".to_owned(),
        size,
        subject: None,
        artifact_type: None,
        annotations: None,
    };
    store
        .record_mirrored(
            job("cert-manager"),
            &[
                content("a", ContentKind::Manifest, 1_021),
                content("b", ContentKind::Blob, 31_457_280),
            ],
            &[],
            Some(COSIGN_KEY),
            NOW + 40,
        )
        .await
        .unwrap();
    store
        .record_mirror_failure(
            job("gateway"),
            "ghcr.io/fundament-oss/plugins/gateway: not found upstream",
            "GET https://ghcr.io/v2/fundament-oss/plugins/gateway/manifests/sha256:04ec: 404 Not Found: {\"errors\":[{\"code\":\"MANIFEST_UNKNOWN\"}]}",
            NOW + 650,
            NOW + 50,
        )
        .await
        .unwrap();
    let waiting: Vec<i64> = [
        "backup",
        "external-dns",
        "object-storage",
        "observability",
        "postgres-operator",
    ]
    .into_iter()
    .map(job)
    .collect();
    store.release_mirror_jobs(&waiting, NOW + 60).await.unwrap();
    store.close().await;
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    sqlx::query("UPDATE plugin_versions SET image_id = NULL WHERE image LIKE '%/external-dns@%'")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    db
}

#[tokio::test]
async fn catalog_api_answers_keep_their_shape() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&catalog(dir.path()).await).await.unwrap();
    let s = AppState::new(store, None);
    for (name, uri) in [
        ("catalog_list", "/api/v1/plugins?sort=name"),
        ("catalog_list_search", "/api/v1/plugins?q=cert&per_page=1"),
        (
            "catalog_detail_cert_manager",
            "/api/v1/plugins/fundament/cert-manager",
        ),
        (
            "catalog_detail_gateway",
            "/api/v1/plugins/fundament/gateway",
        ),
        (
            "catalog_detail_old_storage",
            "/api/v1/plugins/fundament/old-storage",
        ),
        (
            "catalog_versions_cert_manager",
            "/api/v1/plugins/fundament/cert-manager/versions",
        ),
        (
            "catalog_versions_storage",
            "/api/v1/plugins/fundament/storage/versions",
        ),
        (
            "catalog_versions_backup",
            "/api/v1/plugins/fundament/backup/versions",
        ),
        (
            "catalog_versions_external_dns",
            "/api/v1/plugins/fundament/external-dns/versions",
        ),
    ] {
        let r = get(&s, uri).await;
        assert_eq!(r.status, StatusCode::OK, "{uri}: {}", r.body);
        assert_shape(name, &r.body);
    }
    // The page words the same mirror state the API carries.
    let page = get(&s, "/plugins/fundament/cert-manager").await.body;
    assert!(
        page.contains("Mirrored here (30.0 MiB); clusters can pull it from this marketplace; image signature verified by 3f1c2a9be0d84c7a"),
        "{page}"
    );
    let page = get(&s, "/plugins/fundament/gateway").await.body;
    assert!(
        page.contains(
            "Mirror failed: ghcr.io/fundament-oss/plugins/gateway: not found upstream; next attempt in"
        ),
        "{page}"
    );
}

#[tokio::test]
async fn mirror_status_json_keeps_its_shape() {
    let dir = tempfile::tempdir().unwrap();
    catalog(dir.path()).await;
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(["mirror", "status", "--json", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    let stdout = String::from_utf8(o.stdout).unwrap();
    let body = stdout
        .strip_suffix('\n')
        .expect("one line, ended by a newline");
    assert!(!body.contains('\n'), "one JSON document per line: {stdout}");
    assert_shape("mirror_status", body);
}

/// A worker over `dir` with three sources: `alpha` synced (acme's definitions, one of
/// the older design; publisher globex failing verification), `beta` failing twice,
/// `gamma` never synced; and two sideloads of organization `acme`. Returns the worker,
/// and the id and secret of the token that sideloaded.
async fn worker(dir: &Path) -> (Arc<Worker>, String, String) {
    std::fs::write(dir.join("root.json"), b"{}").unwrap();
    let config = Config::parse(
        "dataDir: worker
sources:
  - name: alpha
    url: https://alpha.example/tuf
    root: root.json
    interval: 10m
    priority: 20
  - name: beta
    url: https://beta.example/
    root: root.json
    priority: 10
  - name: gamma
    url: http://gamma.example:8080/index/
    root: root.json
    interval: 1h
    priority: -5
",
        dir,
    )
    .unwrap();
    let worker = Worker::open(config).await.unwrap();
    let store = worker.store();
    let row = |def: &Definition| SourceDefinition {
        target: format!("acme/{}/{}.yaml", def.name(), def.version),
        publisher: "acme".to_owned(),
        name: def.name().to_owned(),
        version: def.version.to_string(),
        hash: def.hash.clone(),
        yanked: false,
        signer_key_ids: SIGNER.to_owned(),
        extras: if def.extras.is_empty() {
            String::new()
        } else {
            serde_json::to_string(&def.extras).unwrap()
        },
        bytes: Some((def.bytes.clone(), summary_json(def))),
    };
    let trusted = Trusted {
        versions: TrustedVersions {
            root: 2,
            timestamp: 41,
            snapshot: 17,
            targets: 9,
            timestamp_expires_at: NOW + 86_400,
            expires_at: NOW + 3_600,
            expires_role: "acme".to_owned(),
        },
        definitions: 2,
        root: b"{}".to_vec(),
        timestamp: b"{}".to_vec(),
        snapshot: b"{}".to_vec(),
    };
    store
        .replace_source(
            "alpha",
            &[
                row(&definition("gateway", "edge", "1.4.0")),
                row(&legacy("storage", "old-storage")),
            ],
            &[PublisherFailure {
                publisher: "globex".to_owned(),
                reason: "expired".to_owned(),
                message: "globex's role expired at 2026-09-20T10:00:00Z".to_owned(),
                since: NOW + 100,
                consecutive_failures: 1,
            }],
            &trusted,
            NOW + 100,
        )
        .await
        .unwrap();
    for at in [NOW + 200, NOW + 500] {
        store
            .record_failure(
                "beta",
                "unreachable",
                "timestamp.json: error sending request: connection refused",
                at,
            )
            .await
            .unwrap();
    }
    let (token_id, token) = store
        .create_token(&Scope::Org("acme".to_owned()), NOW)
        .await
        .unwrap();
    for (def, at) in [
        (definition("backup", "vault-backup", "1.0.0"), NOW + 300),
        (definition("observability", "tracing", "v0.3.1"), NOW + 400),
    ] {
        store
            .add_sideload("acme", &def, &token_id, at, OnConflict::Refuse)
            .await
            .unwrap();
    }
    (Arc::new(worker), token_id, token)
}

async fn worker_get(worker: &Arc<Worker>, uri: &str, token: Option<&str>) -> String {
    let mut req = Request::get(uri);
    if let Some(token) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let res = marketplace::api::worker::router(worker.clone())
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8(bytes.to_vec()).unwrap();
    assert_eq!(status, StatusCode::OK, "{uri}: {body}");
    body
}

#[tokio::test]
async fn worker_answers_keep_their_shape() {
    let dir = tempfile::tempdir().unwrap();
    let (worker, token_id, token) = worker(dir.path()).await;
    assert_shape("worker_status", &worker_get(&worker, "/status", None).await);
    // Offers carry each version's summary, which the worker's database stores as JSON.
    for (name, uri) in [
        ("worker_plugins", "/orgs/acme/plugins"),
        (
            "worker_plugin_old_storage",
            "/orgs/acme/plugins/old-storage",
        ),
        (
            "worker_upgrades_tracing",
            "/orgs/acme/plugins/tracing/upgrades?from=0.1.0",
        ),
    ] {
        assert_shape(name, &worker_get(&worker, uri, Some(&token)).await);
    }
    // The token's id is random; nothing else in the list is.
    let sideloads = worker_get(&worker, "/orgs/acme/sideloads", Some(&token)).await;
    assert_eq!(sideloads.matches(&token_id).count(), 2, "{sideloads}");
    assert_shape(
        "worker_sideloads",
        &sideloads.replace(&token_id, "<token id>"),
    );
}
