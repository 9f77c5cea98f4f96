use super::*;

fn row(source: Option<&str>, publisher: &str, name: &str, version: &str, bytes: &str) -> Row {
    Row {
        publisher: publisher.to_owned(),
        name: name.to_owned(),
        version: Version::parse(version).unwrap(),
        hash: format!("sha256:{bytes}"),
        yanked: false,
        trust: match source {
            None => Trust::Builtin,
            Some(s) => Trust::Marketplace {
                source: s.to_owned(),
                publisher: publisher.to_owned(),
                key_ids: vec!["k".into()],
            },
        },
        summary: Arc::new(Summary::default()),
    }
}

fn source(name: &str, priority: i64, rows: Vec<Row>) -> SourceRows {
    SourceRows {
        name: name.to_owned(),
        priority,
        rows,
    }
}

fn versions(p: &Plugin) -> Vec<String> {
    p.versions.keys().map(ToString::to_string).collect()
}

fn sources_of(p: &Plugin, version: &str) -> Trust {
    p.versions[&Version::parse(version).unwrap()].trust.clone()
}

#[test]
fn the_highest_priority_source_speaks_for_a_publishers_plugin() {
    let main = vec![
        row(Some("main"), "acme", "db", "1.0.0", "a1"),
        row(Some("main"), "acme", "db", "2.0.0", "a2"),
    ];
    let view = base(
        vec![],
        vec![
            source(
                "mirror",
                1,
                vec![
                    row(Some("mirror"), "acme", "db", "1.0.0", "m1"),
                    row(Some("mirror"), "acme", "db", "9.0.0", "m9"),
                ],
            ),
            source("main", 10, main.clone()),
        ],
    );
    let db = &view.plugins["db"];
    // Not mixed: a lower source cannot add a newer version under the same name.
    assert_eq!(versions(db), ["1.0.0", "2.0.0"]);
    assert_eq!(db.versions[&Version::new(1, 0, 0)].hash, "sha256:a1");
    assert!(
        matches!(sources_of(db, "1.0.0"), Trust::Marketplace { source, .. } if source == "main")
    );
    assert_eq!(view.clashes.len(), 1, "{:?}", view.clashes);
    let c = &view.clashes[0];
    assert_eq!(c.kind, ClashKind::Shadowed);
    assert_eq!(c.kept.as_ref().unwrap().sources, ["main"]);
    assert_eq!(c.others[0].sources, ["mirror"]);

    // A mirror holding an exact copy hides nothing, so there is nothing to report.
    let copy = main
        .iter()
        .cloned()
        .map(|mut r| {
            r.trust = Trust::Marketplace {
                source: "copy".into(),
                publisher: "acme".into(),
                key_ids: vec![],
            };
            r
        })
        .collect();
    let view = base(
        vec![],
        vec![source("main", 10, main), source("copy", 1, copy)],
    );
    assert!(view.clashes.is_empty(), "{:?}", view.clashes);
}

#[test]
fn a_marketplace_supersedes_a_builtin_only_when_newer() {
    let view = base(
        vec![row(None, "fundament", "cert-manager", "1.19.3", "b")],
        vec![source(
            "main",
            100,
            vec![
                row(Some("main"), "fundament", "cert-manager", "1.18.0", "old"),
                row(Some("main"), "fundament", "cert-manager", "1.19.3", "other"),
                row(Some("main"), "fundament", "cert-manager", "1.20.0", "new"),
            ],
        )],
    );
    let p = &view.plugins["cert-manager"];
    assert_eq!(p.origin, Origin::Builtin);
    assert_eq!(
        versions(p),
        ["1.19.3", "1.20.0"],
        "older marketplace versions are not offered"
    );
    assert_eq!(
        sources_of(p, "1.19.3"),
        Trust::Builtin,
        "the binary's bytes win"
    );
    assert_eq!(p.latest().unwrap().version, Version::new(1, 20, 0));
    assert_eq!(view.clashes.len(), 1);
    assert_eq!(view.clashes[0].kind, ClashKind::VersionConflict);

    // Nothing newer: the built-in stays the latest.
    let view = base(
        vec![row(None, "fundament", "cert-manager", "1.19.3", "b")],
        vec![source(
            "main",
            100,
            vec![row(
                Some("main"),
                "fundament",
                "cert-manager",
                "1.19.3",
                "b",
            )],
        )],
    );
    let p = &view.plugins["cert-manager"];
    assert_eq!(versions(p), ["1.19.3"]);
    assert_eq!(sources_of(p, "1.19.3"), Trust::Builtin);
    assert!(view.clashes.is_empty());
}

#[test]
fn another_publishers_name_is_shadowed_or_ambiguous_never_silent() {
    // A marketplace publisher reusing a built-in name loses, whatever its priority.
    let view = base(
        vec![row(None, "fundament", "backup", "1.0.0", "b")],
        vec![source(
            "main",
            100,
            vec![row(Some("main"), "evil", "backup", "9.0.0", "e")],
        )],
    );
    assert_eq!(
        view.plugins["backup"].publisher.as_deref(),
        Some("fundament")
    );
    assert_eq!(view.clashes[0].kind, ClashKind::Shadowed);
    assert_eq!(view.clashes[0].others[0].publisher.as_deref(), Some("evil"));

    // Two publishers on sources of different priority: the higher wins, reported.
    let view = base(
        vec![],
        vec![
            source("low", 1, vec![row(Some("low"), "acme", "db", "1.0.0", "a")]),
            source(
                "high",
                2,
                vec![row(Some("high"), "globex", "db", "1.0.0", "g")],
            ),
        ],
    );
    assert_eq!(view.plugins["db"].publisher.as_deref(), Some("globex"));
    assert_eq!(view.clashes[0].kind, ClashKind::Shadowed);

    // Two publishers in one source tie: not offered at all, reported with both.
    let view = base(
        vec![],
        vec![source(
            "main",
            0,
            vec![
                row(Some("main"), "acme", "db", "1.0.0", "a"),
                row(Some("main"), "globex", "db", "2.0.0", "g"),
            ],
        )],
    );
    assert!(!view.plugins.contains_key("db"));
    assert_eq!(view.clashes.len(), 1);
    assert_eq!(view.clashes[0].kind, ClashKind::Ambiguous);
    assert_eq!(view.clashes[0].others.len(), 2);
}

#[test]
fn sideloads_shadow_for_their_organization_only() {
    let base = Arc::new(base(
        vec![row(None, "fundament", "backup", "1.0.0", "b")],
        vec![],
    ));
    let mut mine = row(None, "", "backup", "3.0.0", "s");
    mine.trust = Trust::Sideloaded { org: "a".into() };
    let extra = Row {
        name: "tool".into(),
        ..mine.clone()
    };
    let a = org_view(base.clone(), "a", vec![mine, extra]);
    let b = org_view(base.clone(), "b", vec![]);
    assert_eq!(a.plugin("backup").unwrap().origin, Origin::Sideloaded);
    assert_eq!(a.plugin("backup").unwrap().publisher, None);
    assert!(a.plugin("tool").is_some());
    assert_eq!(
        a.plugins().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["backup", "tool"]
    );
    assert_eq!(a.clashes.len(), 1);
    assert_eq!(a.clashes[0].kind, ClashKind::Shadowed);
    assert_eq!(a.clashes[0].others[0].origin, Origin::Builtin);

    assert_eq!(b.plugin("backup").unwrap().origin, Origin::Builtin);
    assert!(b.plugin("tool").is_none());
    assert!(b.clashes.is_empty());

    // Found by stable id as by name: the sideload that shadows keeps the name's id, a
    // sideload-only name is found in its organization only.
    let id = |name: &str| crate::ids::org_plugin(name);
    let origin = |v: &OrgView, name: &str| v.by_id(&id(name)).map(|p| p.origin);
    assert_eq!(origin(&a, "backup"), Some(Origin::Sideloaded));
    assert_eq!(origin(&b, "backup"), Some(Origin::Builtin));
    assert_eq!(origin(&a, "tool"), Some(Origin::Sideloaded));
    assert_eq!(origin(&b, "tool"), None);
    assert_eq!(origin(&a, "ghost"), None);
    // backup's one built-in version gives way to the sideload's, and tool adds one.
    assert_eq!(b.offered_versions(), 1);
    assert_eq!(a.offered_versions(), 2);
    assert_eq!(
        a.offered_versions(),
        a.plugins().map(|p| p.versions.len()).sum::<usize>()
    );
}

#[test]
fn latest_per_major_and_upgrades_skip_yanked_and_prereleases() {
    let mut rows: Vec<Row> = [
        "1.0.0",
        "1.1.0",
        "1.2.0",
        "1.3.0-rc.1",
        "2.0.0-beta.1",
        "3.0.0",
    ]
    .iter()
    .map(|v| row(Some("s"), "acme", "db", v, v))
    .collect();
    rows[2].yanked = true; // 1.2.0
    rows[5].yanked = true; // 3.0.0: major 3 has nothing installable
    let view = base(vec![], vec![source("s", 0, rows)]);
    let db = &view.plugins["db"];
    let latest: Vec<String> = db
        .latest_per_major()
        .iter()
        .map(|o| o.version.to_string())
        .collect();
    assert_eq!(latest, ["2.0.0-beta.1", "1.1.0"]);
    let up = |from: &str| -> Vec<String> {
        db.upgrades(&Version::parse(from).unwrap())
            .iter()
            .map(|o| o.version.to_string())
            .collect()
    };
    assert_eq!(up("1.0.0"), ["1.1.0"]);
    assert_eq!(up("1.1.0"), Vec::<String>::new());
    assert_eq!(up("1.3.0-rc.0"), ["1.3.0-rc.1"]);
    assert_eq!(up("2.0.0-alpha.1"), ["2.0.0-beta.1"]);
}
