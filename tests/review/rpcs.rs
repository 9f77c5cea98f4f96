//! Every RPC of `registry.v1.PublicationService` and `admin.v1.ReviewService`, once in
//! binary protobuf (`buf curl`) and once in proto3 JSON, against the real binary with
//! `--review required`; then the refusals Fundament's clients must be able to tell
//! apart (codes and the field named).

use base64::Engine;
use marketplace::ids;
use serde_json::{Value, json};

use super::{Codec, PUBLICATION, REVIEW, add_reviewer, rpc};
use crate::common::Server;
use crate::common::publishing::{definition, setup};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn ids_of(list: &Value, key: &str) -> Vec<String> {
    list[key]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| p["id"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn every_rpc_in_binary_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let (data, _key, acme, beta) = setup(dir.path());
    let alice = add_reviewer(&data, "alice");
    let server = Server::start_with(&data, &["--review", "required"]);
    let category = ids::category("Security");

    for codec in [Codec::Binary, Codec::Json] {
        let name = match codec {
            Codec::Binary => "edge-bin",
            Codec::Json => "edge-json",
        };
        let publication = |method: &'static str, token: &str, data: Value| {
            let token = token.to_owned();
            let server = &server;
            async move { rpc(server, codec, PUBLICATION, method, &token, data).await }
        };
        let review = |method: &'static str, data: Value| {
            let token = alice.clone();
            let server = &server;
            async move { rpc(server, codec, REVIEW, method, &token, data).await }
        };

        // Listing: create, read, update, list.
        let created = publication(
            "CreatePlugin",
            &acme,
            json!({
                "name": name, "displayName": "Edge", "descriptionShort": "An edge gateway.",
                "categoryIds": [category], "tags": ["gateway", "edge"],
                "image": "https://example.com/edge.svg", "repositoryUrl": "https://example.com/edge",
                "license": "Apache-2.0", "visibility": "PLUGIN_VISIBILITY_PUBLIC",
            }),
        )
        .await
        .ok();
        let plugin_id = ids::plugin("acme", name);
        assert_eq!(created["plugin"]["id"], plugin_id.as_str(), "{codec:?}");
        assert_eq!(
            created["plugin"]["organizationId"],
            ids::publisher("acme").as_str()
        );
        assert_eq!(created["plugin"]["visibility"], "PLUGIN_VISIBILITY_PUBLIC");
        assert_eq!(created["plugin"]["categoryIds"], json!([category]));
        let got = publication("GetPlugin", &acme, json!({"pluginId": plugin_id}))
            .await
            .ok();
        assert_eq!(got["plugin"]["name"], name);
        let updated = publication(
            "UpdatePlugin",
            &acme,
            json!({
                "pluginId": plugin_id, "displayName": "Edge Gateway",
                "descriptionShort": "Routes traffic at the edge.", "tags": ["gateway"],
                "documentationLinks": [{"title": "Guide", "urlName": "guide", "url": "https://example.com/guide"}],
                "features": [{"title": "Fast", "body": "Very."}],
                "authorName": "Acme", "authorUrl": "https://acme.example",
                "visibility": "PLUGIN_VISIBILITY_PUBLIC",
            }),
        )
        .await
        .ok();
        let p = &updated["plugin"];
        assert_eq!(p["displayName"], "Edge Gateway");
        assert_eq!(p["features"], json!([{"title": "Fast", "body": "Very."}]));
        assert_eq!(
            p["documentationLinks"][0]["url"],
            "https://example.com/guide"
        );
        assert!(ids::parse("id", p["documentationLinks"][0]["id"].as_str().unwrap()).is_ok());
        assert_eq!(p["authorName"], "Acme");
        // Update replaces every field: what it left out is cleared (proto3 JSON leaves an
        // empty list out; buf prints it).
        assert!(p.get("categoryIds").is_none_or(|c| c == &json!([])), "{p}");
        let mine = publication("ListPlugins", &acme, json!({})).await.ok();
        assert!(ids_of(&mine, "plugins").contains(&plugin_id), "{mine}");
        let categories = publication("ListCategories", &acme, json!({})).await.ok();
        assert!(ids_of(&categories, "categories").contains(&category));

        // A version: uploaded as a draft, submitted, sent back, uploaded again, approved.
        let v1 = definition("gateway", name, "1.0.0");
        let version_id = ids::version("acme", name, "1.0.0");
        let draft = publication(
            "CreatePluginVersion",
            &acme,
            json!({"pluginId": plugin_id, "version": "1.0.0", "manifest": b64(&v1.bytes), "releaseNotes": "First."}),
        )
        .await
        .ok();
        let v = &draft["version"];
        assert_eq!(v["id"], version_id.as_str());
        assert_eq!(v["status"], "SUBMISSION_STATUS_DRAFT");
        assert_eq!(v["definitionHash"], v1.hash.as_str());
        assert_eq!(v["image"], v1.image.to_string().as_str());
        assert_eq!(v["releaseNotes"], "First.");
        let listed = publication("ListPluginVersions", &acme, json!({"pluginId": plugin_id}))
            .await
            .ok();
        assert_eq!(
            ids_of(&listed, "versions"),
            std::slice::from_ref(&version_id)
        );
        let submitted = publication(
            "SubmitPluginVersion",
            &acme,
            json!({"pluginVersionId": version_id}),
        )
        .await
        .ok();
        assert_eq!(submitted["version"]["status"], "SUBMISSION_STATUS_PENDING");
        assert!(submitted["version"]["submitted"].is_string());

        let pending = review(
            "ListSubmissions",
            json!({"status": "SUBMISSION_STATUS_PENDING"}),
        )
        .await
        .ok();
        assert!(
            ids_of(&pending, "submissions").contains(&version_id),
            "{pending}"
        );
        let s = review("GetSubmission", json!({"submissionId": version_id}))
            .await
            .ok();
        assert_eq!(s["submission"]["pluginVersionId"], version_id.as_str());
        assert_eq!(s["submission"]["pluginId"], plugin_id.as_str());
        assert_eq!(
            s["submission"]["organizationId"],
            ids::publisher("acme").as_str()
        );
        assert_eq!(s["submission"]["status"], "SUBMISSION_STATUS_PENDING");
        let sent_back = review(
            "RequestChanges",
            json!({"submissionId": version_id, "feedback": "Pin a newer image."}),
        )
        .await
        .ok();
        let s = &sent_back["submission"];
        assert_eq!(s["status"], "SUBMISSION_STATUS_CHANGES_REQUESTED");
        assert_eq!(s["reviewerUserId"], ids::reviewer("alice").as_str());
        assert_eq!(s["feedback"], "Pin a newer image.");
        assert!(s["reviewed"].is_string());
        let seen = publication(
            "GetPluginVersion",
            &acme,
            json!({"pluginVersionId": version_id}),
        )
        .await
        .ok();
        assert_eq!(seen["version"]["reviewFeedback"], "Pin a newer image.");
        let v1b = definition("gateway", name, "1.0.0");
        let again = String::from_utf8(v1b.bytes.clone()).unwrap() + "# pinned anew\n";
        let draft = publication(
            "CreatePluginVersion",
            &acme,
            json!({"pluginId": plugin_id, "version": "1.0.0", "manifest": b64(again.as_bytes())}),
        )
        .await
        .ok();
        assert_eq!(draft["version"]["status"], "SUBMISSION_STATUS_DRAFT");
        assert_ne!(draft["version"]["definitionHash"], v1.hash.as_str());
        publication(
            "SubmitPluginVersion",
            &acme,
            json!({"pluginVersionId": version_id}),
        )
        .await
        .ok();
        let approved = review(
            "ApproveSubmission",
            json!({"submissionId": version_id, "feedback": "Thanks."}),
        )
        .await
        .ok();
        assert_eq!(
            approved["submission"]["status"],
            "SUBMISSION_STATUS_APPROVED"
        );
        // Approved bytes stay: neither the publisher nor a reviewer can change them.
        let locked = publication(
            "CreatePluginVersion",
            &acme,
            json!({"pluginId": plugin_id, "version": "1.0.0", "manifest": b64(&v1.bytes)}),
        )
        .await;
        assert_eq!(locked.code(), "failed_precondition", "{}", locked.message());
        let twice = review("ApproveSubmission", json!({"submissionId": version_id})).await;
        assert_eq!(twice.code(), "failed_precondition");

        // What reviewers read about plugins and versions.
        let all = review("ListPlugins", json!({})).await.ok();
        assert!(ids_of(&all, "plugins").contains(&plugin_id));
        let p = review("GetPlugin", json!({"pluginId": plugin_id}))
            .await
            .ok();
        assert_eq!(p["plugin"]["displayName"], "Edge Gateway");
        let pv = review("GetPluginVersion", json!({"pluginVersionId": version_id}))
            .await
            .ok();
        let caps: Vec<String> = v1
            .manifest
            .spec
            .permissions
            .capabilities
            .iter()
            .map(|c| c.value.clone())
            .collect();
        assert_eq!(pv["version"]["capabilities"], json!(caps));
        assert!(
            !v1.manifest.spec.permissions.rbac.is_empty()
                && !pv["version"]["permissions"].as_array().unwrap().is_empty(),
            "{pv}"
        );
        assert_eq!(pv["version"]["status"], "SUBMISSION_STATUS_APPROVED");
        let cats = review("ListCategories", json!({})).await.ok();
        assert!(ids_of(&cats, "categories").contains(&category));
        let pubs = review("ListPublishers", json!({})).await.ok();
        let names: Vec<&str> = pubs["publishers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"acme") && names.contains(&"beta"), "{pubs}");

        // Reject and withdraw, on versions of their own.
        let v2 = definition("gateway", name, "1.1.0");
        let id2 = ids::version("acme", name, "1.1.0");
        publication(
            "CreatePluginVersion",
            &acme,
            json!({"pluginId": plugin_id, "version": "1.1.0", "manifest": b64(&v2.bytes)}),
        )
        .await
        .ok();
        publication(
            "SubmitPluginVersion",
            &acme,
            json!({"pluginVersionId": id2}),
        )
        .await
        .ok();
        let no_reason = review("RejectSubmission", json!({"submissionId": id2})).await;
        assert_eq!(no_reason.code(), "invalid_argument");
        assert!(
            no_reason.message().contains("reason"),
            "{}",
            no_reason.message()
        );
        let no_feedback = review("RequestChanges", json!({"submissionId": id2})).await;
        assert_eq!(no_feedback.code(), "invalid_argument");
        assert!(no_feedback.message().contains("feedback"));
        let rejected = review(
            "RejectSubmission",
            json!({"submissionId": id2, "reason": "REJECTION_REASON_SECURITY_CONCERNS", "feedback": "Too broad."}),
        )
        .await
        .ok();
        assert_eq!(
            rejected["submission"]["status"],
            "SUBMISSION_STATUS_REJECTED"
        );
        assert_eq!(
            rejected["submission"]["rejectionReason"],
            "REJECTION_REASON_SECURITY_CONCERNS"
        );
        let v3 = definition("gateway", name, "1.2.0");
        let id3 = ids::version("acme", name, "1.2.0");
        publication(
            "CreatePluginVersion",
            &acme,
            json!({"pluginId": plugin_id, "version": "v1.2.0", "manifest": b64(&v3.bytes)}),
        )
        .await
        .ok();
        let withdrawn = publication(
            "WithdrawPluginVersion",
            &acme,
            json!({"pluginVersionId": id3}),
        )
        .await
        .ok();
        assert_eq!(
            withdrawn["version"]["status"],
            "SUBMISSION_STATUS_WITHDRAWN"
        );
        let resubmit = publication(
            "SubmitPluginVersion",
            &acme,
            json!({"pluginVersionId": id3}),
        )
        .await;
        assert_eq!(resubmit.code(), "failed_precondition");

        // A listing without versions in the index can be deleted.
        let scratch = format!("scratch-{}", &name[5..]);
        publication(
            "CreatePlugin",
            &acme,
            json!({"name": scratch, "displayName": "Scratch", "visibility": "PLUGIN_VISIBILITY_PUBLIC"}),
        )
        .await
        .ok();
        let scratch_id = ids::plugin("acme", &scratch);
        publication("DeletePlugin", &acme, json!({"pluginId": scratch_id}))
            .await
            .ok();
        let gone = publication("GetPlugin", &acme, json!({"pluginId": scratch_id})).await;
        assert_eq!(gone.code(), "not_found");

        // Field rules answer invalid_argument naming the field; restricted is not built.
        for (request, code, field) in [
            (
                json!({"name": "Bad_Name", "displayName": "x", "visibility": "PLUGIN_VISIBILITY_PUBLIC"}),
                "invalid_argument",
                "name",
            ),
            (
                json!({"name": "okname", "displayName": "", "visibility": "PLUGIN_VISIBILITY_PUBLIC"}),
                "invalid_argument",
                "display_name",
            ),
            (
                json!({"name": "okname", "displayName": "x"}),
                "invalid_argument",
                "visibility",
            ),
            (
                json!({"name": "okname", "displayName": "x", "visibility": "PLUGIN_VISIBILITY_PUBLIC", "image": "javascript:alert(1)"}),
                "invalid_argument",
                "image",
            ),
            (
                json!({"name": "okname", "displayName": "x", "visibility": "PLUGIN_VISIBILITY_RESTRICTED"}),
                "unimplemented",
                "RESTRICTED",
            ),
            (
                json!({"name": name, "displayName": "x", "visibility": "PLUGIN_VISIBILITY_PUBLIC"}),
                "already_exists",
                name,
            ),
        ] {
            let refused = publication("CreatePlugin", &acme, request.clone()).await;
            assert_eq!(refused.code(), code, "{request}: {}", refused.message());
            assert!(
                refused.message().contains(field),
                "{request}: {}",
                refused.message()
            );
        }
        let mismatch = publication(
            "CreatePluginVersion",
            &acme,
            json!({"pluginId": plugin_id, "version": "2.0.0", "manifest": b64(&v1.bytes)}),
        )
        .await;
        assert_eq!(mismatch.code(), "invalid_argument");
        assert!(
            mismatch.message().starts_with("version:"),
            "{}",
            mismatch.message()
        );
        // A manifest is validated as a publish would: every problem named.
        let invalid = publication(
            "CreatePluginVersion",
            &acme,
            json!({"pluginId": plugin_id, "version": "3.0.0", "manifest": b64(b"apiVersion: fundament.io/v1\nkind: PluginDefinition\nmetadata: {name: x}\n")}),
        )
        .await;
        assert_eq!(invalid.code(), "invalid_argument");
        assert!(
            invalid.message().starts_with("manifest:"),
            "{}",
            invalid.message()
        );
        // Over 1 MiB (sent as JSON: buf takes its request as one argument).
        let huge = vec![b'#'; 1024 * 1024 + 1];
        let too_big = rpc(
            &server,
            Codec::Json,
            PUBLICATION,
            "CreatePluginVersion",
            &acme,
            json!({"pluginId": plugin_id, "version": "3.0.0", "manifest": b64(&huge)}),
        )
        .await;
        assert_eq!(too_big.code(), "invalid_argument");
        assert!(too_big.message().contains("1 MiB"), "{}", too_big.message());
        let bad_id = publication("GetPlugin", &acme, json!({"pluginId": "edge"})).await;
        assert_eq!(bad_id.code(), "invalid_argument");
        assert!(bad_id.message().contains("plugin_id"));

        // Who may do what: tokens of the other kind, another publisher, no token.
        let as_reviewer = rpc(
            &server,
            codec,
            PUBLICATION,
            "ListPlugins",
            &alice,
            json!({}),
        )
        .await;
        assert_eq!(as_reviewer.code(), "permission_denied");
        let as_publisher = rpc(&server, codec, REVIEW, "ListSubmissions", &acme, json!({})).await;
        assert_eq!(as_publisher.code(), "permission_denied");
        let nobody = rpc(
            &server,
            codec,
            REVIEW,
            "ListSubmissions",
            "mkr_nope",
            json!({}),
        )
        .await;
        assert_eq!(nobody.code(), "unauthenticated");
        for (method, request) in [
            ("GetPluginVersion", json!({"pluginVersionId": version_id})),
            ("GetPlugin", json!({"pluginId": plugin_id})),
            ("ListPluginVersions", json!({"pluginId": plugin_id})),
            ("SubmitPluginVersion", json!({"pluginVersionId": id3})),
        ] {
            let theirs = publication(method, &beta, request).await;
            assert_eq!(theirs.code(), "not_found", "beta {method}");
        }
        let betas = publication("ListPlugins", &beta, json!({})).await.ok();
        assert!(!ids_of(&betas, "plugins").contains(&plugin_id));
    }

    // Nothing under review is public: no page, no JSON API, no catalog.v1, no target.
    let catalog = reqwest::get(format!("{}/api/v1/plugins?q=edge", server.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        !catalog.contains("edge-bin") && !catalog.contains("edge-json"),
        "{catalog}"
    );
    let page = reqwest::get(format!("{}/plugins/acme/edge-bin", server.url))
        .await
        .unwrap();
    assert_eq!(page.status(), 404);
    let public = rpc(
        &server,
        Codec::Json,
        "catalog.v1.CatalogService",
        "GetPlugin",
        "",
        json!({"pluginId": ids::plugin("acme", "edge-bin")}),
    )
    .await;
    assert_eq!(public.code(), "not_found");
    let targets = reqwest::get(format!("{}/tuf/metadata/targets.json", server.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!targets.contains("edge-bin"));
}
