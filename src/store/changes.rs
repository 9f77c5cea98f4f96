//! How a reader keeping signed metadata in memory learns that it may have changed: the
//! `metadata` generation of the change feed, which every transaction storing metadata
//! bumps, whichever process runs it (`serve`, `publisher suspend`, `repo rotate-root`,
//! another replica on the same PostgreSQL). One primary-key read per check.

/// What [`crate::store::Store::metadata_stamp`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub(super) generation: i64,
}

impl Stamp {
    /// True when nothing was committed between `earlier` and `self`: what was read after
    /// taking `earlier` is still current. A reader takes the stamp before it reads, so
    /// what it read is at least as new as the stamp says.
    pub fn unchanged_since(&self, earlier: &Stamp) -> bool {
        self.generation == earlier.generation
    }
}
