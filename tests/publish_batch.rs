//! Publishing several definitions as one role version: all or none.

mod common;

use std::process::Command;

use common::Server;
use common::publishing::{Client, YEAR, assert_refused, definition, setup};
use marketplace::trust::publisher::plan::build_role_adding;

#[tokio::test]
async fn a_batch_publishes_as_one_role_version_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let (data, key, token, _) = setup(dir.path());
    let server = Server::start(&data);
    let c = Client::new(&server.url);
    let key_file = dir.path().join("acme.pem");
    key.save_new(&key_file).unwrap();
    let publish = |files: &[&std::path::Path]| {
        let mut args = vec!["publish".to_owned()];
        args.extend(files.iter().map(|f| f.to_str().unwrap().to_owned()));
        args.extend(["--server".into(), server.url.clone(), "--key".into()]);
        args.push(key_file.to_str().unwrap().into());
        Command::new(env!("CARGO_BIN_EXE_marketplace"))
            .args(args)
            .env("MARKETPLACE_TOKEN", &token)
            .output()
            .unwrap()
    };
    let write = |name: &str, def: &marketplace::definition::Definition| {
        let path = dir.path().join(name);
        std::fs::write(&path, &def.bytes).unwrap();
        path
    };
    let a = write("a.yaml", &definition("gateway", "edge-gateway", "1.0.0"));
    let b = write("b.yaml", &definition("storage", "fast-disk", "1.0.0"));
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: fundament.io/v1\nkind: PluginDefinition\n",
    )
    .unwrap();

    // One invalid file stops the whole batch before anything is uploaded.
    let out = publish(&[&a, &bad]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.yaml") && err.contains("not publishing"),
        "{err}"
    );
    assert!(c.role("acme").await.is_none(), "nothing was published");

    let out = publish(&[&a, &b]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("published acme/edge-gateway 1.0.0")
            && text.contains("published acme/fast-disk 1.0.0")
            && text.matches("as role version 1").count() == 2,
        "{text}"
    );
    let role = c.role("acme").await.unwrap();
    assert_eq!(role.signed.targets.len(), 2);

    // Over HTTP: a role that adds only one of the two uploaded definitions is refused,
    // and so is a batch with one invalid definition; neither leaves anything behind.
    let c1 = definition("gateway", "edge-gateway", "1.1.0");
    let c2 = definition("storage", "fast-disk", "1.1.0");
    let now = marketplace::clock::now();
    let post = async |defs: Vec<String>, role: Vec<u8>| {
        let body = serde_json::json!({
            "definitions": defs,
            "role": String::from_utf8(role).unwrap(),
        });
        c.post("acme/definitions", Some(&token), &body).await
    };
    let text_of =
        |d: &marketplace::definition::Definition| String::from_utf8(d.bytes.clone()).unwrap();
    let only_one = build_role_adding("acme", Some(&role), &[(&c1, false)], &[&key], 1, YEAR, now)
        .await
        .unwrap();
    let (status, body) = post(vec![text_of(&c1), text_of(&c2)], only_one).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("rejected")),
        "{body}"
    );
    let both = build_role_adding(
        "acme",
        Some(&role),
        &[(&c1, false), (&c2, false)],
        &[&key],
        1,
        YEAR,
        now,
    )
    .await
    .unwrap();
    let (status, body) = post(vec![text_of(&c1), "kind: nonsense\n".into()], both.clone()).await;
    assert_refused(status, &body, 422, "invalid_definition", "definition #2");
    assert_eq!(c.role("acme").await.unwrap().signed.version.get(), 1);

    let (status, body) = post(vec![text_of(&c1), text_of(&c2)], both).await;
    assert_eq!(
        (status, body["role_version"].as_u64()),
        (201, Some(2)),
        "{body}"
    );
    assert_eq!(body["changed"].as_array().unwrap().len(), 2);
}
