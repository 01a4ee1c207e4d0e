//! What a replica keeps of the sessions it served: a record per session
//! ended, subscribed on, given a log level or holding loaded tools, per
//! tenant, bounded per tenant, gone when its id expires.

use super::*;

pub(super) struct Record {
    expires: u64,
    ended: bool,
    subscribed: Subscribed,
    /// The level its client set with `logging/setLevel`.
    level: Option<LogLevel>,
    /// The ids of the tools it loaded (`load_tools`), oldest first.
    loaded: Vec<String>,
}

/// One tenant's records, by nonce.
#[derive(Default)]
pub(super) struct Records(pub(super) HashMap<String, Record>);

impl McpSessions {
    /// `tenant`'s records, if it has any.
    pub(super) fn records(&self, tenant: &str) -> Option<Arc<Mutex<Records>>> {
        self.tenants.get(tenant).map(|r| r.clone())
    }

    /// [`Self::set_level`] on this replica.
    pub fn set_level_here(&self, s: &Opened, level: LogLevel) -> Result<(), Refused> {
        self.keep(s, |r| {
            r.level = Some(level);
            Ok(())
        })
    }

    /// The level the session's client set (on this replica).
    pub fn level_here(&self, s: &Opened) -> Option<LogLevel> {
        self.records(&s.tenant).and_then(|records| {
            let records = records.lock().unwrap_or_else(PoisonError::into_inner);
            records.0.get(&*s.nonce).and_then(|r| r.level)
        })
    }

    /// Changes the session's record (made first, with room made for it in
    /// its tenant's records); `f` says whether the change was kept.
    pub(super) fn keep<T>(
        &self,
        s: &Opened,
        f: impl FnOnce(&mut Record) -> Result<T, Refused>,
    ) -> Result<T, Refused> {
        let records = self.tenants.entry(s.tenant.clone()).or_default().clone();
        let mut records = records.lock().unwrap_or_else(PoisonError::into_inner);
        if !records.0.contains_key(&*s.nonce) && records.0.len() >= self.max_records {
            let t = now();
            records.0.retain(|_, r| r.expires > t);
            if records.0.len() >= self.max_records {
                let oldest = records.0.values().map(|r| r.expires).min().unwrap_or(t);
                return Err(Refused::Full {
                    retry_after_secs: oldest.saturating_sub(t).max(1),
                });
            }
        }
        let record = records
            .0
            .entry(s.nonce.to_string())
            .or_insert_with(|| Record {
                expires: s.expires,
                ended: false,
                subscribed: Subscribed::default(),
                level: None,
                loaded: Vec::new(),
            });
        let kept = f(record);
        // A record that keeps nothing is not kept.
        if !record.ended
            && record.subscribed.is_empty()
            && record.level.is_none()
            && record.loaded.is_empty()
        {
            records.0.remove(&*s.nonce);
        }
        kept
    }

    /// Ends a session (DELETE): its id is refused here from now on. Refused
    /// (the session goes on) when the tenant keeps as many records as it may.
    pub fn end_here(&self, s: &Opened) -> Result<(), Refused> {
        self.keep(s, |r| {
            r.ended = true;
            r.subscribed.clear();
            r.level = None;
            r.loaded.clear();
            Ok(())
        })
    }

    /// `resources/subscribe` of a uri the tenant can read (`on`), or
    /// `resources/unsubscribe`.
    pub fn subscribe_here(&self, s: &Opened, uri: &str, on: bool) -> Result<(), Refused> {
        self.keep(s, |r| {
            if on {
                r.subscribed
                    .add(&self.budget, &s.tenant, uri)
                    .map_err(Refused::Subscriptions)
            } else {
                r.subscribed.remove(uri);
                Ok(())
            }
        })
    }

    /// Whether the session subscribed to `uri` (on this replica).
    pub fn subscribed_here(&self, s: &Opened, uri: &str) -> bool {
        self.records(&s.tenant).is_some_and(|records| {
            let records = records.lock().unwrap_or_else(PoisonError::into_inner);
            records
                .0
                .get(&*s.nonce)
                .is_some_and(|r| r.subscribed.contains(uri))
        })
    }

    /// Whether the session was ended since it was opened (on this replica).
    pub fn ended_here(&self, s: &Opened) -> bool {
        self.records(&s.tenant).is_some_and(|records| {
            let records = records.lock().unwrap_or_else(PoisonError::into_inner);
            records.0.get(&*s.nonce).is_some_and(|r| r.ended)
        })
    }

    /// Records `tenant` keeps now (for tests and the admin view).
    pub fn records_of(&self, tenant: &str) -> usize {
        self.records(tenant).map_or(0, |records| {
            records
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .0
                .len()
        })
    }

    /// The tools the session loaded, as this replica keeps them.
    pub fn loaded_here(&self, s: &Opened) -> Vec<String> {
        self.records(&s.tenant)
            .and_then(|records| {
                let records = records.lock().unwrap_or_else(PoisonError::into_inner);
                records.0.get(&*s.nonce).map(|r| r.loaded.clone())
            })
            .unwrap_or_default()
    }

    /// Keeps `ids` as the tools the session loaded, on this replica.
    pub fn keep_loaded_here(&self, s: &Opened, ids: Vec<String>) -> Result<(), Refused> {
        self.keep(s, |r| {
            r.loaded = ids;
            Ok(())
        })
    }
}
