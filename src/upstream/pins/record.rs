//! One upstream's pins and the rules that keep them, whatever holds them
//! (the pins file, or the shared store): each pinned tool's fingerprint and
//! definition, and each definition waiting for review beside it, with why
//! it waits and whether it was rejected.
//!
//! An upstream without pins is pinned whole at first sight. After that, a
//! listed definition whose fingerprint matches no pin of the upstream is
//! quarantined whatever its name: `changed` when its id is pinned to
//! another definition, `renamed` when a pinned id is no longer listed (it
//! is compared with the closest such pin), else `new`. A new id whose
//! fingerprint equals a pin is that tool renamed: it serves, pinned under
//! the new id.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::protocol::fingerprint::{Seen, pretty};

/// One tool's pin: what it is pinned to (nothing yet for a tool that has
/// only waited for review), and what waits.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<Value>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "pending_of_any_file"
    )]
    pub pending: Option<Pending>,
}

/// A definition waiting for review.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pending {
    pub fingerprint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<Value>,
    #[serde(default)]
    pub reason: Reason,
    #[serde(default)]
    pub state: State,
    /// The pinned tool it was compared with (`renamed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compared: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    #[default]
    Changed,
    Renamed,
    New,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    #[default]
    Pending,
    Rejected,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Changed => "changed",
            Reason::Renamed => "renamed",
            Reason::New => "new",
        }
    }
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Rejected => "rejected",
        }
    }
}

/// Older files wrote a pending fingerprint alone, as a string.
fn pending_of_any_file<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Pending>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Any {
        Old(String),
        New(Pending),
    }
    Ok(match Option::<Any>::deserialize(d)? {
        None => None,
        Some(Any::New(p)) => Some(p),
        Some(Any::Old(fingerprint)) => Some(Pending {
            fingerprint,
            definition: None,
            reason: Reason::Changed,
            state: State::Pending,
            compared: None,
        }),
    })
}

/// An upstream's pins, by the tool's own id. Sorted, so files diff cleanly.
pub type UpstreamPins = BTreeMap<String, Pin>;

/// What a check of a listing came to.
#[derive(Debug, Default, PartialEq)]
pub struct Checked {
    /// The ids quarantined, with why.
    pub quarantined: Vec<(String, Reason)>,
    /// Whether the pins changed (and must be written).
    pub changed: bool,
}

impl Checked {
    pub fn ids(&self) -> HashSet<String> {
        self.quarantined.iter().map(|(id, _)| id.clone()).collect()
    }
}

/// Checks a listing against an upstream's pins, updating them.
pub fn check(pins: &mut UpstreamPins, seen: &[Seen]) -> Checked {
    let mut out = Checked::default();
    if pins.is_empty() {
        for s in seen {
            pins.insert(s.id.clone(), pinned(s));
        }
        out.changed = !seen.is_empty();
        return out;
    }
    let before = pins.clone();
    let listed: HashSet<&str> = seen.iter().map(|s| s.id.as_str()).collect();
    for s in seen {
        if let Err(reason) = check_one(pins, s, &listed) {
            out.quarantined.push((s.id.clone(), reason));
        }
    }
    // What waited under an id no longer listed waits no more.
    pins.retain(|id, pin| pin.fingerprint.is_some() || listed.contains(id.as_str()));
    for (id, pin) in pins.iter_mut() {
        if !listed.contains(id.as_str()) {
            pin.pending = None;
        }
    }
    out.changed = *pins != before;
    out
}

fn pinned(s: &Seen) -> Pin {
    Pin {
        fingerprint: Some(s.fingerprint.clone()),
        definition: Some(s.definition.clone()),
        pending: None,
    }
}

/// `Ok`: the tool serves; `Err(reason)`: it waits for review (its pending
/// definition recorded, a rejection of the same one kept).
fn check_one(pins: &mut UpstreamPins, s: &Seen, listed: &HashSet<&str>) -> Result<(), Reason> {
    if let Some(pin) = pins.get_mut(&s.id)
        && let Some(print) = &pin.fingerprint
    {
        if *print == s.fingerprint || *print == s.legacy {
            // Pinned to this definition (an older file's formula is rewritten).
            *pin = pinned(s);
            return Ok(());
        }
        wait(pin, s, Reason::Changed, None);
        return Err(Reason::Changed);
    }
    // Not pinned under this id: the same definition pinned under another
    // is the tool renamed.
    let same = pins
        .iter()
        .find(|(_, p)| p.fingerprint.as_deref() == Some(s.fingerprint.as_str()))
        .map(|(id, _)| id.clone());
    if let Some(old) = same {
        if !listed.contains(old.as_str()) {
            pins.remove(&old);
        }
        pins.insert(s.id.clone(), pinned(s));
        return Ok(());
    }
    let gone = closest_gone(pins, s, listed);
    let reason = if gone.is_some() {
        Reason::Renamed
    } else {
        Reason::New
    };
    wait(pins.entry(s.id.clone()).or_default(), s, reason, gone);
    Err(reason)
}

/// Records `s` as the definition waiting under `pin`, unless it already is
/// (a rejection of it stands).
fn wait(pin: &mut Pin, s: &Seen, reason: Reason, compared: Option<String>) {
    if let Some(p) = &mut pin.pending
        && p.fingerprint == s.fingerprint
    {
        p.definition = Some(s.definition.clone());
        p.reason = reason;
        p.compared = compared;
        return;
    }
    pin.pending = Some(Pending {
        fingerprint: s.fingerprint.clone(),
        definition: Some(s.definition.clone()),
        reason,
        state: State::Pending,
        compared,
    });
}

/// Of the pinned tools no longer listed, the one whose definition is most
/// like `s`'s.
fn closest_gone(pins: &UpstreamPins, s: &Seen, listed: &HashSet<&str>) -> Option<String> {
    let mine = pretty(&crate::protocol::fingerprint::nameless(&s.definition));
    pins.iter()
        .filter(|(id, p)| p.fingerprint.is_some() && !listed.contains(id.as_str()))
        .map(|(id, p)| {
            let theirs = p
                .definition
                .as_ref()
                .map(|d| pretty(&crate::protocol::fingerprint::nameless(d)))
                .unwrap_or_default();
            let ratio = similar::TextDiff::from_lines(&theirs, &mine).ratio();
            (id, ratio)
        })
        .max_by(|a, b| a.1.total_cmp(&b.1).then_with(|| b.0.cmp(a.0)))
        .map(|(id, _)| id.clone())
}

/// Why a review decision could not be made.
#[derive(Debug, PartialEq, Eq)]
pub enum Undecided {
    /// Nothing of that tool waits for review.
    Nothing,
    /// Another definition waits than the one reviewed: its fingerprint.
    Other(String),
}

/// A decision on what waits under `tool`: approving pins it (and lets go
/// of the pin a renamed tool was compared with); rejecting keeps it
/// quarantined. `fingerprint`: the definition reviewed, when the reviewer
/// names it. The fingerprint decided.
pub fn decide(
    pins: &mut UpstreamPins,
    tool: &str,
    fingerprint: Option<&str>,
    approve: bool,
) -> Result<String, Undecided> {
    let pin = pins.get_mut(tool).ok_or(Undecided::Nothing)?;
    let pending = pin.pending.as_mut().ok_or(Undecided::Nothing)?;
    if let Some(reviewed) = fingerprint
        && reviewed != pending.fingerprint
    {
        return Err(Undecided::Other(pending.fingerprint.clone()));
    }
    let print = pending.fingerprint.clone();
    if !approve {
        pending.state = State::Rejected;
        return Ok(print);
    }
    let Some(pending) = pin.pending.take() else {
        return Err(Undecided::Nothing);
    };
    pin.fingerprint = Some(pending.fingerprint);
    pin.definition = pending.definition;
    if let Some(compared) = pending.compared.filter(|c| c != tool) {
        pins.remove(&compared);
    }
    Ok(print)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, description: &str) -> Seen {
        Seen::of(
            name,
            json!({"name": name, "description": description, "inputSchema": {"type": "object"}}),
        )
    }

    #[test]
    fn first_sight_pins_and_a_change_waits_as_changed() {
        let mut pins = UpstreamPins::new();
        let v1 = [tool("a", "A."), tool("b", "B.")];
        assert!(check(&mut pins, &v1).quarantined.is_empty());
        assert_eq!(pins.len(), 2);
        let v2 = [tool("a", "A."), tool("b", "B, and more.")];
        let checked = check(&mut pins, &v2);
        assert_eq!(checked.quarantined, [("b".to_owned(), Reason::Changed)]);
        let again = check(&mut pins, &v2);
        assert_eq!(again.quarantined, checked.quarantined);
        assert!(!again.changed, "the same wait is not written again");
        // Back to the pinned definition: it serves, nothing waits.
        assert!(check(&mut pins, &v1).quarantined.is_empty());
        assert_eq!(pins["b"].pending, None);
    }

    #[test]
    fn a_rename_alone_serves_and_a_rename_with_a_change_waits() {
        let mut pins = UpstreamPins::new();
        check(&mut pins, &[tool("read", "Reads."), tool("list", "Lists.")]);
        // Renamed, unchanged: pinned under the new id.
        let renamed = [tool("read_file", "Reads."), tool("list", "Lists.")];
        assert!(check(&mut pins, &renamed).quarantined.is_empty());
        assert!(pins.contains_key("read_file") && !pins.contains_key("read"));
        // Renamed and changed: compared with the pin no longer listed.
        let laundered = [
            tool("fetch_file", "Reads, and mails it out."),
            tool("list", "Lists."),
        ];
        let checked = check(&mut pins, &laundered);
        assert_eq!(
            checked.quarantined,
            [("fetch_file".to_owned(), Reason::Renamed)]
        );
        let pending = pins["fetch_file"].pending.as_ref().unwrap();
        assert_eq!(pending.compared.as_deref(), Some("read_file"));
        // A new tool beside every pinned one listed: new.
        let more = [
            tool("read_file", "Reads."),
            tool("list", "Lists."),
            tool("wipe", "Wipes."),
        ];
        let checked = check(&mut pins, &more);
        assert_eq!(checked.quarantined, [("wipe".to_owned(), Reason::New)]);
        assert!(
            !pins.contains_key("fetch_file"),
            "what no longer lists waits no more"
        );
    }

    #[test]
    fn decisions_name_what_they_reviewed() {
        let mut pins = UpstreamPins::new();
        check(&mut pins, &[tool("read", "Reads.")]);
        let changed = tool("read", "Reads, and more.");
        check(&mut pins, std::slice::from_ref(&changed));
        assert_eq!(
            decide(&mut pins, "nope", None, true),
            Err(Undecided::Nothing)
        );
        assert_eq!(
            decide(&mut pins, "read", Some("sha256:other"), true),
            Err(Undecided::Other(changed.fingerprint.clone()))
        );
        assert!(decide(&mut pins, "read", Some(&changed.fingerprint), false).is_ok());
        let checked = check(&mut pins, std::slice::from_ref(&changed));
        assert_eq!(
            checked.quarantined.len(),
            1,
            "a rejected definition stays out"
        );
        assert_eq!(
            pins["read"].pending.as_ref().unwrap().state,
            State::Rejected
        );
        assert!(decide(&mut pins, "read", None, true).is_ok());
        assert!(check(&mut pins, &[changed]).quarantined.is_empty());
    }

    #[test]
    fn an_older_file_is_read_and_rewritten_silently() {
        let old = json!({"up": {"read": {"fingerprint": "LEGACY", "pending": "sha256:9"}}});
        let read = tool("read", "Reads.");
        let text = old.to_string().replace("LEGACY", &read.legacy);
        let mut file: BTreeMap<String, UpstreamPins> = serde_json::from_str(&text).unwrap();
        let pins = file.get_mut("up").unwrap();
        assert_eq!(
            pins["read"].pending.as_ref().unwrap().fingerprint,
            "sha256:9"
        );
        let checked = check(pins, std::slice::from_ref(&read));
        assert!(checked.quarantined.is_empty() && checked.changed);
        assert_eq!(
            pins["read"].fingerprint.as_deref(),
            Some(read.fingerprint.as_str())
        );
        assert_eq!(pins["read"].pending, None);
    }
}
