//! Definition pinning, the rug-pull defence: the fingerprint of every tool of
//! a pinned upstream is recorded on first sight in a JSON file meant to be
//! reviewed (and kept in git); a tool whose definition later changes is
//! quarantined (left out of listings, refused with -32007) and its new
//! fingerprint written as `pending`, until an operator approves it
//! (`mcp-gateway pins approve`), which makes `pending` the pinned fingerprint.
//!
//! ```json
//! {
//!   "files": {
//!     "mcp://acme/tools/read": {"fingerprint": "sha256:9f86..."},
//!     "mcp://acme/tools/write": {"fingerprint": "sha256:60b7...", "pending": "sha256:2c26..."}
//!   }
//! }
//! ```

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// One tool's pin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    pub fingerprint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<String>,
}

/// upstream → tool (its own id) → pin. Sorted, so the file diffs cleanly.
pub type Pins = BTreeMap<String, BTreeMap<String, Pin>>;

/// The pins file, read afresh on every check so that an approval takes effect
/// at the next refresh; writes are atomic (temporary file, then rename).
///
/// With a shared store the pins are the store's, for every replica alike
/// (see `crate::store::pins`), and the file only seeds them: a tool the
/// store has not pinned yet is pinned to the file's fingerprint when the
/// file has one. While the store cannot be reached a tool serves only if
/// its definition is the one this replica last saw pinned there; anything
/// else is quarantined until the store answers again (pinning fails closed).
pub struct PinStore {
    path: PathBuf,
    /// One check or approval at a time, in this process.
    lock: Mutex<()>,
    shared: Option<crate::store::Store>,
    /// (upstream, tool) → the fingerprint the store last said is pinned.
    known: Mutex<std::collections::HashMap<(String, String), String>>,
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

    /// [`Self::check`], against the store when the pins are shared.
    pub async fn check_now(
        &self,
        upstream: &str,
        tools: &[(String, String)],
    ) -> std::io::Result<HashSet<String>> {
        let Some(store) = &self.shared else {
            return self.check(upstream, tools);
        };
        // The file's pins seed the store's; a file that cannot be read seeds nothing.
        let seeds = load(&self.path).unwrap_or_default();
        let seeded = seeds.get(upstream);
        let args: Vec<(String, String, String)> = tools
            .iter()
            .map(|(id, print)| {
                let seed = seeded
                    .and_then(|pins| pins.get(id))
                    .map_or(print, |pin| &pin.fingerprint);
                (id.clone(), seed.clone(), print.clone())
            })
            .collect();
        let checked = store.check_pins(upstream, &args).await;
        let mut known = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let quarantined = match checked {
            Ok(quarantined) => {
                for (id, print) in tools {
                    let key = (upstream.to_owned(), id.clone());
                    if quarantined.contains(id) {
                        known.remove(&key);
                    } else {
                        known.insert(key, print.clone());
                    }
                }
                self.fell_back
                    .store(false, std::sync::atomic::Ordering::Release);
                quarantined
            }
            Err(e) => {
                self.fell_back
                    .store(true, std::sync::atomic::Ordering::Release);
                let quarantined: HashSet<String> = tools
                    .iter()
                    .filter(|(id, print)| {
                        known.get(&(upstream.to_owned(), id.clone())) != Some(print)
                    })
                    .map(|(id, _)| id.clone())
                    .collect();
                if !quarantined.is_empty() {
                    tracing::warn!(upstream, error = %e, quarantined = quarantined.len(), "cannot reach the store to check pinned tools: those this replica has not seen pinned there are quarantined until it answers");
                }
                quarantined
            }
        };
        Ok(quarantined)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records unseen tools, and returns the ids of tools whose fingerprint
    /// differs from the pinned one (their new fingerprint becomes `pending`).
    pub fn check(
        &self,
        upstream: &str,
        tools: &[(String, String)],
    ) -> std::io::Result<HashSet<String>> {
        let _guard = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut pins = load(&self.path)?;
        let pinned = pins.entry(upstream.to_owned()).or_default();
        let mut changed = false;
        let mut quarantined = HashSet::new();
        for (id, print) in tools {
            match pinned.get_mut(id) {
                None => {
                    pinned.insert(
                        id.clone(),
                        Pin {
                            fingerprint: print.clone(),
                            pending: None,
                        },
                    );
                    changed = true;
                }
                Some(pin) if &pin.fingerprint == print => {
                    if pin.pending.take().is_some() {
                        changed = true;
                    }
                }
                Some(pin) => {
                    if pin.pending.as_ref() != Some(print) {
                        pin.pending = Some(print.clone());
                        changed = true;
                    }
                    quarantined.insert(id.clone());
                }
            }
        }
        if changed {
            save(&self.path, &pins)?;
        }
        Ok(quarantined)
    }
}

/// Makes every `pending` fingerprint (of one upstream, or of one tool) the
/// pinned one. Returns the (upstream, tool) pairs approved.
pub fn approve(
    path: &Path,
    upstream: Option<&str>,
    tool: Option<&str>,
) -> std::io::Result<Vec<(String, String)>> {
    let mut pins = load(path)?;
    let mut approved = Vec::new();
    for (up, tools) in pins.iter_mut() {
        if upstream.is_some_and(|u| u != up) {
            continue;
        }
        for (id, pin) in tools.iter_mut() {
            if tool.is_some_and(|t| t != id) {
                continue;
            }
            if let Some(new) = pin.pending.take() {
                pin.fingerprint = new;
                approved.push((up.clone(), id.clone()));
            }
        }
    }
    if !approved.is_empty() {
        save(path, &pins)?;
    }
    Ok(approved)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_quarantines_and_approves() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pins.json");
        let store = PinStore::new(path.clone());
        let v1 = vec![
            ("a".to_owned(), "sha256:1".to_owned()),
            ("b".to_owned(), "sha256:2".to_owned()),
        ];
        assert!(store.check("up", &v1).unwrap().is_empty());
        let v2 = vec![
            ("a".to_owned(), "sha256:1".to_owned()),
            ("b".to_owned(), "sha256:9".to_owned()),
        ];
        assert_eq!(store.check("up", &v2).unwrap(), ["b".to_owned()].into());
        let pins = load(&path).unwrap();
        assert_eq!(
            pins["up"]["b"],
            Pin {
                fingerprint: "sha256:2".into(),
                pending: Some("sha256:9".into())
            }
        );
        assert_eq!(
            approve(&path, Some("up"), None).unwrap(),
            vec![("up".to_owned(), "b".to_owned())]
        );
        assert!(store.check("up", &v2).unwrap().is_empty());
        // A change back to the pinned definition clears the pending one.
        assert_eq!(store.check("up", &v1).unwrap(), ["b".to_owned()].into());
        assert!(store.check("up", &v2).unwrap().is_empty());
        assert_eq!(load(&path).unwrap()["up"]["b"].pending, None);
    }
}
