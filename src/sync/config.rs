//! `sync.yaml`: the worker's data directory, local API address and sources.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::db::Database;
use crate::definition::yaml;

/// The largest config file read.
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;
/// Sources are polled at most this often.
const MIN_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: PathBuf,
    /// Where the worker keeps its state: `DATA_DIR/sync.db` unless `database:` names
    /// another SQLite file or a PostgreSQL database.
    pub database: Database,
    /// The most connections a PostgreSQL pool opens (`databaseConnections:`).
    pub database_connections: u32,
    pub listen: String,
    pub sources: Vec<SourceConfig>,
    /// How the worker answers Fundament's `organization.v1.PluginService`.
    pub fundament: FundamentConfig,
}

/// The `fundament:` section: what Fundament's own contract needs from the operator.
#[derive(Debug, Clone, Default)]
pub struct FundamentConfig {
    pub anonymous_definitions: AnonymousDefinitions,
    /// Offered to every organization by `ListPresets`, in file order.
    pub presets: Vec<Preset>,
}

/// Which definitions `GetPluginDefinition` returns without a token. Fundament's plugin
/// controller calls it without one, so anything stricter than `offered` means the
/// controller cannot install what the stricter rule withholds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AnonymousDefinitions {
    /// Every definition the organization is offered: built-ins, synced from a
    /// marketplace, and its own sideloads.
    #[default]
    Offered,
    /// Built-ins and synced definitions; an organization's sideloads need its token or
    /// the reader token.
    Public,
    /// None: every call needs the organization's token or the reader token.
    None,
}

/// A named set of plugins the console offers to install together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preset {
    /// A DNS-1123 label, unique in the file.
    pub name: String,
    pub description: String,
    /// Plugin names (`metadata.name`).
    pub plugins: Vec<String>,
}

/// One marketplace to sync from.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// Short name: a DNS-1123 label, unique in the file.
    pub name: String,
    /// Base URL of the marketplace (its index is under `tuf/`).
    pub url: url::Url,
    /// The trusted root metadata (`1.root.json`, obtained out of band).
    pub root: Vec<u8>,
    pub interval: Duration,
    /// Higher wins when two sources offer the same plugin; unique among sources.
    pub priority: i64,
    /// Deadline of each request to the source (a trickling server times out).
    pub request_timeout: Duration,
    /// Deadline of a whole round.
    pub round_timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {0}")]
    Read(String, #[source] std::io::Error),
    #[error("{0} is larger than {MAX_CONFIG_BYTES} bytes")]
    TooLarge(String),
    #[error("{file}: {message}")]
    Invalid { file: String, message: String },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawConfig {
    data_dir: Option<PathBuf>,
    database: Option<String>,
    database_connections: Option<u32>,
    listen: Option<String>,
    #[serde(default)]
    sources: Vec<RawSource>,
    #[serde(default)]
    fundament: RawFundament,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawFundament {
    #[serde(default)]
    anonymous_definitions: AnonymousDefinitions,
    #[serde(default)]
    presets: Vec<RawPreset>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawPreset {
    name: String,
    #[serde(default)]
    description: String,
    plugins: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawSource {
    name: String,
    url: String,
    root: PathBuf,
    #[serde(default)]
    interval: Option<String>,
    #[serde(default)]
    priority: i64,
    #[serde(default)]
    request_timeout: Option<String>,
    #[serde(default)]
    round_timeout: Option<String>,
}

impl Config {
    /// Reads and checks `path`; relative paths in it are relative to its folder.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let read_err = |e| ConfigError::Read(file.clone(), e);
        let meta = std::fs::metadata(path).map_err(read_err)?;
        if meta.len() > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge(file));
        }
        let text = std::fs::read_to_string(path).map_err(read_err)?;
        let base = path.parent().unwrap_or(Path::new("."));
        Config::parse(&text, base).map_err(|message| ConfigError::Invalid { file, message })
    }

    /// Parses config text; `base` resolves relative paths.
    pub fn parse(text: &str, base: &Path) -> Result<Config, String> {
        let raw: RawConfig = parse_yaml(text)?;
        let mut sources: Vec<SourceConfig> = Vec::new();
        for (i, s) in raw.sources.into_iter().enumerate() {
            let at = format!("sources[{i}]");
            if !crate::definition::is_dns_label(&s.name) {
                return Err(format!(
                    "{at}.name: `{}` must be a DNS-1123 label (lowercase letters, digits, '-')",
                    s.name
                ));
            }
            if sources.iter().any(|o| o.name == s.name) {
                return Err(format!("{at}.name: `{}` is used twice", s.name));
            }
            let mut url = url::Url::parse(&s.url)
                .map_err(|e| format!("{at}.url: `{}` is not a URL: {e}", s.url))?;
            if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
                return Err(format!("{at}.url: `{}` must be an http(s) URL", s.url));
            }
            if !url.path().ends_with('/') {
                url.set_path(&format!("{}/", url.path()));
            }
            let root_path = base.join(&s.root);
            let root = std::fs::read(&root_path)
                .map_err(|e| format!("{at}.root: cannot read {}: {e}", root_path.display()))?;
            let interval = match s.interval {
                None => Duration::from_secs(300),
                Some(text) => parse_interval(&text).map_err(|e| format!("{at}.interval: {e}"))?,
            };
            if interval < MIN_INTERVAL {
                return Err(format!(
                    "{at}.interval: at least {}s",
                    MIN_INTERVAL.as_secs()
                ));
            }
            let duration = |field: &str, text: Option<String>, default: u64| {
                let d = match text {
                    None => Duration::from_secs(default),
                    Some(text) => {
                        parse_interval(&text).map_err(|e| format!("{at}.{field}: {e}"))?
                    }
                };
                if d < Duration::from_secs(1) {
                    return Err(format!("{at}.{field}: at least 1s"));
                }
                Ok(d)
            };
            let request_timeout = duration("requestTimeout", s.request_timeout, 30)?;
            let round_timeout = duration("roundTimeout", s.round_timeout, 600)?;
            if round_timeout < request_timeout {
                return Err(format!(
                    "{at}.roundTimeout: shorter than requestTimeout, so no request could use its full deadline"
                ));
            }
            if let Some(other) = sources.iter().find(|o| o.priority == s.priority) {
                return Err(format!(
                    "{at}.priority: {} is also the priority of `{}`; priorities decide which source wins when both offer a plugin, so each source needs its own",
                    s.priority, other.name
                ));
            }
            sources.push(SourceConfig {
                name: s.name,
                url,
                root,
                interval,
                priority: s.priority,
                request_timeout,
                round_timeout,
            });
        }
        let fundament = FundamentConfig {
            anonymous_definitions: raw.fundament.anonymous_definitions,
            presets: presets(raw.fundament.presets)?,
        };
        let data_dir = base.join(raw.data_dir.unwrap_or_else(|| PathBuf::from("sync-data")));
        let database = match raw.database {
            None => Database::Sqlite(data_dir.join("sync.db")),
            Some(url) => match Database::parse(&url).map_err(|e| format!("database: {e}"))? {
                Database::Sqlite(path) => Database::Sqlite(base.join(path)),
                db => db,
            },
        };
        let database_connections = raw
            .database_connections
            .unwrap_or(crate::db::postgres::DEFAULT_CONNECTIONS);
        if !(1..=crate::db::postgres::MAX_CONNECTIONS).contains(&database_connections) {
            return Err(format!(
                "databaseConnections: between 1 and {}",
                crate::db::postgres::MAX_CONNECTIONS
            ));
        }
        Ok(Config {
            fundament,
            database,
            database_connections,
            data_dir,
            listen: raw.listen.unwrap_or_else(|| "127.0.0.1:8081".into()),
            sources,
        })
    }
}

/// Presets with checked names; `fundament.presets[i]` names the bad one.
fn presets(raw: Vec<RawPreset>) -> Result<Vec<Preset>, String> {
    let mut out: Vec<Preset> = Vec::new();
    for (i, p) in raw.into_iter().enumerate() {
        let at = format!("fundament.presets[{i}]");
        if !crate::definition::is_dns_label(&p.name) {
            return Err(format!(
                "{at}.name: `{}` must be a DNS-1123 label (lowercase letters, digits, '-')",
                p.name
            ));
        }
        if out.iter().any(|o| o.name == p.name) {
            return Err(format!("{at}.name: `{}` is used twice", p.name));
        }
        if p.plugins.is_empty() {
            return Err(format!("{at}.plugins: a preset needs at least one plugin"));
        }
        for (j, name) in p.plugins.iter().enumerate() {
            if !crate::definition::is_dns_label(name) {
                return Err(format!(
                    "{at}.plugins[{j}]: `{name}` is not a plugin name (DNS-1123 label)"
                ));
            }
        }
        out.push(Preset {
            name: p.name,
            description: p.description,
            plugins: p.plugins,
        });
    }
    Ok(out)
}

/// The same parser settings and budgets as definitions (the file is at most 1 MiB too),
/// and the same wording of errors: never the parser's developer-facing text.
fn parse_yaml(text: &str) -> Result<RawConfig, String> {
    yaml::config(text, "a sync config")
}

/// `90s`, `5m`, `1h`: a number and a unit.
fn parse_interval(s: &str) -> Result<Duration, String> {
    let bad = || format!("`{s}` is not an interval like 90s, 5m or 1h");
    let (number, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        _ => return Err(bad()),
    };
    Ok(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sources_and_names_the_bad_field() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("root.json"), b"{}").unwrap();
        let ok = Config::parse(
            "dataDir: state\nsources:\n  - name: public\n    url: http://127.0.0.1:9/x\n    root: root.json\n    interval: 2m\n    priority: 5\n",
            dir.path(),
        )
        .unwrap();
        assert_eq!(ok.data_dir, dir.path().join("state"));
        assert_eq!(ok.sources[0].url.as_str(), "http://127.0.0.1:9/x/");
        assert_eq!(ok.sources[0].interval, Duration::from_secs(120));
        assert_eq!(ok.sources[0].priority, 5);
        assert_eq!(ok.sources[0].request_timeout, Duration::from_secs(30));
        assert_eq!(ok.sources[0].round_timeout, Duration::from_secs(600));
        let empty = Config::parse("", dir.path()).unwrap();
        assert!(empty.sources.is_empty());
        assert_eq!(
            empty.fundament.anonymous_definitions,
            AnonymousDefinitions::Offered
        );
        assert!(empty.fundament.presets.is_empty());
        let f = Config::parse(
            "fundament:\n  anonymousDefinitions: public\n  presets:\n    - {name: base, description: Basics, plugins: [cert-manager, storage]}\n",
            dir.path(),
        )
        .unwrap()
        .fundament;
        assert_eq!(f.anonymous_definitions, AnonymousDefinitions::Public);
        assert_eq!(
            f.presets,
            vec![Preset {
                name: "base".into(),
                description: "Basics".into(),
                plugins: vec!["cert-manager".into(), "storage".into()],
            }]
        );
        for (text, field) in [
            (
                "sources:\n  - {name: Bad, url: http://h/, root: root.json}",
                "sources[0].name",
            ),
            (
                "sources:\n  - {name: a, url: ftp://h/, root: root.json}",
                "sources[0].url",
            ),
            (
                "sources:\n  - {name: a, url: http://h/, root: missing.json}",
                "sources[0].root",
            ),
            (
                "sources:\n  - {name: a, url: http://h/, root: root.json, interval: 1s}",
                "sources[0].interval",
            ),
            (
                "sources:\n  - {name: a, url: http://h/, root: root.json}\n  - {name: a, url: http://h/, root: root.json}",
                "sources[1].name",
            ),
            (
                "sources:\n  - {name: a, url: http://h/, root: root.json}\n  - {name: b, url: http://h/, root: root.json}",
                "sources[1].priority",
            ),
            (
                "sources:\n  - {name: a, url: http://h/, root: root.json, requestTimeout: 0s}",
                "sources[0].requestTimeout",
            ),
            (
                "sources:\n  - {name: a, url: http://h/, root: root.json, requestTimeout: 2m, roundTimeout: 1m}",
                "sources[0].roundTimeout",
            ),
            ("colour: blue", "colour"),
            (
                "fundament: {anonymousDefinitions: always}",
                "anonymousDefinitions",
            ),
            (
                "fundament: {presets: [{name: Base, plugins: [a]}]}",
                "fundament.presets[0].name",
            ),
            (
                "fundament: {presets: [{name: base, plugins: []}]}",
                "fundament.presets[0].plugins",
            ),
            (
                "fundament: {presets: [{name: base, plugins: [Bad]}]}",
                "fundament.presets[0].plugins[0]",
            ),
            (
                "fundament: {presets: [{name: a, plugins: [x]}, {name: a, plugins: [y]}]}",
                "fundament.presets[1].name",
            ),
        ] {
            let err = Config::parse(text, dir.path()).unwrap_err();
            assert!(err.contains(field), "{text}: {err}");
        }
    }
}
