//! A byte-bounded in-memory cache of immutable files, least recently used out first.
//!
//! A hit is a read lock, a map lookup and two atomic operations. A miss loads once
//! however many requests want the same file at the same moment (they wait for the
//! first), and what is not found is not remembered: names that do not exist yet may
//! exist later, and hostile requests for made-up names must not fill memory.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::encoding::File;

/// Memory a cached file costs beyond its bytes (key, map entry, slot): an estimate,
/// so that many small files count for something.
const OVERHEAD: usize = 160;

pub(super) struct Cache {
    budget: usize,
    slots: RwLock<Slots>,
    /// Advances on every hit: the recency order for eviction.
    clock: AtomicU64,
}

#[derive(Default)]
struct Slots {
    map: HashMap<String, Arc<Slot>>,
    /// Sum of the cost of the loaded slots in `map`.
    bytes: usize,
}

#[derive(Default)]
struct Slot {
    file: tokio::sync::OnceCell<Arc<File>>,
    used: AtomicU64,
    /// Counted in `Slots::bytes` (set once, under the write lock).
    counted: AtomicBool,
}

/// Why a load produced nothing to cache.
pub(super) enum Miss<E> {
    NotFound,
    Failed(E),
}

impl Cache {
    pub(super) fn new(budget: usize) -> Cache {
        Cache {
            budget,
            slots: RwLock::default(),
            clock: AtomicU64::new(0),
        }
    }

    /// The cached file under `key`, or what `load` makes of it (cached when it fits).
    pub(super) async fn get_or_load<E, Fut>(
        &self,
        key: &str,
        load: impl FnOnce() -> Fut,
    ) -> Result<Arc<File>, Miss<E>>
    where
        Fut: Future<Output = Result<File, Miss<E>>>,
    {
        let slot = {
            let slots = self.slots.read().expect("cache lock");
            match slots.map.get(key) {
                Some(slot) => {
                    if let Some(file) = slot.file.get() {
                        slot.used.store(self.tick(), Ordering::Relaxed);
                        return Ok(file.clone());
                    }
                    slot.clone()
                }
                None => {
                    drop(slots);
                    let mut slots = self.slots.write().expect("cache lock");
                    slots.map.entry(key.to_owned()).or_default().clone()
                }
            }
        };
        match slot
            .file
            .get_or_try_init(|| async { load().await.map(Arc::new) })
            .await
        {
            Ok(file) => {
                let file = file.clone();
                self.admit(key, &slot, &file);
                Ok(file)
            }
            Err(miss) => {
                self.forget(key, &slot);
                Err(miss)
            }
        }
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// Counts a newly loaded file, or drops it when it alone exceeds the budget, and
    /// evicts the least recently used files until the total fits again.
    fn admit(&self, key: &str, slot: &Arc<Slot>, file: &File) {
        let mut slots = self.slots.write().expect("cache lock");
        if slot.counted.load(Ordering::Relaxed) {
            return;
        }
        let cost = file.size() + key.len() + OVERHEAD;
        let ours = slots.map.get(key).is_some_and(|s| Arc::ptr_eq(s, slot));
        if cost > self.budget {
            if ours {
                slots.map.remove(key);
            }
            return;
        }
        if !ours {
            // Our slot was forgotten after a failed load while this one succeeded.
            if slots.map.get(key).is_some_and(|s| s.file.initialized()) {
                return;
            }
            slots.map.insert(key.to_owned(), slot.clone());
        }
        slot.counted.store(true, Ordering::Relaxed);
        slot.used.store(self.tick(), Ordering::Relaxed);
        slots.bytes += cost;
        if slots.bytes > self.budget {
            // Down to 7/8 of the budget, so evictions come in batches rather than one
            // sort per admitted file.
            let goal = self.budget / 8 * 7;
            let mut loaded: Vec<(u64, String, usize)> = slots
                .map
                .iter()
                .filter(|(k, s)| s.counted.load(Ordering::Relaxed) && k.as_str() != key)
                .map(|(k, s)| {
                    let size = s.file.get().map_or(0, |f| f.size()) + k.len() + OVERHEAD;
                    (s.used.load(Ordering::Relaxed), k.clone(), size)
                })
                .collect();
            loaded.sort_unstable();
            for (_, k, size) in loaded {
                if slots.bytes <= goal {
                    break;
                }
                slots.map.remove(&k);
                slots.bytes -= size;
            }
        }
    }

    /// Removes a slot whose load found nothing, unless another request filled it.
    fn forget(&self, key: &str, slot: &Arc<Slot>) {
        let mut slots = self.slots.write().expect("cache lock");
        if slots
            .map
            .get(key)
            .is_some_and(|s| Arc::ptr_eq(s, slot) && !s.file.initialized())
        {
            slots.map.remove(key);
        }
    }

    /// Bytes held and files cached, for tests and diagnostics.
    pub(super) fn usage(&self) -> (usize, usize) {
        let slots = self.slots.read().expect("cache lock");
        let files = slots
            .map
            .values()
            .filter(|s| s.counted.load(Ordering::Relaxed))
            .count();
        (slots.bytes, files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(n: usize) -> File {
        File::new(vec![b'x'; n], "\"t\"".into(), false)
    }

    async fn get(cache: &Cache, key: &str, n: usize) -> Arc<File> {
        cache
            .get_or_load::<(), _>(key, || async move { Ok(file(n)) })
            .await
            .unwrap_or_else(|_| panic!("load of {key} failed"))
    }

    #[tokio::test]
    async fn the_budget_is_kept_and_the_least_recently_used_go_first() {
        let cost = |key: &str| 1000 + 3 + key.len() + OVERHEAD;
        let cache = Cache::new(4 * cost("a"));
        for key in ["a", "b", "c", "d"] {
            get(&cache, key, 1000).await;
        }
        assert_eq!(cache.usage(), (4 * cost("a"), 4));
        // `a` is used again, so `b` is the least recently used.
        get(&cache, "a", 1000).await;
        get(&cache, "e", 1000).await;
        let (bytes, files) = cache.usage();
        assert!(bytes <= 4 * cost("a"), "{bytes}");
        assert_eq!(files, 3, "evicted down to 7/8 of the budget");
        let loaded = AtomicU64::new(0);
        let reload = |key: &'static str| {
            let (cache, loaded) = (&cache, &loaded);
            async move {
                cache
                    .get_or_load::<(), _>(key, || async move {
                        loaded.fetch_add(1, Ordering::Relaxed);
                        Ok(file(1000))
                    })
                    .await
                    .ok()
                    .unwrap();
            }
        };
        reload("a").await;
        reload("e").await;
        assert_eq!(loaded.load(Ordering::Relaxed), 0, "a and e stayed");
        reload("b").await;
        assert_eq!(loaded.load(Ordering::Relaxed), 1, "b was evicted first");
        assert!(cache.usage().0 <= 4 * cost("a"));
    }

    #[tokio::test]
    async fn a_file_over_the_budget_is_served_but_not_kept() {
        let cache = Cache::new(2000);
        assert_eq!(get(&cache, "big", 5000).await.bytes().len(), 5000);
        assert_eq!(cache.usage(), (0, 0));
    }

    #[tokio::test]
    async fn nothing_is_remembered_of_a_miss() {
        let cache = Cache::new(1 << 20);
        for i in 0..100 {
            let miss = cache
                .get_or_load::<(), _>(&format!("nope-{i}"), || async { Err(Miss::NotFound) })
                .await;
            assert!(matches!(miss, Err(Miss::NotFound)));
        }
        assert_eq!(cache.slots.read().unwrap().map.len(), 0);
        // A name found later is loaded then.
        assert_eq!(get(&cache, "nope-1", 10).await.bytes().len(), 10);
    }

    #[tokio::test]
    async fn concurrent_misses_load_once() {
        let cache = Arc::new(Cache::new(1 << 20));
        let loads = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (cache, loads) = (cache.clone(), loads.clone());
                tokio::spawn(async move {
                    cache
                        .get_or_load::<(), _>("k", || async move {
                            loads.fetch_add(1, Ordering::Relaxed);
                            // Long enough for the other tasks to ask meanwhile.
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                            Ok(file(10))
                        })
                        .await
                        .ok()
                        .unwrap()
                })
            })
            .collect();
        for task in tasks {
            assert_eq!(task.await.unwrap().bytes().len(), 10);
        }
        assert_eq!(loads.load(Ordering::Relaxed), 1);
    }
}
