//! Ed25519 keys: generation, PKCS#8 files, TUF key ids.
//!
//! Private keys are PKCS#8 PEM files (`-----BEGIN PRIVATE KEY-----`, as OpenSSL writes
//! them) with mode 0600. They are never logged; `SigningKey`'s `Debug` shows only the
//! key id.

use std::fmt;
use std::io::Write;
use std::path::Path;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};
use serde::{Deserialize, Serialize};
use tough::schema::decoded::{Decoded, Hex};
use tough::schema::key::{Ed25519Key, Ed25519Scheme, Key};

const PEM_TAG: &str = "PRIVATE KEY";
/// A key file larger than this is not a key.
const MAX_KEY_FILE: u64 = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read key file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write key file {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} already exists; refusing to overwrite a key")]
    Exists { path: String },
    #[error("{path} is not an ed25519 PKCS#8 private key ({reason})")]
    NotAKey { path: String, reason: String },
    #[error("key file {path} is readable by other users (mode {mode:o}); run `chmod 600 {path}`")]
    TooOpen { path: String, mode: u32 },
    #[error("`{0}` is not an ed25519 public key: expected 64 hex digits or a .pub JSON file")]
    BadPublicKey(String),
    #[error("key generation failed")]
    Generate,
}

/// An ed25519 private key able to sign TUF metadata.
pub struct SigningKey {
    pkcs8: Vec<u8>,
    pair: Ed25519KeyPair,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("key_id", &self.public().key_id())
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    pub fn generate() -> Result<SigningKey, KeyError> {
        // PKCS#8 v1, as `openssl genpkey -algorithm ED25519` writes it; aws-lc's default
        // v2 form (with the public key appended) is refused by OpenSSL 3.0.
        let doc = Ed25519KeyPair::generate_pkcs8v1(&SystemRandom::new())
            .map_err(|_| KeyError::Generate)?;
        Self::from_pkcs8_der(doc.as_ref().to_vec(), "<generated>")
    }

    fn from_pkcs8_der(der: Vec<u8>, path: &str) -> Result<SigningKey, KeyError> {
        let pair = Ed25519KeyPair::from_pkcs8(&der).map_err(|e| KeyError::NotAKey {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(SigningKey { pkcs8: der, pair })
    }

    /// Reads a PEM or DER PKCS#8 ed25519 key, refusing files other users can read.
    pub fn load(path: &Path) -> Result<SigningKey, KeyError> {
        Self::load_with_mask(path, 0o077)
    }

    /// As [`SigningKey::load`], but the file's group may read it: a Kubernetes Secret
    /// mounted for a non-root user (`fsGroup`) is mode 0440, and the group is the pod's
    /// own. Writable by the group, or readable by anyone else, is still refused.
    pub fn load_group_readable(path: &Path) -> Result<SigningKey, KeyError> {
        Self::load_with_mask(path, 0o037)
    }

    fn load_with_mask(path: &Path, refused: u32) -> Result<SigningKey, KeyError> {
        let shown = path.display().to_string();
        let read_err = |source| KeyError::Read {
            path: shown.clone(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(read_err)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o777;
            if mode & refused != 0 {
                return Err(KeyError::TooOpen { path: shown, mode });
            }
        }
        if meta.len() > MAX_KEY_FILE {
            return Err(KeyError::NotAKey {
                path: shown,
                reason: "file is too large".into(),
            });
        }
        let bytes = std::fs::read(path).map_err(read_err)?;
        let der = match pem::parse(&bytes) {
            Ok(p) if p.tag() == PEM_TAG => p.into_contents(),
            Ok(p) => {
                return Err(KeyError::NotAKey {
                    path: shown,
                    reason: format!("PEM block is `{}`, expected `{PEM_TAG}`", p.tag()),
                });
            }
            Err(_) => bytes,
        };
        Self::from_pkcs8_der(der, &shown)
    }

    /// Writes the key as PEM with mode 0600, failing if `path` exists: a key is never
    /// silently replaced. The file appears complete or not at all.
    pub fn save_new(&self, path: &Path) -> Result<(), KeyError> {
        let shown = path.display().to_string();
        let write_err = |source| KeyError::Write {
            path: shown.clone(),
            source,
        };
        let pem = pem::encode_config(
            &pem::Pem::new(PEM_TAG, self.pkcs8.clone()),
            pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
        );
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let mut tmp = tempfile_in(dir).map_err(write_err)?;
        tmp.1.write_all(pem.as_bytes()).map_err(write_err)?;
        tmp.1.sync_all().map_err(write_err)?;
        // hard_link fails if the target exists, unlike rename, so an existing key survives.
        let linked = std::fs::hard_link(&tmp.0, path);
        let _ = std::fs::remove_file(&tmp.0);
        match linked {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(KeyError::Exists { path: shown })
            }
            Err(e) => Err(write_err(e)),
        }
    }

    pub fn public(&self) -> PublicKey {
        PublicKey(self.pair.public_key().as_ref().to_vec())
    }

    /// An ed25519 signature over `message` (for metadata whose canonical bytes the caller
    /// built itself).
    pub fn sign_raw(&self, message: &[u8]) -> Vec<u8> {
        self.pair.sign(message).as_ref().to_vec()
    }

    /// tough's signer for this key.
    pub fn signer(&self) -> impl tough::sign::Sign + use<> {
        tough::sign::parse_keypair(&self.pkcs8).expect("a validated ed25519 PKCS#8 key parses")
    }
}

/// A new file with mode 0600 next to the final path, so the final link is atomic.
fn tempfile_in(dir: &Path) -> std::io::Result<(std::path::PathBuf, std::fs::File)> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    for attempt in 0..16u32 {
        let name = dir.join(format!(".key-{}-{attempt}.tmp", std::process::id()));
        match options.open(&name) {
            Ok(f) => return Ok((name, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        "no free temporary name",
    ))
}

/// An ed25519 public key (32 bytes).
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey(Vec<u8>);

/// The `.pub` file format: TUF's own key object, so it can be pasted into metadata.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PublicKeyFile {
    keytype: String,
    scheme: String,
    keyval: KeyVal,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyVal {
    public: String,
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.key_id())
    }
}

impl PublicKey {
    /// Accepts 64 hex digits, or the path of a `.pub` file written by `keys generate`.
    pub fn parse(input: &str) -> Result<PublicKey, KeyError> {
        let bad = || KeyError::BadPublicKey(input.chars().take(80).collect());
        if let Ok(key) = PublicKey::from_hex(input) {
            return Ok(key);
        }
        let path = Path::new(input);
        let meta = std::fs::metadata(path).map_err(|_| bad())?;
        if meta.len() > MAX_KEY_FILE {
            return Err(bad());
        }
        let text = std::fs::read_to_string(path).map_err(|_| bad())?;
        let file: PublicKeyFile = serde_json::from_str(&text).map_err(|_| bad())?;
        if file.keytype != "ed25519" || file.scheme != "ed25519" || file.keyval.public.len() != 64 {
            return Err(bad());
        }
        Ok(PublicKey(
            hex::decode(&file.keyval.public).map_err(|_| bad())?,
        ))
    }

    /// A key given as 64 hex digits only, never a file name: what the admin API takes.
    pub fn from_hex(input: &str) -> Result<PublicKey, KeyError> {
        let bad = || KeyError::BadPublicKey(input.chars().take(80).collect());
        if input.len() != 64 || !input.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        Ok(PublicKey(
            hex::decode(input.to_ascii_lowercase()).map_err(|_| bad())?,
        ))
    }

    pub fn hex(&self) -> String {
        hex::encode(&self.0)
    }

    /// The key as TUF metadata represents it.
    pub fn tuf_key(&self) -> Key {
        Key::Ed25519 {
            keyval: Ed25519Key {
                public: self.0.clone().into(),
                _extra: Default::default(),
            },
            scheme: Ed25519Scheme::Ed25519,
            _extra: Default::default(),
        }
    }

    /// TUF key id as metadata holds it: sha256 of the key's canonical JSON.
    pub fn tuf_key_id(&self) -> Decoded<Hex> {
        // Serializing an ed25519 key object cannot fail: it is three fixed strings.
        self.tuf_key().key_id().expect("an ed25519 key serializes")
    }

    /// The key with its id, as an entry of a metadata `keys` map.
    pub fn tuf_entry(&self) -> (Decoded<Hex>, Key) {
        (self.tuf_key_id(), self.tuf_key())
    }

    /// TUF key id in hex, as pages, logs and the database show it.
    pub fn key_id(&self) -> String {
        hex::encode(self.tuf_key_id().as_ref())
    }

    /// The `.pub` file contents.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(&PublicKeyFile {
            keytype: "ed25519".into(),
            scheme: "ed25519".into(),
            keyval: KeyVal { public: self.hex() },
        })
        .expect("serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_round_trip_with_private_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.pem");
        let key = SigningKey::generate().unwrap();
        key.save_new(&path).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("-----BEGIN PRIVATE KEY-----"));
        let loaded = SigningKey::load(&path).unwrap();
        assert_eq!(loaded.public(), key.public());
        // tough computes the same key id from the signer's own view of the key.
        use tough::sign::Sign;
        let id = hex::encode(loaded.signer().tuf_key().key_id().unwrap().as_ref());
        assert_eq!(id, key.public().key_id());
        assert!(
            !format!("{loaded:?}").contains(&text[30..60]),
            "Debug never shows key material"
        );
    }

    #[test]
    fn never_overwrites_and_refuses_open_or_bogus_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.pem");
        SigningKey::generate().unwrap().save_new(&path).unwrap();
        let before = std::fs::read(&path).unwrap();
        assert!(matches!(
            SigningKey::generate().unwrap().save_new(&path),
            Err(KeyError::Exists { .. })
        ));
        assert_eq!(std::fs::read(&path).unwrap(), before);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert!(matches!(
                SigningKey::load(&path),
                Err(KeyError::TooOpen { .. })
            ));
        }
        let junk = dir.path().join("junk.pem");
        std::fs::write(
            &junk,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&junk, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        assert!(matches!(
            SigningKey::load(&junk),
            Err(KeyError::NotAKey { .. })
        ));
    }

    /// A test-only key made by `openssl genpkey -algorithm ED25519`.
    const OPENSSL_KEY: &str = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIM+iNfAmbPdyx00sTlQkptVbEVJ5v8/PVwnr2TDTt+Yq\n-----END PRIVATE KEY-----\n";
    const OPENSSL_PUBLIC: &str = "dda371681548f73615a620dada12833b99f75f7efa842eb724e75f15928f68c2";

    #[test]
    fn reads_keys_made_by_openssl() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("openssl.pem");
        std::fs::write(&path, OPENSSL_KEY).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        assert_eq!(
            SigningKey::load(&path).unwrap().public().hex(),
            OPENSSL_PUBLIC
        );
    }

    #[test]
    fn public_keys_parse_from_hex_or_pub_file() {
        let key = SigningKey::generate().unwrap().public();
        assert_eq!(PublicKey::parse(&key.hex()).unwrap(), key);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("k.pub");
        std::fs::write(&file, key.to_json()).unwrap();
        assert_eq!(PublicKey::parse(file.to_str().unwrap()).unwrap(), key);
        assert!(PublicKey::parse("abc").is_err());
        assert_eq!(key.key_id().len(), 64);
    }
}
