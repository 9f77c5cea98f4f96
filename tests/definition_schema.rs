//! Definitions are exactly Fundament's schema: what we accept, Fundament's own parser
//! accepts too. The referee is independent of our Rust types: PyYAML and `jsonschema`
//! against `schema/plugin-definition.schema.json`, written from Fundament's facts. Every
//! built-in, every valid fixture and Fundament's own definitions pass both; every
//! refused fixture is refused by both. Fields of the older design are refused with
//! their replacement named, and a definition already published with them stays readable,
//! marked not installable.

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use common::{fixtures, fundament_definitions, is_companion, referee, schema, yaml_files};
use marketplace::definition::{Definition, Extras, definition_hash};

fn catalog() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("catalog")
}

/// The referee's verdict on each file: the schema's errors (empty when it accepts it).
fn schema_errors(schema_file: &str, files: &[PathBuf]) -> Vec<(PathBuf, Vec<String>)> {
    let schema = schema(schema_file);
    let mut args: Vec<&OsStr> = vec![OsStr::new("check"), schema.as_os_str()];
    args.extend(files.iter().map(|f| f.as_os_str()));
    let report = referee(&args);
    files
        .iter()
        .map(|f| {
            let errors = report[f.to_str().unwrap()]
                .as_array()
                .unwrap_or_else(|| panic!("no verdict on {}: {report}", f.display()))
                .iter()
                .map(|e| e.as_str().unwrap().to_owned())
                .collect();
            (f.clone(), errors)
        })
        .collect()
}

#[test]
fn builtins_valid_fixtures_and_fundaments_own_definitions_pass_ours_and_the_referee() {
    let mut files: Vec<PathBuf> = yaml_files(&catalog())
        .into_iter()
        .filter(|f| !is_companion(f))
        .collect();
    let builtins = files.len();
    assert!(builtins >= 8, "the built-in catalog holds 8 plugins");
    files.extend(fixtures("valid"));
    let fundament = fundament_definitions();
    assert_eq!(fundament.len(), 5, "Fundament's five definitions");
    files.extend(fundament);
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        let def = Definition::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert_eq!(def.hash, definition_hash(&bytes));
        assert!(def.not_installable().is_none(), "{}", f.display());
    }
    for (f, errors) in schema_errors("plugin-definition.schema.json", &files) {
        assert!(
            errors.is_empty(),
            "the schema refuses {}: {errors:?}",
            f.display()
        );
    }
}

#[test]
fn companion_documents_pass_ours_and_the_extras_schema() {
    let companions: Vec<PathBuf> = yaml_files(&catalog())
        .into_iter()
        .filter(|f| is_companion(f))
        .collect();
    assert!(companions.len() >= 6, "{companions:?}");
    for f in &companions {
        let doc = Extras::parse_document(&std::fs::read(f).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let stem = f.file_name().unwrap().to_str().unwrap();
        assert_eq!(format!("{}.extras.yaml", doc.plugin), stem);
    }
    for (f, errors) in schema_errors("plugin-extras.schema.json", &companions) {
        assert!(errors.is_empty(), "{}: {errors:?}", f.display());
    }
}

/// Each refused fixture: the field our message names, and a phrase of its reason.
const REFUSED: &[(&str, &str, &str)] = &[
    (
        "allowed-resources-kinds.yaml",
        "spec.allowedResources[0].apiGroup",
        "write group, version, resource and verbs",
    ),
    (
        "api-version.yaml",
        "apiVersion",
        "must be `fundament.io/v1`",
    ),
    (
        "component-edit.yaml",
        "spec.customComponents.A.edit",
        "list, detail and create",
    ),
    (
        "dependencies.yaml",
        "spec.dependencies",
        "companion document (PluginExtras",
    ),
    ("kind.yaml", "kind", "must be `PluginDefinition`"),
    (
        "menu-cluster.yaml",
        "spec.menu.cluster",
        "write organization",
    ),
    (
        "menu-edit.yaml",
        "spec.menu.project[0].edit",
        "menu entries have list and detail",
    ),
    ("missing-image.yaml", "spec", "missing field `image`"),
    (
        "name-57-characters.yaml",
        "metadata.name",
        "plugin-<name>, so the limit is 56",
    ),
    (
        "non-resource-urls.yaml",
        "spec.permissions.rbac[0].nonResourceURLs",
        "not part of a Fundament definition",
    ),
    ("pull-policy.yaml", "spec.imagePullPolicy", "unknown value"),
    (
        "requirements.yaml",
        "spec.requirements.internetAccess",
        "declare internet_access in spec.permissions.capabilities",
    ),
    (
        "status-value-field.yaml",
        "spec.uiHints.a.example.com.statusMapping.values.a.color",
        "unknown field `color`, expected one of badge, label",
    ),
    (
        "suggested-plugins.yaml",
        "spec.suggestedPlugins",
        "as suggestedPlugins",
    ),
    ("tag-image.yaml", "spec.image", "not pinned by digest"),
    (
        "ui-hints-columns.yaml",
        "spec.uiHints.columns",
        "keys uiHints by CRD name",
    ),
    (
        "unknown-field.yaml",
        "spec.imageTag",
        "unknown field `imageTag`",
    ),
    ("wrong-type.yaml", "spec.menu.project[0].list", "expected"),
];

#[test]
fn refused_fixtures_are_refused_by_ours_and_the_referee_alike() {
    let refused = fixtures("refused");
    assert_eq!(refused.len(), REFUSED.len(), "every fixture has its row");
    for ((file, path, phrase), f) in REFUSED.iter().zip(&refused) {
        assert!(f.ends_with(file), "{} is not {file}", f.display());
        let err = Definition::parse(&std::fs::read(f).unwrap())
            .expect_err(&format!("{file} was accepted"));
        let first = &err.problems[0];
        assert_eq!(first.path, *path, "{file}: {err}");
        assert!(first.line.is_some(), "{file}: a line is named: {err}");
        assert!(first.message.contains(phrase), "{file}: {err}");
        // Never suggest writing a field of the older design.
        assert!(!first.message.contains("requirements,"), "{file}: {err}");
    }
    // The older design's built-ins too: refused as new input by both.
    let legacy = fixtures("legacy");
    for f in &legacy {
        assert!(Definition::parse(&std::fs::read(f).unwrap()).is_err());
    }
    let all: Vec<PathBuf> = refused.into_iter().chain(legacy).collect();
    for (f, errors) in schema_errors("plugin-definition.schema.json", &all) {
        assert!(!errors.is_empty(), "the schema accepts {}", f.display());
    }
}

#[test]
fn every_field_of_the_older_design_is_named_with_its_replacement_in_one_pass() {
    let old = std::fs::read(
        fixtures("legacy")
            .iter()
            .find(|f| f.ends_with("observability.yaml"))
            .unwrap(),
    )
    .unwrap();
    let err = Definition::parse(&old).unwrap_err();
    let found: Vec<(&str, u64)> = err
        .problems
        .iter()
        .map(|p| (p.path.as_str(), p.line.unwrap()))
        .collect();
    assert_eq!(
        found,
        [
            ("spec.requirements.internetAccess", 43),
            ("spec.requirements.kubeSystemDeployment", 44),
            ("spec.requirements.privileged", 45),
            ("spec.requirements.capabilities", 46),
            ("spec.dependencies", 48),
            ("spec.suggestedPlugins", 50),
            ("spec.menu.organization[0].edit", 56),
            ("spec.menu.project[0].edit", 63),
            ("spec.menu.project[1].edit", 68),
            ("spec.menu.project[2].edit", 73),
            ("spec.menu.project[3].edit", 79),
            ("spec.uiHints.columns", 90),
            ("spec.uiHints.formOrder", 93),
            (
                "spec.customComponents.prometheusrules.monitoring.coreos.com.edit",
                98,
            ),
            ("spec.allowedResources[0].apiGroup", 100),
            ("spec.allowedResources[0].kinds", 101),
            ("spec.allowedResources[1].apiGroup", 102),
            ("spec.allowedResources[1].kinds", 103),
        ]
    );
    let privileged = &err.problems[2];
    assert_eq!(
        privileged.message,
        "not part of a Fundament definition; declare privileged in spec.permissions.capabilities"
    );
    assert!(
        err.problems[3].message.ends_with("as clusterCapabilities"),
        "{err}"
    );
}

#[test]
fn published_definitions_of_the_older_design_stay_readable_and_are_marked() {
    for f in fixtures("legacy") {
        let bytes = std::fs::read(&f).unwrap();
        let def =
            Definition::parse_published(&bytes).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert_eq!(def.bytes, bytes, "served exactly as signed");
        let fields = def.not_installable().expect("marked not installable");
        assert!(!fields.is_empty(), "{}", f.display());
    }
    let read = |name: &str| {
        let f = fixtures("legacy")
            .into_iter()
            .find(|f| f.ends_with(format!("{name}.yaml")))
            .unwrap();
        Definition::parse_published(&std::fs::read(f).unwrap()).unwrap()
    };
    // What its own fields said still shows: dependencies, suggestions, cluster
    // capabilities, and every need it asked an admin to approve.
    let backup = read("backup");
    assert_eq!(backup.extras.dependencies, ["object-storage"]);
    assert_eq!(backup.extras.suggested_plugins, ["observability"]);
    assert_eq!(backup.extras.cluster_capabilities, ["volumeSnapshots"]);
    let storage = read("storage");
    let approval = storage.approval();
    assert!(approval.privileged && approval.kube_system_deployment);
    assert_eq!(
        storage.not_installable().unwrap(),
        "spec.requirements.internetAccess, spec.requirements.kubeSystemDeployment, spec.requirements.privileged, spec.suggestedPlugins, spec.menu.organization[0].edit, spec.menu.organization[1].edit, spec.menu.project[0].edit, spec.uiHints.columns"
    );
    // Console sections in a shape of the older design's own (it kept them as written):
    // read without them, and named.
    let postgres = read("postgres-operator");
    let fields = postgres.not_installable().unwrap();
    for field in [
        "spec.uiHints",
        "spec.customComponents",
        "spec.allowedResources",
    ] {
        assert!(fields.contains(field), "{fields}");
    }
    assert!(postgres.manifest.spec.ui_hints.entries.is_empty());
    assert_eq!(postgres.extras.dependencies, ["storage"]);
}
