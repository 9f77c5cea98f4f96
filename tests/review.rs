//! Publishing with review, on the real binary: `registry.v1.PublicationService` and
//! `admin.v1.ReviewService` driven RPC by RPC in binary protobuf by `buf curl` (the
//! independent Connect client) and in proto3 JSON over plain HTTP (`rpcs`); the whole
//! flow with our CLI (submit, request changes, upload again, approve, `publish
//! --approved`, python-tuf downloading it) and who may do what (`flow`).

mod common;
#[path = "review/flow.rs"]
mod flow;
#[path = "review/rpcs.rs"]
mod rpcs;
#[path = "review/upgrade.rs"]
mod upgrade;

use std::path::Path;

use common::publishing::marketplace;
use common::{Server, buf};
use serde_json::Value;

/// How a call is encoded on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    /// `buf curl`: binary protobuf, as Fundament's Go components send.
    Binary,
    /// proto3 JSON over plain HTTP, as Fundament's console sends.
    Json,
}

/// One Connect call's outcome: the response message as proto3 JSON, or the error code
/// and message.
#[derive(Debug)]
enum Answer {
    Ok(Value),
    Err { code: String, message: String },
}

impl Answer {
    #[track_caller]
    fn ok(self) -> Value {
        match self {
            Answer::Ok(v) => v,
            Answer::Err { code, message } => panic!("expected success, got {code}: {message}"),
        }
    }

    #[track_caller]
    fn code(&self) -> &str {
        match self {
            Answer::Ok(v) => panic!("expected an error, got {v}"),
            Answer::Err { code, .. } => code,
        }
    }

    #[track_caller]
    fn message(&self) -> &str {
        match self {
            Answer::Ok(v) => panic!("expected an error, got {v}"),
            Answer::Err { message, .. } => message,
        }
    }
}

/// Calls `service`'s `method` on `server` with `token` and `data` (JSON), encoded as
/// `codec` says.
async fn rpc(
    server: &Server,
    codec: Codec,
    service: &str,
    method: &str,
    token: &str,
    data: Value,
) -> Answer {
    let url = format!("{}/{service}/{method}", server.url);
    let auth = format!("Authorization: Bearer {token}");
    match codec {
        Codec::Binary => {
            let call = buf::curl(&url, &data.to_string(), &[&auth]);
            if call.exit == 0 {
                Answer::Ok(call.json())
            } else {
                // buf prints the Connect error as JSON on stderr.
                let printed: Value = serde_json::from_str(&call.stderr)
                    .unwrap_or_else(|_| panic!("buf printed no JSON error: {}", call.stderr));
                assert_eq!(printed["code"], call.code(), "{}", call.stderr);
                Answer::Err {
                    code: call.code().to_owned(),
                    message: printed["message"].as_str().unwrap_or_default().to_owned(),
                }
            }
        }
        Codec::Json => {
            let answer = reqwest::Client::new()
                .post(&url)
                .bearer_auth(token)
                .header("content-type", "application/json")
                .body(data.to_string())
                .send()
                .await
                .unwrap();
            let ok = answer.status().is_success();
            let body: Value = answer.json().await.unwrap();
            if ok {
                Answer::Ok(body)
            } else {
                Answer::Err {
                    code: body["code"].as_str().unwrap_or_default().to_owned(),
                    message: body["message"].as_str().unwrap_or_default().to_owned(),
                }
            }
        }
    }
}

const PUBLICATION: &str = "registry.v1.PublicationService";
const REVIEW: &str = "admin.v1.ReviewService";

/// Adds reviewer `name` to the server's data directory; its token.
fn add_reviewer(data: &Path, name: &str) -> String {
    let out = marketplace(&[
        "reviewer",
        "add",
        name,
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", common::output_text(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let token = text.lines().nth(1).expect("token line").trim().to_owned();
    assert!(token.starts_with("mkr_"), "{text}");
    token
}
