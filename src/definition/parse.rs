//! Bytes to [`Manifest`]: size, encoding and YAML structure. Semantic rules live in
//! `validate`.

use super::yaml::{self, MAX_YAML_BYTES};
use super::{InvalidDefinition, Manifest, Position, Problem};

/// The largest definition accepted, in bytes.
pub const MAX_DEFINITION_BYTES: usize = MAX_YAML_BYTES;

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

    let result = yaml::deserialize::<Manifest>(text);
    result.map_err(|failed| {
        let (err, path) = *failed;
        let path = clean_path(&path);
        let pos = err.location().and_then(|l| {
            (l.line() > 0).then(|| Position {
                line: l.line(),
                column: l.column(),
            })
        });
        let mut message = yaml::message(&err, "a plugin definition");
        if path.is_empty() && message.starts_with("expected a mapping") {
            message =
                "the document root must be a mapping with apiVersion, kind, metadata and spec"
                    .into();
        }
        InvalidDefinition::one(Problem::at(path, pos, message))
    })
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
