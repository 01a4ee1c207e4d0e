//! The configuration in force, for the console: its digest, when it was
//! loaded, and how the last reload went. The composition root writes it
//! at start and at each reload; the console reads it.

use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

/// How a reload ended.
#[derive(Clone)]
pub struct Reload {
    pub at: SystemTime,
    pub applied: bool,
    pub digest: String,
    /// Why it was rejected.
    pub error: Option<String>,
}

#[derive(Clone)]
pub struct InForce {
    pub digest: String,
    pub loaded_at: SystemTime,
    pub last_reload: Option<Reload>,
}

pub struct ConfigRecord(Mutex<InForce>);

impl ConfigRecord {
    pub fn new(digest: String) -> Self {
        ConfigRecord(Mutex::new(InForce {
            digest,
            loaded_at: SystemTime::now(),
            last_reload: None,
        }))
    }

    pub fn now(&self) -> InForce {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A reload of the file whose bytes have `digest` was applied.
    pub fn applied(&self, digest: String) {
        let mut r = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let at = SystemTime::now();
        r.digest = digest.clone();
        r.loaded_at = at;
        r.last_reload = Some(Reload {
            at,
            applied: true,
            digest,
            error: None,
        });
    }

    /// A reload of the file whose bytes have `digest` was rejected; the
    /// configuration in force stays.
    pub fn rejected(&self, digest: String, error: String) {
        let mut r = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        r.last_reload = Some(Reload {
            at: SystemTime::now(),
            applied: false,
            digest,
            error: Some(error),
        });
    }
}
