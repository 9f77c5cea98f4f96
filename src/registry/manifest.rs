//! Image manifests and indexes as far as mirroring and serving need them: their media
//! type and the descriptors they point at (platform manifests, config, layers, the
//! subject of a referrer). The bytes are always kept and served as they came; this
//! parse only decides what else must be fetched and what may be served.

use serde::Deserialize;

use crate::blob::Digest;

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// Every manifest media type we mirror and serve, for `Accept` headers.
pub const ACCEPTED: [&str; 4] = [OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST];

/// The largest manifest fetched or served (the distribution spec suggests registries
/// accept at least 4 MiB).
pub const MAX_MANIFEST_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: Digest,
    pub size: u64,
    #[serde(default)]
    pub artifact_type: Option<String>,
    #[serde(default)]
    pub platform: Option<serde_json::Value>,
    #[serde(default)]
    pub annotations: Option<std::collections::BTreeMap<String, String>>,
}

/// A parsed manifest: an index (multi-platform) or an image manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Manifest {
    Index {
        media_type: String,
        manifests: Vec<Descriptor>,
        subject: Option<Descriptor>,
        artifact_type: Option<String>,
    },
    Image {
        media_type: String,
        config: Descriptor,
        layers: Vec<Descriptor>,
        subject: Option<Descriptor>,
        artifact_type: Option<String>,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ManifestError {
    #[error("the manifest is {size} bytes, more than the {MAX_MANIFEST_BYTES} accepted")]
    TooLarge { size: u64 },
    #[error("the manifest is not valid JSON of its kind: {0}")]
    Json(String),
    #[error("media type `{0}` is not an image manifest or index we mirror")]
    MediaType(String),
    #[error(
        "the manifest says it is `{inside}` but was served as `{outside}`; one of them is wrong"
    )]
    MediaTypeConflict { inside: String, outside: String },
    #[error("schemaVersion {0}; only 2 is supported")]
    SchemaVersion(i64),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    schema_version: i64,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Option<Vec<Descriptor>>,
    #[serde(default)]
    subject: Option<Descriptor>,
    #[serde(default)]
    artifact_type: Option<String>,
}

impl Manifest {
    /// Parses `bytes`, served with `content_type` (the `Content-Type` an upstream sent,
    /// or `None`). The media type is the manifest's own `mediaType`, else the served
    /// one, else inferred from the fields (an OCI manifest may omit it); the two may
    /// not disagree.
    pub fn parse(bytes: &[u8], content_type: Option<&str>) -> Result<Manifest, ManifestError> {
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(ManifestError::TooLarge {
                size: bytes.len() as u64,
            });
        }
        let raw: Raw =
            serde_json::from_slice(bytes).map_err(|e| ManifestError::Json(e.to_string()))?;
        if raw.schema_version != 2 {
            return Err(ManifestError::SchemaVersion(raw.schema_version));
        }
        // Parameters such as `; charset=utf-8` are not part of the type.
        let outside = content_type
            .map(|c| c.split(';').next().unwrap_or("").trim().to_owned())
            .filter(|c| ACCEPTED.contains(&c.as_str()));
        let media_type = match (raw.media_type, outside) {
            (Some(inside), Some(outside)) if inside != outside => {
                return Err(ManifestError::MediaTypeConflict { inside, outside });
            }
            (Some(inside), _) => inside,
            (None, Some(outside)) => outside,
            (None, None) if raw.manifests.is_some() => OCI_INDEX.to_owned(),
            (None, None) => OCI_MANIFEST.to_owned(),
        };
        let json_error = |what: &str| ManifestError::Json(format!("{media_type} without {what}"));
        match media_type.as_str() {
            OCI_INDEX | DOCKER_LIST => Ok(Manifest::Index {
                manifests: raw.manifests.ok_or_else(|| json_error("manifests"))?,
                media_type,
                subject: raw.subject,
                artifact_type: raw.artifact_type,
            }),
            OCI_MANIFEST | DOCKER_MANIFEST => Ok(Manifest::Image {
                config: raw.config.ok_or_else(|| json_error("config"))?,
                layers: raw.layers.unwrap_or_default(),
                media_type,
                subject: raw.subject,
                artifact_type: raw.artifact_type,
            }),
            _ => Err(ManifestError::MediaType(media_type)),
        }
    }

    pub fn media_type(&self) -> &str {
        match self {
            Manifest::Index { media_type, .. } | Manifest::Image { media_type, .. } => media_type,
        }
    }

    pub fn subject(&self) -> Option<&Descriptor> {
        match self {
            Manifest::Index { subject, .. } | Manifest::Image { subject, .. } => subject.as_ref(),
        }
    }

    /// The artifact type a referrers listing shows: the manifest's own, else its
    /// config's media type (the image spec's rule).
    pub fn artifact_type(&self) -> Option<&str> {
        match self {
            Manifest::Index { artifact_type, .. } => artifact_type.as_deref(),
            Manifest::Image {
                artifact_type,
                config,
                ..
            } => artifact_type
                .as_deref()
                .or(Some(config.media_type.as_str())),
        }
    }

    /// The manifests an index lists (fetched and kept as manifests).
    pub fn children(&self) -> &[Descriptor] {
        match self {
            Manifest::Index { manifests, .. } => manifests,
            Manifest::Image { .. } => &[],
        }
    }

    /// The children of an index for the platforms `wanted` (`OS/ARCH` or
    /// `OS/ARCH/VARIANT`); all of them when `wanted` is empty.
    pub fn children_for<'a>(
        &'a self,
        wanted: &'a [String],
    ) -> impl Iterator<Item = &'a Descriptor> {
        self.children()
            .iter()
            .filter(move |d| wanted.is_empty() || platform_selected(d, wanted))
    }

    /// The blobs an image manifest needs: its config, then its layers.
    pub fn blobs(&self) -> Vec<&Descriptor> {
        match self {
            Manifest::Index { .. } => Vec::new(),
            Manifest::Image { config, layers, .. } => {
                std::iter::once(config).chain(layers.iter()).collect()
            }
        }
    }
}

/// Whether an index entry's platform is one of `wanted` (`OS/ARCH` matches every
/// variant; `OS/ARCH/VARIANT` that variant only). An entry without a platform (an
/// attestation, say) is not.
pub fn platform_selected(d: &Descriptor, wanted: &[String]) -> bool {
    let Some(p) = &d.platform else {
        return false;
    };
    let field = |k: &str| p.get(k).and_then(|v| v.as_str()).unwrap_or("");
    let (os, arch, variant) = (field("os"), field("architecture"), field("variant"));
    wanted.iter().any(|w| {
        let mut parts = w.split('/');
        parts.next() == Some(os)
            && parts.next() == Some(arch)
            && parts.next().is_none_or(|v| v == variant)
    })
}

/// Checks a platform as `--platform` takes it: `OS/ARCH` or `OS/ARCH/VARIANT`.
pub fn check_platform(text: &str) -> Result<(), String> {
    let parts: Vec<&str> = text.split('/').collect();
    let word = |p: &&str| {
        !p.is_empty() && p.len() <= 32 && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    if !(2..=3).contains(&parts.len()) || !parts.iter().all(word) {
        return Err(format!(
            "`{text}` is not OS/ARCH or OS/ARCH/VARIANT (e.g. linux/amd64, linux/arm/v7)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platforms_are_selected_by_os_arch_and_variant() {
        let d = |p: serde_json::Value| Descriptor {
            media_type: OCI_MANIFEST.into(),
            digest: format!("sha256:{}", "a".repeat(64)).parse().unwrap(),
            size: 1,
            artifact_type: None,
            platform: Some(p),
            annotations: None,
        };
        let arm7 = d(serde_json::json!({"os": "linux", "architecture": "arm", "variant": "v7"}));
        let amd = d(serde_json::json!({"os": "linux", "architecture": "amd64"}));
        let want = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(platform_selected(&arm7, &want(&["linux/arm"])));
        assert!(platform_selected(&arm7, &want(&["linux/arm/v7"])));
        assert!(!platform_selected(&arm7, &want(&["linux/arm/v6"])));
        assert!(platform_selected(
            &amd,
            &want(&["linux/arm64", "linux/amd64"])
        ));
        assert!(!platform_selected(&amd, &want(&["windows/amd64"])));
        assert!(check_platform("linux/amd64").is_ok());
        assert!(check_platform("linux/arm/v7").is_ok());
        assert!(check_platform("amd64").is_err());
        assert!(check_platform("linux/amd64/v1/x").is_err());
        assert!(check_platform("linux/../x").is_err());
    }

    fn digest(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    fn image(media_type: Option<&str>) -> String {
        let mt = media_type.map_or(String::new(), |m| format!(r#""mediaType":"{m}","#));
        format!(
            r#"{{"schemaVersion":2,{mt}"config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{}","size":7}},
               "layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"{}","size":9,"annotations":{{"a":"b"}}}}],
               "annotations":{{"org.opencontainers.image.created":"2026-01-01"}}}}"#,
            digest('a'),
            digest('b')
        )
    }

    #[test]
    fn an_image_manifest_names_its_config_and_layers() {
        let m = Manifest::parse(image(Some(OCI_MANIFEST)).as_bytes(), None).unwrap();
        assert_eq!(m.media_type(), OCI_MANIFEST);
        let blobs: Vec<String> = m.blobs().iter().map(|d| d.digest.to_string()).collect();
        assert_eq!(blobs, vec![digest('a'), digest('b')]);
        assert!(m.children().is_empty());
        assert_eq!(
            m.artifact_type(),
            Some("application/vnd.oci.image.config.v1+json")
        );
        // No mediaType inside: the served one, else inferred.
        let m = Manifest::parse(
            image(None).as_bytes(),
            Some(&format!("{DOCKER_MANIFEST}; charset=utf-8")),
        )
        .unwrap();
        assert_eq!(m.media_type(), DOCKER_MANIFEST);
        assert_eq!(
            Manifest::parse(image(None).as_bytes(), None)
                .unwrap()
                .media_type(),
            OCI_MANIFEST
        );
    }

    #[test]
    fn an_index_names_its_platform_manifests_and_subject() {
        let index = format!(
            r#"{{"schemaVersion":2,"mediaType":"{OCI_INDEX}","manifests":[
                {{"mediaType":"{OCI_MANIFEST}","digest":"{}","size":500,"platform":{{"architecture":"amd64","os":"linux"}}}},
                {{"mediaType":"{OCI_MANIFEST}","digest":"{}","size":501,"platform":{{"architecture":"arm64","os":"linux"}}}}],
               "subject":{{"mediaType":"{OCI_MANIFEST}","digest":"{}","size":3}}}}"#,
            digest('c'),
            digest('d'),
            digest('e')
        );
        let m = Manifest::parse(index.as_bytes(), Some(OCI_INDEX)).unwrap();
        assert_eq!(m.children().len(), 2);
        assert_eq!(m.children()[1].digest.to_string(), digest('d'));
        assert_eq!(m.subject().unwrap().digest.to_string(), digest('e'));
        assert!(m.blobs().is_empty());
    }

    #[test]
    fn what_cannot_be_mirrored_is_refused_with_the_reason() {
        let cases: Vec<(Vec<u8>, Option<&str>, &str)> = vec![
            (b"{".to_vec(), None, "not valid JSON"),
            (
                br#"{"schemaVersion":1,"name":"x"}"#.to_vec(),
                None,
                "schemaVersion 1",
            ),
            (
                image(Some(
                    "application/vnd.docker.distribution.manifest.v1+prettyjws",
                ))
                .into_bytes(),
                None,
                "not an image manifest",
            ),
            (
                image(Some(OCI_MANIFEST)).into_bytes(),
                Some(DOCKER_MANIFEST),
                "one of them is wrong",
            ),
            (
                image(Some(OCI_MANIFEST))
                    .replace(&digest('b'), "sha256:short")
                    .into_bytes(),
                None,
                "64 lowercase hex",
            ),
            (
                format!(r#"{{"schemaVersion":2,"mediaType":"{OCI_INDEX}"}}"#).into_bytes(),
                None,
                "without manifests",
            ),
            (
                vec![b' '; MAX_MANIFEST_BYTES as usize + 1],
                None,
                "more than",
            ),
        ];
        for (bytes, served, why) in cases {
            let err = Manifest::parse(&bytes, served).unwrap_err().to_string();
            assert!(err.contains(why), "{why}: {err}");
        }
    }
}
