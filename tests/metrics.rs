//! `/metrics` of the real server and the real sync worker, checked by Prometheus's own
//! `promtool check metrics` (Debian's `prometheus` package) and read back sample by
//! sample: requests per surface and status class, publishes and refusals by reason, the
//! signed index's expiry per kind of role, the mirror, and per source and organization
//! what the worker did.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::publishing::{Client, definition, definition_bytes, setup_with};
use common::worker::{Api, synced_from, token};
use common::{Server, output_text};

/// `promtool check metrics` on `text`: it must find nothing to say.
fn promtool(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "promtool is needed for this test: run `bash .ci/run` (Debian's prometheus package)",
        );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}\n{text}",
        output_text(&out)
    );
}

/// The value of the sample `series` (name and labels exactly as exposed).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn scrape(url: &str) -> String {
    let r = reqwest::get(format!("{url}/metrics")).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    r.text().await.unwrap()
}

#[tokio::test]
async fn the_server_counts_every_surface_and_publishing_outcome_as_promtool_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let server = Server::start(&m.data);
    let base = &server.url;
    let client = Client::new(base);
    for path in [
        "/",
        "/api/v1/plugins",
        "/tuf/metadata/timestamp.json",
        "/feed.atom",
    ] {
        assert_eq!(
            reqwest::get(format!("{base}{path}"))
                .await
                .unwrap()
                .status(),
            200
        );
    }
    assert_eq!(
        reqwest::get(format!("{base}/api/v1/plugins/nobody/nothing"))
            .await
            .unwrap()
            .status(),
        404
    );
    let db = definition("postgres-operator", "db", "1.0.0");
    let (status, body) = client
        .publish_as("acme", &m.acme_token, &db, &[&m.acme])
        .await;
    assert_eq!(status, 201, "{body}");
    // Refused: a wrong token, and a definition that is not one.
    let (status, _) = client.publish("acme", Some("mkp_wrong"), b"x", b"{}").await;
    assert_eq!(status, 401);
    let (status, body) = client
        .publish("acme", Some(&m.acme_token), b"kind: Nothing\n", b"{}")
        .await;
    assert!(status == 400 || status == 422, "{status} {body}");
    let reason = body["error"]["code"].as_str().unwrap().to_owned();

    let text = scrape(base).await;
    promtool(&text);
    let count = |surface: &str, status: &str| {
        sample(
            &text,
            &format!(
                "marketplace_http_request_duration_seconds_count{{surface=\"{surface}\",status=\"{status}\"}}"
            ),
        )
    };
    for (surface, status) in [
        ("pages", "2xx"),
        ("catalog_api", "2xx"),
        ("catalog_api", "4xx"),
        ("tuf", "2xx"),
        ("feeds", "2xx"),
        ("publishing", "2xx"),
        ("publishing", "4xx"),
    ] {
        assert!(
            count(surface, status) >= Some(1.0),
            "{surface} {status}:\n{text}"
        );
    }
    // The two refusals, and the 404 of acme's role before its first publish.
    assert_eq!(count("publishing", "4xx"), Some(3.0), "{text}");
    assert_eq!(
        sample(&text, "marketplace_publishes_total{action=\"publish\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "marketplace_publish_refusals_total{action=\"publish\",reason=\"unauthorized\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            &format!(
                "marketplace_publish_refusals_total{{action=\"publish\",reason=\"{reason}\"}}"
            )
        ),
        Some(1.0)
    );
    // Every kind of role, with its time left: a timestamp lives a day by default, the
    // root a year.
    let left = |role: &str| {
        sample(
            &text,
            &format!("marketplace_signed_index_expiry_seconds{{role=\"{role}\"}}"),
        )
        .unwrap_or_else(|| panic!("no expiry for {role}:\n{text}"))
    };
    for role in ["root", "targets", "snapshot", "timestamp", "delegated"] {
        assert!(left(role) > 0.0, "{role}");
    }
    assert!(left("timestamp") <= 86_400.0 * 7.0);
    assert!(left("root") > left("timestamp"));
    assert!(text.contains("# TYPE marketplace_mirror_images gauge"));
    assert_eq!(sample(&text, "marketplace_mirror_bytes"), Some(0.0));

    // The scrape itself is counted, under ops, on the next scrape.
    let again = scrape(base).await;
    assert!(
        sample(
            &again,
            "marketplace_http_request_duration_seconds_count{surface=\"ops\",status=\"2xx\"}"
        ) >= Some(1.0)
    );
}

#[tokio::test]
async fn the_worker_reports_each_source_and_organization_as_promtool_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let server = Server::start(&m.data);
    let client = Client::new(&server.url);
    let (status, body) = client
        .publish_as(
            "acme",
            &m.acme_token,
            &definition("postgres-operator", "db", "1.0.0"),
            &[&m.acme],
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let config = synced_from(dir.path(), &server.url).await;
    let org_token = token(&config, Some("team-a"));
    let api = Api::start(&config, true);
    // Its first round runs at start; the index has not changed since `--once`.
    let mut text = String::new();
    for _ in 0..100 {
        text = scrape(&api.url).await;
        if sample(
            &text,
            "marketplace_sync_rounds_total{source=\"m\",outcome=\"unchanged\"}",
        )
        .is_some()
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    promtool(&text);
    assert_eq!(
        sample(
            &text,
            "marketplace_sync_rounds_total{source=\"m\",outcome=\"unchanged\"}"
        ),
        Some(1.0),
        "{text}"
    );
    let synced_at = sample(
        &text,
        "marketplace_sync_last_success_timestamp_seconds{source=\"m\"}",
    )
    .unwrap();
    assert!(synced_at > 1.7e9, "{text}");
    assert_eq!(
        sample(&text, "marketplace_sync_interval_seconds{source=\"m\"}"),
        Some(3600.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "marketplace_sync_failing_publishers{source=\"m\"}"),
        Some(0.0)
    );
    // The source's 8 built-ins and acme's db; the organization is offered the worker's
    // own built-ins merged with them.
    let builtins = marketplace::catalog::builtin::definitions().unwrap().len() as f64;
    assert_eq!(
        sample(&text, "marketplace_sync_definitions{source=\"m\"}"),
        Some(builtins + 1.0)
    );
    assert_eq!(
        sample(
            &text,
            "marketplace_sync_definitions_offered{organization=\"team-a\"}"
        ),
        Some(builtins + 1.0),
        "{text}"
    );

    // A sideload adds to that organization's count only.
    let sideload = definition_bytes("storage", "inhouse", "1.0.0").bytes;
    let (status, body) = api
        .send(
            reqwest::Method::POST,
            "/orgs/team-a/sideloads",
            Some(&org_token),
            sideload,
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, _) = api.get("/orgs/team-a/plugins", Some(&org_token)).await;
    assert_eq!(status, 200);
    let text = scrape(&api.url).await;
    promtool(&text);
    assert_eq!(
        sample(
            &text,
            "marketplace_sync_definitions_offered{organization=\"team-a\"}"
        ),
        Some(builtins + 2.0),
        "{text}"
    );
    for (surface, status) in [("worker_api", "2xx"), ("ops", "2xx")] {
        assert!(
            sample(
                &text,
                &format!(
                    "marketplace_http_request_duration_seconds_count{{surface=\"{surface}\",status=\"{status}\"}}"
                )
            ) >= Some(1.0),
            "{surface}:\n{text}"
        );
    }
}

/// The alert rules README suggests (`deploy/prometheus-rules.yaml`) load in Prometheus,
/// and every metric they watch is one the server or the worker exposes.
#[tokio::test]
async fn the_suggested_alert_rules_load_and_watch_metrics_we_expose() {
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus-rules.yaml");
    let out = Command::new("promtool")
        .args(["check", "rules", rules])
        .output()
        .expect("promtool is needed for this test: run `bash .ci/run`");
    assert!(out.status.success(), "{}", output_text(&out));

    // The families both processes expose: the source files name each one in full.
    let exposed: String = ["src/api/metrics.rs", "src/metrics.rs"]
        .iter()
        .map(|f| std::fs::read_to_string(format!("{}/{f}", env!("CARGO_MANIFEST_DIR"))).unwrap())
        .collect();
    let text = std::fs::read_to_string(rules).unwrap();
    let mut watched: Vec<&str> = text
        .match_indices("marketplace_")
        .map(|(i, _)| {
            let rest = &text[i..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect();
    watched.sort();
    watched.dedup();
    assert!(watched.len() >= 5, "{watched:?}");
    for name in watched {
        let family = name.strip_suffix("_count").unwrap_or(name);
        assert!(
            exposed.contains(&format!("\"{family}\"")),
            "the rules watch {name}, which nothing exposes"
        );
    }
}
