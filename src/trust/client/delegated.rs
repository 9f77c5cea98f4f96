//! The publishers' part of a refresh: each publisher's role and hashed bins, verified
//! under the delegations that name them, and the targets they list. Every failure here
//! is the publisher's alone ([`super::refresh::Publisher::outcome`]), except a network
//! failure, which fails the refresh.

use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tough::schema::{DelegatedRole, Delegations, PathSet, Signed, Snapshot, Targets};

use super::refresh::{
    Client, Judged, Listed, PARALLEL_ROLES, Publisher, PublisherTargets, RoleFile, bad_signature,
};
use super::{ClientError, Failure};
use crate::trust::verify::owned_by;

impl Client<'_> {
    /// One publisher: its role, its bins if it has them, and the targets they list.
    pub(super) async fn publisher(
        &self,
        role: &DelegatedRole,
        delegations: &Delegations,
        snapshot: &Snapshot,
        consistent: bool,
    ) -> Result<Publisher, ClientError> {
        let name = role.name.clone();
        let outcome = self
            .publisher_targets(role, delegations, snapshot, consistent)
            .await?;
        Ok(Publisher { name, outcome })
    }

    async fn publisher_targets(
        &self,
        role: &DelegatedRole,
        delegations: &Delegations,
        snapshot: &Snapshot,
        consistent: bool,
    ) -> Judged<PublisherTargets> {
        let publisher = role.name.as_str();
        if !crate::definition::is_dns_label(publisher) {
            return Ok(Err(ClientError::new(
                Failure::InvalidMetadata,
                format!("`{publisher}` is not a publisher name"),
            )));
        }
        let top = match self
            .delegated(publisher, delegations, snapshot, consistent)
            .await?
        {
            Ok(top) => top,
            Err(e) => return Ok(Err(e)),
        };
        let mut out = PublisherTargets {
            expires_at: top.0.signed.expires.as_second(),
            expires_role: publisher.to_owned(),
            listed: Vec::new(),
            roles: vec![top.2],
        };
        if let Err(e) = list(publisher, None, &top.0, &top.1, &mut out.listed) {
            return Ok(Err(e));
        }
        let Some(bins) = top
            .0
            .signed
            .delegations
            .as_ref()
            .filter(|d| !d.roles.is_empty())
        else {
            return Ok(Ok(out));
        };
        if let Some(bad) = bins.roles.iter().find(|b| !is_bin_name(publisher, &b.name)) {
            return Ok(Err(ClientError::new(
                Failure::InvalidMetadata,
                format!(
                    "{publisher} delegates to `{}`, which is not one of its bins",
                    bad.name
                ),
            )));
        }
        let pending: Vec<_> = bins
            .roles
            .iter()
            .map(|bin| self.delegated(&bin.name, bins, snapshot, consistent))
            .collect();
        let loaded: Vec<Judged<(Signed<Targets>, String, RoleFile)>> =
            futures_util::stream::iter(pending)
                .buffered(PARALLEL_ROLES)
                .collect()
                .await;
        for (bin, judged) in bins.roles.iter().zip(loaded) {
            let (role, signers, file) = match judged? {
                Ok(found) => found,
                Err(e) => return Ok(Err(e)),
            };
            if role
                .signed
                .delegations
                .as_ref()
                .is_some_and(|d| !d.roles.is_empty())
            {
                return Ok(Err(ClientError::new(
                    Failure::InvalidMetadata,
                    format!("bin {} delegates further; bins may not", bin.name),
                )));
            }
            if role.signed.expires.as_second() < out.expires_at {
                out.expires_at = role.signed.expires.as_second();
                out.expires_role = bin.name.clone();
            }
            if let Err(e) = list(publisher, Some(bin), &role, &signers, &mut out.listed) {
                return Ok(Err(e));
            }
            out.roles.push(file);
        }
        Ok(Ok(out))
    }

    /// A delegated role verified under `delegations`: snapshot version, hash, length,
    /// signatures over the bytes as served, expiry. Returns it with its signers and the
    /// file as served.
    async fn delegated(
        &self,
        name: &str,
        delegations: &Delegations,
        snapshot: &Snapshot,
        consistent: bool,
    ) -> Judged<(Signed<Targets>, String, RoleFile)> {
        let (parsed, bytes, version) = match self
            .fetch_listed::<Targets>(name, snapshot, consistent, self.limits.targets)
            .await?
        {
            Ok(found) => found,
            Err(e) => return Ok(Err(e)),
        };
        let signers = match parsed.verify_delegated(delegations, name) {
            Ok(mut ids) => {
                ids.sort();
                ids.join(" ")
            }
            Err(e) => return Ok(Err(bad_signature(&e))),
        };
        let role = parsed.envelope.typed;
        if role.signed.version.get() != version {
            return Ok(Err(ClientError::new(
                Failure::InvalidMetadata,
                format!(
                    "{name} v{} is not the v{version} the snapshot lists",
                    role.signed.version
                ),
            )));
        }
        if let Err(e) = self.unexpired(name, role.signed.expires) {
            return Ok(Err(e));
        }
        let file = RoleFile {
            name: name.to_owned(),
            version,
            bytes,
        };
        Ok(Ok((role, signers, file)))
    }
}

/// The role's own targets, each under its publisher's path (and, in a bin, under the
/// bin's hash prefixes); anything else means the role breaks the index's rules.
fn list(
    publisher: &str,
    bin: Option<&DelegatedRole>,
    role: &Signed<Targets>,
    signers: &str,
    out: &mut Vec<Listed>,
) -> Result<(), ClientError> {
    let where_ = bin.map_or(publisher, |b| b.name.as_str());
    for (name, target) in &role.signed.targets {
        let raw = name.raw();
        if !owned_by(publisher, raw) {
            return Err(ClientError::new(
                Failure::InvalidMetadata,
                format!("{where_} lists {raw}, outside {publisher}/NAME/FILE"),
            ));
        }
        if let Some(bin) = bin
            && !in_bin(bin, raw)
        {
            return Err(ClientError::new(
                Failure::InvalidMetadata,
                format!(
                    "{} lists {raw}, whose path hash it is not delegated",
                    bin.name
                ),
            ));
        }
        out.push(Listed {
            name: raw.to_owned(),
            target: target.clone(),
            signers: signers.to_owned(),
        });
    }
    Ok(())
}

fn is_bin_name(publisher: &str, name: &str) -> bool {
    name.strip_prefix(publisher)
        .and_then(|r| r.strip_prefix('.'))
        .is_some_and(|p| {
            !p.is_empty()
                && p.len() <= 8
                && p.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        })
}

/// Whether the bin's delegation covers `target` by its path hash (as python-tuf and
/// tough match `path_hash_prefixes`).
fn in_bin(bin: &DelegatedRole, target: &str) -> bool {
    let digest = hex::encode(Sha256::digest(target.as_bytes()));
    match &bin.paths {
        PathSet::PathHashPrefixes(prefixes) => {
            prefixes.iter().any(|p| digest.starts_with(p.value()))
        }
        PathSet::Paths(_) => false,
    }
}
