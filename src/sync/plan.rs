//! Install plans: which versions to install, in dependency order, what is missing,
//! which dependencies form cycles and what an admin must approve. Dependencies are
//! shown and ordered, never enforced (docs/ARCHITECTURE.md, "Precedence rules"), so a
//! plan with missing dependencies is still a plan; it says it is incomplete.

use std::collections::BTreeMap;

use semver::Version;
use serde::Serialize;

use super::view::{OrgView, Trust};

/// Plugins one plan may request.
pub const MAX_REQUESTED: usize = 100;

/// One requested plugin: `name`, or `name@VERSION` to pin a version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub name: String,
    pub version: Option<Version>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("plugins: name at least one plugin, as plugins=a,b")]
    Empty,
    #[error("plugins: at most {MAX_REQUESTED} plugins per plan")]
    TooMany,
    #[error("plugins: `{0}` is not a plugin name (DNS-1123 label, optionally @VERSION)")]
    BadName(String),
    #[error("plugins: `{0}` is not a semantic version")]
    BadVersion(String),
    #[error("plugins: `{0}` is listed twice")]
    Duplicate(String),
    #[error("plugin {0} is not offered to this organization")]
    Unknown(String),
    #[error("plugin {0} is offered by several publishers of equal precedence; see clashes")]
    Ambiguous(String),
    #[error("plugin {name} has no version {version}")]
    NoSuchVersion { name: String, version: Version },
    #[error("plugin {name} version {version} is yanked")]
    Yanked { name: String, version: Version },
    #[error("plugin {0} has no installable version (all are yanked)")]
    NothingInstallable(String),
}

/// Parses `a,b@1.2.3`.
pub fn parse_requests(list: &str) -> Result<Vec<Request>, PlanError> {
    let mut out: Vec<Request> = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if out.len() == MAX_REQUESTED {
            return Err(PlanError::TooMany);
        }
        let (name, version) = match item.split_once('@') {
            Some((n, v)) => (
                n,
                Some(
                    crate::definition::parse_version(v)
                        .map_err(|_| PlanError::BadVersion(v.to_owned()))?,
                ),
            ),
            None => (item, None),
        };
        if !crate::definition::is_dns_label(name) {
            return Err(PlanError::BadName(item.chars().take(80).collect()));
        }
        if out.iter().any(|r| r.name == name) {
            return Err(PlanError::Duplicate(name.to_owned()));
        }
        out.push(Request {
            name: name.to_owned(),
            version,
        });
    }
    if out.is_empty() {
        return Err(PlanError::Empty);
    }
    Ok(out)
}

/// One plugin to install, in order.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    pub name: String,
    #[serde(serialize_with = "as_text")]
    #[schema(value_type = String, example = "1.19.3")]
    pub version: Version,
    pub hash: String,
    pub trust: Trust,
    pub requested: bool,
    /// Where Fundament installs it: `plugin-<name>`.
    pub namespace: String,
    /// The plugins in this plan that depend on it.
    pub required_by: Vec<String>,
    /// Requirements an admin must approve before installing it.
    pub approve: Vec<String>,
    /// Why Fundament cannot install this version (published in the older definition
    /// design); absent when it can.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_installable: Option<String>,
}

fn as_text<S: serde::Serializer>(v: &Version, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Missing {
    pub name: String,
    pub required_by: Vec<String>,
    /// `not_offered`, `ambiguous` or `all_yanked`.
    #[schema(value_type = String, pattern = "^(not_offered|ambiguous|all_yanked)$")]
    pub reason: &'static str,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Dependencies before the plugins that need them.
    pub order: Vec<Step>,
    pub missing: Vec<Missing>,
    /// Each cycle as the path that closes it, e.g. `[a, b, a]`.
    pub cycles: Vec<Vec<String>>,
    /// No missing dependency, no cycle, and every step installable by Fundament.
    pub complete: bool,
}

/// Plans the installation of `requests` in `view`.
pub fn install_plan(view: &OrgView, requests: &[Request]) -> Result<Plan, PlanError> {
    let mut planner = Planner {
        view,
        pinned: requests
            .iter()
            .filter_map(|r| Some((r.name.as_str(), r.version.clone()?)))
            .collect(),
        marks: BTreeMap::new(),
        stack: Vec::new(),
        order: Vec::new(),
        missing: Vec::new(),
        cycles: Vec::new(),
    };
    for r in requests {
        planner.visit(&r.name, None)?;
    }
    for r in requests {
        if let Some(step) = planner.order.iter_mut().find(|s| s.name == r.name) {
            step.requested = true;
        }
    }
    let complete = planner.missing.is_empty()
        && planner.cycles.is_empty()
        && planner.order.iter().all(|s| s.not_installable.is_none());
    Ok(Plan {
        order: planner.order,
        missing: planner.missing,
        cycles: planner.cycles,
        complete,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mark {
    Visiting,
    Done,
}

struct Planner<'a> {
    view: &'a OrgView,
    pinned: BTreeMap<&'a str, Version>,
    marks: BTreeMap<String, Mark>,
    stack: Vec<String>,
    order: Vec<Step>,
    missing: Vec<Missing>,
    cycles: Vec<Vec<String>>,
}

impl<'a> Planner<'a> {
    /// Depth-first: a plugin's step is pushed after its dependencies'. `parent` is
    /// `None` for a requested plugin, whose problems are errors rather than gaps.
    fn visit(&mut self, name: &str, parent: Option<&str>) -> Result<(), PlanError> {
        match self.marks.get(name) {
            Some(Mark::Done) => {
                if let (Some(parent), Some(step)) =
                    (parent, self.order.iter_mut().find(|s| s.name == name))
                    && !step.required_by.iter().any(|p| p == parent)
                {
                    step.required_by.push(parent.to_owned());
                }
                return Ok(());
            }
            Some(Mark::Visiting) => {
                let from = self.stack.iter().position(|n| n == name).unwrap_or(0);
                let mut cycle = self.stack[from..].to_vec();
                cycle.push(name.to_owned());
                self.cycles.push(cycle);
                return Ok(());
            }
            None => {}
        }
        let offer = match self.resolve(name) {
            Ok(offer) => offer,
            Err(e) => match parent {
                None => return Err(e),
                Some(parent) => {
                    let reason = match e {
                        PlanError::Ambiguous(_) => "ambiguous",
                        PlanError::NothingInstallable(_) => "all_yanked",
                        _ => "not_offered",
                    };
                    match self.missing.iter_mut().find(|m| m.name == name) {
                        Some(m) => m.required_by.push(parent.to_owned()),
                        None => self.missing.push(Missing {
                            name: name.to_owned(),
                            required_by: vec![parent.to_owned()],
                            reason,
                        }),
                    }
                    return Ok(());
                }
            },
        };
        self.marks.insert(name.to_owned(), Mark::Visiting);
        self.stack.push(name.to_owned());
        for dep in &offer.summary.dependencies {
            self.visit(dep, Some(name))?;
        }
        self.stack.pop();
        self.marks.insert(name.to_owned(), Mark::Done);
        self.order.push(Step {
            name: name.to_owned(),
            version: offer.version.clone(),
            hash: offer.hash.clone(),
            trust: offer.trust.clone(),
            requested: false,
            namespace: crate::definition::install_namespace(name),
            required_by: parent.map(|p| vec![p.to_owned()]).unwrap_or_default(),
            approve: offer.summary.requirements.to_approve(),
            not_installable: offer.summary.not_installable.clone(),
        });
        Ok(())
    }

    fn resolve(&self, name: &str) -> Result<&'a super::view::Offer, PlanError> {
        let view: &'a OrgView = self.view;
        let Some(plugin) = view.plugin(name) else {
            return Err(match view.ambiguity(name) {
                Some(_) => PlanError::Ambiguous(name.to_owned()),
                None => PlanError::Unknown(name.to_owned()),
            });
        };
        match self.pinned.get(name) {
            Some(version) => {
                let offer =
                    plugin
                        .versions
                        .get(version)
                        .ok_or_else(|| PlanError::NoSuchVersion {
                            name: name.to_owned(),
                            version: version.clone(),
                        })?;
                if offer.yanked {
                    return Err(PlanError::Yanked {
                        name: name.to_owned(),
                        version: version.clone(),
                    });
                }
                Ok(offer)
            }
            None => plugin
                .latest()
                .ok_or_else(|| PlanError::NothingInstallable(name.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::sync::merge::{Row, SourceRows, base, org_view};
    use crate::sync::view::{RequirementsSummary, Summary};

    fn row(name: &str, version: &str, deps: &[&str], internet: bool) -> Row {
        Row {
            publisher: "acme".into(),
            name: name.into(),
            version: Version::parse(version).unwrap(),
            hash: format!("sha256:{name}{version}"),
            yanked: false,
            trust: Trust::Builtin,
            summary: Arc::new(Summary {
                dependencies: deps.iter().map(|d| d.to_string()).collect(),
                requirements: RequirementsSummary {
                    internet_access: internet,
                    capabilities: vec!["loadBalancer".into()],
                    ..Default::default()
                },
                ..Default::default()
            }),
        }
    }

    fn view(rows: Vec<Row>) -> OrgView {
        let source = SourceRows {
            name: "s".into(),
            priority: 0,
            rows: rows
                .into_iter()
                .map(|mut r| {
                    r.trust = Trust::Marketplace {
                        source: "s".into(),
                        publisher: "acme".into(),
                        key_ids: vec![],
                    };
                    r
                })
                .collect(),
        };
        org_view(Arc::new(base(vec![], vec![source])), "org", vec![])
    }

    fn names(plan: &Plan) -> Vec<String> {
        plan.order
            .iter()
            .map(|s| format!("{}@{}", s.name, s.version))
            .collect()
    }

    #[test]
    fn orders_dependencies_first_and_reports_gaps_and_cycles() {
        let v = view(vec![
            row("app", "1.0.0", &["db", "cache", "ghost"], true),
            row("db", "1.0.0", &["storage"], false),
            row("db", "2.0.0", &["storage"], false),
            row("storage", "1.0.0", &[], false),
            row("cache", "1.0.0", &["cache-helper"], false),
            row("cache-helper", "1.0.0", &["cache"], false),
        ]);
        let plan = install_plan(&v, &parse_requests("app, db@1.0.0").unwrap()).unwrap();
        assert_eq!(
            names(&plan),
            [
                "storage@1.0.0",
                "db@1.0.0",
                "cache-helper@1.0.0",
                "cache@1.0.0",
                "app@1.0.0"
            ]
        );
        assert!(!plan.complete);
        assert_eq!(plan.missing.len(), 1);
        assert_eq!(plan.missing[0].name, "ghost");
        assert_eq!(plan.missing[0].required_by, ["app"]);
        assert_eq!(plan.cycles, [["cache", "cache-helper", "cache"]]);
        let db = plan.order.iter().find(|s| s.name == "db").unwrap();
        assert!(db.requested);
        assert_eq!(db.required_by, ["app"]);
        let app = plan.order.last().unwrap();
        assert_eq!(app.approve, ["internetAccess", "capability:loadBalancer"]);
    }

    #[test]
    fn approval_includes_needs_declared_as_capabilities() {
        // Fundament-style: `permissions.capabilities: [internet_access]`, no requirements.
        let def = crate::definition::Definition::parse(include_bytes!(
            "../../tests/common/fundament-style.yaml"
        ))
        .expect("valid definition");
        let mut r = row("webhook-relay", "0.4.1", &[], false);
        r.summary = Arc::new(Summary::of(&def));
        let plan = install_plan(&view(vec![r]), &parse_requests("webhook-relay").unwrap()).unwrap();
        assert_eq!(plan.order[0].approve, ["internetAccess"]);
    }

    #[test]
    fn refuses_bad_requests_by_name() {
        let v = view(vec![row("db", "1.0.0", &[], false)]);
        let plan = |q: &str| parse_requests(q).and_then(|r| install_plan(&v, &r));
        assert_eq!(plan("").unwrap_err(), PlanError::Empty);
        assert_eq!(
            plan("db,db").unwrap_err(),
            PlanError::Duplicate("db".into())
        );
        assert!(matches!(plan("Db").unwrap_err(), PlanError::BadName(_)));
        assert!(matches!(
            plan("db@x").unwrap_err(),
            PlanError::BadVersion(_)
        ));
        assert_eq!(plan("nope").unwrap_err(), PlanError::Unknown("nope".into()));
        assert!(matches!(
            plan("db@9.0.0").unwrap_err(),
            PlanError::NoSuchVersion { .. }
        ));
        let many = (0..=MAX_REQUESTED)
            .map(|i| format!("p{i}"))
            .collect::<Vec<_>>();
        assert_eq!(plan(&many.join(",")).unwrap_err(), PlanError::TooMany);
        let ok = plan("db@v1.0.0").unwrap();
        assert!(ok.complete);
        assert_eq!(names(&ok), ["db@1.0.0"]);
    }
}
