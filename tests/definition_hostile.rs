//! Hostile and malformed Plugin Definitions must be refused, without panicking, quickly,
//! and with a problem that names the right field (path), line and cause. A few positive
//! tests pin the real-world YAML that must keep loading.
//!
//! Inputs are derived from one valid base document by replacing single lines, so each
//! test shows exactly what differs from a good definition. Fundament's schema is typed
//! throughout, so attacks on the parser's budgets go where the strict parser still
//! consumes anything: under a key of the older design (`uiHints.columns`), which is
//! refused, but only after it has been read (see `opaque`).

mod common;

use std::time::{Duration, Instant};

use common::{FUNDAMENT_STYLE, assert_human, is_companion};

use marketplace::definition::{Definition, MAX_DEFINITION_BYTES, Problem, definition_hash};
use sha2::{Digest, Sha256};

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A small valid definition. The `L_*` constants below are its line numbers; the test
/// `base_lines_are_where_the_tests_expect_them` keeps them honest.
fn base() -> String {
    format!(
        r#"apiVersion: fundament.io/v1
kind: PluginDefinition
metadata:
  name: demo
  version: v1.2.3
  description: A demo plugin.
  urls:
    homepage: https://example.com/demo
  tags: [demo, test]
spec:
  permissions:
    rbac:
      - apiGroups: [""]
        resources: [configmaps]
        verbs: [get, list]
  menu:
    project:
      - crd: widgets.example.com
        list: true
        detail: true
  crds: [widgets.example.com]
  uiHints:
    widgets.example.com:
      statusMapping: {{jsonPath: .status.phase, values: {{Ready: {{badge: success, label: Ready}}}}}}
  image: ghcr.io/x/y@{DIGEST}
  imagePullPolicy: IfNotPresent
"#
    )
}

const L_API_VERSION: u64 = 1;
const L_KIND: u64 = 2;
const L_NAME: u64 = 4;
const L_VERSION: u64 = 5;
const L_DESCRIPTION: u64 = 6;
const L_HOMEPAGE: u64 = 8;
const L_TAGS: u64 = 9;
const L_PERMISSIONS: u64 = 11;
const L_RBAC0: u64 = 13;
const L_VERBS: u64 = 15;
const L_MENU_CRD: u64 = 18;
const L_LIST: u64 = 19;
const L_CRDS: u64 = 21;
const L_UI_HINTS: u64 = 22;
const L_UI_HINT: u64 = 23;
const L_STATUS_MAPPING: u64 = 24;
/// The first line of what [`opaque`] puts under `uiHints.columns`.
const L_OPAQUE: u64 = 24;
const L_IMAGE: u64 = 25;
const L_PULL_POLICY: u64 = 26;
const BASE_LINES: u64 = 26;

/// The base document with line `line` (1-based) replaced by `new`, which may span lines.
fn with_line(line: u64, new: &str) -> String {
    let base = base();
    let mut lines: Vec<&str> = base.lines().collect();
    assert!(
        line >= 1 && line as usize <= lines.len(),
        "base has no line {line}"
    );
    lines[line as usize - 1] = new;
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// The base document with `content` (lines indented by 4) read as the value of
/// `uiHints.columns`: a key of the older design, consumed whole before it is refused.
/// Its first line is [`L_OPAQUE`].
fn opaque(content: &str) -> String {
    let indented: Vec<String> = content.lines().map(|l| format!("  {l}")).collect();
    let base = with_line(L_STATUS_MAPPING, &indented.join("\n"));
    let mut lines: Vec<&str> = base.lines().collect();
    lines[L_UI_HINT as usize - 1] = "    columns:";
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// Parses input that must be refused and returns the problems; a panic fails the test.
fn refused(input: impl AsRef<[u8]>) -> Vec<Problem> {
    let err = match Definition::parse(input.as_ref()) {
        Ok(def) => panic!("hostile input was ACCEPTED as definition `{}`", def.name()),
        Err(err) => err,
    };
    assert!(
        !err.problems.is_empty(),
        "refused without naming any problem"
    );
    for p in &err.problems {
        assert_human(&p.to_string());
        assert!(
            !p.message.chars().any(char::is_control),
            "raw control character in message: {p:?}"
        );
    }
    err.problems
}

/// Parses input that must be refused with exactly one problem, and returns it.
fn refused_once(input: impl AsRef<[u8]>) -> Problem {
    let mut problems = refused(input);
    assert_eq!(
        problems.len(),
        1,
        "expected exactly one problem, got {problems:#?}"
    );
    problems.remove(0)
}

#[track_caller]
fn assert_problem(p: &Problem, path: &str, line: Option<u64>, phrase: &str) {
    assert_eq!(p.path, path, "wrong path in {p:?}");
    assert_eq!(p.line, line, "wrong line in {p:?}");
    assert_eq!(
        p.column.is_some(),
        line.is_some(),
        "line and column must come together: {p:?}"
    );
    assert!(
        p.message.to_lowercase().contains(&phrase.to_lowercase()),
        "message of {p:?} does not mention {phrase:?}"
    );
}

#[test]
fn base_lines_are_where_the_tests_expect_them() {
    let base = base();
    let lines: Vec<&str> = base.lines().collect();
    assert_eq!(lines.len() as u64, BASE_LINES);
    for (line, start) in [
        (L_API_VERSION, "apiVersion:"),
        (L_KIND, "kind:"),
        (L_NAME, "  name:"),
        (L_VERSION, "  version:"),
        (L_DESCRIPTION, "  description:"),
        (L_HOMEPAGE, "    homepage:"),
        (L_TAGS, "  tags:"),
        (L_PERMISSIONS, "  permissions:"),
        (L_RBAC0, "      - apiGroups:"),
        (L_VERBS, "        verbs:"),
        (L_MENU_CRD, "      - crd:"),
        (L_LIST, "        list:"),
        (L_CRDS, "  crds:"),
        (L_UI_HINTS, "  uiHints:"),
        (L_UI_HINT, "    widgets.example.com:"),
        (L_STATUS_MAPPING, "      statusMapping:"),
        (L_IMAGE, "  image:"),
        (L_PULL_POLICY, "  imagePullPolicy:"),
    ] {
        assert!(
            lines[line as usize - 1].starts_with(start),
            "line {line} is {:?}",
            lines[line as usize - 1]
        );
    }
    let def = Definition::parse(base.as_bytes()).expect("the base definition is valid");
    assert_eq!(def.name(), "demo");
}

// ---------------------------------------------------------------------------------------
// Resource exhaustion
// ---------------------------------------------------------------------------------------

#[test]
fn billion_laughs_alias_bomb_in_ui_hints_is_refused_quickly() {
    // 9 levels of 9 aliases: 9^9 (~387 million) scalars if expanded.
    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    let mut bomb = format!("    a: &a [{}]", ["lol"; 9].join(", "));
    for pair in names.windows(2) {
        let (prev, next) = (pair[0], pair[1]);
        bomb.push_str(&format!(
            "\n    {next}: &{next} [{}]",
            vec![format!("*{prev}"); 9].join(", ")
        ));
    }
    let input = opaque(&bomb);
    let started = Instant::now();
    let p = refused_once(&input);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "alias bomb took {took:?} to refuse"
    );
    assert!(p.path.starts_with("spec.uiHints"), "wrong path in {p:?}");
    assert!(p.message.contains("too complex"), "{p:?}");
    assert!(
        p.message
            .contains("20000 parser events (the alias/anchor budget)"),
        "names the limit: {p:?}"
    );
    // Refused while replaying the aliases, somewhere inside the bomb (lines 24..=32).
    let line = p.line.expect("bomb problem has a line");
    assert!((L_OPAQUE..L_OPAQUE + 9).contains(&line), "{p:?}");
}

#[test]
fn ten_thousand_deep_flow_sequences_are_refused() {
    let deep = format!("    n: {}{}", "[".repeat(10_000), "]".repeat(10_000));
    let input = opaque(&deep);
    let started = Instant::now();
    let p = refused_once(&input);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_problem(
        &p,
        "spec.uiHints.columns.n",
        Some(L_OPAQUE),
        "deeper than 64 levels",
    );
}

#[test]
fn ten_thousand_deep_block_mappings_are_refused() {
    // Indented, 10,000 levels would need ~50 MB of indentation alone; explicit keys nest
    // block mappings on one line (`? ? ? x`: a mapping whose key is a mapping ...).
    let deep = format!("    {}x", "? ".repeat(10_000));
    let input = opaque(&deep);
    let started = Instant::now();
    let p = refused_once(&input);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_problem(
        &p,
        "spec.uiHints.columns",
        Some(L_OPAQUE),
        "deeper than 64 levels",
    );
}

#[test]
fn deep_indented_block_mappings_within_the_size_limit_are_refused() {
    // The deepest plainly indented nesting that fits under 1 MiB: 1,000 levels (~500 KB).
    let mut deep = String::new();
    for level in 0..1_000 {
        deep.push_str(&format!("{}k:\n", " ".repeat(4 + level)));
    }
    deep.push_str(&format!("{}x", " ".repeat(1_004)));
    let input = opaque(&deep);
    assert!(input.len() < MAX_DEFINITION_BYTES);
    let started = Instant::now();
    let p = refused_once(&input);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(p.path.starts_with("spec.uiHints.columns.k.k.k"), "{p:?}");
    assert!(p.message.contains("deeper than 64 levels"), "{p:?}");
    // Refused at the level that crosses the limit, not at the end of the document.
    let line = p.line.expect("depth problem has a line");
    assert!(line < L_OPAQUE + 70, "{p:?}");
}

#[test]
fn ten_megabyte_document_is_refused_by_the_size_limit() {
    let mut input = base();
    input.push_str("# padding\n");
    while input.len() < 10 * 1024 * 1024 {
        input.push_str("# ................................................................\n");
    }
    let started = Instant::now();
    let p = refused_once(&input);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_problem(
        &p,
        "",
        None,
        &format!("the limit is {MAX_DEFINITION_BYTES} bytes"),
    );
    assert!(p.message.contains(&input.len().to_string()), "{p:?}");
}

#[test]
fn node_flood_is_refused() {
    // 30,000 tiny scalars (~60 KB): small in bytes, large in nodes.
    let flood = format!("    n: [{}]", vec!["1"; 30_000].join(","));
    let p = refused_once(opaque(&flood));
    assert_problem(&p, "spec.uiHints.columns.n", Some(L_OPAQUE), "too complex");
    assert!(p.message.contains("more than 20000 values"), "{p:?}");
}

#[test]
fn too_many_aliases_are_refused() {
    let aliases = format!("    s: &s x\n    n: [{}]", vec!["*s"; 1_500].join(","));
    let p = refused_once(opaque(&aliases));
    assert_problem(
        &p,
        "spec.uiHints.columns.n",
        Some(L_OPAQUE + 1),
        "too complex",
    );
    assert!(p.message.contains("more than 1000 aliases"), "{p:?}");
}

#[test]
fn every_kind_of_parser_error_is_worded_for_people() {
    // `refused` checks each message with `assert_human`; here each also names its cause.
    let mut chain = vec!["    a0: &a0 [x, y]".to_owned()];
    chain.extend((1..25).map(|i| format!("    a{i}: &a{i} [*a{}, *a{}]", i - 1, i - 1)));
    let anchors: Vec<String> = (0..1_500).map(|i| format!("&a{i} x")).collect();
    let cases = [
        (
            "doubling alias chain",
            opaque(&chain.join("\n")),
            "exceeds 20000 parser events (the alias/anchor budget)",
        ),
        (
            "anchor flood",
            opaque(&format!("    n: [{}]", anchors.join(", "))),
            "more than 1000 anchors",
        ),
        (
            "alias without anchor",
            opaque("    n: *nope"),
            "not defined before it",
        ),
        (
            "three documents",
            format!("{b}---\n{b}---\n{b}", b = base()),
            "exactly one YAML document",
        ),
        ("NaN", opaque("    n: .nan"), "not a finite number"),
        ("bad !!binary", opaque("    n: !!binary '%%%'"), "base64"),
        (
            "list for a name",
            with_line(L_NAME, "  name: [a]"),
            "expected a single value",
        ),
        (
            "null for a name",
            with_line(L_NAME, "  name:"),
            "found none",
        ),
        (
            "unclosed flow list",
            with_line(L_TAGS, "  tags: [demo, test"),
            "indicator",
        ),
        ("tab indentation", with_line(L_NAME, "\tname: demo"), "tab"),
        (
            "byte order mark inside",
            with_line(L_DESCRIPTION, "  description: \u{feff}A demo plugin."),
            "BOM",
        ),
    ];
    for (what, input, phrase) in cases {
        let problems = refused(&input);
        assert!(
            problems.iter().any(|p| p.message.contains(phrase)),
            "{what}: no problem mentions {phrase:?}: {problems:#?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Encoding and document structure
// ---------------------------------------------------------------------------------------

#[test]
fn invalid_utf8_is_refused_with_its_line() {
    let mut input = base().into_bytes();
    let at = input
        .windows(5)
        .position(|w| w == b"demo ")
        .expect("description text");
    input[at] = 0xff;
    input[at + 1] = 0xfe;
    let p = refused_once(&input);
    assert_problem(&p, "", Some(L_DESCRIPTION), "not valid UTF-8");
    assert_eq!(p.column, Some(18), "column of the first bad byte: {p:?}");
}

#[test]
fn empty_file_is_refused() {
    assert_problem(&refused_once(b""), "", None, "file is empty");
}

#[test]
fn whitespace_only_file_is_refused() {
    assert_problem(&refused_once(b"  \n\t\n\n   "), "", None, "file is empty");
}

#[test]
fn comment_only_file_is_refused_as_empty() {
    // Holds no document at all, just like an empty file, and should say so.
    let p = refused_once(b"# plugin definition\n\n   # TODO\n");
    assert_eq!(p.path, "", "{p:?}");
    assert!(
        p.message.contains("empty"),
        "comment-only file should be reported as empty, got {p:?}"
    );
}

#[test]
fn several_yaml_documents_are_refused() {
    let input = format!("{}---\n{}", base(), base());
    let p = refused_once(&input);
    assert_problem(&p, "", Some(BASE_LINES + 1), "exactly one YAML document");
}

#[test]
fn list_as_root_is_refused() {
    let p = refused_once(b"- apiVersion: fundament.io/v1\n- kind: PluginDefinition\n");
    assert_problem(&p, "", Some(1), "root must be a mapping");
}

#[test]
fn scalar_as_root_is_refused() {
    assert_problem(
        &refused_once(b"PluginDefinition\n"),
        "",
        Some(1),
        "root must be a mapping",
    );
}

#[test]
fn duplicate_key_is_refused() {
    let input = with_line(L_VERSION, "  name: other\n  version: v1.2.3");
    let p = refused_once(&input);
    assert_problem(&p, "metadata", Some(L_VERSION), "duplicate");
    assert!(p.message.contains("name"), "{p:?}");
}

#[test]
fn duplicate_key_hidden_by_quoting_is_refused() {
    let p = refused_once(with_line(L_VERSION, "  \"name\": other\n  version: v1.2.3"));
    assert_problem(&p, "metadata", Some(L_VERSION), "duplicate");
}

#[test]
fn duplicate_key_inside_a_map_of_the_console_is_refused() {
    let p = refused_once(with_line(
        L_STATUS_MAPPING,
        "      statusMapping: {jsonPath: .a}\n    widgets.example.com: {}",
    ));
    assert_problem(&p, "spec.uiHints", Some(L_STATUS_MAPPING + 1), "duplicate");
}

// ---------------------------------------------------------------------------------------
// Shape: unknown, missing and mistyped fields
// ---------------------------------------------------------------------------------------

#[test]
fn unknown_field_is_refused() {
    let p = refused_once(with_line(L_PULL_POLICY, "  imageTag: v1"));
    assert_problem(
        &p,
        "spec.imageTag",
        Some(L_PULL_POLICY),
        "unknown field `imageTag`",
    );
}

#[test]
fn misspelled_field_is_refused() {
    let p = refused_once(with_line(L_DESCRIPTION, "  descripton: A demo plugin."));
    assert_problem(
        &p,
        "metadata.descripton",
        Some(L_DESCRIPTION),
        "unknown field",
    );
}

#[test]
fn string_for_boolean_is_refused() {
    let p = refused_once(with_line(L_LIST, "        list: \"sometimes\""));
    assert_problem(&p, "spec.menu.project[0].list", Some(L_LIST), "boolean");
}

#[test]
fn yaml_1_1_boolean_yes_is_refused() {
    let p = refused_once(with_line(L_LIST, "        list: yes"));
    assert_problem(
        &p,
        "spec.menu.project[0].list",
        Some(L_LIST),
        "true or false",
    );
}

#[test]
fn null_for_boolean_is_refused() {
    // Not read as "not written": a flag that is written must say true or false.
    let p = refused_once(with_line(L_LIST, "        list:"));
    assert_problem(&p, "spec.menu.project[0].list", Some(L_LIST), "boolean");
}

#[test]
fn number_for_list_is_refused() {
    let p = refused_once(with_line(L_TAGS, "  tags: 5"));
    assert_problem(&p, "metadata.tags", Some(L_TAGS), "sequence");
}

#[test]
fn missing_image_is_refused() {
    let p = refused_once(with_line(L_IMAGE, "  # image: forgotten"));
    // serde reports a missing field where the `spec` mapping ends: at its last key.
    assert_problem(&p, "spec", Some(L_PULL_POLICY), "missing field `image`");
}

#[test]
fn invalid_image_pull_policy_is_refused() {
    let p = refused_once(with_line(L_PULL_POLICY, "  imagePullPolicy: Sometimes"));
    assert_problem(
        &p,
        "spec.imagePullPolicy",
        Some(L_PULL_POLICY),
        "unknown value `Sometimes`",
    );
    assert!(
        p.message.contains("IfNotPresent"),
        "should list the accepted values: {p:?}"
    );
}

#[test]
fn control_characters_in_a_field_name_do_not_reach_the_report() {
    // A quoted key with NUL and an ANSI "clear screen" sequence.
    let p = refused_once(with_line(L_DESCRIPTION, r#"  "desc\0ri\e[2Jption": x"#));
    assert!(p.message.contains("unknown field"), "{p:?}");
    assert_eq!(p.line, Some(L_DESCRIPTION), "{p:?}");
    // Display prints `line:col: path: message`; every part must be free of raw controls.
    assert!(
        !p.path.chars().any(char::is_control),
        "raw control characters in path: {:?}",
        p.path
    );
    assert!(
        !p.to_string().chars().any(char::is_control),
        "raw control characters in {:?}",
        p.to_string()
    );
}

#[test]
fn raw_control_character_in_a_field_name_is_refused() {
    let p = refused_once(with_line(L_DESCRIPTION, "  desc\u{1b}[2Jription: x"));
    assert_problem(&p, "metadata", Some(L_DESCRIPTION), "unexpected character");
}

// ---------------------------------------------------------------------------------------
// Semantic rules
// ---------------------------------------------------------------------------------------

#[test]
fn wrong_api_version_is_refused() {
    let p = refused_once(with_line(L_API_VERSION, "apiVersion: fundament.io/v2"));
    assert_problem(
        &p,
        "apiVersion",
        Some(L_API_VERSION),
        "must be `fundament.io/v1`",
    );
    assert_eq!(p.column, Some(13));
}

#[test]
fn wrong_kind_is_refused() {
    let p = refused_once(with_line(L_KIND, "kind: Deployment"));
    assert_problem(
        &p,
        "kind",
        Some(L_KIND),
        "must be `PluginDefinition`, found `Deployment`",
    );
}

#[test]
fn path_traversal_in_name_is_refused() {
    let p = refused_once(with_line(L_NAME, "  name: ../etc"));
    assert_problem(&p, "metadata.name", Some(L_NAME), "DNS-1123 label");
    assert_eq!(p.column, Some(9));
}

#[test]
fn sixty_four_character_name_is_refused() {
    let p = refused_once(with_line(L_NAME, &format!("  name: {}", "a".repeat(64))));
    assert_problem(
        &p,
        "metadata.name",
        Some(L_NAME),
        "64 characters; the limit is 56",
    );
}

#[test]
fn a_name_longer_than_fundament_allows_is_refused_as_fundament_refuses_it() {
    // A DNS label still, but Fundament installs into `plugin-<name>` (63 at most).
    let p = refused_once(with_line(L_NAME, &format!("  name: {}", "a".repeat(57))));
    assert_problem(
        &p,
        "metadata.name",
        Some(L_NAME),
        "is 57 characters; Fundament installs a plugin into namespace plugin-<name>, so the limit is 56",
    );
    // ... while 56 characters is fine.
    let def =
        Definition::parse(with_line(L_NAME, &format!("  name: {}", "a".repeat(56))).as_bytes())
            .unwrap();
    assert_eq!(def.name().len(), 56);
    assert_eq!(def.namespace().len(), 63);
}

#[test]
fn escape_sequence_in_name_is_refused_and_escaped() {
    let p = refused_once(with_line(L_NAME, r#"  name: "\e[2Jdemo""#));
    assert_problem(&p, "metadata.name", Some(L_NAME), "DNS-1123 label");
}

#[test]
fn non_semver_version_is_refused() {
    let p = refused_once(with_line(L_VERSION, "  version: \"1.2\""));
    assert_problem(
        &p,
        "metadata.version",
        Some(L_VERSION),
        "not a semantic version",
    );
}

#[test]
fn javascript_url_is_refused() {
    let p = refused_once(with_line(L_HOMEPAGE, "    homepage: javascript:alert(1)"));
    assert_problem(
        &p,
        "metadata.urls.homepage",
        Some(L_HOMEPAGE),
        "absolute http(s) URL",
    );
}

#[test]
fn over_long_list_is_refused() {
    let tags: Vec<String> = (0..300).map(|i| format!("t{i}")).collect();
    let p = refused_once(with_line(L_TAGS, &format!("  tags: [{}]", tags.join(", "))));
    assert_problem(&p, "metadata.tags", Some(L_TAGS), "at most 256 entries");
}

#[test]
fn tag_only_image_is_refused() {
    let p = refused_once(with_line(L_IMAGE, "  image: ghcr.io/x/y:v1"));
    assert_problem(&p, "spec.image", Some(L_IMAGE), "not pinned by digest");
    assert_eq!(p.column, Some(10));
}

#[test]
fn uppercase_digest_is_refused() {
    let upper = format!("sha256:{}", DIGEST["sha256:".len()..].to_uppercase());
    let p = refused_once(with_line(L_IMAGE, &format!("  image: ghcr.io/x/y@{upper}")));
    assert_problem(&p, "spec.image", Some(L_IMAGE), "64 lowercase hex digits");
}

#[test]
fn short_digest_is_refused() {
    let p = refused_once(with_line(L_IMAGE, "  image: ghcr.io/x/y@sha256:abc123"));
    assert_problem(
        &p,
        "spec.image",
        Some(L_IMAGE),
        "exactly 64 lowercase hex digits",
    );
}

#[test]
fn tag_and_digest_image_is_refused() {
    let p = refused_once(with_line(
        L_IMAGE,
        &format!("  image: ghcr.io/x/y:v1@{DIGEST}"),
    ));
    assert_problem(
        &p,
        "spec.image",
        Some(L_IMAGE),
        "carries a tag next to the digest",
    );
}

#[test]
fn rbac_rule_without_verbs_is_refused() {
    let p = refused_once(with_line(L_VERBS, "        verbs: []"));
    // Positioned at the rule, since the empty list has nothing to point at.
    assert_problem(
        &p,
        "spec.permissions.rbac[0].verbs",
        Some(L_RBAC0),
        "at least one verb",
    );
}

#[test]
fn menu_crd_without_group_is_refused() {
    let p = refused_once(with_line(L_MENU_CRD, "      - crd: widgets"));
    assert_problem(
        &p,
        "spec.menu.project[0].crd",
        Some(L_MENU_CRD),
        "<plural>.<group>",
    );
}

#[test]
fn every_validation_problem_is_reported_at_once() {
    let input = with_line(L_NAME, "  name: Bad_Name")
        .replace("verbs: [get, list]", "verbs: []")
        .replace(&format!("ghcr.io/x/y@{DIGEST}"), "ghcr.io/x/y:v1");
    let problems = refused(&input);
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert_problem(
        &problems[0],
        "metadata.name",
        Some(L_NAME),
        "DNS-1123 label",
    );
    assert_problem(
        &problems[1],
        "spec.permissions.rbac[0].verbs",
        Some(L_RBAC0),
        "at least one verb",
    );
    assert_problem(
        &problems[2],
        "spec.image",
        Some(L_IMAGE),
        "not pinned by digest",
    );
}

// ---------------------------------------------------------------------------------------
// What must keep loading
// ---------------------------------------------------------------------------------------

#[test]
fn every_catalog_definition_parses() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/catalog");
    let mut parsed = 0;
    for entry in std::fs::read_dir(dir).expect("catalog directory") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") || is_companion(&path) {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let def = Definition::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let stem = path.file_stem().unwrap().to_str().unwrap();
        assert_eq!(
            def.name(),
            stem,
            "{}: file name must be metadata.name",
            path.display()
        );
        assert_eq!(def.hash, definition_hash(&bytes));
        parsed += 1;
    }
    assert!(
        parsed >= 8,
        "expected the 8 built-in definitions, parsed {parsed}"
    );
}

const REAL_WORLD: &str = r#"# A definition using the YAML features authors actually write.
'apiVersion': "fundament.io/v1"   # quoted key and value
"kind": PluginDefinition
metadata:
  name: real-world
  displayName: "Real: World"
  version: 2.0.0
  description: >-
    This description is folded: the lines of this paragraph are joined with
    single spaces, so authors can wrap long prose at any width they like
    without the line breaks ending up in the catalog page.
  tags: [storage, backup]   # flow sequence
spec:
  permissions:
    capabilities: [internet_access]
    rbac:
      - {apiGroups: [example.com], resources: [widgets], verbs: [get, list, watch]}
  menu:
    organization:
      - crd: widgets.example.com
        list: true
        detail: true
  uiHints:
    widgets.example.com:
      formGroups:
        - {name: General, fields: [spec.size, spec.color]}
      statusMapping:
        jsonPath: ".status.conditions[?(@.type==\"Ready\")].status"
        values:
          "True": {badge: success, label: Ready}
          'False': {badge: danger, label: "Not ready"}
        default: {badge: info, label: Pending}
  customComponents:
    Widget: {detail: widget-panel.html}
  allowedResources:
    - group: example.com
      version: v1
      resource: widgets
      verbs: [get, list]
  image: registry.example.com:5000/team/widget@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
"#;

#[test]
fn fundament_style_capabilities_are_what_an_admin_approves() {
    let def = Definition::parse(FUNDAMENT_STYLE.as_bytes()).expect("loads unchanged");
    assert!(def.manifest.spec.requirements.is_none());
    let approval = def.approval();
    assert!(
        approval.internet_access,
        "`internet_access` needs internet access"
    );
    assert!(!approval.privileged && !approval.kube_system_deployment);
    assert!(
        def.extras.is_empty(),
        "no companion, no cluster capabilities"
    );
}

#[test]
fn builtins_declaring_internet_access_need_it() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/catalog");
    let mut declaring = 0;
    for entry in std::fs::read_dir(dir).expect("catalog directory") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") || is_companion(&path) {
            continue;
        }
        let def = Definition::parse(&std::fs::read(&path).unwrap()).unwrap();
        let declares = def
            .manifest
            .spec
            .permissions
            .capabilities
            .iter()
            .any(|c| c.as_str() == "internet_access");
        if declares {
            declaring += 1;
            assert!(def.approval().internet_access, "{}", path.display());
        }
    }
    assert!(declaring >= 2, "backup and cert-manager declare it");
}

#[test]
fn real_world_yaml_features_load() {
    let def = Definition::parse(REAL_WORLD.as_bytes()).expect("valid definition");
    assert_eq!(def.name(), "real-world");
    assert_eq!(def.display_name(), "Real: World");
    assert_eq!(def.tags().collect::<Vec<_>>(), ["storage", "backup"]);
    assert!(def.approval().internet_access);
    assert!(def.description().starts_with(
        "This description is folded: the lines of this paragraph are joined with single spaces,"
    ));
    assert!(
        !def.description().contains('\n'),
        "folded text keeps no line breaks"
    );
    let rule = &def.manifest.spec.permissions.rbac[0];
    assert_eq!(rule.verbs, ["get", "list", "watch"]);
    assert_eq!(rule.line, 17);
    let menu = &def.manifest.spec.menu;
    assert_eq!(menu.organization.len(), 1);
    assert_eq!(menu.organization[0].crd.as_str(), "widgets.example.com");
    assert!(menu.project.is_empty());
    assert_eq!(
        def.image.repository,
        "registry.example.com:5000/team/widget"
    );
    assert_eq!(def.image.digest, DIGEST);
}

#[test]
fn console_sections_are_read_in_fundaments_shapes() {
    let def = Definition::parse(REAL_WORLD.as_bytes()).unwrap();
    let spec = &def.manifest.spec;
    let hints: Vec<(&str, _)> = spec.ui_hints.entries.iter().collect();
    assert_eq!(hints.len(), 1);
    let (crd, hint) = hints[0];
    assert_eq!(crd, "widgets.example.com");
    assert_eq!(hint.form_groups[0].fields, ["spec.size", "spec.color"]);
    let mapping = hint.status_mapping.as_ref().unwrap();
    assert_eq!(
        mapping.json_path,
        ".status.conditions[?(@.type==\"Ready\")].status"
    );
    let values: Vec<(&str, &str)> = mapping
        .values
        .iter()
        .map(|(k, v)| (k, v.label.as_str()))
        .collect();
    assert_eq!(values, [("True", "Ready"), ("False", "Not ready")]);
    assert_eq!(mapping.default.as_ref().unwrap().badge, "info");
    let components: Vec<(&str, _)> = spec.custom_components.iter().collect();
    assert_eq!(components[0].0, "Widget");
    assert_eq!(
        components[0].1.detail.as_deref().map(String::as_str),
        Some("widget-panel.html")
    );
    let r = &spec.allowed_resources[0];
    assert_eq!(
        (r.group.as_str(), r.version.as_str(), r.resource.as_str()),
        ("example.com", "v1", "widgets")
    );
    assert_eq!(r.verbs, ["get", "list"]);
}

#[test]
fn hash_pins_the_exact_bytes() {
    let def = Definition::parse(REAL_WORLD.as_bytes()).unwrap();
    let expected = format!(
        "sha256:{}",
        hex::encode(Sha256::digest(REAL_WORLD.as_bytes()))
    );
    assert_eq!(def.hash, expected);
    assert_eq!(def.bytes, REAL_WORLD.as_bytes());
    // A comment-only change is a different document to consent to.
    let edited = REAL_WORLD.replace("# flow sequence", "# flow  sequence");
    let other = Definition::parse(edited.as_bytes()).unwrap();
    assert_ne!(other.hash, def.hash);
    assert_eq!(
        other.hash,
        format!("sha256:{}", hex::encode(Sha256::digest(edited.as_bytes())))
    );
}

#[test]
fn version_with_and_without_leading_v() {
    let with_v = Definition::parse(base().as_bytes()).unwrap();
    assert_eq!(with_v.version, semver::Version::new(1, 2, 3));
    assert_eq!(with_v.version_text(), "v1.2.3");
    let without_v = Definition::parse(with_line(L_VERSION, "  version: 1.2.3").as_bytes()).unwrap();
    assert_eq!(without_v.version, semver::Version::new(1, 2, 3));
    assert_eq!(without_v.version_text(), "1.2.3");
}
