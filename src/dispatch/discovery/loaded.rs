//! `load_tools`: the tools a session added to its search listing. Where
//! they are kept is the session's business (this replica's memory for a
//! session over one connection; the session's record, and the store, for
//! the handshake era's sessions over HTTP); what a load does to them is
//! decided here, the same for every kind of session.

use std::sync::{Mutex, PoisonError};

use futures_util::future::BoxFuture;
use serde_json::Value;

/// The most names one `load_tools` call takes.
pub const MAX_NAMES: usize = 20;

/// Where a session keeps the ids of the tools it loaded, oldest first.
pub trait SessionTools: Send + Sync {
    /// The ids loaded, oldest first.
    fn loaded(&self) -> BoxFuture<'_, Vec<String>>;
    /// Keeps `ids` as the loaded ones; why not, in words for the client.
    fn keep(&self, ids: Vec<String>) -> BoxFuture<'_, Result<(), String>>;
}

/// A session's loaded tools in this process's memory: a session that
/// lives on one connection (`mcp-gateway stdio`, a session over HTTP of
/// newline-delimited messages) and ends with it.
#[derive(Default)]
pub struct LoadedHere(Mutex<Vec<String>>);

impl SessionTools for LoadedHere {
    fn loaded(&self) -> BoxFuture<'_, Vec<String>> {
        let ids = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Box::pin(std::future::ready(ids))
    }

    fn keep(&self, ids: Vec<String>) -> BoxFuture<'_, Result<(), String>> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = ids;
        Box::pin(std::future::ready(Ok(())))
    }
}

/// `load_tools`' arguments: the names (or mcpIds) asked for, and whether
/// they replace those loaded.
pub struct LoadArgs {
    pub names: Vec<String>,
    pub replace: bool,
}

impl LoadArgs {
    /// `arguments` as load_tools takes them; why not, as a tool error says it.
    pub fn read(arguments: &Value) -> Result<LoadArgs, String> {
        let Some(args) = arguments.as_object() else {
            return Err("load_tools takes an object: {\"names\": [string]}".into());
        };
        if let Some(key) = args
            .keys()
            .find(|k| !matches!(k.as_str(), "names" | "replace"))
        {
            return Err(format!("load_tools takes no argument '{key}'"));
        }
        let replace = match args.get("replace") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("replace must be true or false".into()),
        };
        let names: Option<Vec<String>> =
            args.get("names").and_then(Value::as_array).and_then(|a| {
                a.iter()
                    .map(|n| n.as_str().filter(|n| !n.is_empty()).map(str::to_owned))
                    .collect()
            });
        let names = match names {
            Some(names) if names.len() <= MAX_NAMES && (replace || !names.is_empty()) => names,
            _ => {
                return Err(format!(
                    "names must be an array of 1 to {MAX_NAMES} tool names or mcpIds ([] only with replace: true)"
                ));
            }
        };
        Ok(LoadArgs { names, replace })
    }
}

/// The ids loaded after a load of `ids`: added to `current` (or in its
/// place, with `replace`), each once and where it was last asked for,
/// the earliest dropped past `max`.
pub fn after_load(
    current: Vec<String>,
    ids: Vec<String>,
    replace: bool,
    max: usize,
) -> Vec<String> {
    let mut loaded = if replace { Vec::new() } else { current };
    for id in ids {
        loaded.retain(|l| *l != id);
        loaded.push(id);
    }
    let past = loaded.len().saturating_sub(max);
    loaded.drain(..past);
    loaded
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_load_adds_once_and_drops_the_earliest_past_the_bound() {
        let loaded = after_load(ids(&["a", "b"]), ids(&["c", "a"]), false, 3);
        assert_eq!(loaded, ids(&["b", "c", "a"]));
        let loaded = after_load(loaded, ids(&["d"]), false, 3);
        assert_eq!(loaded, ids(&["c", "a", "d"]));
        assert_eq!(
            after_load(loaded.clone(), ids(&["x"]), true, 3),
            ids(&["x"])
        );
        assert!(after_load(loaded, Vec::new(), true, 3).is_empty());
    }

    #[test]
    fn arguments_are_read_strictly() {
        let ok = LoadArgs::read(&json!({"names": ["a", "mcp://gw/u/tool/b"]})).unwrap();
        assert_eq!(ok.names.len(), 2);
        assert!(!ok.replace);
        assert!(LoadArgs::read(&json!({"names": [], "replace": true})).is_ok());
        for bad in [
            json!({"names": []}),
            json!({"names": "a"}),
            json!({"names": [""]}),
            json!({"names": [1]}),
            json!({"names": ["a"], "replace": "yes"}),
            json!({"names": ["a"], "more": 1}),
            json!({"names": vec!["a"; MAX_NAMES + 1]}),
            json!(["a"]),
        ] {
            assert!(LoadArgs::read(&bad).is_err(), "{bad}");
        }
    }
}
