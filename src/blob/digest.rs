//! Content digests: `sha256:` and 64 lowercase hex digits, the only algorithm the
//! store keeps (the OCI image spec's canonical one; sha512 content is refused where
//! it enters, with this error).

use std::fmt;
use std::str::FromStr;

/// A validated `sha256:<64 lowercase hex>` digest.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    #[error("digest `{0}` has no algorithm (expected sha256:<64 hex digits>)")]
    NoAlgorithm(String),
    #[error("digest algorithm `{0}` is not supported (only sha256)")]
    Algorithm(String),
    #[error("digest `{0}` is not 64 lowercase hex digits after `sha256:`")]
    Hex(String),
}

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        use sha2::Digest as _;
        Digest::from_hash(&sha2::Sha256::digest(bytes))
    }

    pub(crate) fn from_hash(hash: &[u8]) -> Digest {
        Digest(format!("sha256:{}", hex::encode(hash)))
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Digest {
    type Err = DigestError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // What is echoed back in errors is cut short: digests arrive from the network.
        let shown = || s.chars().take(80).collect::<String>();
        let Some((algorithm, hex)) = s.split_once(':') else {
            return Err(DigestError::NoAlgorithm(shown()));
        };
        if algorithm != "sha256" {
            return Err(DigestError::Algorithm(algorithm.chars().take(32).collect()));
        }
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(DigestError::Hex(shown()));
        }
        Ok(Digest(s.to_owned()))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.0)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lowercase_sha256_with_64_digits_parses() {
        let good = format!("sha256:{}", "a1".repeat(32));
        assert_eq!(good.parse::<Digest>().unwrap().hex(), "a1".repeat(32));
        assert_eq!(Digest::of(b"").hex().len(), 64);
        assert_eq!(
            Digest::of(b"").as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let cases = [
            ("a1".repeat(32), "no algorithm"),
            (format!("sha512:{}", "a1".repeat(64)), "not supported"),
            (format!("sha256:{}", "A1".repeat(32)), "lowercase hex"),
            (format!("sha256:{}", "a1".repeat(31)), "lowercase hex"),
            (format!("sha256:{}/../x", "a1".repeat(32)), "lowercase hex"),
            ("sha256:".to_owned(), "lowercase hex"),
        ];
        for (input, why) in cases {
            let err = input.parse::<Digest>().unwrap_err().to_string();
            assert!(err.contains(why), "{input}: {err}");
        }
        // A hostile, very long value is not echoed whole.
        let long = format!("sha256:{}", "z".repeat(10_000));
        assert!(long.parse::<Digest>().unwrap_err().to_string().len() < 200);
    }
}
