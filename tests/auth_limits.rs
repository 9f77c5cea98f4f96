//! Rate limits on failed publisher-token authentication: per client address and per
//! publisher name, answered with 429 and `Retry-After`, while valid tokens keep working.
//! In-process through `app()` (client addresses as `ConnectInfo`), then against the
//! real server with clients bound to distinct loopback addresses.

mod common;

use std::net::{IpAddr, SocketAddr};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode, header};
use common::publishing::*;
use common::{NOW, Reply, Server, send, state};
use marketplace::AppState;
use marketplace::trust::SigningKey;

/// The burst of failures an address gets (`ratelimit::Limits::default`).
const ADDRESS_BURST: usize = 10;
/// The burst of failures a publisher name gets.
const PUBLISHER_BURST: usize = 30;

async fn with_acme() -> (AppState, String) {
    let s = state().await;
    let key = SigningKey::generate().unwrap();
    let token =
        marketplace::trust::server::publishers::add(&s.store, "acme", &[key.public()], 1, NOW)
            .await
            .unwrap();
    (s, token)
}

/// A request to `uri` from `from` (none: no `ConnectInfo`, as with a bare `oneshot`),
/// with `authorization` and `forwarded` (`X-Forwarded-For`) headers when given.
struct Call<'a> {
    method: &'a str,
    uri: &'a str,
    from: Option<&'a str>,
    authorization: Option<String>,
    forwarded: Option<&'a str>,
}

impl<'a> Call<'a> {
    fn whoami(from: Option<&'a str>, token: &str) -> Self {
        Call {
            method: "GET",
            uri: "/api/v1/publishers/me",
            from,
            authorization: Some(format!("Bearer {token}")),
            forwarded: None,
        }
    }

    /// A publish with an empty body: past the token check it is refused as 400
    /// `bad_request`, which shows the token was accepted.
    fn publish(from: Option<&'a str>, token: &str) -> Self {
        Call {
            method: "POST",
            uri: "/api/v1/publishers/acme/definitions",
            ..Call::whoami(from, token)
        }
    }

    async fn send(self, s: &AppState) -> Reply {
        let mut req = Request::builder().method(self.method).uri(self.uri);
        if let Some(a) = self.authorization {
            req = req.header(header::AUTHORIZATION, a);
        }
        if let Some(f) = self.forwarded {
            req = req.header("x-forwarded-for", f);
        }
        let body = if self.method == "POST" {
            req = req.header(header::CONTENT_TYPE, "application/json");
            Body::from("{}")
        } else {
            Body::empty()
        };
        let mut req = req.body(body).unwrap();
        if let Some(ip) = self.from {
            let addr = SocketAddr::new(ip.parse::<IpAddr>().unwrap(), 40_000);
            req.extensions_mut().insert(ConnectInfo(addr));
        }
        send(s, req).await
    }
}

/// 429 `rate_limited` with a `Retry-After` of whole seconds up to `max`, and the message
/// naming when to retry.
fn assert_limited(r: &Reply, max: u64, phrase: &str) {
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.body);
    let body = r.json();
    assert_eq!(body["error"]["code"], "rate_limited");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(phrase) && message.contains("retry in"),
        "{message}"
    );
    let after: u64 = r.headers[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=max).contains(&after), "Retry-After {after}");
}

/// Proof that the request got past authentication: the publish handler read the body.
fn assert_authenticated_publish(r: &Reply) {
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body.contains("give either `definition`"), "{}", r.body);
}

#[tokio::test]
async fn an_address_over_its_failure_budget_is_refused_before_any_token_check() {
    let (s, token) = with_acme().await;
    let guesser = Some("192.0.2.1");
    // Every kind of failure counts: unknown tokens, a missing or malformed header.
    for i in 0..ADDRESS_BURST {
        let mut call = Call::whoami(guesser, &format!("mkt_guess_{i}"));
        match i {
            0 => call.authorization = None,
            1 => call.authorization = Some("Basic YWNtZTpzZWNyZXQ=".into()),
            _ => {}
        }
        assert_eq!(call.send(&s).await.status, StatusCode::UNAUTHORIZED, "{i}");
    }
    let r = Call::whoami(guesser, "mkt_one_more").send(&s).await;
    assert_limited(&r, 6, "from this address");
    // Even the right token is not looked at from that address, on every token route.
    assert_limited(
        &Call::whoami(guesser, &token).send(&s).await,
        6,
        "from this address",
    );
    assert_limited(
        &Call::publish(guesser, &token).send(&s).await,
        6,
        "from this address",
    );
    // Another address with the valid token is not affected.
    let r = Call::whoami(Some("192.0.2.2"), &token).send(&s).await;
    assert_eq!(
        (r.status, r.json()["publisher"].as_str()),
        (StatusCode::OK, Some("acme"))
    );
    assert_authenticated_publish(&Call::publish(Some("192.0.2.2"), &token).send(&s).await);
    // Routes without a token check are not limited at all.
    let mut page = Call::whoami(guesser, &token);
    page.uri = "/api/v1/publishers/acme/role";
    page.authorization = None;
    assert_eq!(page.send(&s).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn valid_tokens_spend_no_budget() {
    let (s, token) = with_acme().await;
    for _ in 0..3 * ADDRESS_BURST {
        let r = Call::whoami(Some("192.0.2.1"), &token).send(&s).await;
        assert_eq!(r.status, StatusCode::OK);
    }
    // Another publisher's token is a refusal (403), not a failed authentication.
    let key = SigningKey::generate().unwrap();
    let beta =
        marketplace::trust::server::publishers::add(&s.store, "beta", &[key.public()], 1, NOW)
            .await
            .unwrap();
    for _ in 0..2 * ADDRESS_BURST {
        let r = Call::publish(Some("192.0.2.1"), &beta).send(&s).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    }
    assert_authenticated_publish(&Call::publish(Some("192.0.2.1"), &token).send(&s).await);
}

#[tokio::test]
async fn guessing_spread_over_addresses_locks_new_addresses_out_of_that_publisher_only() {
    let (s, token) = with_acme().await;
    // acme's own machine authenticates before the attack.
    let home = Some("198.51.100.7");
    assert_eq!(
        Call::whoami(home, &token).send(&s).await.status,
        StatusCode::OK
    );
    // 30 guesses against acme from 6 addresses: none of them reaches its own budget.
    for i in 0..PUBLISHER_BURST {
        let from = format!("203.0.113.{}", i % 6);
        let r = Call::publish(Some(&from), &format!("mkt_guess_{i}"))
            .send(&s)
            .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{i}: {}", r.body);
    }
    // A new address is refused for acme, even with acme's valid token...
    let newcomer = Some("192.0.2.50");
    assert_limited(
        &Call::publish(newcomer, &token).send(&s).await,
        2,
        "for publisher acme from new addresses",
    );
    // ...but not where no publisher is named; and each guesser's address is still
    // within its own budget there.
    for from in [newcomer, Some("203.0.113.0")] {
        let r = Call::whoami(from, &token).send(&s).await;
        assert_eq!(r.status, StatusCode::OK, "{from:?}: {}", r.body);
    }
    // The machine that authenticated recently keeps publishing through the attack.
    assert_authenticated_publish(&Call::publish(home, &token).send(&s).await);
}

#[tokio::test]
async fn requests_of_unknown_origin_share_one_budget() {
    let (s, token) = with_acme().await;
    for i in 0..ADDRESS_BURST {
        let r = Call::whoami(None, &format!("mkt_guess_{i}")).send(&s).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    }
    assert_limited(
        &Call::whoami(None, &token).send(&s).await,
        6,
        "from this address",
    );
    assert_eq!(
        Call::whoami(Some("192.0.2.1"), &token)
            .send(&s)
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn x_forwarded_for_counts_only_when_the_operator_trusts_it() {
    let proxy = Some("10.0.0.1");
    // Not trusted (the default): a client cannot escape its budget by inventing headers.
    let (s, token) = with_acme().await;
    for i in 0..ADDRESS_BURST {
        let mut call = Call::whoami(proxy, &format!("mkt_guess_{i}"));
        let invented = format!("198.51.100.{i}");
        call.forwarded = Some(&invented);
        assert_eq!(call.send(&s).await.status, StatusCode::UNAUTHORIZED);
    }
    let mut call = Call::whoami(proxy, &token);
    call.forwarded = Some("198.51.100.200");
    assert_limited(&call.send(&s).await, 6, "from this address");

    // Trusted (behind a proxy): the rightmost entry, the one the proxy appended, is
    // the client; whatever the client put left of it does not matter.
    let (mut s, token) = with_acme().await;
    s.trust_forwarded_for = true;
    for i in 0..ADDRESS_BURST {
        let mut call = Call::whoami(proxy, &format!("mkt_guess_{i}"));
        let chain = format!("203.0.113.{i}, 192.0.2.10");
        call.forwarded = Some(&chain);
        assert_eq!(call.send(&s).await.status, StatusCode::UNAUTHORIZED);
    }
    let mut call = Call::whoami(proxy, &token);
    call.forwarded = Some("192.0.2.10");
    assert_limited(&call.send(&s).await, 6, "from this address");
    // Other clients behind the same proxy keep working.
    let mut call = Call::whoami(proxy, &token);
    call.forwarded = Some("192.0.2.10, 192.0.2.11");
    assert_eq!(call.send(&s).await.status, StatusCode::OK);
}

/// The real server, clients on distinct loopback addresses (Linux routes 127.0.0.0/8 to
/// `lo`): guessing from one address and from many, while acme keeps publishing with the
/// CLI.
#[tokio::test]
async fn over_tcp_guessers_are_limited_while_the_publisher_keeps_publishing() {
    let dir = tempfile::tempdir().unwrap();
    let (data, key, token, _) = setup(dir.path());
    let server = Server::start(&data);
    let from = |ip: &str| Client {
        http: reqwest::Client::builder()
            .local_address(ip.parse::<IpAddr>().unwrap())
            .build()
            .unwrap(),
        url: server.url.clone(),
    };
    let home = from("127.0.0.1");
    let (status, body) = home
        .publish_signed(
            &token,
            &definition("gateway", "edge-gateway", "1.0.0"),
            &[&key],
        )
        .await;
    assert_eq!(status, 201, "{body}");

    // One address guessing at whoami: limited after its burst, valid token or not.
    let guesser = from("127.0.0.2");
    let whoami = |c: &Client, token: &str| {
        c.http
            .get(format!("{}/api/v1/publishers/me", c.url))
            .bearer_auth(token)
            .send()
    };
    for i in 0..ADDRESS_BURST {
        let r = whoami(&guesser, &format!("mkt_guess_{i}")).await.unwrap();
        assert_eq!(r.status(), 401, "{i}");
    }
    let r = whoami(&guesser, &token).await.unwrap();
    assert_eq!(r.status(), 429);
    let after: u64 = r.headers()[header::RETRY_AFTER.as_str()]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=6).contains(&after), "{after}");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    let r = whoami(&from("127.0.0.3"), &token).await.unwrap();
    assert_eq!(r.status(), 200, "another address is not limited");

    // Guessing against acme spread over six more addresses, five each.
    let guessers: Vec<Client> = (4..10).map(|n| from(&format!("127.0.0.{n}"))).collect();
    for i in 0..PUBLISHER_BURST {
        let (status, body) = guessers[i % guessers.len()]
            .post(
                "acme/definitions",
                Some(&format!("mkt_guess_{i}")),
                &serde_json::json!({}),
            )
            .await;
        assert_refused(status, &body, 401, "unauthorized", "unknown or revoked");
    }
    // A machine acme never used is locked out of acme's routes for now...
    let (status, body) = from("127.0.0.20")
        .publish_signed(
            &token,
            &definition("gateway", "edge-gateway", "1.1.0"),
            &[&key],
        )
        .await;
    assert_refused(status, &body, 429, "rate_limited", "from new addresses");

    // ...while acme's own machine keeps publishing, with the CLI (whoami, then upload).
    let def = definition("gateway", "edge-gateway", "1.2.0");
    let file = dir.path().join("edge-gateway-1.2.0.yaml");
    std::fs::write(&file, &def.bytes).unwrap();
    let key_file = dir.path().join("acme.pem");
    key.save_new(&key_file).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .arg("publish")
        .arg(&file)
        .args(["--server", &server.url, "--key"])
        .arg(&key_file)
        .env("MARKETPLACE_TOKEN", &token)
        .output()
        .unwrap();
    let text = common::output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("published acme/edge-gateway 1.2.0") && text.contains("role version 2"),
        "{text}"
    );
}
