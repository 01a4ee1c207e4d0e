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
    face: Mutex<Option<Arc<dyn Any + Send + Sync>>>,
}

impl Curated {
    pub fn new(spec: Arc<Curation>) -> Self {
        Curated {
            spec,
            face: Mutex::new(None),
        }
    }

    /// The face's names kept here when `current` says they still hold,
    /// otherwise made again by `make` and kept.
    pub fn face<T: Any + Send + Sync>(
        &self,
        current: impl Fn(&T) -> bool,
        make: impl FnOnce() -> T,
    ) -> Arc<T> {
        let kept = self.face.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(kept) = kept.and_then(|k| k.downcast::<T>().ok())
            && current(&kept)
        {
            return kept;
        }
        // Made outside the lock: two callers may both make them, and the
        // last one kept wins; both are the same names.
        let made = Arc::new(make());
        *self.face.lock().unwrap_or_else(|e| e.into_inner()) = Some(made.clone());
        made
    }
}

impl std::ops::Deref for Curated {
    type Target = Curation;

    fn deref(&self) -> &Curation {
        &self.spec
    }
}
