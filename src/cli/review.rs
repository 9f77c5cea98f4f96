//! `marketplace submit FILE` (a publisher sends a version for review) and `marketplace
//! review list|show|approve|request-changes|reject` (a reviewer decides), over the
//! server's Connect contracts (`registry.v1.PublicationService`,
//! `admin.v1.ReviewService`, binary protobuf) and, for what the contracts do not carry
//! (names, history, what an upgrade asks for), the reviewers' JSON API.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use buffa::{EnumValue, Message};
use clap::{Args, Subcommand};

use crate::definition::Definition;
use crate::proto::admin::v1 as admin;
use crate::proto::marketplace::v1 as shared;
use crate::proto::registry::v1 as registry;
use crate::review::{RejectionReason, Status};

/// A Connect client for unary calls: binary protobuf, Connect's JSON error body.
struct Connect {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Connect {
    fn new(server: &str, token: &str) -> anyhow::Result<Connect> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("building the HTTP client")?;
        Ok(Connect {
            http,
            base: server.trim_end_matches('/').to_owned(),
            token: token.trim().to_owned(),
        })
    }

    async fn call<Req: Message, Resp: Message>(
        &self,
        method: &str,
        request: &Req,
    ) -> anyhow::Result<Resp> {
        let url = format!("{}/{method}", self.base);
        let answer = self
            .http
            .post(&url)
            .bearer_auth(&self.token)
            .header("content-type", "application/proto")
            .header("connect-protocol-version", "1")
            .body(request.encode_to_vec())
            .send()
            .await
            .with_context(|| format!("calling {url}"))?;
        let status = answer.status();
        let body = answer
            .bytes()
            .await
            .with_context(|| format!("reading the answer of {url}"))?;
        if !status.is_success() {
            #[derive(serde::Deserialize)]
            struct ConnectError {
                code: String,
                #[serde(default)]
                message: String,
            }
            match serde_json::from_slice::<ConnectError>(&body) {
                Ok(e) => bail!("{}: {}", e.code, e.message),
                Err(_) => bail!("{url} answered {status}"),
            }
        }
        Resp::decode_from_slice(&body)
            .with_context(|| format!("{url} answered something that is not its message"))
    }

    async fn get_json(&self, path: &str) -> anyhow::Result<serde_json::Value> {
        get_json(&self.http, &format!("{}{path}", self.base), &self.token).await
    }
}

/// GET `url` with a bearer token: the JSON answer, or our API's error code and message.
pub(super) async fn get_json(
    http: &reqwest::Client,
    url: &str,
    token: &str,
) -> anyhow::Result<serde_json::Value> {
    let answer = http
        .get(url)
        .bearer_auth(token.trim())
        .send()
        .await
        .with_context(|| format!("fetching {url}"))?;
    let status = answer.status();
    let body: serde_json::Value = answer
        .json()
        .await
        .with_context(|| format!("{url} answered {status} without JSON"))?;
    if !status.is_success() {
        bail!(
            "{}: {}",
            body["error"]["code"].as_str().unwrap_or("error"),
            body["error"]["message"].as_str().unwrap_or_default()
        );
    }
    Ok(body)
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The definition to submit (its image pinned by digest, as for `publish`).
    file: PathBuf,
    /// What changed in this version, for reviewers and the plugin's page.
    #[arg(long, default_value = "")]
    release_notes: String,
    /// Marketplace base URL, e.g. https://plugins.example.com
    #[arg(long, env = "MARKETPLACE_SERVER")]
    server: String,
    /// API token of the publisher.
    #[arg(long, env = "MARKETPLACE_TOKEN", hide_env_values = true)]
    token: String,
}

pub fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    super::publish::runtime()?.block_on(run_submit(args))
}

async fn run_submit(a: SubmitArgs) -> anyhow::Result<()> {
    let bytes = std::fs::read(&a.file).with_context(|| format!("reading {}", a.file.display()))?;
    let def = Definition::parse(&bytes).map_err(|e| {
        let lines: Vec<String> = e
            .problems
            .iter()
            .map(|p| format!("{}:{p}", a.file.display()))
            .collect();
        anyhow::anyhow!("not submitting: invalid definition:\n{}", lines.join("\n"))
    })?;
    let c = Connect::new(&a.server, &a.token)?;
    const SERVICE: &str = "registry.v1.PublicationService";
    let mine: registry::ListPluginsResponse = c
        .call(
            &format!("{SERVICE}/ListPlugins"),
            &registry::ListPluginsRequest::default(),
        )
        .await?;
    let plugin = match mine.plugins.into_iter().find(|p| p.name == def.name()) {
        Some(p) => p,
        None => {
            let meta = &def.manifest.metadata;
            let text = |v: &Option<crate::definition::Located<String>>| {
                v.as_ref().map(|v| v.value.clone()).unwrap_or_default()
            };
            let created: registry::CreatePluginResponse = c
                .call(
                    &format!("{SERVICE}/CreatePlugin"),
                    &registry::CreatePluginRequest {
                        name: def.name().to_owned(),
                        display_name: def.display_name().to_owned(),
                        description_short: crate::api::connect::short(def.description(), 160),
                        description: def.description().to_owned(),
                        tags: def.tags().take(20).map(str::to_owned).collect(),
                        repository_url: text(&meta.urls.repository),
                        license: text(&meta.license),
                        visibility: EnumValue::Known(
                            registry::PluginVisibility::PLUGIN_VISIBILITY_PUBLIC,
                        ),
                        ..Default::default()
                    },
                )
                .await
                .context("creating the plugin's listing")?;
            println!("created the listing of {}", def.name());
            created
                .plugin
                .into_option()
                .context("CreatePlugin answered no plugin")?
        }
    };
    // Submitting the same bytes again (a retried pipeline) is not an error.
    let versions: registry::ListPluginVersionsResponse = c
        .call(
            &format!("{SERVICE}/ListPluginVersions"),
            &registry::ListPluginVersionsRequest {
                plugin_id: plugin.id.clone(),
                ..Default::default()
            },
        )
        .await?;
    if let Some(v) = versions.versions.iter().find(|v| {
        v.definition_hash == def.hash
            && matches!(
                status_of(v.status),
                Some(Status::Pending | Status::Approved)
            )
    }) {
        println!(
            "{} {} ({}) is {} already: nothing to do (version id {})",
            def.name(),
            def.version_text(),
            def.hash,
            status_of(v.status).map_or_else(|| "?".to_owned(), |s| s.to_string()),
            v.id
        );
        return Ok(());
    }
    let uploaded: registry::CreatePluginVersionResponse = c
        .call(
            &format!("{SERVICE}/CreatePluginVersion"),
            &registry::CreatePluginVersionRequest {
                plugin_id: plugin.id.clone(),
                version: def.version_text().to_owned(),
                manifest: bytes.clone(),
                release_notes: a.release_notes.clone(),
                ..Default::default()
            },
        )
        .await
        .context("uploading the version")?;
    let version = uploaded
        .version
        .into_option()
        .context("CreatePluginVersion answered no version")?;
    let submitted: registry::SubmitPluginVersionResponse = c
        .call(
            &format!("{SERVICE}/SubmitPluginVersion"),
            &registry::SubmitPluginVersionRequest {
                plugin_version_id: version.id.clone(),
                ..Default::default()
            },
        )
        .await
        .context("submitting the version")?;
    let status = submitted
        .version
        .as_option()
        .and_then(|v| status_of(v.status));
    println!(
        "submitted {} {} ({}) for review: version id {}, status {}",
        def.name(),
        def.version_text(),
        def.hash,
        version.id,
        status.map_or_else(|| "?".to_owned(), |s| s.to_string())
    );
    Ok(())
}

fn status_of(s: EnumValue<shared::SubmissionStatus>) -> Option<Status> {
    use shared::SubmissionStatus as S;
    match s {
        EnumValue::Known(S::SUBMISSION_STATUS_DRAFT) => Some(Status::Draft),
        EnumValue::Known(S::SUBMISSION_STATUS_PENDING) => Some(Status::Pending),
        EnumValue::Known(S::SUBMISSION_STATUS_CHANGES_REQUESTED) => Some(Status::ChangesRequested),
        EnumValue::Known(S::SUBMISSION_STATUS_APPROVED) => Some(Status::Approved),
        EnumValue::Known(S::SUBMISSION_STATUS_REJECTED) => Some(Status::Rejected),
        EnumValue::Known(S::SUBMISSION_STATUS_WITHDRAWN) => Some(Status::Withdrawn),
        _ => None,
    }
}

#[derive(Debug, Args)]
pub struct ReviewArgs {
    /// Marketplace base URL, e.g. https://plugins.example.com
    #[arg(long, env = "MARKETPLACE_SERVER", global = true)]
    server: Option<String>,
    /// API token of the reviewer (`marketplace reviewer add`).
    #[arg(
        long,
        env = "MARKETPLACE_REVIEWER_TOKEN",
        hide_env_values = true,
        global = true
    )]
    token: Option<String>,
    #[command(subcommand)]
    command: ReviewCommand,
}

#[derive(Debug, Subcommand)]
enum ReviewCommand {
    /// Submissions waiting for a decision (or in another status, or all).
    List {
        /// pending, changes-requested, approved, rejected, withdrawn, draft or all.
        #[arg(long, default_value = "pending")]
        status: String,
    },
    /// One submission: the version, its history, and what it asks for that the newest
    /// published version did not.
    Show { id: String },
    /// Approve: the publisher may now publish exactly these bytes.
    Approve {
        id: String,
        #[arg(long, default_value = "")]
        feedback: String,
    },
    /// Send the version back to its publisher, saying what to change.
    RequestChanges {
        id: String,
        #[arg(long)]
        feedback: String,
    },
    /// Reject the version for good.
    Reject {
        id: String,
        /// incomplete-metadata, duplicate, security-concerns, naming-guidelines,
        /// out-of-scope or other.
        #[arg(long)]
        reason: String,
        #[arg(long, default_value = "")]
        feedback: String,
    },
}

pub fn review(args: ReviewArgs) -> anyhow::Result<()> {
    super::publish::runtime()?.block_on(run_review(args))
}

async fn run_review(a: ReviewArgs) -> anyhow::Result<()> {
    let server = a
        .server
        .context("--server (or MARKETPLACE_SERVER) is required")?;
    let token = a
        .token
        .context("--token (or MARKETPLACE_REVIEWER_TOKEN) is required")?;
    let c = Connect::new(&server, &token)?;
    const SERVICE: &str = "admin.v1.ReviewService";
    let decided = match a.command {
        ReviewCommand::List { status } => return list(&c, &status).await,
        ReviewCommand::Show { id } => return show(&c, &id).await,
        ReviewCommand::Approve { id, feedback } => {
            let r: admin::ApproveSubmissionResponse = c
                .call(
                    &format!("{SERVICE}/ApproveSubmission"),
                    &admin::ApproveSubmissionRequest {
                        submission_id: id,
                        feedback,
                        ..Default::default()
                    },
                )
                .await?;
            r.submission
        }
        ReviewCommand::RequestChanges { id, feedback } => {
            let r: admin::RequestChangesResponse = c
                .call(
                    &format!("{SERVICE}/RequestChanges"),
                    &admin::RequestChangesRequest {
                        submission_id: id,
                        feedback,
                        ..Default::default()
                    },
                )
                .await?;
            r.submission
        }
        ReviewCommand::Reject {
            id,
            reason,
            feedback,
        } => {
            let Some(reason) = RejectionReason::parse(&reason) else {
                bail!(
                    "--reason `{reason}` is not one of incomplete-metadata, duplicate, security-concerns, naming-guidelines, out-of-scope, other"
                );
            };
            let r: admin::RejectSubmissionResponse = c
                .call(
                    &format!("{SERVICE}/RejectSubmission"),
                    &admin::RejectSubmissionRequest {
                        submission_id: id,
                        reason: EnumValue::Known(rejection(reason)),
                        feedback,
                        ..Default::default()
                    },
                )
                .await?;
            r.submission
        }
    };
    let s = decided
        .into_option()
        .context("the server answered no submission")?;
    println!(
        "submission {} is {} now",
        s.id,
        status_of(s.status).map_or_else(|| "?".to_owned(), |s| s.to_string())
    );
    Ok(())
}

fn rejection(r: RejectionReason) -> admin::RejectionReason {
    use admin::RejectionReason as R;
    match r {
        RejectionReason::IncompleteMetadata => R::REJECTION_REASON_INCOMPLETE_METADATA,
        RejectionReason::Duplicate => R::REJECTION_REASON_DUPLICATE,
        RejectionReason::SecurityConcerns => R::REJECTION_REASON_SECURITY_CONCERNS,
        RejectionReason::NamingGuidelines => R::REJECTION_REASON_NAMING_GUIDELINES,
        RejectionReason::OutOfScope => R::REJECTION_REASON_OUT_OF_SCOPE,
        RejectionReason::Other => R::REJECTION_REASON_OTHER,
    }
}

async fn list(c: &Connect, status: &str) -> anyhow::Result<()> {
    let filter = status.replace('-', "_");
    if filter != "all" && Status::parse(&filter).is_none() {
        bail!(
            "--status `{status}` is not one of pending, changes-requested, approved, rejected, withdrawn, draft, all"
        );
    }
    let query = if filter == "all" {
        String::new()
    } else {
        format!("?status={filter}")
    };
    let answer = c
        .get_json(&format!("/api/v1/review/submissions{query}"))
        .await?;
    let items = answer["items"].as_array().cloned().unwrap_or_default();
    if items.is_empty() {
        println!("no submissions are {status}");
        return Ok(());
    }
    println!("ID\tPLUGIN\tVERSION\tSTATUS\tSUBMITTED");
    for i in items {
        println!(
            "{}\t{}/{}\t{}\t{}\t{}",
            i["id"].as_str().unwrap_or_default(),
            i["publisher"].as_str().unwrap_or_default(),
            i["name"].as_str().unwrap_or_default(),
            i["version"].as_str().unwrap_or_default(),
            i["status"].as_str().unwrap_or_default().to_uppercase(),
            i["submitted"].as_str().unwrap_or("-"),
        );
    }
    Ok(())
}

async fn show(c: &Connect, id: &str) -> anyhow::Result<()> {
    let s = c
        .get_json(&format!("/api/v1/review/submissions/{id}"))
        .await?;
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("-").to_owned();
    println!("submission {}", text(&s["id"]));
    println!("plugin     {}/{}", text(&s["publisher"]), text(&s["name"]));
    println!("version    {}", text(&s["version"]));
    println!("hash       {}", text(&s["definition_hash"]));
    println!("image      {}", text(&s["image"]));
    println!("status     {}", text(&s["status"]).to_uppercase());
    if let Some(notes) = s["release_notes"].as_str().filter(|n| !n.is_empty()) {
        println!("notes      {notes}");
    }
    match s["changes"].as_object() {
        None => println!("\nfirst version of this plugin: everything it asks for is new"),
        Some(ch) => {
            println!(
                "\nwhat changes from {} (the newest published version):",
                ch.get("from_version")
                    .and_then(|v| v.as_str())
                    .unwrap_or("?")
            );
            let lines = ch
                .get("lines")
                .and_then(|l| l.as_array())
                .cloned()
                .unwrap_or_default();
            if lines.is_empty() {
                println!("  nothing an administrator consents to");
            }
            for l in lines {
                println!("  - {}", l.as_str().unwrap_or_default());
            }
        }
    }
    println!("\nhistory:");
    for e in s["history"].as_array().cloned().unwrap_or_default() {
        let feedback = e["feedback"].as_str().filter(|f| !f.is_empty());
        println!(
            "  {}  {:<18} {}{}",
            text(&e["at"]),
            text(&e["action"]),
            text(&e["actor"]),
            feedback.map(|f| format!(": {f}")).unwrap_or_default()
        );
    }
    Ok(())
}
