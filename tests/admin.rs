//! The admin API (`/api/v1/admin/...`) on the real binary, and the CLI acting through
//! it with `--server` and an operator's token, from a folder without a data directory:
//! operator tokens apart from publishers' and reviewers', publishers added, suspended,
//! resumed, given keys and tokens, reviewers, the signed index's expiries, the
//! curation reloaded, refusals with their status and field, and every change logged
//! with the operator's name.

mod common;

use std::process::Command;

use common::publishing::{Client, admin_cli, definition, marketplace, operator_token, setup_with};
use common::{Server, output_text};
use marketplace::trust::SigningKey;
use serde_json::{Value, json};

struct Admin {
    http: reqwest::Client,
    url: String,
}

impl Admin {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}/api/v1/admin/{path}", self.url));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }
}

fn stdout(o: &std::process::Output) -> String {
    assert!(o.status.success(), "{}", output_text(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[tokio::test]
async fn operators_run_publishers_and_reviewers_through_the_admin_api() {
    use reqwest::Method;
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let curation = dir.path().join("curation.yaml");
    std::fs::write(
        &curation,
        "categories:\n  - name: Databases\n    plugins: [acme/db]\n",
    )
    .unwrap();
    let log = dir.path().join("server.log");
    let server = Server::start_logged(&m.data, &["--curation", curation.to_str().unwrap()], &log);
    let url = server.url.clone();
    let admin = Admin {
        http: reqwest::Client::new(),
        url: url.clone(),
    };
    let client = Client::new(&url);
    let (status, body) = client
        .publish_as(
            "acme",
            &m.acme_token,
            &definition("postgres-operator", "db", "1.0.0"),
            &[&m.acme],
        )
        .await;
    assert_eq!(status, 201, "{body}");

    let alice = operator_token(&m.data, "alice");
    assert!(alice.starts_with("mko_") && alice.len() == 68, "{alice}");

    // Tokens: none, unknown, and the other kinds are refused; alice's is taken.
    assert_eq!(admin.call(Method::GET, "me", None, None).await.0, 401);
    assert_eq!(
        admin
            .call(Method::GET, "me", Some("mko_wrong"), None)
            .await
            .0,
        401
    );
    let (status, body) = admin
        .call(Method::GET, "me", Some(&m.acme_token), None)
        .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the admin API needs an operator's token"),
        "{body}"
    );
    let (status, body) = admin.call(Method::GET, "me", Some(&alice), None).await;
    assert_eq!((status, &body), (200, &json!({"operator": "alice"})));
    // An operator's token publishes nothing.
    let (status, _) = client.publish("acme", Some(&alice), b"x", b"{}").await;
    assert_eq!(status, 403);

    // Suspend over HTTP with the CLI: acme's plugin leaves the catalog; resume brings it back.
    let out = stdout(&admin_cli(&url, &alice, &["publisher", "suspend", "acme"]));
    assert!(out.contains("publisher acme suspended: targets v"), "{out}");
    let listed_for = |url: String| async move {
        let v: Value = reqwest::get(format!("{url}/api/v1/plugins?publisher=acme"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["total"].as_i64().unwrap()
    };
    assert_eq!(listed_for(url.clone()).await, 0);
    let listed = stdout(&admin_cli(&url, &alice, &["publisher", "list"]));
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("acme\t") && l.contains("SUSPENDED")),
        "{listed}"
    );
    let (status, body) = admin
        .call(Method::POST, "publishers/acme/suspend", Some(&alice), None)
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("suspended already")
    );
    let (status, body) = admin
        .call(Method::POST, "publishers/acme/resume", Some(&alice), None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["suspended"], false);
    assert_eq!(listed_for(url.clone()).await, 1);
    let (status, _) = admin
        .call(
            Method::POST,
            "publishers/nobody/suspend",
            Some(&alice),
            None,
        )
        .await;
    assert_eq!(status, 404);

    // A new publisher with its key, through the CLI; its token publishes.
    let gamma = SigningKey::generate().unwrap();
    let out = stdout(&admin_cli(
        &url,
        &alice,
        &["publisher", "add", "gamma", "--key", &gamma.public().hex()],
    ));
    assert!(
        out.contains("publisher gamma added: 1 of 1 key(s)"),
        "{out}"
    );
    let gamma_token = out.lines().last().unwrap().trim().to_owned();
    assert!(gamma_token.starts_with("mkt_"));
    let (status, body) = client
        .publish_as(
            "gamma",
            &gamma_token,
            &definition("cert-manager", "certs", "1.0.0"),
            &[&gamma],
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let again = admin_cli(
        &url,
        &alice,
        &["publisher", "add", "gamma", "--key", &gamma.public().hex()],
    );
    assert!(!again.status.success());
    assert!(
        output_text(&again).contains("already exists") && output_text(&again).contains("409"),
        "{}",
        output_text(&again)
    );
    // Bad requests name their field.
    for (body, field) in [
        (
            json!({"name": "delta", "public_keys": ["abc"]}),
            "public_keys[0]",
        ),
        (json!({"name": "delta", "public_keys": []}), "public_keys"),
        (
            json!({"name": "delta", "public_keys": [gamma.public().hex()], "cosign_keys": ["not a pem"]}),
            "cosign_keys[0]",
        ),
        (
            json!({"name": "delta", "public_keys": [gamma.public().hex()], "extra": 1}),
            "extra",
        ),
        (
            json!({"name": "Delta!", "public_keys": [gamma.public().hex()]}),
            "Delta!",
        ),
    ] {
        let (status, answer) = admin
            .call(Method::POST, "publishers", Some(&alice), Some(body.clone()))
            .await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(
            answer["error"]["message"].as_str().unwrap().contains(field),
            "{body}: {answer}"
        );
    }

    // Tokens and keys.
    let out = stdout(&admin_cli(
        &url,
        &alice,
        &["publisher", "new-token", "gamma"],
    ));
    assert!(out.contains("API token for gamma"), "{out}");
    let out = stdout(&admin_cli(
        &url,
        &alice,
        &["publisher", "revoke-token", "gamma"],
    ));
    assert!(out.contains("revoked 2 token(s) of gamma"), "{out}");
    let (status, _) = client.role("gamma").await.map_or((0, ()), |_| (200, ()));
    assert_eq!(status, 200);
    let newer = SigningKey::generate().unwrap();
    let out = stdout(&admin_cli(
        &url,
        &alice,
        &[
            "publisher",
            "rotate-key",
            "gamma",
            "--key",
            &newer.public().hex(),
        ],
    ));
    assert!(
        out.contains("publisher gamma now signs with 1 of 1 key(s)")
            && out.contains("marketplace resign"),
        "{out}"
    );
    let (status, body) = admin
        .call(Method::GET, "publishers", Some(&alice), None)
        .await;
    assert_eq!(status, 200);
    let gamma_row = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "gamma")
        .unwrap()
        .clone();
    assert_eq!(gamma_row["index"], "stale", "{gamma_row}");
    assert_eq!(gamma_row["key_ids"], json!([newer.public().key_id()]));
    assert_eq!(gamma_row["active_tokens"], 0);

    // Reviewers.
    let out = stdout(&admin_cli(&url, &alice, &["reviewer", "add", "rita"]));
    let rita = out.lines().last().unwrap().trim().to_owned();
    assert!(rita.starts_with("mkr_"), "{out}");
    let listed = stdout(&admin_cli(&url, &alice, &["reviewer", "list"]));
    assert!(listed.starts_with("rita\tactive"), "{listed}");
    let out = stdout(&admin_cli(&url, &alice, &["reviewer", "revoke", "rita"]));
    assert!(out.contains("reviewer rita revoked"));
    assert_eq!(
        admin
            .call(Method::DELETE, "reviewers/rita", Some(&alice), None)
            .await
            .0,
        404
    );

    // The signed index's roles, earliest expiry first.
    let (status, index) = admin
        .call(Method::GET, "signed-index", Some(&alice), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(index["initialized"], true);
    let roles = index["roles"].as_array().unwrap();
    for role in ["root", "targets", "snapshot", "timestamp", "acme", "gamma"] {
        assert!(roles.iter().any(|r| r["role"] == role), "{role}: {index}");
    }
    let expiries: Vec<i64> = roles
        .iter()
        .map(|r| r["expires_at"].as_i64().unwrap())
        .collect();
    assert!(expiries.windows(2).all(|w| w[0] <= w[1]), "{expiries:?}");

    // The curation, read again after the file changed; a broken file keeps the old one.
    let categories = || async {
        let r = reqwest::Client::new()
            .post(format!("{url}/catalog.v1.CatalogService/ListCategories"))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        v["categories"]
            .as_array()
            .map(|c| {
                c.iter()
                    .map(|c| c["name"].as_str().unwrap().to_owned())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    assert_eq!(categories().await, ["Databases"]);
    std::fs::write(
        &curation,
        "categories:\n  - name: Databases\n    plugins: [acme/db]\n  - name: Security\n    tags: [security]\n",
    )
    .unwrap();
    let out = stdout(&admin_cli(&url, &alice, &["curation", "reload"]));
    assert!(out.contains("2 categories"), "{out}");
    assert_eq!(categories().await, ["Databases", "Security"]);
    std::fs::write(&curation, "categories: [").unwrap();
    let (status, body) = admin
        .call(Method::POST, "curation/reload", Some(&alice), None)
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(categories().await, ["Databases", "Security"]);

    // Revoked: the token is refused at once; the CLI says what the server said.
    assert!(
        stdout(&marketplace(&[
            "operator",
            "token",
            "revoke",
            "alice",
            "--data-dir",
            m.data.to_str().unwrap()
        ]))
        .contains("revoked")
    );
    let refused = admin_cli(&url, &alice, &["publisher", "list"]);
    assert!(!refused.status.success());
    assert!(
        output_text(&refused).contains("401"),
        "{}",
        output_text(&refused)
    );
    let listed = stdout(&marketplace(&[
        "operator",
        "token",
        "list",
        "--data-dir",
        m.data.to_str().unwrap(),
    ]));
    assert!(listed.starts_with("alice\trevoked"), "{listed}");

    // Without a token, --server says where to get one.
    let o = Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(["publisher", "list", "--server", &url])
        .env_remove("MARKETPLACE_OPERATOR_TOKEN")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        output_text(&o).contains("MARKETPLACE_OPERATOR_TOKEN"),
        "{}",
        output_text(&o)
    );

    // Every change is in the server's log with who made it; reads are not.
    drop(server);
    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let by_alice = |message: &str| {
        lines
            .iter()
            .filter(|l| l["fields"]["message"] == message && l["fields"]["operator"] == "alice")
            .count()
    };
    for (message, times) in [
        ("publisher suspension changed", 2),
        ("publisher added", 1),
        ("publisher token issued", 1),
        ("publisher tokens revoked", 1),
        ("publisher keys rotated", 1),
        ("reviewer added", 1),
        ("reviewer revoked", 1),
        ("curation reloaded", 1),
    ] {
        assert_eq!(by_alice(message), times, "{message}: {lines:#?}");
    }
}
