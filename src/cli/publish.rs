//! `marketplace publish FILE... [--extras FILE]... [--image REPO@DIGEST] --server URL --key KEY`

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;

use crate::definition::Definition;
use crate::trust::publisher::plan::{Change, Limits};
use crate::trust::publisher::retry::RetryPolicy;
use crate::trust::publisher::uploader::{PublisherClient, Uploaded};
use crate::trust::{PublicKey, SigningKey, bins};

#[derive(Debug, Args)]
pub struct PublishArgs {
    /// The definition file(s) to publish; several are published as one role version
    /// (all or none).
    #[arg(required_unless_present = "approved", conflicts_with = "approved")]
    files: Vec<PathBuf>,
    /// Instead of files: every version of this publisher a reviewer approved that is
    /// not in the signed index yet (the bytes the server holds, checked against their
    /// approved hash), signed and published as one role version.
    #[arg(long, conflicts_with = "image")]
    approved: bool,
    /// A companion document (`kind: PluginExtras`: dependencies, suggested plugins,
    /// cluster capabilities), signed beside the definition its `plugin` names; repeat
    /// for several definitions.
    #[arg(long = "extras", value_name = "FILE")]
    extras: Vec<PathBuf>,
    /// Sets `spec.image` (and `spec.imagePullPolicy: IfNotPresent` when absent) on the
    /// definition before it is signed, as Fundament's own publishing tool does with the
    /// digest it just pushed; the edited bytes are what is published. One file only.
    #[arg(long, value_name = "REPO@sha256:DIGEST")]
    image: Option<String>,
    #[command(flatten)]
    publisher: PublisherOptions,
}

/// What every publisher command needs: where, who (token) and the signing keys.
#[derive(Debug, Args)]
pub(super) struct PublisherOptions {
    /// Marketplace base URL, e.g. https://plugins.example.com
    #[arg(long, env = "MARKETPLACE_SERVER")]
    pub server: String,
    /// The publisher's private key; repeat when the threshold needs several.
    #[arg(long = "key", value_name = "PUBLISHER_KEY", required = true)]
    pub keys: Vec<PathBuf>,
    /// API token of the publisher.
    #[arg(long, env = "MARKETPLACE_TOKEN", hide_env_values = true)]
    pub token: String,
    /// Lifetime of the signed role metadata. The marketplace accepts roles valid for
    /// between its operator's minimum and maximum (7 and 730 days unless set otherwise);
    /// this is checked before anything is signed.
    #[arg(long, default_value = "365d", value_parser = super::repo::parse_duration)]
    pub expires: Duration,
    /// Past this many targets the role delegates hashed bins, so that a publish
    /// re-signs and uploads one bin instead of every target.
    #[arg(long, default_value_t = bins::FLAT_MAX_TARGETS, value_parser = positive)]
    pub flat_max_targets: usize,
    /// Past this many targets in one bin, every bin moves to longer hash prefixes
    /// (16 bins, then 256).
    #[arg(long, default_value_t = bins::BIN_MAX_TARGETS, value_parser = positive)]
    pub bin_max_targets: usize,
    /// When another update of the role lands first (409), or no connection to the
    /// marketplace can be opened, sign again on fresh metadata after a random, growing
    /// wait, until this long after the first attempt; `0s` tries once.
    #[arg(
        long,
        env = "MARKETPLACE_RETRY_DEADLINE",
        default_value = "60s",
        value_parser = super::repo::parse_duration
    )]
    pub retry_deadline: Duration,
}

fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("`{s}` is not a positive whole number")),
    }
}

impl PublisherOptions {
    /// The signing keys, and the marketplace as this publisher's token sees it.
    pub(super) async fn connect(&self) -> anyhow::Result<(Vec<SigningKey>, PublisherClient)> {
        let keys = self
            .keys
            .iter()
            .map(|k| SigningKey::load(k))
            .collect::<Result<Vec<_>, _>>()?;
        let client = PublisherClient::connect(&self.server, &self.token)
            .await
            .with_context(|| format!("connecting to {}", self.server))?
            .with_retry(RetryPolicy::until(self.retry_deadline));
        if client.account().suspended {
            bail!(
                "publisher {} is suspended by the marketplace's operator; nothing it uploads is accepted until the operator resumes it",
                client.publisher()
            );
        }
        client.check_lifetime(self.expires)?;
        Ok((keys, client))
    }

    pub(super) fn limits(&self) -> Limits {
        Limits {
            flat_max: self.flat_max_targets,
            bin_max: self.bin_max_targets,
        }
    }
}

pub fn run(args: PublishArgs) -> anyhow::Result<()> {
    runtime()?.block_on(publish(args))
}

/// The runtime of a publisher command. Logs (each retry, at debug) go to stderr only
/// when `MARKETPLACE_LOG` asks for them: by default the command prints its result and
/// nothing else.
pub(super) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    if std::env::var_os("MARKETPLACE_LOG").is_some() {
        super::serve::init_tracing("text");
    }
    tokio::runtime::Runtime::new().context("starting the async runtime")
}

/// On stderr, after an update: the publisher's roles that expire within 30 days (an
/// update re-signs only the roles it touches; a binned publisher's other bins and top
/// role keep their expiry until `marketplace resign`).
pub(super) async fn warn_expiring(client: &mut PublisherClient) {
    let now = crate::clock::now();
    let Ok(account) = client.refresh_account().await else {
        return;
    };
    for r in account.roles.iter().filter(|r| r.expiring_soon) {
        let when = if r.expired {
            "expired".to_owned()
        } else {
            format!(
                "expires in {}",
                crate::clock::human_duration(r.expires_at - now)
            )
        };
        eprintln!(
            "warning: role {} v{} {when} ({}); clients refuse this publisher's plugins once it has expired: renew it with `marketplace resign`",
            r.role, r.version, r.expires
        );
    }
}

/// On stderr, only when the update had to be signed again: how many attempts it took.
pub(super) fn report_retries(done: &Uploaded) {
    if done.attempts > 1 {
        eprintln!(
            "note: the role changed while signing; accepted on attempt {} after {:.1} s",
            done.attempts,
            done.elapsed.as_secs_f64()
        );
    }
}

/// Reads a definition, with `--image` set when given.
fn read_definition(
    file: &std::path::Path,
    image: Option<&str>,
) -> anyhow::Result<Result<Definition, Vec<String>>> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let located = |problems: &[crate::definition::Problem]| {
        problems
            .iter()
            .map(|p| format!("{}:{p}", file.display()))
            .collect::<Vec<_>>()
    };
    let Some(image) = image else {
        return Ok(Definition::parse(&bytes).map_err(|e| located(&e.problems)));
    };
    let text =
        String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8", file.display()))?;
    Ok(match crate::definition::edit::set_image(&text, image) {
        Ok(def) => Ok(def),
        Err(crate::definition::edit::EditError::Invalid(e)) => Err(located(&e.problems)),
        Err(e) => Err(vec![format!("{}: {e}", file.display())]),
    })
}

/// Pairs each companion document with the definition its `plugin` field names.
fn attach_extras(defs: Vec<Definition>, files: &[PathBuf]) -> anyhow::Result<Vec<Definition>> {
    let mut docs = Vec::new();
    let mut problems = Vec::new();
    for file in files {
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        match crate::definition::Extras::parse_document(&bytes) {
            Ok(doc) => docs.push((file, doc)),
            Err(e) => problems.extend(e.problems.iter().map(|p| format!("{}:{p}", file.display()))),
        }
    }
    if !problems.is_empty() {
        bail!(
            "not publishing: invalid companion document(s):\n{}",
            problems.join("\n")
        );
    }
    let mut out = Vec::with_capacity(defs.len());
    for def in defs {
        let mine: Vec<_> = docs
            .iter()
            .filter(|(_, d)| d.plugin == def.name())
            .collect();
        match mine[..] {
            [] => out.push(def),
            [(file, doc)] => out.push(
                def.with_companion(doc.clone())
                    .map_err(|e| anyhow::anyhow!("not publishing: {}: {e}", file.display()))?,
            ),
            _ => bail!(
                "not publishing: {} companion documents are for plugin {}; give one",
                mine.len(),
                def.name()
            ),
        }
    }
    if let Some((file, doc)) = docs
        .iter()
        .find(|(_, d)| !out.iter().any(|def| def.name() == d.plugin))
    {
        bail!(
            "not publishing: {} is for plugin {}, which none of the definitions is",
            file.display(),
            doc.plugin
        );
    }
    Ok(out)
}

async fn publish(a: PublishArgs) -> anyhow::Result<()> {
    if a.image.is_some() && a.files.len() != 1 {
        bail!("--image sets the image of one definition; give one file");
    }
    // Files are checked before the marketplace is contacted.
    let mut from_files = Vec::new();
    let mut problems = Vec::new();
    for file in &a.files {
        match read_definition(file, a.image.as_deref())? {
            Ok(def) => from_files.push(def),
            Err(found) => problems.extend(found),
        }
    }
    if !problems.is_empty() {
        bail!(
            "not publishing: invalid definition(s):\n{}",
            problems.join("\n")
        );
    }
    let from_files = match a.approved {
        true => from_files,
        false => attach_extras(from_files, &a.extras)?,
    };
    let (keys, mut client) = a.publisher.connect().await?;
    let (defs, names): (Vec<Definition>, Vec<String>) = if a.approved {
        let defs = attach_extras(approved(&a.publisher, client.publisher()).await?, &a.extras)?;
        if defs.is_empty() {
            println!(
                "no approved version of {} is waiting to be published: nothing to do",
                client.publisher()
            );
            return Ok(());
        }
        let names = defs
            .iter()
            .map(|d| format!("{} {}", d.name(), d.version_text()))
            .collect();
        (defs, names)
    } else {
        let names = a.files.iter().map(|f| f.display().to_string()).collect();
        (from_files, names)
    };
    let texts = defs
        .iter()
        .zip(&names)
        .map(|(d, f): (&Definition, &String)| {
            String::from_utf8(d.bytes.clone()).with_context(|| format!("{f} is not UTF-8"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let key_refs: Vec<&SigningKey> = keys.iter().collect();
    let adding: Vec<(&Definition, bool)> = defs.iter().map(|d| (d, false)).collect();
    let extra = match &texts[..] {
        [one] => serde_json::json!({ "definition": one }),
        many => serde_json::json!({ "definitions": many }),
    };
    let done = client
        .update(
            "definitions",
            &publics(&keys),
            &Change::Add(adding),
            &key_refs,
            a.publisher.expires,
            a.publisher.limits(),
            extra,
        )
        .await?;
    report_retries(&done);
    if done.answer["unchanged"] == true {
        // Re-running a publish (a pipeline retried, or an attempt whose answer was
        // lost) is not an error: what was asked for holds.
        for def in &defs {
            println!(
                "already published {}/{} {} ({}): nothing to do",
                client.publisher(),
                def.name(),
                def.version_text(),
                def.hash
            );
        }
        return Ok(());
    }
    for def in &defs {
        println!(
            "published {}/{} {} ({}) as role version {}{}",
            client.publisher(),
            def.name(),
            def.version_text(),
            def.hash,
            done.answer["role_version"],
            roles_note(&done.answer)
        );
    }
    warn_expiring(&mut client).await;
    Ok(())
}

/// The publisher's approved versions not in the signed index yet, as the server holds
/// them; each must parse and hash to what was approved.
async fn approved(options: &PublisherOptions, publisher: &str) -> anyhow::Result<Vec<Definition>> {
    let url = format!(
        "{}/api/v1/publishers/{publisher}/approved",
        options.server.trim_end_matches('/')
    );
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .context("building the HTTP client")?;
    let body = super::review::get_json(&http, &url, &options.token).await?;
    let mut defs = Vec::new();
    for item in body["items"].as_array().cloned().unwrap_or_default() {
        let text = item["definition"].as_str().unwrap_or_default();
        let def = Definition::parse(text.as_bytes()).map_err(|e| {
            anyhow::anyhow!(
                "the approved {} {} no longer parses: {e}",
                item["name"],
                item["version"]
            )
        })?;
        if Some(def.hash.as_str()) != item["definition_hash"].as_str() {
            bail!(
                "the server sent bytes for {} {} that do not hash to the approved {}",
                def.name(),
                def.version_text(),
                item["definition_hash"]
            );
        }
        defs.push(def);
    }
    Ok(defs)
}

/// ", bins acme.3 v7" when the update re-signed bins; nothing for a flat role.
pub(super) fn roles_note(answer: &serde_json::Value) -> String {
    let Some(roles) = answer["roles"].as_object() else {
        return String::new();
    };
    let bins: Vec<String> = roles
        .iter()
        .filter(|(n, _)| n.contains('.'))
        .map(|(n, v)| format!("{n} v{v}"))
        .collect();
    match bins.len() {
        0 => String::new(),
        1..=4 => format!(", bin {}", bins.join(", ")),
        n => format!(", {n} bins"),
    }
}

pub(super) fn publics(keys: &[SigningKey]) -> Vec<PublicKey> {
    keys.iter().map(SigningKey::public).collect()
}
