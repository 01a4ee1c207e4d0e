//! Definition pinning, the rug-pull defence: every tool of a pinned
//! upstream is recorded on first sight, its fingerprint beside its
//! definition, in a JSON file meant to be reviewed (and kept in git); a
//! definition that later matches no pin of its upstream (changed, renamed
//! and changed, or new) is quarantined (left out of listings, refused with
//! -32007) and waits beside the pin for a review: approved, it is pinned;
//! rejected, it stays out (`record` holds the rules, `review` what a
//! reviewer reads, `cli` the offline commands).
//!
//! ```json
//! {
//!   "files": {
//!     "read": {"fingerprint": "sha256:9f86...", "definition": {...}},
//!     "write": {"fingerprint": "sha256:60b7...", "definition": {...},
//!               "pending": {"fingerprint": "sha256:2c26...", "definition": {...},
//!                           "reason": "changed", "state": "pending"}}
//!   }
//! }
//! ```

pub mod cli;
pub mod record;
pub mod review;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::protocol::fingerprint::Seen;
pub use record::{Checked, Pin, Reason, State, Undecided, UpstreamPins};

/// upstream → its pins. Sorted, so the file diffs cleanly.
pub type Pins = BTreeMap<String, UpstreamPins>;

/// How many times a change of the store's record is tried against other
/// replicas changing it at the same moment.
const SWAP_ATTEMPTS: usize = 8;

/// The pins, read afresh on every check so that a decision takes effect at
/// the next refresh; file writes are atomic (temporary file, then rename).
///
/// With a shared store the pins are the store's, for every replica alike
/// (see `crate::store::pins`), and the file only seeds them: a tool the
/// store has not pinned yet is pinned as the file has it, when it has it.
/// While the store cannot be reached a tool serves only if its definition
/// is the one this replica last saw pinned there; anything else is
/// quarantined until the store answers again (pinning fails closed).
pub struct PinStore {
    path: PathBuf,
    /// One change of the file at a time, in this process.
    lock: Mutex<()>,
    shared: Option<crate::store::Store>,
    /// (upstream, tool) → the fingerprint the store last said is pinned.
    known: Mutex<HashMap<(String, String), String>>,
    /// The last check could not reach the store.
    fell_back: std::sync::atomic::AtomicBool,
}

impl PinStore {
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            lock: Mutex::new(()),
            shared: None,
            known: Mutex::default(),
            fell_back: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Keeps the pins in `store`, for every replica (before it is used).
    pub fn shared(mut self, store: crate::store::Store) -> Self {
        self.shared = Some(store);
        self
    }

    /// The store the pins are kept in, when they are shared.
    pub fn store(&self) -> Option<&crate::store::Store> {
        self.shared.as_ref()
    }

    /// Whether the last check could not reach the store (its quarantines
    /// may be lifted once the store answers).
    pub fn fell_back(&self) -> bool {
        self.fell_back.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Where the pins are kept, as logs name it.
    pub fn place(&self) -> String {
        match &self.shared {
            Some(store) => format!("the store ({})", store.settings().url),
            None => self.path.display().to_string(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// An upstream's pins as they are kept now.
    pub async fn record(&self, upstream: &str) -> std::io::Result<UpstreamPins> {
        match &self.shared {
            None => Ok(load(&self.path)?.remove(upstream).unwrap_or_default()),
            Some(_) => Ok(self.stored(upstream).await?.1),
        }
    }

    /// Runs `f` on an upstream's pins and keeps what it changed: in the
    /// file, or in the store (tried again, on the record as it is then,
    /// while another replica changes it at the same moment).
    pub async fn update<R>(
        &self,
        upstream: &str,
        mut f: impl FnMut(&mut UpstreamPins) -> R,
    ) -> std::io::Result<R> {
        let Some(store) = &self.shared else {
            let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            let mut pins = load(&self.path)?;
            let before = pins.get(upstream).cloned().unwrap_or_default();
            let mine = pins.entry(upstream.to_owned()).or_default();
            let out = f(mine);
            if before != *mine {
                save(&self.path, &pins)?;
            }
            return Ok(out);
        };
        for _ in 0..SWAP_ATTEMPTS {
            let (text, mut pins) = self.stored(upstream).await?;
            let before = pins.clone();
            let out = f(&mut pins);
            if text.is_some() && pins == before {
                return Ok(out);
            }
            let new = serde_json::to_string(&pins).map_err(std::io::Error::other)?;
            if store
                .swap_pin_record(upstream, text.as_deref(), &new)
                .await
                .map_err(std::io::Error::other)?
            {
                return Ok(out);
            }
        }
        Err(std::io::Error::other(
            "the store's pins kept changing under this replica",
        ))
    }

    /// The store's record of an upstream (its text, and its pins seeded by
    /// what an older gateway kept there and by the file).
    async fn stored(&self, upstream: &str) -> std::io::Result<(Option<String>, UpstreamPins)> {
        let Some(store) = &self.shared else {
            return Ok((None, UpstreamPins::new()));
        };
        let record = store
            .pin_record(upstream)
            .await
            .map_err(std::io::Error::other)?;
        let mut pins: UpstreamPins = match &record.text {
            Some(text) => serde_json::from_str(text)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?,
            None => record
                .legacy
                .into_iter()
                .map(|(id, fingerprint)| {
                    let pin = Pin {
                        fingerprint: Some(fingerprint),
                        ..Pin::default()
                    };
                    (id, pin)
                })
                .collect(),
        };
        // The file's pins seed the store's; a file that cannot be read seeds nothing.
        if let Some(seeds) = load(&self.path).unwrap_or_default().remove(upstream) {
            for (id, seed) in seeds {
                if seed.fingerprint.is_some() && !pins.contains_key(&id) {
                    pins.insert(
                        id,
                        Pin {
                            pending: None,
                            ..seed
                        },
                    );
                }
            }
        }
        Ok((record.text, pins))
    }

    /// Checks a listing against the upstream's pins (see `record::check`):
    /// the ids quarantined and why. Without the store, only what this
    /// replica last saw pinned there serves.
    pub async fn check_now(&self, upstream: &str, seen: &[Seen]) -> std::io::Result<Checked> {
        let checked = self
            .update(upstream, |pins| record::check(pins, seen))
            .await;
        if self.shared.is_none() {
            return checked;
        }
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let fell_back = checked.is_err();
        self.fell_back
            .store(fell_back, std::sync::atomic::Ordering::Release);
        match checked {
            Ok(checked) => {
                let out = checked.ids();
                for s in seen {
                    let key = (upstream.to_owned(), s.id.clone());
                    if out.contains(&s.id) {
                        known.remove(&key);
                    } else {
                        known.insert(key, s.fingerprint.clone());
                    }
                }
                Ok(checked)
            }
            Err(e) => {
                let quarantined: Vec<(String, Reason)> = seen
                    .iter()
                    .filter(|s| {
                        known.get(&(upstream.to_owned(), s.id.clone())) != Some(&s.fingerprint)
                    })
                    .map(|s| (s.id.clone(), Reason::Changed))
                    .collect();
                if !quarantined.is_empty() {
                    tracing::warn!(upstream, error = %e, quarantined = quarantined.len(), "cannot reach the store to check pinned tools: those this replica has not seen pinned there are quarantined until it answers");
                }
                Ok(Checked {
                    quarantined,
                    changed: false,
                })
            }
        }
    }

    /// A review decision on what waits under `tool` (see `record::decide`).
    pub async fn decide(
        &self,
        upstream: &str,
        tool: &str,
        fingerprint: Option<&str>,
        approve: bool,
    ) -> std::io::Result<Result<String, Undecided>> {
        self.update(upstream, |pins| {
            record::decide(pins, tool, fingerprint, approve)
        })
        .await
    }
}

fn load(path: &Path) -> std::io::Result<Pins> {
    match std::fs::read(path) {
        Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Ok(Pins::new()),
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Pins::new()),
        Err(e) => Err(e),
    }
}

fn save(path: &Path, pins: &Pins) -> std::io::Result<()> {
    let mut text = serde_json::to_vec_pretty(pins).map_err(std::io::Error::other)?;
    text.push(b'\n');
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}
