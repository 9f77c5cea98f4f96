//! The YAML parser's settings and its errors in the reader's terms, shared by plugin
//! definitions and the worker's `sync.yaml`.
//!
//! serde-saphyr's own formatter is written for developers: some messages print a Rust
//! `Debug` value (`budget breached: RecordedAnchorEvents { ... }`) or name parser
//! options and Rust types (`use Option<String>`). Every error the parser can return is
//! worded here instead; the default text is used only where it already reads well.

use serde_saphyr::budget::BudgetBreach;
use serde_saphyr::{Budget, DuplicateKeyPolicy, Error, MessageFormatter, Options};

/// Real definitions are a few kilobytes; a megabyte leaves room for large `uiHints`
/// while keeping one request or file from costing much memory or CPU.
pub const MAX_YAML_BYTES: usize = 1024 * 1024;

// Budgets sized for a definition, far below serde-saphyr's general defaults, so that
// alias bombs and deep nesting are refused in milliseconds. Messages name them.
const MAX_EVENTS: usize = 200_000;
const MAX_NODES: usize = 20_000;
const MAX_ALIASES: usize = 1_000;
const MAX_ANCHORS: usize = 1_000;
pub const MAX_DEPTH: usize = 64;
const MAX_RECORDED_ANCHOR_EVENTS: usize = 20_000;
const MAX_REPLAYED_EVENTS: usize = 20_000;
const MAX_REPLAY_DEPTH: usize = 16;

pub(crate) fn options() -> Options {
    let mut budget = Budget::default();
    budget.max_events = MAX_EVENTS;
    budget.max_nodes = MAX_NODES;
    budget.max_aliases = MAX_ALIASES;
    budget.max_anchors = MAX_ANCHORS;
    budget.max_depth = MAX_DEPTH;
    budget.max_documents = 1;
    budget.max_recorded_anchor_events = MAX_RECORDED_ANCHOR_EVENTS;
    budget.max_total_scalar_bytes = MAX_YAML_BYTES;
    let mut options = Options::default();
    options.budget = Some(budget);
    options.duplicate_keys = DuplicateKeyPolicy::Error;
    // YAML 1.1 booleans (`yes`, `on`) are a classic source of surprises in k8s files.
    options.strict_booleans = true;
    options.alias_limits.max_total_replayed_events = MAX_REPLAYED_EVENTS;
    options.alias_limits.max_replay_stack_depth = MAX_REPLAY_DEPTH;
    options
}

/// Deserializes `text` into `T` with [`options`]. On failure, also the path of the
/// field that failed (`spec.image`; empty at the root).
///
/// Tracking the path through `serde_path_to_error` costs about a third of the parse of a
/// definition, and a sync round parses thousands of them: the path is only needed when
/// there is an error, so a failed parse is run again with tracking. The parser is
/// deterministic, so the second run fails with the same error at the same place.
pub(crate) fn deserialize<T: serde::de::DeserializeOwned>(
    text: &str,
) -> Result<T, Box<(Error, String)>> {
    let fast = serde_saphyr::with_deserializer_from_str_with_options(text, options(), |de| {
        T::deserialize(de)
    });
    let first = match fast {
        Ok(value) => return Ok(value),
        Err(e) => e,
    };
    let mut path = None;
    let tracked = serde_saphyr::with_deserializer_from_str_with_options(text, options(), |de| {
        serde_path_to_error::deserialize::<_, T>(de).map_err(|e| {
            path = Some(e.path().to_string());
            e.into_inner()
        })
    });
    match tracked {
        Err(e) => Err(Box::new((e, path.unwrap_or_default()))),
        // Cannot happen (see above); the first error then stands without a path.
        Ok(_) => Err(Box::new((first, String::new()))),
    }
}

/// A configuration file (the sync worker's `sync.yaml`, the server's upstreams): the
/// definitions' parser settings and budgets, and one line naming the field, the line
/// and the column for whoever wrote it; `what` names the file's kind.
pub(crate) fn config<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T, String> {
    deserialize::<T>(text).map_err(|failed| {
        let (e, path) = *failed;
        let mut message = message(&e, what);
        // An unknown key is named in the message; its path would end in `?`.
        if !path.is_empty() && path != "." && !path.ends_with('?') {
            message = format!("{path}: {message}");
        }
        match e.location().filter(|l| l.line() > 0) {
            Some(l) => format!("line {}, column {}: {message}", l.line(), l.column()),
            None => message,
        }
    })
}

/// The error as one line for the author of the file; `what` names the file's kind
/// ("a plugin definition").
pub(crate) fn message(err: &Error, what: &str) -> String {
    let too_complex = |detail: String| format!("document is too complex for {what}: {detail}");
    match err {
        Error::WithSnippet { error, .. } => message(error, what),
        Error::AliasError { error, .. } => message(error, what),
        Error::Budget { breach, .. } => budget_message(breach, what),
        Error::AliasReplayLimitExceeded { .. } | Error::AliasReplayCounterOverflow { .. } => {
            too_complex(format!(
                "YAML aliases expand to more than {MAX_REPLAYED_EVENTS} parser events in total (the alias budget)"
            ))
        }
        Error::AliasExpansionLimitExceeded {
            max_expansions_per_anchor,
            ..
        } => too_complex(format!(
            "one anchor is expanded through aliases more than {max_expansions_per_anchor} times (the alias budget)"
        )),
        Error::AliasReplayStackDepthExceeded { max_depth, .. } => too_complex(format!(
            "YAML aliases nest inside each other more than {max_depth} levels deep"
        )),
        // The scanner's own guard against deep flow nesting (`[[[[...`).
        Error::ExternalMessage { msg, .. } if msg.contains("recursion limit") => {
            format!("nesting is deeper than {MAX_DEPTH} levels")
        }
        Error::UnknownAnchor { .. } => {
            "alias `*name` refers to an anchor `&name` that is not defined before it".into()
        }
        Error::MultipleDocuments { .. } => one_document(),
        Error::DuplicateMappingKey { key: Some(key), .. } => {
            format!("duplicate key `{key}`: a key may appear once per mapping")
        }
        Error::DuplicateMappingKey { key: None, .. } => {
            "duplicate key: a key may appear once per mapping".into()
        }
        Error::InvalidBooleanStrict { .. } => {
            "expected a boolean, true or false (YAML 1.1 words such as yes, no, on and off are not booleans here)".into()
        }
        Error::InvalidScalar { ty, .. } => format!("expected {}", scalar_kind(ty)),
        Error::Unexpected { expected, .. } => format!("expected {}", structure(expected)),
        Error::NullIntoString { .. } | Error::InvalidCharNull { .. } => {
            "expected a value, found none (null)".into()
        }
        Error::InvalidCharNotSingleScalar { .. } => "expected a single character".into(),
        Error::BinaryNotUtf8 { .. } | Error::TaggedScalarCannotDeserializeIntoString { .. } => {
            "expected plain text; this tagged value is not text".into()
        }
        Error::BytesNotSupportedMissingBinaryTag { .. } => "expected a !!binary value".into(),
        Error::NonFiniteFloat { value, .. } => {
            format!("`{value}` is not a finite number; NaN and infinity are not accepted")
        }
        Error::SerdeUnknownVariant {
            variant, expected, ..
        } => format!("unknown value `{variant}`; expected {}", one_of(expected)),
        Error::CyclicInclude { .. }
        | Error::UnsupportedIncludeForm { .. }
        | Error::ResolverError { .. } => "`!include` is not supported".into(),
        Error::UnresolvedProperty { .. }
        | Error::InvalidPropertyName { .. }
        | Error::PropertyRequiredButUnset { .. }
        | Error::PropertyRequiredButEmpty { .. } => {
            "`${...}` property references are not supported".into()
        }
        Error::CannotBorrowTransformedString { .. }
        | Error::InvalidOptions { .. }
        | Error::InternalSeedReusedForMapKey { .. }
        | Error::ValueRequestedBeforeKey { .. }
        | Error::InternalDepthUnderflow { .. }
        | Error::InternalRecursionStackEmpty { .. }
        | Error::RecursiveReferencesRequireWeakTypes { .. } => {
            "the YAML parser failed on this document (an internal error); please report it"
                .into()
        }
        // The remaining texts (serde's "invalid type: ..., expected ...", "unknown field",
        // "missing field", the scanner's syntax errors) already read well.
        other => serde_saphyr::DefaultMessageFormatter
            .format_message(other)
            .into_owned(),
    }
}

fn budget_message(breach: &BudgetBreach, what: &str) -> String {
    let detail = match breach {
        BudgetBreach::Depth { .. } => return format!("nesting is deeper than {MAX_DEPTH} levels"),
        BudgetBreach::Documents { .. } => return one_document(),
        BudgetBreach::Events { .. } => {
            format!("more than {MAX_EVENTS} YAML parser events (the event budget)")
        }
        BudgetBreach::Nodes { .. } => {
            format!("more than {MAX_NODES} values, lists and mappings (the node budget)")
        }
        BudgetBreach::Aliases { .. } => {
            format!("more than {MAX_ALIASES} aliases `*name` (the alias budget)")
        }
        BudgetBreach::Anchors { .. } => {
            format!("more than {MAX_ANCHORS} anchors `&name` (the anchor budget)")
        }
        BudgetBreach::AliasAnchorRatio { aliases, anchors } => {
            format!("{aliases} aliases for {anchors} anchors (the alias budget)")
        }
        BudgetBreach::RecordedAnchorEvents { .. } | BudgetBreach::RecordedAnchorBytes { .. } => {
            format!(
                "anchored content replayed through aliases exceeds {MAX_RECORDED_ANCHOR_EVENTS} parser events (the alias/anchor budget)"
            )
        }
        BudgetBreach::ScalarBytes { .. } => {
            format!("text values total more than {MAX_YAML_BYTES} bytes (the text budget)")
        }
        BudgetBreach::MergeKeys { .. } => {
            "too many `<<` merge keys (the merge key budget)".to_owned()
        }
        BudgetBreach::InclusionDepth { .. } => return "`!include` is not supported".into(),
        BudgetBreach::PropertyExpansionDepth { .. }
        | BudgetBreach::PropertyInterpolationWork { .. } => {
            return "`${...}` property references are not supported".into();
        }
        BudgetBreach::SequenceUnbalanced => {
            return "a list or mapping ends that never started".into();
        }
        BudgetBreach::InputBytes { .. } => format!("more than {MAX_YAML_BYTES} bytes"),
        // Budgets of features this program does not enable (comments) or that a newer
        // serde-saphyr adds: still a budget, still no Rust value in the message.
        _ => "a YAML parser budget is exceeded".to_owned(),
    };
    format!("document is too complex for {what}: {detail}")
}

fn one_document() -> String {
    "a file holds exactly one YAML document; found another after `---`".into()
}

/// serde-saphyr's name for the value it wanted, as a reader says it.
fn scalar_kind(ty: &str) -> &'static str {
    match ty {
        "boolean" | "bool" => "a boolean, true or false",
        "floating point" | "f32" | "f64" => "a number",
        "char" => "a single character",
        t if t.starts_with('i') || t.starts_with('u') => "a whole number",
        _ => "a different kind of value",
    }
}

fn structure(expected: &str) -> String {
    match expected {
        "sequence start" => "a list (YAML sequence)".into(),
        "mapping start" | "empty mapping start" => "a mapping (`key: value` pairs)".into(),
        "mapping end" | "empty mapping end" => "the end of the mapping".into(),
        "string scalar" | "scalar" => "a single value, not a list or mapping".into(),
        // The rest are parser states ("consumed event"); no reader can act on them.
        _ => "something else at this point of the document".into(),
    }
}

/// `Always`, `IfNotPresent` or `Never`; an empty variant reads as `""`.
fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names
        .iter()
        .map(|n| {
            if n.is_empty() {
                "\"\"".to_owned()
            } else {
                format!("`{n}`")
            }
        })
        .collect();
    match quoted.split_last() {
        None => "nothing here".into(),
        Some((only, [])) => only.clone(),
        Some((last, rest)) => format!("one of {} or {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use serde_saphyr::Location;

    use super::*;

    /// No `Debug` braces, no parser option or Rust type names.
    fn assert_human(message: &str) {
        for marker in ["{ ", " }", "Some(", "Options", "Policy", "Option<", "_"] {
            assert!(!message.contains(marker), "{marker:?} in {message:?}");
        }
    }

    #[test]
    fn every_budget_breach_names_its_limit_in_words() {
        let at = Location::UNKNOWN;
        let budget = |breach| Error::Budget {
            breach,
            location: at,
        };
        let cases = [
            (
                budget(BudgetBreach::Events { events: 1 }),
                "200000 YAML parser events",
            ),
            (budget(BudgetBreach::Aliases { aliases: 1 }), "1000 aliases"),
            (budget(BudgetBreach::Anchors { anchors: 1 }), "1000 anchors"),
            (
                budget(BudgetBreach::Depth { depth: 65 }),
                "deeper than 64 levels",
            ),
            (
                budget(BudgetBreach::InclusionDepth { depth: 1 }),
                "`!include`",
            ),
            (
                budget(BudgetBreach::Documents { documents: 2 }),
                "exactly one YAML document",
            ),
            (budget(BudgetBreach::Nodes { nodes: 1 }), "20000 values"),
            (
                budget(BudgetBreach::ScalarBytes {
                    total_scalar_bytes: 1,
                }),
                "1048576 bytes",
            ),
            (
                budget(BudgetBreach::MergeKeys { merge_keys: 1 }),
                "merge keys",
            ),
            (
                budget(BudgetBreach::AliasAnchorRatio {
                    aliases: 500,
                    anchors: 1,
                }),
                "500 aliases for 1 anchors",
            ),
            (budget(BudgetBreach::SequenceUnbalanced), "never started"),
            (
                budget(BudgetBreach::InputBytes { input_bytes: 1 }),
                "1048576 bytes",
            ),
            (
                budget(BudgetBreach::RecordedAnchorEvents {
                    recorded_anchor_events: 20_001,
                }),
                "20000 parser events (the alias/anchor budget)",
            ),
            (
                budget(BudgetBreach::RecordedAnchorBytes {
                    recorded_anchor_bytes: 1,
                }),
                "alias/anchor budget",
            ),
            (
                budget(BudgetBreach::PropertyExpansionDepth {
                    depth: 1,
                    max_depth: 1,
                }),
                "not supported",
            ),
            (
                Error::AliasReplayLimitExceeded {
                    total_replayed_events: 20_001,
                    max_total_replayed_events: 20_000,
                    location: at,
                },
                "more than 20000 parser events",
            ),
            (
                Error::AliasExpansionLimitExceeded {
                    anchor_id: 3,
                    expansions: 11,
                    max_expansions_per_anchor: 10,
                    location: at,
                },
                "more than 10 times",
            ),
            (
                Error::AliasReplayStackDepthExceeded {
                    depth: 17,
                    max_depth: 16,
                    location: at,
                },
                "more than 16 levels",
            ),
            (
                Error::MultipleDocuments {
                    hint: "use from_multiple",
                    location: at,
                },
                "`---`",
            ),
            (Error::NullIntoString { location: at }, "found none"),
            (
                Error::InvalidBooleanStrict { location: at },
                "true or false",
            ),
            (
                Error::InvalidScalar {
                    ty: "u16",
                    location: at,
                },
                "a whole number",
            ),
            (
                Error::InternalDepthUnderflow { location: at },
                "internal error",
            ),
        ];
        for (err, phrase) in cases {
            let m = message(&err, "a plugin definition");
            assert_human(&m);
            assert!(m.contains(phrase), "{phrase:?} not in {m:?}");
        }
    }

    #[test]
    fn accepted_values_are_listed_readably() {
        let m = message(
            &Error::SerdeUnknownVariant {
                variant: "Sometimes".into(),
                expected: vec!["", "Always", "Never"],
                location: Location::UNKNOWN,
            },
            "a plugin definition",
        );
        assert_eq!(
            m,
            "unknown value `Sometimes`; expected one of \"\", `Always` or `Never`"
        );
    }
}
