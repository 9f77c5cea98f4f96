use super::*;
use crate::definition::Definition;

/// The gateway built-in as its publisher ships it: a real-style definition.
const GATEWAY: &str = include_str!("../../../catalog/gateway.yaml");

fn parse(yaml: &str) -> Definition {
    Definition::parse(yaml.as_bytes()).expect("valid definition")
}

fn version(yaml: &str, v: &str) -> String {
    yaml.replacen("version: v1.4.1", &format!("version: {v}"), 1)
}

#[test]
fn internet_access_and_a_cluster_wide_rule_are_what_the_upgrade_asks_for() {
    let old = parse(GATEWAY);
    let new = version(GATEWAY, "v1.5.0")
        .replacen(
            "capabilities: [manage_load_balancers]",
            "capabilities: [manage_load_balancers, internet_access]",
            1,
        )
        .replacen(
            "    rbac:\n",
            "    rbac:\n      - apiGroups: [\"*\"]\n        resources: [\"*\"]\n        verbs: [get, list, watch]\n",
            1,
        );
    let c = between(&old, &parse(&new));
    assert_eq!(
        (c.from_version.as_str(), c.to_version.as_str()),
        ("v1.4.1", "v1.5.0")
    );
    assert_eq!(c.approvals_added, ["internet_access"]);
    assert_eq!(c.capabilities_added, ["internet_access"]);
    assert_eq!(
        c.access_raised,
        [AccessChange {
            resource: "all resources in all API groups".into(),
            from: None,
            to: Some(AccessLevel::Read),
        }]
    );
    assert!(c.asks_for_more());
    assert_eq!(
        c.lines(),
        [
            "needs approval for internet access (new)",
            "may read all resources in all API groups (new)",
        ]
    );
    // Nothing else moved.
    assert!(c.approvals_dropped.is_empty() && c.access_lowered.is_empty());
    assert!(c.crds_added.is_empty() && c.menu_added.is_empty() && c.image.is_none());
}

#[test]
fn a_new_version_number_alone_changes_nothing() {
    let c = between(&parse(GATEWAY), &parse(&version(GATEWAY, "v1.4.2")));
    assert!(c.is_empty() && !c.asks_for_more(), "{:?}", c.lines());
}

#[test]
fn what_is_dropped_asks_for_nothing() {
    let old = version(GATEWAY, "v1.4.0").replacen(
        "capabilities: [manage_load_balancers]",
        "capabilities: [manage_load_balancers, privileged]",
        1,
    );
    let new = GATEWAY.replacen(
        "      - apiGroups: [apps]\n        resources: [deployments]\n        verbs: [get, list, watch, create, update, patch, delete]\n",
        "",
        1,
    );
    let c = between(&parse(&old), &parse(&new));
    assert_eq!(c.approvals_dropped, ["privileged"]);
    assert_eq!(c.capabilities_removed, ["privileged"]);
    assert_eq!(
        c.access_lowered,
        [AccessChange {
            resource: "deployments.apps".into(),
            from: Some(AccessLevel::ReadWrite),
            to: None,
        }]
    );
    assert!(!c.asks_for_more());
    assert_eq!(
        c.lines(),
        [
            "no longer needs approval for privileged containers",
            "no longer has access to deployments.apps",
        ]
    );
}

#[test]
fn a_raised_level_on_the_same_resource_is_stated_with_the_old_one() {
    let new = version(GATEWAY, "v1.5.0").replacen(
        "resources: [envoyproxies, clienttrafficpolicies, backendtrafficpolicies, securitypolicies]\n        verbs: [get, list, watch]",
        "resources: [envoyproxies, clienttrafficpolicies, backendtrafficpolicies, securitypolicies]\n        verbs: [get, list, watch, update]",
        1,
    );
    let c = between(&parse(GATEWAY), &parse(&new));
    let raised: Vec<(&str, Option<AccessLevel>, Option<AccessLevel>)> = c
        .access_raised
        .iter()
        .map(|a| (a.resource.as_str(), a.from, a.to))
        .collect();
    assert_eq!(raised.len(), 4, "{raised:?}");
    assert!(raised.iter().all(
        |(_, from, to)| *from == Some(AccessLevel::Read) && *to == Some(AccessLevel::ReadWrite)
    ));
    assert!(c.lines().contains(
        &"may read and change envoyproxies.gateway.envoyproxy.io (was: read)".to_owned()
    ));
    assert!(c.asks_for_more());
}

#[test]
fn crds_menu_entries_and_the_image_are_reported() {
    let digest = "1111111111111111111111111111111111111111111111111111111111111111";
    let new = version(GATEWAY, "v1.5.0")
        .replacen(
            "    - securitypolicies.gateway.envoyproxy.io\n  uiHints:",
            "    - securitypolicies.gateway.envoyproxy.io\n    - udproutes.gateway.networking.k8s.io\n  uiHints:",
            1,
        )
        .replacen(
            "  menu:\n    organization:\n",
            "  menu:\n    organization:\n      - crd: udproutes.gateway.networking.k8s.io\n        list: true\n        label: UDP routes\n",
            1,
        )
        .replacen(
            "sha256:04ec98c16b3bf7bfaf2de3bf2ff4579b84b040965d520e4772f89db8acd8da97",
            &format!("sha256:{digest}"),
            1,
        );
    let c = between(&parse(GATEWAY), &parse(&new));
    assert_eq!(c.crds_added, ["udproutes.gateway.networking.k8s.io"]);
    assert_eq!(
        c.menu_added,
        [MenuItem {
            scope: "organization",
            crd: "udproutes.gateway.networking.k8s.io".into(),
            label: Some("UDP routes".into()),
        }]
    );
    let (old_image, new_image) = c.image.clone().expect("image changed");
    assert!(
        old_image.ends_with("04ec98c16b3bf7bfaf2de3bf2ff4579b84b040965d520e4772f89db8acd8da97")
    );
    assert!(new_image.ends_with(digest));
    assert_eq!(
        c.lines(),
        [
            "installs CRD udproutes.gateway.networking.k8s.io (new)".to_owned(),
            "adds organization menu entry \"UDP routes\" (udproutes.gateway.networking.k8s.io)"
                .to_owned(),
            format!("runtime image changes from {old_image} to {new_image}"),
        ]
    );
}
