//! Bytes to [`Manifest`]: size, encoding and YAML structure. Semantic rules live in
//! `validate`.

use super::yaml::{self, MAX_YAML_BYTES};
use super::{InvalidDefinition, Manifest, Position, Problem};

/// The largest definition accepted, in bytes.
pub const MAX_DEFINITION_BYTES: usize = MAX_YAML_BYTES;

/// Bytes to a manifest. With `published` (bytes already published, see
/// [`super::Definition::parse_published`]), a definition of the older design whose
/// console fields do not fit Fundament's shapes is read without them, each one left out
/// named in the returned findings.
pub(super) fn parse_manifest(
    bytes: &[u8],
    published: bool,
) -> Result<(Manifest, Vec<Problem>), InvalidDefinition> {
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
    if published
        && result.is_err()
        && let Some(found) = super::legacy::parse_published(text)
    {
        return Ok(found);
    }
    result.map(|m| (m, Vec::new())).map_err(|failed| {
        let (err, path) = *failed;
        let path = clean_path(&path);
        let pos = err.location().and_then(|l| {
            (l.line() > 0).then(|| Position {
                line: l.line(),
                column: l.column(),
            })
        });
        let mut message =
            super::legacy::without_legacy_names(yaml::message(&err, "a plugin definition"));
        if path.is_empty() && message.starts_with("expected a mapping") {
            message =
                "the document root must be a mapping with apiVersion, kind, metadata and spec"
                    .into();
        }
        InvalidDefinition::one(Problem::at(path, pos, message))
    })
}

/// `serde_path_to_error` shows the `Located` wrapper as a `value` segment and an unknown
/// map key as `?`; neither means anything to an author.
pub(super) fn clean_path(path: &str) -> String {
    let cleaned = path.replace(".value.", ".");
    let cleaned = cleaned.strip_suffix(".value").unwrap_or(&cleaned);
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
