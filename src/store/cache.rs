//! What catalog listings derive from many rows (each query's ranked plugin ids, its result
//! pages, the facets), kept per generation of the catalog tables.
//!
//! Without it, a search that matches every plugin ranks (bm25) and counts the whole table
//! on every request. Correctness rests on the generation: the change feed (table
//! `change_feed`, migration 0010) holds the catalog's generation, which every write to
//! what listings read bumps in its own transaction, and every request reads it first.
//! Results are cached only under the generation they were read at (one read
//! transaction), and served only to a request that read that same generation, so a
//! committed write is seen by the next request whichever process, replica or connection
//! made it.
//!
//! It also keeps plugins asked for one at a time by stable id, each with its latest
//! definition parsed (catalog.v1 `GetPlugin`): on PostgreSQL that saves a round trip and
//! a parse per request.
//!
//! Memory is bounded by a budget of approximate heap bytes (keys and values), one for
//! the listings and one, the same, for the plugins; the least recently used entries go
//! first, so varied hostile queries cost their own computation but cannot grow the cache
//! or push out more than they occupy.

use std::hash::Hash;
use std::sync::{Arc, Mutex};

use hashlink::LinkedHashMap;

use super::{Facets, ListedDetail, ListedPlugin, PluginQuery, PluginSummary};

/// Default budget: far above what 10,000 plugins' usual queries need (a ranked list of
/// every plugin is 80 KB, a page of 24 about 10 KB), small against the server's memory
/// target.
pub const DEFAULT_BUDGET: usize = 16 * 1024 * 1024;
/// A single entry may take at most this share of the budget, so one huge result cannot
/// push out everything else.
const MAX_ENTRY_SHARE: usize = 4;
/// Rough per-entry bookkeeping (map node, links, `Arc` headers) added to every weight.
const ENTRY_OVERHEAD: usize = 96;

/// Approximate heap bytes a cached key or value holds.
pub(super) trait Weigh {
    fn weigh(&self) -> usize;
}

/// A least-recently-used map bounded by the summed weight of its keys and values.
pub(super) struct Lru<K, V> {
    map: LinkedHashMap<K, (V, usize)>,
    bytes: usize,
    budget: usize,
}

impl<K: Hash + Eq + Weigh, V: Clone + Weigh> Lru<K, V> {
    pub(super) fn new(budget: usize) -> Self {
        Lru {
            map: LinkedHashMap::new(),
            bytes: 0,
            budget,
        }
    }

    /// The value for `key`, which becomes the most recently used.
    pub(super) fn get(&mut self, key: &K) -> Option<V> {
        self.map.to_back(key).map(|(v, _)| v.clone())
    }

    /// Stores `value`, then drops least recently used entries until the budget holds.
    /// A value too large for its share of the budget is not stored.
    pub(super) fn insert(&mut self, key: K, value: V) {
        let weight = key.weigh() + value.weigh() + ENTRY_OVERHEAD;
        if weight > self.budget / MAX_ENTRY_SHARE {
            return;
        }
        if let Some((_, old)) = self.map.insert(key, (value, weight)) {
            self.bytes -= old;
        }
        self.bytes += weight;
        while self.bytes > self.budget {
            match self.map.pop_front() {
                Some((_, (_, w))) => self.bytes -= w,
                None => break,
            }
        }
    }

    pub(super) fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
    }

    pub(super) fn usage(&self) -> CacheUsage {
        CacheUsage {
            entries: self.map.len(),
            bytes: self.bytes,
            budget: self.budget,
        }
    }
}

/// How full the catalog cache is, in entries and approximate heap bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheUsage {
    pub entries: usize,
    pub bytes: usize,
    pub budget: usize,
}

/// A normalized catalog query ([`PluginQuery`] as parsed from request parameters) and
/// which part of its answer is kept.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Key {
    /// The ids of every match, in listing order; the query's page fields are zero, so
    /// every page of one query shares it.
    Ranked(PluginQuery),
    /// One page of summaries.
    Page(PluginQuery),
}

impl Key {
    pub(super) fn ranked(q: &PluginQuery) -> Key {
        Key::Ranked(PluginQuery {
            page: 0,
            per_page: 0,
            ..q.clone()
        })
    }
}

#[derive(Debug, Clone)]
pub(super) enum Entry {
    Ranked(Arc<[i64]>),
    Page(Arc<CachedPage>),
}

#[derive(Debug)]
pub(super) struct CachedPage {
    pub(super) items: Vec<PluginSummary>,
    pub(super) total: i64,
}

fn text(s: &str) -> usize {
    s.len()
}

impl Weigh for Key {
    fn weigh(&self) -> usize {
        let (Key::Ranked(q) | Key::Page(q)) = self;
        std::mem::size_of::<Key>()
            + q.terms
                .iter()
                .map(|t| std::mem::size_of::<String>() + text(t))
                .sum::<usize>()
            + q.tag.as_deref().map_or(0, text)
            + q.publisher.as_deref().map_or(0, text)
    }
}

impl Weigh for Entry {
    fn weigh(&self) -> usize {
        match self {
            Entry::Ranked(ids) => std::mem::size_of_val(&**ids),
            Entry::Page(page) => {
                std::mem::size_of::<CachedPage>()
                    + page
                        .items
                        .iter()
                        .map(|s| {
                            std::mem::size_of::<PluginSummary>()
                                + text(&s.publisher)
                                + text(&s.name)
                                + text(&s.display_name)
                                + text(&s.description)
                                + text(&s.latest_version)
                                + s.tags
                                    .iter()
                                    .map(|t| std::mem::size_of::<String>() + text(t))
                                    .sum::<usize>()
                        })
                        .sum::<usize>()
            }
        }
    }
}

impl Weigh for String {
    fn weigh(&self) -> usize {
        std::mem::size_of::<String>() + self.len()
    }
}

impl Weigh for Arc<ListedDetail> {
    fn weigh(&self) -> usize {
        std::mem::size_of::<ListedDetail>()
            + listed(&self.plugin)
            + std::mem::size_of::<crate::definition::Definition>()
            // The published bytes, and the parsed manifest, estimated at twice their
            // size (its strings, lists and maps copy the text, with their headers).
            + 3 * self.definition.bytes.len()
    }
}

fn listed(p: &ListedPlugin) -> usize {
    text(&p.publisher)
        + text(&p.name)
        + text(&p.display_name)
        + text(&p.description)
        + text(&p.latest_version)
        + p.tags
            .iter()
            .map(|t| std::mem::size_of::<String>() + text(t))
            .sum::<usize>()
}

/// The cache the store shares between its clones.
pub(super) struct CatalogCache {
    state: Mutex<State>,
}

struct State {
    /// The generation every entry below was read at; `None` before the first.
    generation: Option<i64>,
    entries: Lru<Key, Entry>,
    /// Plugins with their latest definition by stable id, apart from the listings so
    /// that varied searches cannot push out the plugins people open, nor the reverse.
    details: Lru<String, Arc<ListedDetail>>,
    facets: Option<Arc<Facets>>,
    listed_ids: Option<Arc<ListedIds>>,
}

/// Every listed plugin's publisher and name by its stable id (`ids::plugin`): ids are
/// hashes of names, so without it finding one by id hashes every listed name.
pub type ListedIds = std::collections::HashMap<String, (String, String)>;

impl State {
    /// Moves to `generation` when it is newer, dropping what was read before it.
    /// Returns whether the cache now holds that generation.
    fn at(&mut self, generation: i64) -> bool {
        match self.generation {
            Some(g) if g == generation => true,
            // A result read before the cache's generation is already out of date.
            Some(g) if g > generation => false,
            _ => {
                self.entries.clear();
                self.details.clear();
                self.facets = None;
                self.listed_ids = None;
                self.generation = Some(generation);
                true
            }
        }
    }
}

impl CatalogCache {
    pub(super) fn new(budget: usize) -> Self {
        CatalogCache {
            state: Mutex::new(State {
                generation: None,
                entries: Lru::new(budget),
                details: Lru::new(budget),
                facets: None,
                listed_ids: None,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing can panic while the lock is held; a poisoned lock still holds a
        // consistent map.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The entry for `key` if it was read at `generation`.
    pub(super) fn get(&self, generation: i64, key: &Key) -> Option<Entry> {
        let mut state = self.state();
        if !state.at(generation) {
            return None;
        }
        state.entries.get(key)
    }

    /// Keeps `entry`, read at `generation`, unless the cache has moved past it.
    pub(super) fn put(&self, generation: i64, key: Key, entry: Entry) {
        let mut state = self.state();
        if state.at(generation) {
            state.entries.insert(key, entry);
        }
    }

    pub(super) fn facets(&self, generation: i64) -> Option<Arc<Facets>> {
        let mut state = self.state();
        if !state.at(generation) {
            return None;
        }
        state.facets.clone()
    }

    pub(super) fn put_facets(&self, generation: i64, facets: Arc<Facets>) {
        let mut state = self.state();
        if state.at(generation) {
            state.facets = Some(facets);
        }
    }

    pub(super) fn listed_ids(&self, generation: i64) -> Option<Arc<ListedIds>> {
        let mut state = self.state();
        if !state.at(generation) {
            return None;
        }
        state.listed_ids.clone()
    }

    pub(super) fn put_listed_ids(&self, generation: i64, ids: Arc<ListedIds>) {
        let mut state = self.state();
        if state.at(generation) {
            state.listed_ids = Some(ids);
        }
    }

    pub(super) fn detail(&self, generation: i64, id: &str) -> Option<Arc<ListedDetail>> {
        let mut state = self.state();
        if !state.at(generation) {
            return None;
        }
        state.details.get(&id.to_owned())
    }

    pub(super) fn put_detail(&self, generation: i64, id: &str, detail: Arc<ListedDetail>) {
        let mut state = self.state();
        if state.at(generation) {
            state.details.insert(id.to_owned(), detail);
        }
    }

    /// The listings' part; the plugins' part has a budget of its own, the same.
    pub(super) fn usage(&self) -> CacheUsage {
        self.state().entries.usage()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    struct K(u32);
    impl Weigh for K {
        fn weigh(&self) -> usize {
            4
        }
    }
    impl Weigh for Vec<u8> {
        fn weigh(&self) -> usize {
            self.len()
        }
    }

    #[test]
    fn stays_within_its_budget_dropping_the_least_recently_used() {
        let weight = |len: usize| 4 + len + ENTRY_OVERHEAD;
        let budget = 10 * weight(100);
        let mut lru: Lru<K, Vec<u8>> = Lru::new(budget);
        for i in 0..10 {
            lru.insert(K(i), vec![0; 100]);
        }
        assert_eq!(lru.usage().entries, 10);
        assert_eq!(lru.usage().bytes, budget);
        // Using 0 makes 1 the oldest, so the next insert pushes out 1, not 0.
        assert!(lru.get(&K(0)).is_some());
        lru.insert(K(10), vec![0; 100]);
        assert!(lru.get(&K(0)).is_some());
        assert!(lru.get(&K(1)).is_none());
        assert_eq!(lru.usage().entries, 10);

        // Many varied entries never take more than the budget.
        for i in 100..10_000 {
            lru.insert(K(i), vec![0; (i % 150) as usize]);
            assert!(lru.usage().bytes <= budget, "over budget after {i}");
        }
        // Replacing a key's value re-weighs it instead of counting it twice.
        let before = lru.usage();
        lru.insert(K(9_999), vec![0; 9_999 % 150]);
        assert_eq!(lru.usage(), before);
        // An entry larger than its share of the budget is not kept at all.
        lru.insert(K(1), vec![0; budget / MAX_ENTRY_SHARE]);
        assert!(lru.get(&K(1)).is_none());
        assert!(lru.usage().bytes <= budget);
    }

    #[test]
    fn entries_are_served_only_at_the_generation_they_were_read_at() {
        let cache = CatalogCache::new(DEFAULT_BUDGET);
        let q = PluginQuery::default();
        let ids = |v: &[i64]| Entry::Ranked(v.into());
        let got = |e: Option<Entry>| match e {
            Some(Entry::Ranked(ids)) => Some(ids.to_vec()),
            _ => None,
        };
        cache.put(3, Key::ranked(&q), ids(&[1, 2]));
        assert_eq!(got(cache.get(3, &Key::ranked(&q))), Some(vec![1, 2]));
        // A request that read a newer generation misses, and the old entries go.
        assert_eq!(got(cache.get(4, &Key::ranked(&q))), None);
        assert_eq!(cache.usage().entries, 0);
        // A straggler that read generation 3 cannot put its result back.
        cache.put(3, Key::ranked(&q), ids(&[1, 2]));
        assert_eq!(got(cache.get(3, &Key::ranked(&q))), None);
        assert_eq!(got(cache.get(4, &Key::ranked(&q))), None);
        cache.put(4, Key::ranked(&q), ids(&[2]));
        assert_eq!(got(cache.get(4, &Key::ranked(&q))), Some(vec![2]));
        // Pages are kept apart from the ranked list of the same query.
        assert!(cache.get(4, &Key::Page(q.clone())).is_none());
    }
}
