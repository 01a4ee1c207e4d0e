//! A tenant's curation as dispatch uses it: the compiled settings, and the
//! names a face works out from them and the tenant's catalogs, kept until
//! those catalogs change (a listing is rare beside the calls that look a
//! name up).

use std::any::Any;
use std::sync::{Arc, Mutex};

use crate::config::curation::Curation;

/// One tenant's curation, shared by every view of the tenant (a token's too).
pub struct Curated {
    pub spec: Arc<Curation>,
    /// A face's names for the tenant, as that face made them last.
    face: Slot,
    /// Its tools' search index (`tools.discovery`), as last made.
    search: Slot,
}

/// Something made from the tenant's catalogs, kept until they change.
type Slot = Mutex<Option<Arc<dyn Any + Send + Sync>>>;

impl Curated {
    pub fn new(spec: Arc<Curation>) -> Self {
        Curated {
            spec,
            face: Mutex::new(None),
            search: Mutex::new(None),
        }
    }

    /// The search index kept here when `current` says it still holds,
    /// otherwise made again by `make` and kept (see [`Self::face`]).
    pub fn search<T: Any + Send + Sync>(
        &self,
        current: impl Fn(&T) -> bool,
        make: impl FnOnce() -> T,
    ) -> Arc<T> {
        kept(&self.search, current, make)
    }

    /// The face's names kept here when `current` says they still hold,
    /// otherwise made again by `make` and kept.
    pub fn face<T: Any + Send + Sync>(
        &self,
        current: impl Fn(&T) -> bool,
        make: impl FnOnce() -> T,
    ) -> Arc<T> {
        kept(&self.face, current, make)
    }
}

fn kept<T: Any + Send + Sync>(
    slot: &Slot,
    current: impl Fn(&T) -> bool,
    make: impl FnOnce() -> T,
) -> Arc<T> {
    let kept = slot.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(kept) = kept.and_then(|k| k.downcast::<T>().ok())
        && current(&kept)
    {
        return kept;
    }
    // Made outside the lock: two callers may both make it, and the last
    // one kept wins; both are the same.
    let made = Arc::new(make());
    *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(made.clone());
    made
}

impl std::ops::Deref for Curated {
    type Target = Curation;

    fn deref(&self) -> &Curation {
        &self.spec
    }
}
