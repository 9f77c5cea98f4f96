//! Publishers: register with keys, list, rotate keys, cosign keys, tokens, suspend and
//! resume. Keys arrive as 64 hex digits and cosign keys as PEM text (the CLI reads its
//! files first), so nothing here reads a path a client named.

use serde::{Deserialize, Serialize};

use super::{AdminError, Operator};
use crate::store::Store;
use crate::trust::PublicKey;
use crate::trust::server::publishers::{self, Delegation, new_token, token_hash};
use crate::trust::server::state::OnlineKeys;

/// A publisher's keys as a request gives them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Keys {
    /// Ed25519 public keys, 64 hex digits each.
    #[schema(schema_with = hex_keys)]
    pub public_keys: Vec<String>,
    /// Signatures required on the publisher's metadata.
    #[serde(default = "one")]
    #[schema(minimum = 1)]
    pub threshold: u64,
    /// Cosign public keys (PEM) its images must be signed by; `None` leaves those
    /// registered as they are.
    #[serde(default)]
    pub cosign_keys: Option<Vec<String>>,
}

fn one() -> u64 {
    1
}

/// `public_keys` as the description gives it: 64 hex digits each.
fn hex_keys() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};
    ArrayBuilder::new()
        .min_items(Some(1))
        .items(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^[0-9a-fA-F]{64}$")),
        )
        .build()
}

/// A publisher's, reviewer's or operator's name: a DNS-1123 label.
pub const NAME_PATTERN: &str = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$";

// `NewPublisher` flattens `Keys`, which refuses unknown fields: the derive would write
// an `allOf` no object satisfies, so its schema is `Keys`' object with `name` added.
impl utoipa::PartialSchema for NewPublisher {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::RefOr;
        use utoipa::openapi::schema::Schema;
        let RefOr::T(Schema::Object(mut o)) = <Keys as utoipa::PartialSchema>::schema() else {
            unreachable!("Keys is an object")
        };
        let name = utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some(NAME_PATTERN))
            .max_length(Some(63));
        o.properties.insert("name".to_owned(), name.into());
        o.required.insert(0, "name".to_owned());
        o.description = Some("A publisher to register: its name and keys.".to_owned());
        RefOr::T(Schema::Object(o))
    }
}

impl utoipa::ToSchema for NewPublisher {}

/// `POST /api/v1/admin/publishers`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewPublisher {
    pub name: String,
    #[serde(flatten)]
    pub keys: Keys,
}

/// A publisher registered, with its first token (shown once).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = AddedPublisher)]
pub struct Added {
    pub name: String,
    pub threshold: u64,
    pub key_ids: Vec<String>,
    pub cosign_key_ids: Vec<String>,
    pub token: String,
}

/// A publisher's keys replaced.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Rotated {
    pub name: String,
    pub threshold: u64,
    pub key_ids: Vec<String>,
    pub cosign_key_ids: Vec<String>,
    /// The index delegates to it already: it names the old keys until the publisher
    /// re-signs.
    pub delegated: bool,
}

/// The cosign keys a publisher's images must be signed by (none: no signature needed).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CosignKeys {
    pub name: String,
    pub cosign_key_ids: Vec<String>,
}

/// A new token (shown once).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NewToken {
    pub name: String,
    pub token: String,
}

/// Tokens revoked.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Revoked {
    pub name: String,
    pub revoked: u64,
}

/// A publisher suspended or resumed, and the `targets.json` version that says so.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Suspension {
    pub name: String,
    pub suspended: bool,
    pub targets_version: u64,
}

/// How the signed index stands with a publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InIndex {
    /// Not delegated yet: it enters with the first publish.
    Missing,
    /// Delegated to exactly the registered keys.
    Current,
    /// Delegated to older keys until the publisher re-signs.
    Stale,
    /// Suspended: not delegated.
    Suspended,
}

/// The role of a publisher's that expires first.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EarliestRole {
    pub role: String,
    pub expires_at: i64,
    pub expired: bool,
    pub expiring_soon: bool,
}

/// One publisher as the list shows it.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PublisherStatus {
    pub name: String,
    pub threshold: u64,
    pub key_ids: Vec<String>,
    pub active_tokens: i64,
    pub created_at: i64,
    pub suspended_at: Option<i64>,
    /// The upstream marketplace it is followed from; `None` when registered here.
    pub origin: Option<String>,
    pub index: InIndex,
    pub earliest_role: Option<EarliestRole>,
}

fn invalid(field: impl Into<String>, reason: impl std::fmt::Display) -> AdminError {
    AdminError::Invalid {
        field: field.into(),
        reason: reason.to_string(),
    }
}

/// Cosign keys as (id, PEM).
type Cosign = Vec<(String, String)>;

/// The keys of `k`, each checked; the cosign keys as (id, PEM).
fn parse(k: &Keys) -> Result<(Vec<PublicKey>, Option<Cosign>), AdminError> {
    if k.public_keys.is_empty() {
        return Err(invalid("public_keys", "give at least one key"));
    }
    let keys = k
        .public_keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            PublicKey::from_hex(key).map_err(|_| {
                invalid(
                    format!("public_keys[{i}]"),
                    "must be an ed25519 public key as 64 hex digits",
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let cosign = k.cosign_keys.as_deref().map(parse_cosign).transpose()?;
    Ok((keys, cosign))
}

/// Cosign public keys (PEM) as (id, PEM), each checked.
fn parse_cosign(pems: &[String]) -> Result<Cosign, AdminError> {
    pems.iter()
        .enumerate()
        .map(|(i, pem)| {
            crate::mirror::signature::CosignKey::parse(pem)
                .map(|c| (c.id, c.pem))
                .map_err(|why| invalid(format!("cosign_keys[{i}]"), why))
        })
        .collect()
}

fn ids(keys: &[PublicKey]) -> Vec<String> {
    keys.iter().map(PublicKey::key_id).collect()
}

fn cosign_ids(cosign: &[(String, String)]) -> Vec<String> {
    cosign.iter().map(|(id, _)| id.clone()).collect()
}

/// Refuses to change the keys or tokens of a publisher followed from an upstream: they
/// are the upstream's, and the next round would bring the upstream's keys back.
async fn local_only(store: &Store, name: &str) -> Result<(), AdminError> {
    match store.publisher(name).await? {
        None => Err(AdminError::UnknownPublisher(name.to_owned())),
        Some(p) => match p.origin {
            Some(origin) => Err(AdminError::Followed {
                name: name.to_owned(),
                origin,
            }),
            None => Ok(()),
        },
    }
}

/// Registers a publisher with its keys; its first token is in the answer.
pub async fn add(
    store: &Store,
    who: &Operator,
    new: &NewPublisher,
    now: i64,
) -> Result<Added, AdminError> {
    let (keys, cosign) = parse(&new.keys)?;
    let token = publishers::add(store, &new.name, &keys, new.keys.threshold, now).await?;
    let cosign = cosign.unwrap_or_default();
    if !cosign.is_empty() {
        store.set_cosign_keys(&new.name, &cosign, now).await?;
    }
    tracing::info!(operator = %who, publisher = %new.name, keys = ?ids(&keys), threshold = new.keys.threshold, "publisher added");
    Ok(Added {
        name: new.name.clone(),
        threshold: new.keys.threshold,
        key_ids: ids(&keys),
        cosign_key_ids: cosign_ids(&cosign),
        token,
    })
}

/// Every publisher with its keys, tokens and how the index stands with it.
pub async fn list(store: &Store, now: i64) -> Result<Vec<PublisherStatus>, AdminError> {
    let targets = crate::trust::server::state::current(store)
        .await?
        .map(|s| s.targets.signed.signed);
    let roles = crate::trust::server::state::publisher_roles(store).await?;
    let earliest = crate::trust::expiry::earliest_by_publisher(&roles);
    let mut out = Vec::new();
    for p in store.publisher_list().await? {
        // Stored keys are hex (checked when registered): read as hex only, once.
        let parsed: Vec<Option<PublicKey>> = p
            .public_keys
            .iter()
            .map(|k| PublicKey::from_hex(k).ok())
            .collect();
        let key_ids = parsed
            .iter()
            .map(|k| {
                k.as_ref()
                    .map_or_else(|| "<invalid key>".into(), PublicKey::key_id)
            })
            .collect();
        let keys: Vec<PublicKey> = parsed.into_iter().flatten().collect();
        let index = match (
            p.suspended_at,
            publishers::delegation(targets.as_ref(), &p.name, &keys, p.threshold),
        ) {
            (Some(_), _) => InIndex::Suspended,
            (None, Delegation::Missing) => InIndex::Missing,
            (None, Delegation::Current) => InIndex::Current,
            (None, Delegation::Stale) => InIndex::Stale,
        };
        out.push(PublisherStatus {
            key_ids,
            earliest_role: earliest.get(p.name.as_str()).map(|r| EarliestRole {
                role: r.role.clone(),
                expires_at: r.expires_at,
                expired: r.expired(now),
                expiring_soon: r.expiring_soon(now),
            }),
            name: p.name,
            threshold: p.threshold,
            active_tokens: p.active_tokens,
            created_at: p.created_at,
            suspended_at: p.suspended_at,
            origin: p.origin,
            index,
        });
    }
    Ok(out)
}

/// Replaces a publisher's keys (and its cosign keys when given).
pub async fn rotate_key(
    store: &Store,
    who: &Operator,
    name: &str,
    k: &Keys,
    now: i64,
) -> Result<Rotated, AdminError> {
    local_only(store, name).await?;
    let (keys, cosign) = parse(k)?;
    let delegated = publishers::rotate(store, name, &keys, k.threshold).await?;
    let cosign = match cosign {
        Some(c) => {
            store.set_cosign_keys(name, &c, now).await?;
            cosign_ids(&c)
        }
        None => Vec::new(),
    };
    tracing::info!(operator = %who, publisher = %name, keys = ?ids(&keys), threshold = k.threshold, "publisher keys rotated");
    Ok(Rotated {
        name: name.to_owned(),
        threshold: k.threshold,
        key_ids: ids(&keys),
        cosign_key_ids: cosign,
        delegated,
    })
}

/// Sets the cosign keys a publisher's images must be signed by (none: no signature
/// needed), for a publisher followed from an upstream too.
pub async fn set_cosign_keys(
    store: &Store,
    who: &Operator,
    name: &str,
    pems: &[String],
    now: i64,
) -> Result<CosignKeys, AdminError> {
    if store.publisher(name).await?.is_none() {
        return Err(AdminError::UnknownPublisher(name.to_owned()));
    }
    let cosign = parse_cosign(pems)?;
    store.set_cosign_keys(name, &cosign, now).await?;
    tracing::info!(operator = %who, publisher = %name, cosign_keys = ?cosign_ids(&cosign), "publisher cosign keys set");
    Ok(CosignKeys {
        name: name.to_owned(),
        cosign_key_ids: cosign_ids(&cosign),
    })
}

/// An additional token for a publisher (shown once).
pub async fn new_token_for(
    store: &Store,
    who: &Operator,
    name: &str,
    now: i64,
) -> Result<NewToken, AdminError> {
    local_only(store, name).await?;
    let token = new_token();
    store.add_token(name, &token_hash(&token), now).await?;
    tracing::info!(operator = %who, publisher = %name, "publisher token issued");
    Ok(NewToken {
        name: name.to_owned(),
        token,
    })
}

/// Revokes every token of a publisher.
pub async fn revoke_tokens(
    store: &Store,
    who: &Operator,
    name: &str,
    now: i64,
) -> Result<Revoked, AdminError> {
    if store.publisher(name).await?.is_none() {
        return Err(AdminError::UnknownPublisher(name.to_owned()));
    }
    let revoked = store.revoke_tokens(name, now).await?;
    tracing::info!(operator = %who, publisher = %name, revoked, "publisher tokens revoked");
    Ok(Revoked {
        name: name.to_owned(),
        revoked,
    })
}

/// Suspends (`suspend`) or resumes a publisher: its delegation leaves or returns to
/// `targets.json`, signed with the online targets key.
pub async fn set_suspended(
    store: &Store,
    keys: &OnlineKeys,
    who: &Operator,
    name: &str,
    suspend: bool,
    now: i64,
) -> Result<Suspension, AdminError> {
    let targets_version = if suspend {
        crate::trust::server::suspend::suspend(store, keys, name, now).await?
    } else {
        crate::trust::server::suspend::resume(store, keys, name, now).await?
    };
    tracing::info!(operator = %who, publisher = %name, suspended = suspend, targets_version, "publisher suspension changed");
    Ok(Suspension {
        name: name.to_owned(),
        suspended: suspend,
        targets_version,
    })
}
