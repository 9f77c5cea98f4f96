//! Bytes to [`Manifest`]: size, encoding and YAML structure. Semantic rules live in
//! `validate`.

use serde_saphyr::{Budget, DuplicateKeyPolicy, MessageFormatter, Options};

use super::{InvalidDefinition, Manifest, Position, Problem};

/// Real definitions are a few kilobytes; a megabyte leaves room for large `uiHints`
/// while keeping one request or file from costing much memory or CPU.
pub const MAX_DEFINITION_BYTES: usize = 1024 * 1024;

/// Parser budgets sized for a definition, far below serde-saphyr's general defaults, so
/// that alias bombs and deep nesting are refused in milliseconds.
fn options() -> Options {
    let mut budget = Budget::default();
    budget.max_events = 200_000;
    budget.max_nodes = 20_000;
    budget.max_aliases = 1_000;
    budget.max_anchors = 1_000;
    budget.max_depth = 64;
    budget.max_documents = 1;
    budget.max_recorded_anchor_events = 20_000;
    budget.max_total_scalar_bytes = MAX_DEFINITION_BYTES;
    let mut options = Options::default();
    options.budget = Some(budget);
    options.duplicate_keys = DuplicateKeyPolicy::Error;
    // YAML 1.1 booleans (`yes`, `on`) are a classic source of surprises in k8s files.
    options.strict_booleans = true;
    options.alias_limits.max_total_replayed_events = 20_000;
    options.alias_limits.max_replay_stack_depth = 16;
    options
}

pub(super) fn parse_manifest(bytes: &[u8]) -> Result<Manifest, InvalidDefinition> {
    let whole = |msg: String| InvalidDefinition::one(Problem::at("", None, msg));
    if bytes.len() > MAX_DEFINITION_BYTES {
        return Err(whole(format!(
            "definition is {} bytes; the limit is {MAX_DEFINITION_BYTES} bytes",
            bytes.len()
        )));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let pos = position_of(bytes, e.valid_up_to());
        InvalidDefinition::one(Problem::at("", Some(pos), "file is not valid UTF-8"))
    })?;
    let has_content = text
        .lines()
        .map(str::trim)
        .any(|l| !l.is_empty() && !l.starts_with('#'));
    if !has_content {
        return Err(whole(
            "file is empty; expected a PluginDefinition document".into(),
        ));
    }

    let mut path = None;
    let result = serde_saphyr::with_deserializer_from_str_with_options(text, options(), |de| {
        serde_path_to_error::deserialize::<_, Manifest>(de).map_err(|e| {
            path = Some(e.path().to_string());
            e.into_inner()
        })
    });
    result.map_err(|err| {
        let path = clean_path(path.as_deref().unwrap_or(""));
        let pos = err.location().and_then(|l| {
            (l.line() > 0).then(|| Position {
                line: l.line(),
                column: l.column(),
            })
        });
        let raw = serde_saphyr::DefaultMessageFormatter
            .format_message(err.without_snippet())
            .into_owned();
        InvalidDefinition::one(Problem::at(path.clone(), pos, explain(&path, &raw)))
    })
}

/// Turns the parser's wording into the reader's terms where it is unclear on its own.
fn explain(path: &str, raw: &str) -> String {
    if raw.contains("Documents {") {
        return "a definition file holds exactly one YAML document; found another after `---`"
            .into();
    }
    if raw.contains("Depth {") || raw.contains("recursion limit") {
        return "nesting is deeper than 64 levels".into();
    }
    if raw.contains("budget breached") || raw.contains("alias") && raw.contains("limit") {
        return format!(
            "document is too complex to be a plugin definition (anchors/aliases or node count over the limit): {raw}"
        );
    }
    if path.is_empty() && raw.contains("expected mapping") {
        return "the document root must be a mapping with apiVersion, kind, metadata and spec"
            .into();
    }
    raw.trim_end_matches(", set DuplicateKeyPolicy in Options if acceptable")
        .to_owned()
}

/// `serde_path_to_error` shows the `Located` wrapper as `.value` and an unknown map key as
/// `?`; neither means anything to an author.
fn clean_path(path: &str) -> String {
    let cleaned = path.replace(".value", "");
    let cleaned = cleaned.trim_end_matches(".?").trim_end_matches('?');
    if cleaned == "." {
        String::new()
    } else {
        cleaned.to_owned()
    }
}

fn position_of(bytes: &[u8], offset: usize) -> Position {
    let before = &bytes[..offset];
    let line = before.iter().filter(|b| **b == b'\n').count() as u64 + 1;
    let line_start = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    // Columns count characters; the prefix is valid UTF-8 by construction.
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count() as u64
        + 1;
    Position { line, column }
}
