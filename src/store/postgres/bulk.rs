//! PostgreSQL's part of writing plugins new to the store in bulk (`store::bulk`): the
//! plugin rows with their summary and search document.

use std::collections::HashMap;

use sqlx::{Postgres, QueryBuilder};

use crate::store::StoreError;
use crate::store::upstream::NewPlugin;

crate::store::bulk::bulk_store!(Postgres, insert_plugins);

/// One chunk's plugin rows with their search documents; their ids by (publisher id,
/// name).
async fn insert_plugins(
    tx: &mut sqlx::Transaction<'_, Postgres>,
    chunk: &[NewPlugin<'_>],
    publishers: &HashMap<&str, i64>,
    now: i64,
) -> Result<HashMap<(i64, String), i64>, StoreError> {
    let mut q = QueryBuilder::<Postgres>::new(concat!(
        "INSERT INTO plugins (",
        crate::store::bulk::plugin_columns!(),
        ", search_document) "
    ));
    q.push_values(chunk, |mut b, p| {
        crate::store::bulk::plugin_row!(b, p, publishers, now);
        let d = p.latest;
        // The search document as `write_search_document` writes it, weighted name A,
        // title B, tags C, description D.
        let words = |text: &str| crate::store::search_tokens(&[text.to_owned()]);
        b.push("setweight(array_to_tsvector(")
            .push_bind_unseparated(words(p.name))
            .push_unseparated("::text[]), 'A') || setweight(array_to_tsvector(")
            .push_bind_unseparated(words(d.display_name()))
            .push_unseparated("::text[]), 'B') || setweight(array_to_tsvector(")
            .push_bind_unseparated(words(&d.tags().collect::<Vec<_>>().join(" ")))
            .push_unseparated("::text[]), 'C') || setweight(array_to_tsvector(")
            .push_bind_unseparated(words(d.description()))
            .push_unseparated("::text[]), 'D')");
    });
    q.push(" RETURNING id, publisher_id, name");
    let rows: Vec<(i64, i64, String)> = q.build_query_as().fetch_all(&mut **tx).await?;
    let ids: HashMap<(i64, String), i64> = rows
        .into_iter()
        .map(|(id, publisher, name)| ((publisher, name), id))
        .collect();
    Ok(ids)
}
