//! The built-in definitions: the `catalog/` folder, embedded into the binary at build
//! time and loaded under the `fundament` publisher. `NAME.yaml` is the definition
//! (Fundament's schema, installable as it is) and `NAME.extras.yaml`, when present, its
//! companion document (dependencies, suggested plugins, cluster capabilities).

use rust_embed::RustEmbed;

use crate::definition::{Definition, EXTRAS_FILE_SUFFIX, Extras, InvalidDefinition};
use crate::store::{Inserted, Store, StoreError};

use crate::definition::BUILTIN_PUBLISHER;

#[derive(RustEmbed)]
#[folder = "catalog/"]
struct Embedded;

#[derive(Debug, thiserror::Error)]
pub enum BuiltinError {
    #[error("built-in definition {file} is invalid: {source}")]
    Invalid {
        file: String,
        #[source]
        source: InvalidDefinition,
    },
    #[error("built-in definition {file} is named `{name}`; the file must be named {name}.yaml")]
    Misnamed { file: String, name: String },
    #[error("{file} goes with no definition: the folder has no {stem}.yaml")]
    Orphan { file: String, stem: String },
}

/// Every embedded definition with its companion document, parsed and checked; file
/// names must match plugin names so the folder cannot hold two files for one plugin.
pub fn definitions() -> Result<Vec<Definition>, BuiltinError> {
    let mut files: Vec<_> = Embedded::iter()
        .filter(|f| f.ends_with(".yaml") || f.ends_with(".yml"))
        .collect();
    files.sort();
    let is_extras = |f: &str| f.ends_with(EXTRAS_FILE_SUFFIX);
    for file in files.iter().filter(|f| is_extras(f)) {
        let stem = file.trim_end_matches(EXTRAS_FILE_SUFFIX);
        if Embedded::get(&format!("{stem}.yaml")).is_none() {
            return Err(BuiltinError::Orphan {
                file: file.to_string(),
                stem: stem.to_owned(),
            });
        }
    }
    files
        .into_iter()
        .filter(|f| !is_extras(f))
        .map(|file| {
            let invalid = |file: &str| {
                let file = file.to_owned();
                move |source| BuiltinError::Invalid { file, source }
            };
            let data = Embedded::get(&file).expect("listed file is embedded").data;
            let mut def = Definition::parse(&data).map_err(invalid(&file))?;
            let stem = file.trim_end_matches(".yaml").trim_end_matches(".yml");
            if stem.rsplit('/').next() != Some(def.name()) {
                return Err(BuiltinError::Misnamed {
                    file: file.to_string(),
                    name: def.name().to_owned(),
                });
            }
            let extras_file = format!("{stem}{EXTRAS_FILE_SUFFIX}");
            if let Some(extras) = Embedded::get(&extras_file) {
                def = Extras::parse_document(&extras.data)
                    .and_then(|doc| def.with_companion(doc))
                    .map_err(invalid(&extras_file))?;
            }
            Ok(def)
        })
        .collect()
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LoadReport {
    pub added: usize,
    pub unchanged: usize,
    /// Built-ins whose version is already stored with other bytes; the stored bytes win
    /// because published versions are immutable.
    pub conflicting: usize,
}

/// Loads the built-ins into the store; running it again changes nothing.
pub async fn load(store: &Store, now: i64) -> Result<LoadReport, LoadError> {
    let mut report = LoadReport::default();
    for def in definitions()? {
        match store.insert_version(BUILTIN_PUBLISHER, &def, now).await {
            Ok(Inserted::New) => report.added += 1,
            Ok(Inserted::Unchanged) => report.unchanged += 1,
            Err(e @ StoreError::VersionExists { .. }) => {
                tracing::warn!(error = %e, "built-in definition differs from the stored one; keeping the stored version");
                report.conflicting += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(report)
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Builtin(#[from] BuiltinError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails the build's test run when any embedded definition is invalid or misnamed.
    #[test]
    fn every_builtin_is_valid_and_named_after_its_file() {
        let defs = definitions().unwrap_or_else(|e| panic!("{e}"));
        assert!(
            defs.len() >= 6,
            "the built-in catalog holds at least six plugins"
        );
        let mut names: Vec<&str> = defs.iter().map(Definition::name).collect();
        names.dedup();
        assert_eq!(names.len(), defs.len());
    }

    #[test]
    fn dependencies_between_builtins_resolve() {
        let defs = definitions().unwrap();
        let names: Vec<&str> = defs.iter().map(Definition::name).collect();
        for d in &defs {
            for dep in &d.extras.dependencies {
                assert!(
                    names.contains(&dep.as_str()),
                    "{} depends on missing {}",
                    d.name(),
                    dep
                );
            }
        }
    }
}
