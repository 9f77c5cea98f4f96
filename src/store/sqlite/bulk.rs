//! SQLite's part of writing plugins new to the store in bulk (`store::bulk`): the plugin
//! rows with their summary, and their FTS5 search rows.

use std::collections::HashMap;

use sqlx::{QueryBuilder, Sqlite};

use crate::store::StoreError;
use crate::store::upstream::NewPlugin;

crate::store::bulk::bulk_store!(Sqlite, insert_plugins);

/// One chunk's plugin rows and search rows; their ids by (publisher id, name).
async fn insert_plugins(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    chunk: &[NewPlugin<'_>],
    publishers: &HashMap<&str, i64>,
    now: i64,
) -> Result<HashMap<(i64, String), i64>, StoreError> {
    let mut q = QueryBuilder::<Sqlite>::new(concat!(
        "INSERT INTO plugins (",
        crate::store::bulk::plugin_columns!(),
        ") "
    ));
    q.push_values(chunk, |mut b, p| {
        crate::store::bulk::plugin_row!(b, p, publishers, now);
    });
    q.push(" RETURNING id, publisher_id, name");
    let rows: Vec<(i64, i64, String)> = q.build_query_as().fetch_all(&mut **tx).await?;
    let ids: HashMap<(i64, String), i64> = rows
        .into_iter()
        .map(|(id, publisher, name)| ((publisher, name), id))
        .collect();
    let id_of = |p: &NewPlugin<'_>| ids[&(publishers[p.publisher], p.name.to_owned())];

    let mut q = QueryBuilder::<Sqlite>::new(
        "INSERT INTO plugin_search (rowid, name, display_name, description, tags) ",
    );
    q.push_values(chunk, |mut b, p| {
        let d = p.latest;
        b.push_bind(id_of(p))
            .push_bind(d.name())
            .push_bind(d.display_name())
            .push_bind(d.description())
            .push_bind(d.tags().collect::<Vec<_>>().join(" "));
    });
    q.build().execute(&mut **tx).await?;
    Ok(ids)
}
