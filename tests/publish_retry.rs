//! Publishing under contention: the CLI signs again on fresh metadata after a 409 (and
//! after a balancer's 502 or 504 or the server's 503), with backoff and jitter, until
//! its deadline; other refusals are final. A publish already in the role (run twice, or
//! landed with its answer lost) is done, not refused.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::routing::{get, post};
use common::publishing::*;
use common::{Server, python_tuf, trusted_root};
use marketplace::trust::SigningKey;
use marketplace::trust::publisher::plan::{Change, Limits};
use marketplace::trust::publisher::retry::RetryPolicy;
use marketplace::trust::publisher::uploader::{PublisherClient, UploadError};

const CONCURRENT: usize = 50;

/// The scenario: many `marketplace publish` runs at once by one publisher with
/// one token. Every one must succeed, and python-tuf must then verify all of them.
#[tokio::test]
async fn fifty_concurrent_cli_publishes_by_one_publisher_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let (data, key, token, _) = setup(dir.path());
    let server = Server::start(&data);
    let key_file = dir.path().join("acme.pem");
    key.save_new(&key_file).unwrap();
    let c = Client::new(&server.url);
    let initial = c.role("acme").await.map_or(0, |r| r.signed.version.get());

    let defs: Vec<_> = (0..CONCURRENT)
        .map(|i| {
            let from = ["gateway", "storage", "backup"][i % 3];
            definition(from, &format!("plugin-{i:02}"), &format!("1.{i}.0"))
        })
        .collect();
    let files: Vec<_> = defs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let file = dir.path().join(format!("plugin-{i:02}.yaml"));
            std::fs::write(&file, &d.bytes).unwrap();
            file
        })
        .collect();

    let started = Instant::now();
    let children: Vec<_> = files
        .iter()
        .map(|file| {
            std::process::Command::new(env!("CARGO_BIN_EXE_marketplace"))
                .arg("publish")
                .arg(file)
                .args(["--server", &server.url, "--key"])
                .arg(&key_file)
                .env("MARKETPLACE_TOKEN", &token)
                .env_remove("MARKETPLACE_RETRY_DEADLINE")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("binary starts")
        })
        .collect();
    let outputs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let wall = started.elapsed();

    let mut attempts = Vec::new();
    for (out, def) in outputs.iter().zip(&defs) {
        let text = common::output_text(out);
        assert!(out.status.success(), "{}: {text}", def.name());
        assert!(
            text.contains(&format!("published acme/{} {}", def.name(), def.version)),
            "{text}"
        );
        // The note appears only when the role had to be signed again.
        let n = text
            .split("accepted on attempt ")
            .nth(1)
            .map_or(1, |rest| rest.split(' ').next().unwrap().parse().unwrap());
        attempts.push(n);
    }
    let retries: u32 = attempts.iter().map(|n| n - 1).sum();
    eprintln!(
        "{CONCURRENT} concurrent `marketplace publish` runs: wall {:.1} s, {retries} retries in total, at most {} attempts by one run, {} of {CONCURRENT} retried",
        wall.as_secs_f64(),
        attempts.iter().max().unwrap(),
        attempts.iter().filter(|n| **n > 1).count()
    );

    // One role version per publish, no more, no fewer.
    let role = c.role("acme").await.expect("acme has a role");
    assert_eq!(role.signed.version.get(), initial + CONCURRENT as u64);
    assert_eq!(role.signed.targets.len(), CONCURRENT);

    // python-tuf, the independent referee, verifies and downloads every one.
    let root_path = dir.path().join("root.json");
    std::fs::write(&root_path, trusted_root(&server.url).await).unwrap();
    let names: Vec<String> = defs
        .iter()
        .map(|d| format!("acme/{}/{}.yaml", d.name(), d.version))
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let report = python_tuf(&server.url, &root_path, &dir.path().join("py"), &refs);
    for (def, name) in defs.iter().zip(&names) {
        assert_eq!(
            report["targets"][name]["sha256"].as_str(),
            def.hash.strip_prefix("sha256:"),
            "{name}"
        );
    }
}

/// A marketplace stand-in that answers every publish with `status`, counting uploads.
async fn stub(status: StatusCode) -> (String, Arc<AtomicUsize>) {
    let uploads = Arc::new(AtomicUsize::new(0));
    let counter = uploads.clone();
    let app = axum::Router::new()
        .route(
            "/api/v1/publishers/me",
            get(|| async { axum::Json(serde_json::json!({ "publisher": "acme" })) }),
        )
        .route(
            "/api/v1/publishers/acme/role",
            get(|| async { StatusCode::NOT_FOUND }),
        )
        .route(
            "/api/v1/publishers/acme/definitions",
            post(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                async move {
                    (
                        status,
                        axum::Json(serde_json::json!({
                            "error": { "code": "stub", "message": "the stub says no" }
                        })),
                    )
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, uploads)
}

async fn publish_to(url: &str, retry: RetryPolicy) -> Result<u32, UploadError> {
    let key = SigningKey::generate().unwrap();
    let def = definition("gateway", "edge-gateway", "1.0.0");
    let client = PublisherClient::connect(url, "mkt_stub")
        .await
        .unwrap()
        .with_retry(retry);
    client
        .update(
            "definitions",
            &[key.public()],
            &Change::Add(vec![(&def, false)]),
            &[&key],
            YEAR,
            Limits::default(),
            serde_json::json!({ "definition": std::str::from_utf8(&def.bytes).unwrap() }),
        )
        .await
        .map(|done| done.attempts)
}

#[tokio::test]
async fn a_conflict_that_never_clears_gives_up_at_the_deadline_and_says_so() {
    let (url, uploads) = stub(StatusCode::CONFLICT).await;
    let deadline = Duration::from_millis(1500);
    let started = Instant::now();
    let err = publish_to(&url, RetryPolicy::until(deadline))
        .await
        .unwrap_err();
    let took = started.elapsed();
    let UploadError::GaveUp { attempts, .. } = &err else {
        panic!("expected GaveUp, got {err}");
    };
    let message = err.to_string();
    assert!(
        message.contains(&format!("gave up after {attempts} attempt(s) over"))
            && message.contains("the index kept changing")
            && message.contains("the stub says no"),
        "{message}"
    );
    // Backoff: several attempts, each one upload, none started after the deadline;
    // waits are capped at 3 s so giving up follows the deadline closely.
    assert_eq!(uploads.load(Ordering::SeqCst), *attempts as usize);
    assert!(*attempts >= 2, "{message}");
    assert!(*attempts < 40, "no backoff? {message}");
    assert!(took < deadline + Duration::from_secs(1), "{took:?}");
}

#[tokio::test]
async fn a_zero_deadline_tries_once() {
    let (url, uploads) = stub(StatusCode::CONFLICT).await;
    let err = publish_to(&url, RetryPolicy::until(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(
        matches!(err, UploadError::GaveUp { attempts: 1, .. }),
        "{err}"
    );
    assert_eq!(uploads.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn refusals_other_than_a_conflict_are_final() {
    for status in [
        StatusCode::FORBIDDEN,
        StatusCode::UNPROCESSABLE_ENTITY,
        StatusCode::TOO_MANY_REQUESTS,
        StatusCode::INTERNAL_SERVER_ERROR,
    ] {
        let (url, uploads) = stub(status).await;
        let err = publish_to(&url, RetryPolicy::default()).await.unwrap_err();
        assert!(
            matches!(&err, UploadError::Refused { status: s, .. } if *s == status),
            "{status}: {err}"
        );
        assert_eq!(uploads.load(Ordering::SeqCst), 1, "{status}: one upload");
    }
}

#[tokio::test]
async fn an_unavailable_server_or_a_replica_gone_behind_a_balancer_is_retried() {
    for status in [
        StatusCode::BAD_GATEWAY,
        StatusCode::SERVICE_UNAVAILABLE,
        StatusCode::GATEWAY_TIMEOUT,
    ] {
        let (url, uploads) = stub(status).await;
        let err = publish_to(&url, RetryPolicy::until(Duration::from_millis(800)))
            .await
            .unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(&err, UploadError::GaveUp { attempts, .. } if *attempts >= 2)
                && message.contains("kept answering that it is unavailable"),
            "{status}: {message}"
        );
        assert!(uploads.load(Ordering::SeqCst) >= 2, "{status}");
    }
}

/// The named fake of this test: a balancer in front of the real server that forwards
/// everything and loses the answer of the first publish (502 after the server took
/// it), as when a replica dies between its commit and its answer. Nothing else makes a
/// real server commit without answering on demand.
async fn losing_balancer(upstream: String) -> (String, Arc<AtomicUsize>) {
    use axum::extract::Request;
    let lost = Arc::new(AtomicUsize::new(0));
    let counter = lost.clone();
    let http = reqwest::Client::new();
    let app = axum::Router::new().fallback(move |request: Request| {
        let (http, upstream, counter) = (http.clone(), upstream.clone(), counter.clone());
        async move {
            let (parts, body) = request.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            let url = format!("{upstream}{}", parts.uri);
            let mut forward = http.request(parts.method.clone(), url).body(body);
            for (k, v) in &parts.headers {
                if k != "host" && k != "content-length" {
                    forward = forward.header(k, v);
                }
            }
            let answer = forward.send().await.unwrap();
            let status = answer.status();
            let bytes = answer.bytes().await.unwrap();
            if parts.method == "POST" && counter.fetch_add(1, Ordering::SeqCst) == 0 {
                assert_eq!(status, StatusCode::CREATED, "the publish landed");
                return (StatusCode::BAD_GATEWAY, "upstream went away").into_response();
            }
            (status, bytes).into_response()
        }
    });
    use axum::response::IntoResponse;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, lost)
}

#[tokio::test]
async fn a_publish_that_landed_with_its_answer_lost_or_run_twice_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let (data, key, token, _) = setup(dir.path());
    let server = Server::start(&data);
    let key_file = dir.path().join("acme.pem");
    key.save_new(&key_file).unwrap();
    let def = definition("gateway", "edge", "1.0.0");
    let file = dir.path().join("edge.yaml");
    std::fs::write(&file, &def.bytes).unwrap();
    let (balancer, posts) = losing_balancer(server.url.clone()).await;
    let publish = |via: &str| {
        let (file, key_file, token, via) = (
            file.clone(),
            key_file.clone(),
            token.clone(),
            via.to_owned(),
        );
        tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_marketplace"))
                .arg("publish")
                .arg(&file)
                .args(["--server", &via, "--token", &token, "--key"])
                .arg(&key_file)
                .output()
                .unwrap();
            (out.status.success(), common::output_text(&out))
        })
    };
    let c = Client::new(&server.url);
    let before = c.role("acme").await.map_or(0, |r| r.signed.version.get());

    // The 502 is retried; the role already lists the definition exactly: done.
    let (ok, out) = publish(&balancer).await.unwrap();
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("already published acme/edge 1.0.0 ({})", def.hash)),
        "{out}"
    );
    assert_eq!(
        posts.load(Ordering::SeqCst),
        1,
        "one upload, whose answer was lost"
    );
    let role = c.role("acme").await.unwrap();
    assert_eq!(role.signed.version.get(), before + 1, "one role version");
    // The same file again, straight to the server: nothing signed, nothing uploaded.
    let (ok, out) = publish(&server.url).await.unwrap();
    assert!(
        ok && out.contains("already published acme/edge 1.0.0"),
        "{out}"
    );
    assert_eq!(
        c.role("acme").await.unwrap().signed.version.get(),
        before + 1
    );
    // Other bytes under the same version are still refused by the server.
    let other = definition("storage", "edge", "1.0.0");
    std::fs::write(&file, &other.bytes).unwrap();
    let (ok, out) = publish(&server.url).await.unwrap();
    assert!(!ok && out.contains("immutable"), "{out}");
}
