//! Publishing through the HTTP API into the signed index, against the real server.
//! Each refusal the issue lists has its own assertion with status and error code.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Server, python_tuf, trusted_root};
use marketplace::definition::Definition;
use marketplace::trust::SigningKey;
use marketplace::trust::publisher::plan::{build_role, sign_role};
use tough::schema::{Signed, Targets};

use common::publishing::*;

#[tokio::test]
async fn publishing_adds_signed_targets_that_tuf_clients_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (data, key, token, _) = setup(dir.path());
    let server = Server::start(&data);
    let c = Client::new(&server.url);
    assert!(c.role("acme").await.is_none(), "nothing published yet");

    let first = definition("gateway", "edge-gateway", "v1.0.0");
    let (status, body) = c.publish_signed(&token, &first, &[&key]).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        (body["role_version"].as_u64(), body["hash"].as_str()),
        (Some(1), Some(first.hash.as_str()))
    );
    let second = definition("storage", "fast-disk", "2.1.0");
    let (status, body) = c.publish_signed(&token, &second, &[&key]).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["role_version"], 2);

    // The catalog lists them, with the signer recorded.
    let list: serde_json::Value =
        reqwest::get(format!("{}/api/v1/plugins?publisher=acme", server.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(list["total"], 2);

    // Our tough-based client verifies the whole index: built-ins and acme's targets.
    let root = trusted_root(&server.url).await;

    // Pages: the signer of each version, and every role's current version and expiry.
    let page = reqwest::get(format!("{}/plugins/acme/fast-disk", server.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let key_id = key.public().key_id();
    assert!(
        page.contains(&format!(
            "title=\"publisher key {key_id}\">{}</code>",
            &key_id[..12]
        )),
        "signer shown"
    );
    let index = reqwest::get(format!("{}/signed-index", server.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (role, version) in [
        ("root", 1),
        ("targets", 2),
        ("snapshot", 3),
        ("timestamp", 3),
        ("fundament", 1),
        ("acme", 2),
    ] {
        let row = format!("<tr data-role=\"{role}\">");
        let at = index.find(&row).unwrap_or_else(|| panic!("{role} listed"));
        let row_html = &index[at..at + index[at..].find("</tr>").unwrap()];
        let cells: Vec<&str> = row_html
            .split("<td>")
            .skip(1)
            .map(|c| c.split("</td>").next().unwrap())
            .collect();
        assert_eq!(cells[2], version.to_string(), "{role}: {row_html}");
    }
    assert!(index.contains("valid for"));

    // python-tuf, the independent referee, verifies and downloads acme's definitions.
    let root_path = dir.path().join("root.json");
    std::fs::write(&root_path, &root).unwrap();
    let names: Vec<String> = [&first, &second]
        .iter()
        .map(|d| format!("acme/{}/{}.yaml", d.name(), d.version))
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let report = python_tuf(&server.url, &root_path, &dir.path().join("py"), &refs);
    for (def, name) in [&first, &second].iter().zip(&names) {
        assert_eq!(
            report["targets"][name]["sha256"].as_str(),
            def.hash.strip_prefix("sha256:"),
            "{name}"
        );
    }

    let base = url::Url::parse(&format!("{}/", server.url)).unwrap();
    let repo = common::tough::load(&root, &base, &dir.path().join("tough"))
        .await
        .unwrap();
    for def in [&first, &second] {
        let name =
            tough::TargetName::new(format!("acme/{}/{}.yaml", def.name(), def.version)).unwrap();
        use tough::IntoVec;
        let bytes = repo
            .read_target(&name)
            .await
            .unwrap()
            .expect("published target")
            .into_vec()
            .await
            .unwrap();
        assert_eq!(bytes, def.bytes);
    }
    assert!(repo.delegated_role("fundament").is_some() && repo.delegated_role("acme").is_some());
}

/// A repository where acme has published `edge-gateway` 1.0.0, ready for a bad upload.
struct Refusals {
    _dir: tempfile::TempDir,
    _server: Server,
    c: Client,
    key: SigningKey,
    token: String,
    beta_token: String,
    data: PathBuf,
    v1: Signed<Targets>,
    first: Definition,
    next: Definition,
}

impl Refusals {
    async fn new() -> Refusals {
        let dir = tempfile::tempdir().unwrap();
        let (data, key, token, beta_token) = setup(dir.path());
        let server = Server::start(&data);
        let c = Client::new(&server.url);
        let first = definition("gateway", "edge-gateway", "1.0.0");
        let (status, _) = c.publish_signed(&token, &first, &[&key]).await;
        assert_eq!(status, 201);
        let v1 = c.role("acme").await.unwrap();
        Refusals {
            _dir: dir,
            _server: server,
            c,
            key,
            token,
            beta_token,
            data,
            v1,
            first,
            next: definition("gateway", "edge-gateway", "1.1.0"),
        }
    }

    /// The next version signed correctly by acme.
    async fn good_role(&self) -> Vec<u8> {
        build_role(
            "acme",
            Some(&self.v1),
            &self.next,
            &[&self.key],
            1,
            YEAR,
            marketplace::clock::now(),
        )
        .await
        .unwrap()
    }

    /// Uploads and checks status, error code and a phrase of the message; then checks
    /// the refusal changed nothing: the good upload still applies as role version 2.
    async fn expect(
        &self,
        token: Option<&str>,
        def: &[u8],
        role: &[u8],
        status: u16,
        code: &str,
        phrase: &str,
    ) {
        let (got, body) = self.c.publish("acme", token, def, role).await;
        assert_eq!(
            (got, body["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}"
        );
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(phrase),
            "message {message:?} lacks {phrase:?}"
        );
        let (ok, body) = self
            .c
            .publish(
                "acme",
                Some(&self.token),
                &self.next.bytes,
                &self.good_role().await,
            )
            .await;
        assert_eq!(
            (ok, body["role_version"].as_u64()),
            (201, Some(2)),
            "{body}"
        );
    }

    /// A hand-built role version 2 with these targets, signed by acme's key.
    async fn role_with(&self, targets: Vec<(String, &Definition)>) -> Vec<u8> {
        let mut role = self.v1.signed.clone();
        role.version = std::num::NonZeroU64::new(2).unwrap();
        for (name, def) in targets {
            role.targets.insert(
                tough::TargetName::new(name).unwrap(),
                marketplace::trust::metadata::target(def, false),
            );
        }
        sign_role("acme", role, &[&self.key], 1).await.unwrap()
    }
}

#[tokio::test]
async fn refuses_a_missing_token() {
    let r = Refusals::new().await;
    r.expect(
        None,
        &r.next.bytes,
        &r.good_role().await,
        401,
        "unauthorized",
        "Authorization: Bearer",
    )
    .await;
}

#[tokio::test]
async fn refuses_an_invalid_token() {
    let r = Refusals::new().await;
    r.expect(
        Some("mkt_nope"),
        &r.next.bytes,
        &r.good_role().await,
        401,
        "unauthorized",
        "unknown or revoked",
    )
    .await;
}

#[tokio::test]
async fn refuses_another_publishers_token() {
    let r = Refusals::new().await;
    r.expect(
        Some(&r.beta_token.clone()),
        &r.next.bytes,
        &r.good_role().await,
        403,
        "forbidden",
        "another publisher",
    )
    .await;
}

#[tokio::test]
async fn refuses_a_wrong_publisher_key() {
    let r = Refusals::new().await;
    let rogue = SigningKey::generate().unwrap();
    let role = build_role(
        "acme",
        Some(&r.v1),
        &r.next,
        &[&rogue],
        1,
        YEAR,
        marketplace::clock::now(),
    )
    .await
    .unwrap();
    r.expect(
        Some(&r.token),
        &r.next.bytes,
        &role,
        403,
        "bad_signature",
        "role acme is not signed by 1 of the publisher keys",
    )
    .await;
}

#[tokio::test]
async fn refuses_signatures_below_the_threshold() {
    let r = Refusals::new().await;
    // gamma needs 2 of its 2 keys and signs with one.
    let (k1, k2) = (
        SigningKey::generate().unwrap(),
        SigningKey::generate().unwrap(),
    );
    let gamma_token = add_publisher(&r.data, "gamma", &[&k1, &k2], 2);
    let def = definition("storage", "gamma-disk", "1.0.0");
    let one = build_role(
        "gamma",
        None,
        &def,
        &[&k1],
        1,
        YEAR,
        marketplace::clock::now(),
    )
    .await
    .unwrap();
    let (status, body) =
        r.c.publish("gamma", Some(&gamma_token), &def.bytes, &one)
            .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("bad_signature")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("role gamma is not signed by 2 of the publisher keys")
    );
    let both = build_role(
        "gamma",
        None,
        &def,
        &[&k1, &k2],
        2,
        YEAR,
        marketplace::clock::now(),
    )
    .await
    .unwrap();
    assert_eq!(
        r.c.publish("gamma", Some(&gamma_token), &def.bytes, &both)
            .await
            .0,
        201
    );
}

#[tokio::test]
async fn refuses_a_target_outside_the_publishers_path() {
    let r = Refusals::new().await;
    let role = r
        .role_with(vec![
            (format!("acme/{}/1.1.0.yaml", r.next.name()), &r.next),
            ("other/edge-gateway/1.1.0.yaml".into(), &r.next),
        ])
        .await;
    r.expect(
        Some(&r.token),
        &r.next.bytes,
        &role,
        422,
        "rejected",
        "outside acme/*/*",
    )
    .await;
}

#[tokio::test]
async fn refuses_changing_a_published_version() {
    let r = Refusals::new().await;
    let changed = definition("storage", "edge-gateway", "1.0.0");
    let role = r
        .role_with(vec![(
            format!("acme/edge-gateway/{}.yaml", changed.version),
            &changed,
        )])
        .await;
    r.expect(
        Some(&r.token),
        &changed.bytes,
        &role,
        422,
        "rejected",
        "immutable",
    )
    .await;
}

#[tokio::test]
async fn refuses_removing_a_published_version() {
    let r = Refusals::new().await;
    let mut role = r.v1.signed.clone();
    role.targets.clear();
    role.version = std::num::NonZeroU64::new(2).unwrap();
    role.targets.insert(
        tough::TargetName::new(format!("acme/edge-gateway/{}.yaml", r.next.version)).unwrap(),
        marketplace::trust::metadata::target(&r.next, false),
    );
    let signed = sign_role("acme", role, &[&r.key], 1).await.unwrap();
    r.expect(
        Some(&r.token),
        &r.next.bytes,
        &signed,
        422,
        "rejected",
        "changed or removed",
    )
    .await;
}

#[tokio::test]
async fn refuses_a_version_that_is_not_incremented() {
    let r = Refusals::new().await;
    let replay = build_role(
        "acme",
        None,
        &r.first,
        &[&r.key],
        1,
        YEAR,
        marketplace::clock::now(),
    )
    .await
    .unwrap();
    r.expect(
        Some(&r.token),
        &r.first.bytes,
        &replay,
        409,
        "stale",
        "current version is 1",
    )
    .await;
}

#[tokio::test]
async fn refuses_bytes_that_do_not_match_the_target() {
    let r = Refusals::new().await;
    let other = definition("gateway", "edge-gateway", "1.2.0");
    r.expect(
        Some(&r.token),
        &other.bytes,
        &r.good_role().await,
        422,
        "rejected",
        "acme/edge-gateway/1.2.0.yaml",
    )
    .await;
}

#[tokio::test]
async fn refuses_an_invalid_definition() {
    let r = Refusals::new().await;
    r.expect(
        Some(&r.token),
        b"apiVersion: nope\n",
        &r.good_role().await,
        422,
        "invalid_definition",
        "missing field",
    )
    .await;
}

#[tokio::test]
async fn of_two_concurrent_publishes_one_wins_and_the_other_is_told_to_retry() {
    let dir = tempfile::tempdir().unwrap();
    let (data, key, token, _) = setup(dir.path());
    let server = Server::start(&data);
    let c = Client::new(&server.url);
    let a = definition("gateway", "alpha", "1.0.0");
    let b = definition("storage", "bravo", "1.0.0");
    // Both signed on top of the same (empty) state.
    let (ra, rb) = (
        signed_role(&c, &a, &[&key]).await,
        signed_role(&c, &b, &[&key]).await,
    );
    let ((sa, _), (sb, body_b)) = tokio::join!(
        c.publish("acme", Some(&token), &a.bytes, &ra),
        c.publish("acme", Some(&token), &b.bytes, &rb)
    );
    let mut statuses = [sa, sb];
    statuses.sort();
    assert_eq!(statuses, [201, 409], "loser: {body_b}");
    // The loser signs again on fresh metadata and succeeds.
    let (retry_def, retry_role) = if sa == 409 {
        (&a, signed_role(&c, &a, &[&key]).await)
    } else {
        (&b, signed_role(&c, &b, &[&key]).await)
    };
    let (status, _) = c
        .publish("acme", Some(&token), &retry_def.bytes, &retry_role)
        .await;
    assert_eq!(status, 201);
}

#[tokio::test]
async fn the_publish_cli_signs_uploads_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let (data, key, token, _) = setup(dir.path());
    let server = Server::start(&data);
    let key_file = dir.path().join("acme.pem");
    key.save_new(&key_file).unwrap();
    let publish = |file: &Path, key: &Path| {
        Command::new(env!("CARGO_BIN_EXE_marketplace"))
            .args([
                "publish",
                file.to_str().unwrap(),
                "--server",
                &server.url,
                "--key",
                key.to_str().unwrap(),
            ])
            .env("MARKETPLACE_TOKEN", &token)
            .output()
            .unwrap()
    };
    for (i, version) in ["1.0.0", "1.1.0"].into_iter().enumerate() {
        let def = definition("backup", "vault-backup", version);
        let file = dir.path().join(format!("vault-backup-{version}.yaml"));
        std::fs::write(&file, &def.bytes).unwrap();
        let out = publish(&file, &key_file);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("published acme/vault-backup {version}"))
                && text.contains(&format!("role version {}", i + 1)),
            "{text}"
        );
    }
    let versions: serde_json::Value = reqwest::get(format!(
        "{}/api/v1/plugins/acme/vault-backup/versions",
        server.url
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(versions["items"].as_array().unwrap().len(), 2);

    // Validated locally first, with the same messages as `marketplace validate`.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: fundament.io/v1\nkind: PluginDefinition\n",
    )
    .unwrap();
    let out = publish(&bad, &key_file);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("missing field"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Another key than the registered one: the CLI refuses to build on metadata it did
    // not sign, before uploading anything.
    let rogue = dir.path().join("rogue.pem");
    SigningKey::generate().unwrap().save_new(&rogue).unwrap();
    let file = dir.path().join("vault-backup-2.0.0.yaml");
    std::fs::write(&file, definition("backup", "vault-backup", "2.0.0").bytes).unwrap();
    let out = publish(&file, &rogue);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("none of these keys signed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn yank_hides_a_version_but_keeps_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (data, key, token, _) = setup(dir.path());
    let server = Server::start(&data);
    let c = Client::new(&server.url);
    let old = definition("gateway", "edge-gateway", "1.0.0");
    let new = definition("gateway", "edge-gateway", "1.1.0");
    for def in [&old, &new] {
        let (status, body) = c.publish_signed(&token, def, &[&key]).await;
        assert_eq!(status, 201, "{body}");
    }
    let key_file = dir.path().join("acme.pem");
    key.save_new(&key_file).unwrap();
    let yank = |what: &str| {
        Command::new(env!("CARGO_BIN_EXE_marketplace"))
            .args([
                "yank",
                what,
                "--server",
                &server.url,
                "--key",
                key_file.to_str().unwrap(),
            ])
            .env("MARKETPLACE_TOKEN", &token)
            .output()
            .unwrap()
    };
    let out = yank("acme/edge-gateway@v1.1.0");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("yanked acme/edge-gateway/1.1.0.yaml (role version 3)")
    );

    // Listings move to the newest version still listed; the yanked one is marked.
    let get = |path: String| {
        let url = format!("{}{path}", server.url);
        async move { reqwest::get(url).await.unwrap() }
    };
    let detail: serde_json::Value = get("/api/v1/plugins/acme/edge-gateway".into())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(detail["latest"]["version"], "1.0.0");
    let versions: serde_json::Value = get("/api/v1/plugins/acme/edge-gateway/versions".into())
        .await
        .json()
        .await
        .unwrap();
    let yanked: Vec<(&str, bool)> = versions["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_str().unwrap(),
                v["yanked"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(yanked, [("1.1.0", true), ("1.0.0", false)]);
    let page = get("/plugins/acme/edge-gateway".into())
        .await
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("badge danger\">yanked"),
        "yanked badge on the page"
    );
    // Still downloadable by hash, and python-tuf sees the yank in the signed custom field.
    let hex = new.hash.trim_start_matches("sha256:");
    let raw = get(format!("/tuf/targets/acme/edge-gateway/{hex}.1.1.0.yaml")).await;
    assert_eq!(raw.status(), 200);
    assert_eq!(raw.bytes().await.unwrap().to_vec(), new.bytes);
    let root_path = dir.path().join("root.json");
    std::fs::write(&root_path, trusted_root(&server.url).await).unwrap();
    let report = python_tuf(
        &server.url,
        &root_path,
        &dir.path().join("py"),
        &["acme/edge-gateway/1.1.0.yaml"],
    );
    assert_eq!(
        report["targets"]["acme/edge-gateway/1.1.0.yaml"]["custom"]["yanked"],
        true
    );

    // Yanking it again changes nothing and is refused; un-yanking is refused too.
    let again = yank("acme/edge-gateway@1.1.0");
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("newly yanked"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let mut role = c.role("acme").await.unwrap().signed;
    role.version = std::num::NonZeroU64::new(role.version.get() + 1).unwrap();
    for t in role.targets.values_mut() {
        t.custom
            .insert("yanked".into(), serde_json::Value::Bool(false));
    }
    let signed = sign_role("acme", role, &[&key], 1).await.unwrap();
    let resp = c
        .http
        .post(format!("{}/api/v1/publishers/acme/yank", server.url))
        .bearer_auth(&token)
        .json(&serde_json::json!({ "role": String::from_utf8(signed.clone()).unwrap() }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422, "un-yanking rewrites a published target");

    // Yanking the last listed version removes the plugin from listings.
    assert!(yank("acme/edge-gateway@1.0.0").status.success());
    let list: serde_json::Value = get("/api/v1/plugins?publisher=acme".into())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list["total"], 0);
}
