//! `marketplace validate FILE|DIR...`: definitions, and companion documents
//! (`*.extras.yaml`), each checked as its entry points check it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::definition::{Definition, EXTRAS_FILE_SUFFIX, Extras, MAX_DEFINITION_BYTES, Problem};

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Definition files, or folders searched recursively for `*.yaml` and `*.yml`. A
    /// file named `*.extras.yaml` is a companion document (`kind: PluginExtras`); beside
    /// `NAME.yaml`, it must be for that definition's plugin.
    #[arg(required = true, value_name = "FILE|DIR")]
    paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text, env = "MARKETPLACE_FORMAT")]
    format: Format,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Debug, Serialize)]
struct FileReport {
    file: String,
    /// `definition` or `extras` (a companion document).
    kind: &'static str,
    valid: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hash: Option<String>,
    problems: Vec<Problem>,
}

#[derive(Debug, Serialize)]
struct Report {
    valid: usize,
    invalid: usize,
    files: Vec<FileReport>,
}

pub fn run(args: ValidateArgs) -> ExitCode {
    let mut files = Vec::new();
    let mut reports = Vec::new();
    for path in &args.paths {
        if let Err(e) = collect(path, &mut files) {
            reports.push(failed(path, format!("cannot read: {e}")));
        }
    }
    reports.extend(files.iter().map(|f| check(f)));
    let invalid = reports.iter().filter(|r| !r.valid).count();
    let report = Report {
        valid: reports.len() - invalid,
        invalid,
        files: reports,
    };
    match args.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report serializes")
        ),
        Format::Text => print_text(&report),
    }
    if report.invalid == 0 && report.valid > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_text(report: &Report) {
    for file in &report.files {
        for p in &file.problems {
            match (p.line, p.column) {
                (Some(l), Some(c)) => println!("{}:{l}:{c}: {}", file.file, field_and_message(p)),
                _ => println!("{}: {}", file.file, field_and_message(p)),
            }
        }
    }
    if report.valid + report.invalid == 0 {
        eprintln!("no definition files found (looked for *.yaml and *.yml)");
    } else {
        eprintln!("{} valid, {} invalid", report.valid, report.invalid);
    }
}

fn field_and_message(p: &Problem) -> String {
    if p.path.is_empty() {
        p.message.clone()
    } else {
        format!("{}: {}", p.path, p.message)
    }
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if !path.is_dir() {
        out.push(path.to_owned());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            collect(&entry, out)?;
        } else if entry.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(entry);
        }
    }
    Ok(())
}

/// The definition a companion document at `path` sits beside (`NAME.extras.yaml` →
/// `NAME.yaml`), if it is one.
fn companion_of(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(EXTRAS_FILE_SUFFIX)?;
    Some(path.with_file_name(format!("{stem}.yaml")))
}

fn check(path: &Path) -> FileReport {
    let bytes = match read_limited(path) {
        Ok(b) => b,
        Err(msg) => return failed(path, msg),
    };
    if let Some(definition) = companion_of(path) {
        return check_extras(path, &bytes, &definition);
    }
    match Definition::parse(&bytes) {
        Ok(def) => FileReport {
            file: path.display().to_string(),
            kind: "definition",
            valid: true,
            name: Some(def.name().to_owned()),
            version: Some(def.version_text().to_owned()),
            hash: Some(def.hash),
            problems: Vec::new(),
        },
        Err(e) => FileReport {
            file: path.display().to_string(),
            kind: "definition",
            valid: false,
            name: None,
            version: None,
            hash: None,
            problems: e.problems,
        },
    }
}

/// A companion document, and (when its definition is beside it and valid) whether it
/// goes with that definition.
fn check_extras(path: &Path, bytes: &[u8], definition: &Path) -> FileReport {
    let result = Extras::parse_document(bytes).and_then(|doc| {
        let plugin = doc.plugin.clone();
        match read_limited(definition).ok().map(|b| Definition::parse(&b)) {
            Some(Ok(def)) => def.with_companion(doc).map(|_| plugin),
            _ => Ok(plugin),
        }
    });
    let (valid, name, problems) = match result {
        Ok(plugin) => (true, Some(plugin), Vec::new()),
        Err(e) => (false, None, e.problems),
    };
    FileReport {
        file: path.display().to_string(),
        kind: "extras",
        valid,
        name,
        version: None,
        hash: None,
        problems,
    }
}

/// Reads at most one byte past the limit, so a huge file costs no more than a small one.
fn read_limited(path: &Path) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_DEFINITION_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() > MAX_DEFINITION_BYTES {
        return Err(format!(
            "file is larger than the {MAX_DEFINITION_BYTES}-byte limit"
        ));
    }
    Ok(bytes)
}

fn failed(path: &Path, message: String) -> FileReport {
    FileReport {
        file: path.display().to_string(),
        kind: "definition",
        valid: false,
        name: None,
        version: None,
        hash: None,
        problems: vec![Problem {
            path: String::new(),
            line: None,
            column: None,
            message,
        }],
    }
}
