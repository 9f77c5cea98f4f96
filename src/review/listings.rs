//! Plugin listings: what a publisher writes about its plugin apart from its
//! definitions, and the listing drawn from the latest definition of a plugin published
//! without one.

use super::ReviewError;
use super::listing::{self, ListingFields};
use super::ops::{Actor, not_found};
use std::collections::BTreeMap;

use crate::catalog::Curation;
use crate::definition::Definition;
use crate::ids;
use crate::store::{LinkRow, ListingRow, Store};

/// A plugin's listing: as stored, or drawn from its latest published definition when
/// its publisher never wrote one (a plugin published without review).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub row: ListingRow,
    /// Whether the row is stored (false: drawn from the definition).
    pub stored: bool,
    /// Its latest listed version in the signed index, as written.
    pub latest_published: Option<String>,
}

/// A listing drawn from a published plugin's latest definition.
fn drawn(publisher: &str, name: &str, def: &Definition, created_at: i64) -> ListingRow {
    let meta = &def.manifest.metadata;
    let text = |v: &Option<crate::definition::Located<String>>| {
        v.as_ref().map(|v| v.value.clone()).unwrap_or_default()
    };
    let id = ids::plugin(publisher, name);
    let links = [
        ("homepage", "Homepage", &meta.urls.homepage),
        ("documentation", "Documentation", &meta.urls.documentation),
    ]
    .into_iter()
    .filter_map(|(kind, title, url)| {
        url.as_ref().map(|u| LinkRow {
            id: ids::link(&id, kind),
            title: title.to_owned(),
            url_name: kind.to_owned(),
            url: u.value.clone(),
        })
    })
    .collect();
    ListingRow {
        display_name: def.display_name().to_owned(),
        description: def.description().to_owned(),
        tags: def.tags().map(str::to_owned).collect(),
        repository_url: text(&meta.urls.repository),
        license: text(&meta.license),
        author_name: text(&meta.author),
        documentation_links: links,
        created_at,
        updated_at: created_at,
        id,
        publisher: publisher.to_owned(),
        name: name.to_owned(),
        ..Default::default()
    }
}

/// The listing of `publisher`/`name`: `stored` when it has a row (already read by the
/// caller), otherwise drawn from its latest published definition; `None` when it has
/// neither.
async fn with_plugin(
    store: &Store,
    publisher: &str,
    name: &str,
    stored: Option<ListingRow>,
) -> Result<Option<Listing>, ReviewError> {
    let plugin = store.plugin(publisher, name).await?;
    let latest_published = plugin.as_ref().and_then(|p| p.latest_version.clone());
    if let Some(row) = stored {
        return Ok(Some(Listing {
            row,
            stored: true,
            latest_published,
        }));
    }
    let (Some(plugin), Some(latest)) = (plugin, latest_published) else {
        return Ok(None);
    };
    let Some((_, def)) = store.definition(plugin.id, &latest).await? else {
        return Ok(None);
    };
    Ok(Some(Listing {
        row: drawn(publisher, name, &def, plugin.created_at),
        stored: false,
        latest_published: Some(latest),
    }))
}

/// Publisher and name of every plugin `actor` may see with a listing or a listed
/// version, by publisher and name, with the stored listing rows by the same key.
pub(super) async fn visible(
    store: &Store,
    actor: &Actor,
) -> Result<BTreeMap<(String, String), Option<ListingRow>>, ReviewError> {
    let mut out: BTreeMap<(String, String), Option<ListingRow>> = store
        .listed_names()
        .await?
        .into_iter()
        .filter(|(p, _)| actor.may_see(p))
        .map(|key| (key, None))
        .collect();
    for row in store.listings(actor.publisher()).await? {
        out.insert((row.publisher.clone(), row.name.clone()), Some(row));
    }
    Ok(out)
}

/// Every listing `actor` may see: its own (a publisher) or all (a reviewer), stored
/// or drawn from published plugins, by publisher and name.
pub async fn listings(store: &Store, actor: &Actor) -> Result<Vec<Listing>, ReviewError> {
    let mut out = Vec::new();
    for ((publisher, name), stored) in visible(store, actor).await? {
        if let Some(l) = with_plugin(store, &publisher, &name, stored).await? {
            out.push(l);
        }
    }
    Ok(out)
}

/// The listing `plugin_id` names, if `actor` may see it.
pub async fn listing(
    store: &Store,
    actor: &Actor,
    plugin_id: &str,
) -> Result<Listing, ReviewError> {
    let id = listing::uuid("plugin_id", plugin_id)?;
    let missing = || not_found(format!("plugin {id}"));
    if let Some(row) = store.listing(&id).await? {
        if !actor.may_see(&row.publisher) {
            return Err(missing());
        }
        let (publisher, name) = (row.publisher.clone(), row.name.clone());
        return with_plugin(store, &publisher, &name, Some(row))
            .await?
            .ok_or_else(missing);
    }
    // A plugin published without a listing: its id is a hash of its names.
    let Some((publisher, name)) = store
        .listed_by_id(&id)
        .await?
        .filter(|(p, _)| actor.may_see(p))
    else {
        return Err(missing());
    };
    with_plugin(store, &publisher, &name, None)
        .await?
        .ok_or_else(missing)
}

/// A new listing for `publisher`'s plugin `name`.
pub async fn create_listing(
    store: &Store,
    curation: &Curation,
    publisher: &str,
    name: &str,
    mut fields: ListingFields,
    now: i64,
) -> Result<Listing, ReviewError> {
    listing::check_name(name)?;
    let id = ids::plugin(publisher, name);
    fields.check(curation, &id)?;
    let row = row_of(&id, publisher, name, fields, now, now);
    if !store.create_listing(&row).await? {
        return Err(ReviewError::AlreadyExists(format!(
            "plugin {publisher}/{name} has a listing already (id {id}); change it with UpdatePlugin"
        )));
    }
    with_plugin(store, publisher, name, Some(row))
        .await?
        .ok_or_else(|| not_found(format!("plugin {id}")))
}

fn row_of(
    id: &str,
    publisher: &str,
    name: &str,
    f: ListingFields,
    created_at: i64,
    updated_at: i64,
) -> ListingRow {
    ListingRow {
        id: id.to_owned(),
        publisher: publisher.to_owned(),
        name: name.to_owned(),
        display_name: f.display_name,
        description_short: f.description_short,
        description: f.description,
        category_ids: f.category_ids,
        tags: f.tags,
        image: f.image,
        repository_url: f.repository_url,
        license: f.license,
        author_name: f.author_name,
        author_url: f.author_url,
        documentation_links: f
            .documentation_links
            .into_iter()
            .map(|l| LinkRow {
                id: l.id,
                title: l.title,
                url_name: l.url_name,
                url: l.url,
            })
            .collect(),
        features: f.features.into_iter().map(|f| (f.title, f.body)).collect(),
        created_at,
        updated_at,
    }
}

/// Replaces the listing's fields (a plugin published without one gets one).
pub async fn update_listing(
    store: &Store,
    curation: &Curation,
    publisher: &str,
    plugin_id: &str,
    mut fields: ListingFields,
    now: i64,
) -> Result<Listing, ReviewError> {
    let current = listing(store, &Actor::Publisher(publisher.to_owned()), plugin_id).await?;
    let ListingRow {
        ref id,
        ref name,
        created_at,
        ..
    } = current.row;
    fields.check(curation, id)?;
    let row = row_of(id, publisher, name, fields, created_at, now);
    let stored = if current.stored {
        store.update_listing(&row).await?
    } else {
        store.create_listing(&row).await?
    };
    if !stored {
        return Err(not_found(format!("plugin {id}")));
    }
    Ok(Listing {
        row,
        stored: true,
        latest_published: current.latest_published,
    })
}

/// Deletes a listing and its versions under review; a plugin with versions in the
/// signed index stays (they are immutable: yank them instead).
pub async fn delete_listing(
    store: &Store,
    publisher: &str,
    plugin_id: &str,
) -> Result<(), ReviewError> {
    let current = listing(store, &Actor::Publisher(publisher.to_owned()), plugin_id).await?;
    let name = &current.row.name;
    if let Some(plugin) = store.plugin(publisher, name).await?
        && !store.versions(plugin.id).await?.is_empty()
    {
        return Err(ReviewError::Published(format!(
            "plugin {publisher}/{name} has versions in the signed index, which are immutable; yank them instead (`marketplace yank`)"
        )));
    }
    store.delete_listing(&current.row.id).await?;
    Ok(())
}
