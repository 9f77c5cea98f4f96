//! Deterministic generation of realistic plugin definitions, and seeding a store with them.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use marketplace::definition::{Definition, Extras};
use marketplace::store::Store;

use crate::BoxError;

pub(crate) const PUBLISHERS: usize = 20;
/// Words descriptions are made of; also the search vocabulary.
pub(crate) const WORDS: &[&str] = &[
    "cluster",
    "workload",
    "operator",
    "controller",
    "certificate",
    "gateway",
    "storage",
    "volume",
    "backup",
    "restore",
    "snapshot",
    "metrics",
    "dashboard",
    "alert",
    "policy",
    "secret",
    "identity",
    "network",
    "traffic",
    "proxy",
    "database",
    "replica",
    "queue",
    "stream",
    "cache",
    "index",
    "registry",
    "image",
    "pipeline",
    "deployment",
    "rollout",
    "scaling",
    "quota",
    "tenant",
    "project",
    "namespace",
    "audit",
    "compliance",
    "encryption",
    "rotation",
    "schedule",
    "job",
    "event",
    "trace",
    "log",
    "endpoint",
    "service",
    "domain",
    "record",
    "bucket",
    "object",
    "failover",
    "upgrade",
    "health",
    "probe",
    "resource",
    "cost",
    "report",
    "webhook",
    "token",
];
pub(crate) const ADJECTIVES: &[&str] = &[
    "automatic",
    "secure",
    "lightweight",
    "managed",
    "declarative",
    "resilient",
    "scalable",
    "private",
    "shared",
    "incremental",
    "continuous",
    "multi-tenant",
    "encrypted",
    "fast",
    "reliable",
    "simple",
];
pub(crate) const VERBS: &[&str] = &[
    "manages",
    "monitors",
    "protects",
    "replicates",
    "schedules",
    "exports",
    "collects",
    "provisions",
    "rotates",
    "validates",
    "routes",
    "archives",
    "tracks",
    "renews",
    "scales",
];
/// ~30 tags.
pub(crate) const TAGS: &[&str] = &[
    "security",
    "tls",
    "networking",
    "storage",
    "database",
    "monitoring",
    "logging",
    "metrics",
    "backup",
    "dns",
    "gateway",
    "ingress",
    "certificates",
    "secrets",
    "policy",
    "observability",
    "tracing",
    "alerting",
    "messaging",
    "cache",
    "search",
    "ci",
    "gitops",
    "autoscaling",
    "cost",
    "compliance",
    "identity",
    "registry",
    "serverless",
    "data",
];
pub(crate) const TITLE_WORDS: &[&str] = &[
    "Cobalt", "Harbor", "Beacon", "Ledger", "Summit", "Relay", "Falcon", "Orbit", "Granite",
    "Lantern", "Meridian", "Quartz", "Atlas", "Cedar", "Nimbus", "Pulse", "Vertex", "Willow",
];
pub(crate) const ICONS: &[&str] = &[
    "puzzle",
    "shield",
    "database",
    "cloud",
    "chart-line",
    "key",
    "box",
    "bell",
];
pub(crate) const LICENSES: &[&str] = &["Apache-2.0", "MIT", "BSD-3-Clause", "MPL-2.0"];

/// RBAC rules: (apiGroups, resources, verbs) as YAML flow sequences.
pub(crate) const RBAC_RULES: &[(&str, &str, &str)] = &[
    (r#"[""]"#, "[configmaps]", "[get, list, watch]"),
    (
        r#"[""]"#,
        "[secrets]",
        "[get, list, watch, create, update, patch, delete]",
    ),
    (r#"[""]"#, "[events]", "[create, patch]"),
    (r#"[""]"#, "[services, endpoints]", "[get, list, watch]"),
    (r#"[""]"#, "[pods, pods/log]", "[get, list, watch]"),
    (
        "[apps]",
        "[deployments, statefulsets, daemonsets]",
        "[get, list, watch, update, patch]",
    ),
    (
        "[batch]",
        "[jobs, cronjobs]",
        "[get, list, watch, create, delete]",
    ),
    (
        "[networking.k8s.io]",
        "[ingresses, networkpolicies]",
        "[get, list, watch]",
    ),
    (
        "[gateway.networking.k8s.io]",
        "[gateways, httproutes]",
        "[get, list, watch]",
    ),
    ("[coordination.k8s.io]", "[leases]", "[get, create, update]"),
    (
        "[monitoring.coreos.com]",
        "[servicemonitors, prometheusrules]",
        r#"["*"]"#,
    ),
    (
        "[storage.k8s.io]",
        "[storageclasses, volumeattachments]",
        "[get, list, watch]",
    ),
];

// ---------------------------------------------------------------------------------
// Seeding
// ---------------------------------------------------------------------------------

pub(crate) struct Seeded {
    pub(crate) plugins: usize,
    pub(crate) versions: usize,
    pub(crate) total: Duration,
    pub(crate) parse: Duration,
    pub(crate) insert: Duration,
}

pub(crate) async fn seed(
    db: &marketplace::db::Database,
    plugins: usize,
) -> Result<Seeded, BoxError> {
    let started = Instant::now();
    let store = Store::connect(db, 4).await?;
    let mut rng = Rng(0x5eed_cafe_f00d_beef);
    let now = unix_now();

    // Version sets first, so timestamps can increase with each insert (oldest first).
    let plans: Vec<Vec<String>> = (1..=plugins).map(|i| version_plan(i, &mut rng)).collect();
    let inserts: usize = plans.iter().map(Vec::len).sum();
    let first_ts = now - inserts as i64;

    let (mut parse, mut insert) = (Duration::ZERO, Duration::ZERO);
    let mut seq = 0i64;
    for (i, versions) in plans.iter().enumerate() {
        let i = i + 1;
        let publisher = format!("pub-{:02}", i % PUBLISHERS);
        let base = PluginBase::new(i, plugins, &mut rng);
        for version in versions {
            let t = Instant::now();
            let yaml = plugin_yaml(&base, version, &mut rng);
            // Suggestions travel beside the definition, as a publisher's companion
            // document puts them in the signed target.
            let extras = Extras {
                suggested_plugins: base.suggested.iter().cloned().collect(),
                ..Default::default()
            };
            let def = Definition::parse(yaml.as_bytes())
                .and_then(|d| d.with_extras(extras))
                .map_err(|e| {
                    format!(
                        "generated definition for {} {version} is invalid: {e}\n{yaml}",
                        base.name
                    )
                })?;
            parse += t.elapsed();

            let t = Instant::now();
            store
                .insert_version(&publisher, &def, first_ts + seq)
                .await?;
            insert += t.elapsed();
            seq += 1;
        }
    }
    store.close().await;
    Ok(Seeded {
        plugins,
        versions: inserts,
        total: started.elapsed(),
        parse,
        insert,
    })
}

/// ~10% of plugins get 2-3 versions (oldest first), the rest one.
pub(crate) fn version_plan(i: usize, rng: &mut Rng) -> Vec<String> {
    match i % 20 {
        0 => vec!["v1.0.0".into(), "v1.1.0".into(), "v2.0.0".into()],
        10 => vec!["v0.9.0".into(), format!("v1.0.{}", rng.below(5))],
        _ => vec![format!(
            "v{}.{}.{}",
            rng.below(4),
            rng.below(20),
            rng.below(10)
        )],
    }
}

/// What stays the same across a plugin's versions.
pub(crate) struct PluginBase {
    pub(crate) name: String,
    pub(crate) display_name: String,
    pub(crate) publisher: String,
    pub(crate) tags: Vec<&'static str>,
    pub(crate) internet: bool,
    pub(crate) kube_system: bool,
    pub(crate) privileged: bool,
    pub(crate) rules: Vec<usize>,
    suggested: Option<String>,
    pub(crate) has_crd: bool,
    pub(crate) icon: &'static str,
    pub(crate) license: &'static str,
}

impl PluginBase {
    pub(crate) fn new(i: usize, total: usize, rng: &mut Rng) -> PluginBase {
        let name = format!("plugin-{i:05}");
        let tag_count = 1 + rng.below(4);
        let rule_count = 2 + rng.below(3);
        let suggested = (rng.below(5) == 0 && total > 1).then(|| {
            let other = 1 + (i + 1 + rng.below(total - 1)) % total;
            format!("plugin-{other:05}")
        });
        PluginBase {
            display_name: format!("{} {} {i:05}", rng.pick(TITLE_WORDS), rng.pick(TITLE_WORDS)),
            publisher: format!("pub-{:02}", i % PUBLISHERS),
            tags: rng.distinct(TAGS, tag_count),
            internet: rng.below(10) < 4,
            kube_system: rng.below(10) == 0,
            privileged: rng.below(20) == 0,
            rules: rng.distinct_indices(RBAC_RULES.len(), rule_count),
            suggested: suggested.filter(|s| *s != name),
            has_crd: rng.below(3) == 0,
            icon: rng.pick(ICONS),
            license: rng.pick(LICENSES),
            name,
        }
    }
}

/// A complete, valid definition in the style of catalog/cert-manager.yaml (Fundament's
/// schema: what an admin approves is in `permissions.capabilities`).
pub(crate) fn plugin_yaml(p: &PluginBase, version: &str, rng: &mut Rng) -> String {
    let mut y = String::with_capacity(2048);
    let name = &p.name;
    let _ = writeln!(y, "# Generated benchmark plugin {name} {version}.");
    y.push_str("apiVersion: fundament.io/v1\nkind: PluginDefinition\nmetadata:\n");
    let _ = writeln!(y, "  name: {name}");
    let _ = writeln!(y, "  displayName: {}", p.display_name);
    let _ = writeln!(y, "  version: {version}");
    y.push_str("  description: >-\n");
    for _ in 0..2 + rng.below(3) {
        let _ = writeln!(y, "    {}", sentence(rng));
    }
    let _ = writeln!(y, "  author: Publisher {}", &p.publisher[4..]);
    let _ = writeln!(y, "  license: {}", p.license);
    let _ = writeln!(y, "  icon: {}", p.icon);
    y.push_str("  urls:\n");
    let _ = writeln!(
        y,
        "    homepage: https://{}.example.com/plugins/{name}",
        p.publisher
    );
    let _ = writeln!(
        y,
        "    repository: https://github.com/{}/{name}",
        p.publisher
    );
    let _ = writeln!(y, "  tags: [{}]", p.tags.join(", "));

    y.push_str("spec:\n  permissions:\n");
    let needs: Vec<&str> = [
        (p.internet, "internet_access"),
        (p.kube_system, "kube_system_deployment"),
        (p.privileged, "privileged"),
    ]
    .into_iter()
    .filter_map(|(needed, capability)| needed.then_some(capability))
    .collect();
    if !needs.is_empty() {
        let _ = writeln!(y, "    capabilities: [{}]", needs.join(", "));
    }
    y.push_str("    rbac:\n");
    for &r in &p.rules {
        let (groups, resources, verbs) = RBAC_RULES[r];
        let _ = writeln!(y, "      - apiGroups: {groups}");
        let _ = writeln!(y, "        resources: {resources}");
        let _ = writeln!(y, "        verbs: {verbs}");
    }
    if p.has_crd {
        let crd = format!("widgets.{name}.bench.io");
        y.push_str("  menu:\n    project:\n");
        let _ = writeln!(y, "      - crd: {crd}");
        y.push_str("        list: true\n        detail: true\n        label: Widgets\n");
        let _ = writeln!(y, "  crds:\n    - {crd}");
    }
    let _ = writeln!(y, "  image: ghcr.io/bench/{name}@sha256:{}", rng.hex64());
    y.push_str("  imagePullPolicy: IfNotPresent\n");
    y
}

pub(crate) fn sentence(rng: &mut Rng) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "The {} {} {} {} {}",
        rng.pick(ADJECTIVES),
        rng.pick(WORDS),
        rng.pick(VERBS),
        rng.pick(WORDS),
        rng.pick(WORDS)
    );
    for _ in 0..rng.below(4) {
        let _ = write!(s, " for every {} {}", rng.pick(WORDS), rng.pick(WORDS));
    }
    s.push('.');
    let mut c = s.chars();
    let first = c.next().map(|f| f.to_ascii_uppercase()).unwrap_or('T');
    std::iter::once(first).chain(c).collect()
}

pub(crate) fn db_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// SplitMix64: deterministic, dependency-free.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    pub(crate) fn distinct_indices(&mut self, len: usize, count: usize) -> Vec<usize> {
        let mut out = Vec::with_capacity(count);
        while out.len() < count.min(len) {
            let i = self.below(len);
            if !out.contains(&i) {
                out.push(i);
            }
        }
        out
    }

    fn distinct<T: Copy>(&mut self, items: &[T], count: usize) -> Vec<T> {
        self.distinct_indices(items.len(), count)
            .into_iter()
            .map(|i| items[i])
            .collect()
    }

    pub(crate) fn hex64(&mut self) -> String {
        (0..4).map(|_| format!("{:016x}", self.next())).collect()
    }
}
