//! Shared by the publish and sync benchmarks: a signed index of generated definitions,
//! set up with the real CLI (`repo init`, `publisher add`) and seeded through the
//! server-side `accept` (the verification the HTTP API runs), one signed batch per
//! publisher.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use marketplace::definition::Definition;
use marketplace::store::Store;
use marketplace::trust::SigningKey;
use marketplace::trust::publisher::plan::{Change, Current, Limits, Plan, plan};
use marketplace::trust::server::roleset::RoleUpload;
use marketplace::trust::server::state::{OnlineKeys, Signer};
use marketplace::trust::verify::RoleLifetimes;

use crate::BoxError;
use crate::generate::{PluginBase, Rng, plugin_yaml};

pub(crate) const YEAR: Duration = Duration::from_secs(365 * 86_400);

pub(crate) fn marketplace(args: &[&str]) -> Result<String, BoxError> {
    let out = Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(args)
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "marketplace {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(String::from_utf8(out.stdout)?)
}

pub(crate) struct Publisher {
    pub(crate) name: String,
    pub(crate) key: SigningKey,
    pub(crate) token: String,
}

pub(crate) struct Seeded {
    pub(crate) data: PathBuf,
    pub(crate) publishers: Vec<Publisher>,
    /// Definitions by publisher, in the order of `publishers`.
    pub(crate) definitions: Vec<Vec<Definition>>,
    pub(crate) rng: Rng,
}

/// A repository in `dir/data` with `publishers` publishers (`pub-000`, ...) sharing
/// `definitions` generated definitions (definition i belongs to publisher i % n); its
/// store in `database` (a URL) when given, else the data directory's SQLite file.
pub(crate) async fn seed(
    dir: &Path,
    definitions: usize,
    publishers: usize,
    database: Option<&str>,
) -> Result<Seeded, BoxError> {
    let on: Vec<&str> = match database {
        Some(url) => vec!["--database", url],
        None => Vec::new(),
    };
    let data = dir.join("data");
    let d = data.to_str().ok_or("non-UTF-8 temp path")?;
    let root = dir.join("root.pem");
    SigningKey::generate()?.save_new(&root)?;
    marketplace(
        &[
            "repo",
            "init",
            "--data-dir",
            d,
            "--root-key",
            root.to_str().unwrap(),
        ]
        .iter()
        .chain(&on)
        .copied()
        .collect::<Vec<_>>(),
    )?;
    let mut pubs = Vec::new();
    for i in 0..publishers {
        let name = format!("pub-{i:03}");
        let key = SigningKey::generate()?;
        let out = marketplace(
            &[
                "publisher",
                "add",
                &name,
                "--key",
                &key.public().hex(),
                "--data-dir",
                d,
            ]
            .iter()
            .chain(&on)
            .copied()
            .collect::<Vec<_>>(),
        )?;
        let token = out
            .lines()
            .last()
            .ok_or("no token printed")?
            .trim()
            .to_owned();
        pubs.push(Publisher { name, key, token });
    }
    let mut rng = Rng(0x5eed_cafe_f00d_beef);
    let mut by_publisher: Vec<Vec<Definition>> = (0..publishers).map(|_| Vec::new()).collect();
    for i in 1..=definitions {
        let base = PluginBase::new(i, definitions, &mut rng);
        let yaml = plugin_yaml(&base, "v1.0.0", &mut rng);
        by_publisher[i % publishers]
            .push(Definition::parse(yaml.as_bytes()).map_err(|e| e.to_string())?);
    }
    let db = match database {
        Some(url) => marketplace::db::Database::parse(url)?,
        None => marketplace::db::Database::Sqlite(data.join("marketplace.db")),
    };
    let store = Store::connect(&db, 4).await?;
    let keys = OnlineKeys::load(&marketplace::trust::server::repo::keys_dir(&data))?
        .ok_or("repo init wrote no online keys")?;
    let signer = Signer::new(keys, RoleLifetimes::default());
    let now = marketplace::clock::now();
    for (p, defs) in pubs.iter().zip(&by_publisher) {
        let adding: Vec<(&Definition, bool)> = defs.iter().map(|d| (d, false)).collect();
        let Plan::Ready(upload) = plan(
            &p.name,
            &Current::default(),
            &Change::Add(adding),
            &[&p.key],
            YEAR,
            now,
            Limits::default(),
        )
        .await?
        else {
            return Err("a first publish needs no bins fetched".into());
        };
        let upload = RoleUpload {
            top: upload.top,
            bins: upload.bins,
        };
        let bytes: Vec<&[u8]> = defs.iter().map(|d| d.bytes.as_slice()).collect();
        marketplace::trust::server::accept::accept(&store, &signer, &p.name, &bytes, &upload, now)
            .await?;
    }
    store.close().await;
    Ok(Seeded {
        data,
        publishers: pubs,
        definitions: by_publisher,
        rng,
    })
}
