//! The image signature policy: cosign signatures checked offline against public keys a
//! publisher registered with the operator (key-based; no Fulcio, no Rekor, no network).
//!
//! A cosign signature is a manifest tagged `sha256-<hex>.sig` whose layers are
//! "simple signing" payloads, each with its signature (base64) in the annotation
//! `dev.cosignproject.cosign/signature`. A payload vouches for an image when its
//! signature verifies with a registered key over the payload's exact bytes, and the
//! payload names the pinned digest (`critical.image.docker-manifest-digest`).
//! `sigstore` does the cryptography (ECDSA P-256/384/521, RSA, Ed25519 keys as cosign
//! writes them); the payload is read only after its signature verified.

use sha2::Digest as _;
use sigstore::crypto::{CosignVerificationKey, Signature};

use crate::blob::Digest;

pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The largest payload read.
pub const MAX_PAYLOAD_BYTES: u64 = 256 * 1024;

/// A registered cosign public key.
#[derive(Clone)]
pub struct CosignKey {
    /// Hex sha256 of the key's DER SubjectPublicKeyInfo (what `openssl pkey -pubin
    /// -outform DER | sha256sum` prints).
    pub id: String,
    pub pem: String,
}

impl std::fmt::Debug for CosignKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CosignKey({})", self.id)
    }
}

impl CosignKey {
    /// A PEM `PUBLIC KEY` as `cosign generate-key-pair` or `openssl pkey -pubout`
    /// writes it; anything else is refused with the reason.
    pub fn parse(pem_text: &str) -> Result<CosignKey, String> {
        let block = pem::parse(pem_text).map_err(|e| format!("not PEM: {e}"))?;
        if block.tag() != "PUBLIC KEY" {
            return Err(format!(
                "a `{}` PEM block; a cosign public key is a `PUBLIC KEY` block (never give the private key)",
                block.tag()
            ));
        }
        CosignVerificationKey::try_from_pem(pem_text.as_bytes())
            .map_err(|e| format!("not a key cosign can verify with: {e}"))?;
        Ok(CosignKey {
            id: hex::encode(sha2::Sha256::digest(block.contents())),
            pem: pem::encode(&block),
        })
    }

    /// The first 16 hex digits, for pages.
    pub fn short(id: &str) -> &str {
        &id[..id.len().min(16)]
    }
}

/// Whether `signature` (base64) over `payload` verifies with one of `keys` and the
/// payload vouches for `pinned`; the key's id, or why not.
pub fn verify(
    keys: &[CosignKey],
    payload: &[u8],
    signature: &str,
    pinned: &Digest,
) -> Result<String, String> {
    let signed_by = keys.iter().find(|k| {
        CosignVerificationKey::try_from_pem(k.pem.as_bytes()).is_ok_and(|key| {
            key.verify_signature(
                Signature::Base64Encoded(signature.trim().as_bytes()),
                payload,
            )
            .is_ok()
        })
    });
    let Some(key) = signed_by else {
        return Err("its signature does not verify with any registered key".into());
    };
    let v: serde_json::Value = serde_json::from_slice(payload)
        .map_err(|e| format!("the signed payload is not JSON: {e}"))?;
    if v.pointer("/critical/type").and_then(|t| t.as_str())
        != Some("cosign container image signature")
    {
        return Err("the signed payload is not a cosign container image signature".into());
    }
    match v
        .pointer("/critical/image/docker-manifest-digest")
        .and_then(|d| d.as_str())
    {
        Some(d) if d == pinned.as_str() => Ok(key.id.clone()),
        Some(d) => Err(format!("it signs {d}, not the pinned {pinned}")),
        None => Err("the signed payload names no image digest".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_a_public_key_is_refused() {
        let private = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n";
        assert!(
            CosignKey::parse(private)
                .unwrap_err()
                .contains("never give the private key")
        );
        assert!(CosignKey::parse("hello").unwrap_err().contains("not PEM"));
        let junk = "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n";
        assert!(
            CosignKey::parse(junk)
                .unwrap_err()
                .contains("not a key cosign can verify with")
        );
    }
}
