//! Where an upstream has stood, for people: since when in its state, when
//! it was configured, and its last failure in the gateway's own words (an
//! exit status, a handshake that failed, a timeout), kept after it
//! recovers. Written on state changes and failures only, never on a call
//! that succeeds.

use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

/// The longest a failure's text is kept, in characters.
const MAX_MESSAGE: usize = 200;

pub struct Standing {
    configured_at: SystemTime,
    since: Mutex<SystemTime>,
    last_error: Mutex<Option<(SystemTime, Box<str>)>>,
}

impl Standing {
    pub(super) fn new() -> Self {
        let now = SystemTime::now();
        Standing {
            configured_at: now,
            since: Mutex::new(now),
            last_error: Mutex::new(None),
        }
    }

    /// When this upstream (as configured now) was made.
    pub fn configured_at(&self) -> SystemTime {
        self.configured_at
    }

    /// When it entered the state it is in.
    pub fn since(&self) -> SystemTime {
        *self.since.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Its last failure: when, and what (at most 200 characters).
    pub fn last_error(&self) -> Option<(SystemTime, Box<str>)> {
        self.last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn moved(&self) {
        *self.since.lock().unwrap_or_else(PoisonError::into_inner) = SystemTime::now();
    }

    pub(super) fn failed(&self, what: &str) {
        let cut: Box<str> = match what.char_indices().nth(MAX_MESSAGE) {
            Some((at, _)) => what[..at].into(),
            None => what.into(),
        };
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((SystemTime::now(), cut));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_kept_cut_to_its_bound() {
        let s = Standing::new();
        assert!(s.last_error().is_none());
        s.failed(&"é".repeat(300));
        let (_, kept) = s.last_error().unwrap();
        assert_eq!(kept.chars().count(), MAX_MESSAGE);
        s.failed("exit status: 1");
        assert_eq!(&*s.last_error().unwrap().1, "exit status: 1");
    }
}
