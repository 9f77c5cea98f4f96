//! The catalog cache: listings, counts and facets served from it follow every write at
//! once (through the same store, through a second store on the same database as another
//! process would, and through the real CLI while the real server runs), and its memory
//! stays within its budget under varied queries while answering exactly as an uncached
//! store does.

mod common;

use common::backends::{Backend, Open};
use common::publishing::{Client, definition, marketplace, setup_with};
use common::{NOW, Server, output_text, with_version};
use marketplace::catalog::builtin;
use marketplace::store::{Facets, PluginQuery, Sort, Store};

fn search(words: &[&str]) -> PluginQuery {
    PluginQuery {
        terms: words.iter().map(|w| w.to_string()).collect(),
        ..Default::default()
    }
}

fn tagged(tag: &str) -> PluginQuery {
    PluginQuery {
        tag: Some(tag.to_owned()),
        ..Default::default()
    }
}

/// What a listing shows: (publisher, name, version) of each item, and the total.
async fn listing(store: &Store, q: &PluginQuery) -> (Vec<(String, String, String)>, i64) {
    let page = store.list_plugins(q).await.unwrap();
    let items = page
        .items
        .into_iter()
        .map(|p| (p.publisher, p.name, p.latest_version))
        .collect();
    (items, page.total)
}

fn tag_count(f: &Facets, tag: &str) -> Option<i64> {
    f.tags.iter().find(|(t, _)| t == tag).map(|(_, n)| *n)
}

fn has_publisher(f: &Facets, name: &str) -> bool {
    f.publishers.iter().any(|p| p == name)
}

#[tokio::test]
async fn writes_from_this_store_and_another_on_the_same_file_show_at_once() {
    writes_from_another_store_show_at_once(Backend::sqlite().await).await
}

#[tokio::test]
async fn writes_from_this_store_and_another_on_the_same_database_show_at_once_on_postgres() {
    writes_from_another_store_show_at_once(Backend::postgres().await).await
}

async fn writes_from_another_store_show_at_once(backend: Backend<Store>) {
    let server = backend.store.clone();
    // A second store on the same database has its own pool and cache: another process.
    let other = <Store as Open>::open(&backend.db).await;
    builtin::load(&server, NOW).await.unwrap();
    let gateway = with_version("gateway", "9.0.0");
    let tag = gateway.tags().next().expect("gateway has a tag").to_owned();

    // Warm every kind of cached answer, twice, so the second read is a cache hit.
    let queries = [PluginQuery::default(), search(&["gateway"]), tagged(&tag)];
    let mut before = Vec::new();
    for _ in 0..2 {
        before.clear();
        for q in &queries {
            before.push(listing(&server, q).await);
        }
    }
    let facets = server.facets().await.unwrap();
    // Plugins found by stable id, through the same per-generation index.
    let gateway_id = marketplace::ids::plugin("acme", "gateway");
    let by_id = async |store: &Store| store.listed_by_id(&gateway_id).await.unwrap();
    // The plugin with its latest definition, as catalog.v1 GetPlugin reads it: the
    // listed version and the definition's version, which must agree.
    let detail = async |store: &Store| {
        let generation = store.catalog_generation().await.unwrap();
        let d = store
            .listed_detail(generation, &gateway_id)
            .await
            .unwrap()?;
        assert_eq!(d.plugin.latest_version, d.definition.version.to_string());
        Some(d.plugin.latest_version.clone())
    };
    let some_builtin = server.listed_names().await.unwrap()[0].clone();
    assert_eq!(
        server
            .listed_by_id(&marketplace::ids::plugin(&some_builtin.0, &some_builtin.1))
            .await
            .unwrap(),
        Some(some_builtin.clone())
    );
    assert_eq!(by_id(&server).await, None);
    assert_eq!(detail(&server).await, None);
    assert!(
        server.cache_usage().entries >= 6,
        "pages and ranked lists cached"
    );
    assert!(!has_publisher(&facets, "acme"));

    // Another process publishes acme/gateway: every listing, count and facet shows it.
    other
        .insert_version("acme", &gateway, NOW + 1)
        .await
        .unwrap();
    for (q, (items, total)) in queries.iter().zip(&before) {
        let (now, now_total) = listing(&server, q).await;
        assert_eq!(now_total, total + 1, "{q:?}");
        assert!(
            now.iter().any(|(p, n, _)| p == "acme" && n == "gateway"),
            "{q:?}: {now:?} (was {items:?})"
        );
    }
    let after = server.facets().await.unwrap();
    assert!(has_publisher(&after, "acme"));
    let acme = Some(("acme".to_owned(), "gateway".to_owned()));
    assert_eq!(by_id(&server).await, acme);
    assert_eq!(detail(&server).await.as_deref(), Some("9.0.0"));
    // Asked again at the same generation, it comes from the cache: the same value.
    let generation = server.catalog_generation().await.unwrap();
    let (a, b) = (
        server
            .listed_detail(generation, &gateway_id)
            .await
            .unwrap()
            .unwrap(),
        server
            .listed_detail(generation, &gateway_id)
            .await
            .unwrap()
            .unwrap(),
    );
    assert!(std::sync::Arc::ptr_eq(&a, &b));
    assert_eq!(
        tag_count(&after, &tag),
        tag_count(&facets, &tag).map(|n| n + 1)
    );

    // This process publishes a newer version: the listing moves to it.
    server
        .publish(
            "acme",
            &[with_version("gateway", "9.1.0")],
            &[],
            &[],
            NOW + 2,
        )
        .await
        .unwrap();
    let acme_gateway = |items: &[(String, String, String)]| {
        items
            .iter()
            .find(|(p, n, _)| p == "acme" && n == "gateway")
            .map(|(_, _, v)| v.clone())
    };
    let (items, _) = listing(&server, &search(&["gateway"])).await;
    assert_eq!(acme_gateway(&items).as_deref(), Some("9.1.0"));
    assert_eq!(detail(&server).await.as_deref(), Some("9.1.0"));
    assert_eq!(detail(&other).await.as_deref(), Some("9.1.0"));

    // Another process yanks it: the listing falls back to 9.0.0.
    let newest = with_version("gateway", "9.1.0").hash;
    other.yank("acme", &[newest], &[], NOW + 3).await.unwrap();
    let (items, _) = listing(&server, &search(&["gateway"])).await;
    assert_eq!(acme_gateway(&items).as_deref(), Some("9.0.0"));
    assert_eq!(detail(&server).await.as_deref(), Some("9.0.0"));

    // Another process suspends acme: it leaves listings, counts and facets.
    other
        .suspend_publisher("acme", "{}", &[], NOW + 4)
        .await
        .unwrap();
    for (q, (items, total)) in queries.iter().zip(&before) {
        assert_eq!(listing(&server, q).await, (items.clone(), *total), "{q:?}");
    }
    let suspended = server.facets().await.unwrap();
    assert!(!has_publisher(&suspended, "acme"));
    assert_eq!(by_id(&server).await, None);
    assert_eq!(detail(&server).await, None);
    assert_eq!(tag_count(&suspended, &tag), tag_count(&facets, &tag));

    // This process resumes it; the other process's cache, warmed while acme was
    // suspended, sees that too.
    assert_eq!(listing(&other, &queries[1]).await, before[1]);
    assert_eq!(by_id(&other).await, None);
    server.resume_publisher("acme", &[]).await.unwrap();
    let (items, total) = listing(&other, &queries[1]).await;
    assert_eq!(total, before[1].1 + 1);
    assert!(acme_gateway(&items).is_some());
    assert!(has_publisher(&other.facets().await.unwrap(), "acme"));
    assert_eq!(by_id(&other).await, acme);
    assert_eq!(detail(&other).await.as_deref(), Some("9.0.0"));

    // Yanking the last listed version unlists the plugin everywhere.
    other
        .yank("acme", std::slice::from_ref(&gateway.hash), &[], NOW + 5)
        .await
        .unwrap();
    for (q, (items, total)) in queries.iter().zip(&before) {
        assert_eq!(listing(&server, q).await, (items.clone(), *total), "{q:?}");
    }
    assert_eq!(
        tag_count(&server.facets().await.unwrap(), &tag),
        tag_count(&facets, &tag)
    );
    assert_eq!(by_id(&server).await, None);
    assert_eq!(detail(&server).await, None);
}

#[tokio::test]
async fn varied_queries_stay_within_the_budget_and_answer_as_without_a_cache() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("catalog.db");
    let budget = 48 * 1024;
    let cached = Store::open(&path).await.unwrap().with_cache_budget(budget);
    // A budget of zero keeps nothing: every answer is read from the database.
    let uncached = Store::open(&path).await.unwrap().with_cache_budget(0);
    builtin::load(&cached, NOW).await.unwrap();
    let names = ["gateway", "storage", "backup", "observability"];
    for i in 0..40 {
        let def = definition(names[i % names.len()], &format!("p{i:02}-relay"), "1.0.0");
        cached
            .insert_version(&format!("pub{}", i % 5), &def, NOW + i as i64)
            .await
            .unwrap();
    }
    let words = [
        "", "relay", "p1", "gate", "stor", "back", "obs", "zzz", "%%", "a b",
    ];
    let tags = [None, Some("storage"), Some("networking"), Some("nope")];
    let sorts = [Sort::Relevance, Sort::Name, Sort::Updated];
    let queries: Vec<PluginQuery> = (0..300usize)
        .map(|i| PluginQuery {
            terms: words[i % words.len()]
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
            tag: tags[(i / 10) % tags.len()].map(str::to_owned),
            publisher: (i % 7 == 0).then(|| format!("pub{}", i % 5)),
            no_internet: i % 11 == 0,
            sort: sorts[(i / 3) % sorts.len()],
            page: 1 + (i % 4) as u32,
            per_page: [1, 5, 24, 100][(i / 4) % 4],
            ..Default::default()
        })
        .collect();
    let mut peak = 0;
    let mut check = async |q: &PluginQuery| {
        assert_eq!(
            listing(&cached, q).await,
            listing(&uncached, q).await,
            "{q:?}"
        );
        let usage = cached.cache_usage();
        assert!(usage.bytes <= budget, "{usage:?} after {q:?}");
        peak = peak.max(usage.bytes);
    };
    for q in &queries {
        check(q).await;
    }
    // A write in between: the answers agree right after it, the most recently cached
    // first.
    uncached
        .suspend_publisher("pub3", "{}", &[], NOW + 100)
        .await
        .unwrap();
    for q in queries.iter().rev() {
        check(q).await;
    }
    assert!(peak > budget / 2, "the budget was reached ({peak} bytes)");
    assert_eq!(uncached.cache_usage().entries, 0);
}

#[tokio::test]
async fn pages_cut_one_ranking_in_the_order_asked_for() {
    let store = Store::open_in_memory().await.unwrap();
    builtin::load(&store, NOW).await.unwrap();
    let names = ["gateway", "storage", "backup", "observability"];
    for i in 0..30 {
        // Names and update times in different orders.
        let def = definition(names[i % 4], &format!("relay-{:02}", (i * 7) % 30), "1.0.0");
        store
            .insert_version(&format!("pub{}", i % 3), &def, NOW + i as i64)
            .await
            .unwrap();
    }
    for sort in [Sort::Relevance, Sort::Name, Sort::Updated] {
        for terms in [vec![], vec!["relay".to_owned()]] {
            let q = |page, per_page| PluginQuery {
                terms: terms.clone(),
                sort,
                page,
                per_page,
                ..Default::default()
            };
            let all = store.list_plugins(&q(1, 100)).await.unwrap();
            let mut paged = Vec::new();
            for page in 1..=8 {
                let p = store.list_plugins(&q(page, 5)).await.unwrap();
                assert_eq!(p.total, all.total);
                paged.extend(p.items);
            }
            let key = |p: &marketplace::store::PluginSummary| (p.publisher.clone(), p.name.clone());
            assert_eq!(
                paged.iter().map(key).collect::<Vec<_>>(),
                all.items.iter().map(key).collect::<Vec<_>>(),
                "{sort:?} {terms:?}: pages of 5 are the listing of 100 cut up"
            );
            match sort {
                Sort::Updated => assert!(
                    all.items
                        .windows(2)
                        .all(|w| w[0].updated_at >= w[1].updated_at),
                    "newest first"
                ),
                Sort::Name => assert!(
                    all.items
                        .windows(2)
                        .all(|w| (&w[0].name, &w[0].publisher) <= (&w[1].name, &w[1].publisher)),
                    "by name, then publisher"
                ),
                Sort::Relevance => {}
            }
        }
    }
    // Relevance: the plugin named exactly as searched comes first.
    let exact = store.list_plugins(&search(&["relay-17"])).await.unwrap();
    assert_eq!(exact.items[0].name, "relay-17");
}

/// The real server caches; the real CLI, another process, writes the same database.
#[tokio::test]
async fn the_server_shows_a_suspension_by_the_cli_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let m = setup_with(&dir.path().join("m"), &[]);
    let data = m.data.to_str().unwrap().to_owned();
    let server = Server::start(&m.data);
    let c = Client::new(&server.url);
    let def = definition("gateway", "relay-one", "1.0.0");
    let (status, body) = c.publish_signed(&m.acme_token, &def, &[&m.acme]).await;
    assert_eq!(status, 201, "{body}");

    let get = |path: &str| {
        let url = format!("{}{path}", server.url);
        async move {
            let r = reqwest::get(&url).await.unwrap();
            assert_eq!(r.status(), 200, "{url}");
            r.text().await.unwrap()
        }
    };
    let total = |body: String| -> i64 {
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["total"]
            .as_i64()
            .unwrap()
    };
    let acme_option = r#"<option value="acme">acme</option>"#;
    for _ in 0..2 {
        assert_eq!(total(get("/api/v1/plugins?q=relay").await), 1);
        let page = get("/?q=relay").await;
        assert!(page.contains(acme_option), "{page}");
        assert!(page.contains(r#"data-plugin="acme/relay-one""#), "{page}");
    }

    let o = marketplace(&["publisher", "suspend", "acme", "--data-dir", &data]);
    assert!(o.status.success(), "{}", output_text(&o));
    assert_eq!(total(get("/api/v1/plugins?q=relay").await), 0);
    let page = get("/?q=relay").await;
    assert!(!page.contains(acme_option), "{page}");
    assert!(!page.contains(r#"data-plugin="acme/relay-one""#), "{page}");

    let o = marketplace(&["publisher", "resume", "acme", "--data-dir", &data]);
    assert!(o.status.success(), "{}", output_text(&o));
    assert_eq!(total(get("/api/v1/plugins?q=relay").await), 1);
    assert!(get("/?q=relay").await.contains(acme_option));

    // A publisher added by the CLI appears in the filter at once.
    let key = marketplace::trust::SigningKey::generate().unwrap();
    common::publishing::add_publisher(&m.data, "gamma", &[&key], 1);
    assert!(
        get("/?q=relay")
            .await
            .contains(r#"<option value="gamma">gamma</option>"#)
    );
}
