//! A configuration as a typed value, for a test that needs one a little
//! different from another: parsed from the YAML its builder wrote, changed
//! by dotted path (`upstreams.d.required`), and written back as JSON, which
//! is YAML too. A path that names nothing panics with the path, so a test
//! cannot quietly run the configuration it started from, as a string
//! replacement that no longer matches would.

use serde::Serialize;
use serde_json::{Map, Value};

pub struct Doc(Value);

impl Doc {
    /// The YAML of a whole configuration, or of one part of it (an
    /// upstream's flow mapping).
    pub fn parse(yaml: &str) -> Doc {
        match serde_saphyr::from_str::<Value>(yaml) {
            Ok(v) => Doc(v),
            Err(e) => panic!("not YAML ({e}):\n{yaml}"),
        }
    }

    /// A configuration (or a part of one) built as a value.
    pub fn of(value: Value) -> Doc {
        Doc(value)
    }

    /// Sets the value at `path`; the mapping that holds its last key must exist.
    pub fn set(mut self, path: &str, value: impl Serialize) -> Doc {
        let (parent, last) = split(path);
        let value = serde_json::to_value(value).unwrap();
        self.mapping(parent, path).insert(last.to_string(), value);
        self
    }

    /// Removes the key at `path`, which must be there.
    pub fn remove(mut self, path: &str) -> Doc {
        let (parent, last) = split(path);
        if self.mapping(parent, path).remove(last).is_none() {
            panic!("no {path} to remove in {}", self.0);
        }
        self
    }

    /// The configuration as YAML (JSON, YAML's flow style, on one line: it
    /// fits where an upstream's flow mapping went).
    pub fn yaml(&self) -> String {
        self.0.to_string()
    }

    fn mapping(&mut self, parent: &str, path: &str) -> &mut Map<String, Value> {
        let shown = self.0.to_string();
        let mut at = &mut self.0;
        for key in parent.split('.').filter(|k| !k.is_empty()) {
            at = match at {
                Value::Object(m) => m.get_mut(key),
                Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
                _ => None,
            }
            .unwrap_or_else(|| panic!("no {parent} (for {path}) in {shown}"));
        }
        match at {
            Value::Object(m) => m,
            _ => panic!("{parent} (for {path}) is not a mapping in {shown}"),
        }
    }
}

impl serde::Serialize for Doc {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl std::fmt::Display for Doc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.yaml())
    }
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('.').unwrap_or(("", path))
}
