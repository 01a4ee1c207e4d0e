//! A JSON value read for schema validation only: strings borrowed from the
//! request's text where they hold no escapes, objects as one sorted vector.
//!
//! Validating a tool call's arguments and its output needs the values as a
//! tree. As a `serde_json::Value` every key and every string is its own
//! allocation and every object a B-tree; the call's JSON is then dropped
//! unread, since what is forwarded is the agent's and the upstream's own
//! text. This tree borrows what it can and holds an object's members in one
//! vector, sorted by key, as a `Value`'s map would hold them: the validator
//! sees the same members in the same order and reports the same errors. An
//! object that names a member twice is refused (what is validated must be
//! what is forwarded, and parsers disagree on which of the two counts). The parser is serde_json's, so what is
//! accepted, numbers, and the nesting limit are unchanged too.
//!
//! Longer than most files for its tests (about 150 lines, among them the
//! validator's own conformance contract).

use std::borrow::Cow;
use std::fmt;

use jsonschema::JsonType;
use jsonschema::json::{Array, Json, Node, NodeIdentity, Object};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value};

use crate::jsonrpc::scan::Scanner;

/// One JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Instance<'a> {
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, str>),
    Array(Vec<Instance<'a>>),
    /// Sorted by key; each key once (an object that names a member twice is refused).
    Object(Vec<(Cow<'a, str>, Instance<'a>)>),
}

/// Nesting read in one pass; deeper values are read by serde (which refuses past 128).
const FAST_DEPTH: u32 = 64;

impl<'a> Instance<'a> {
    /// Reads JSON text, borrowing from it. The usual value is read in one pass
    /// over the bytes; strings with escapes and numbers other than plain
    /// integers are decoded by serde_json, and whatever that pass does not take
    /// (invalid text, deep nesting) is read by serde_json whole, so that what is
    /// accepted, the values and the errors are serde_json's.
    pub fn parse(text: &'a str) -> serde_json::Result<Self> {
        match Self::read(text) {
            Some(value) => Ok(value),
            None => serde_json::from_str(text),
        }
    }

    /// The one-pass reading: `None` for anything it does not take.
    pub(crate) fn read(text: &'a str) -> Option<Self> {
        let mut s = Scanner::new(text);
        let value = read_value(&mut s, text, FAST_DEPTH)?;
        s.ws();
        s.at_end().then_some(value)
    }

    /// The same value as a `serde_json::Value` (for error messages).
    pub fn to_value(&self) -> Value {
        match self {
            Instance::Null => Value::Null,
            Instance::Bool(b) => Value::Bool(*b),
            Instance::Number(n) => Value::Number(n.clone()),
            Instance::String(s) => Value::String(s.clone().into_owned()),
            Instance::Array(items) => Value::Array(items.iter().map(Instance::to_value).collect()),
            Instance::Object(members) => Value::Object(
                members
                    .iter()
                    .map(|(k, v)| (k.clone().into_owned(), v.to_value()))
                    .collect(),
            ),
        }
    }
}

fn read_value<'a>(s: &mut Scanner<'a>, text: &'a str, depth: u32) -> Option<Instance<'a>> {
    s.ws();
    let start = s.i;
    match s.next()? {
        b'{' => {
            let depth = depth.checked_sub(1)?;
            let mut members = Vec::new();
            s.members(|s, key, escaped| {
                let key = string_text(text, key, escaped)?;
                members.push((key, read_value(s, text, depth)?));
                Some(())
            })?;
            // A duplicate is left to serde, which gives it its error.
            object(members).ok()
        }
        b'[' => {
            let depth = depth.checked_sub(1)?;
            let mut items = Vec::new();
            s.ws();
            if s.peek() == Some(b']') {
                s.i += 1;
            } else {
                loop {
                    items.push(read_value(s, text, depth)?);
                    s.ws();
                    match s.next()? {
                        b',' => {}
                        b']' => break,
                        _ => return None,
                    }
                }
            }
            Some(Instance::Array(items))
        }
        b'"' => {
            let (start, escaped) = s.string()?;
            string_text(text, start..s.i - 1, escaped).map(Instance::String)
        }
        b'-' | b'0'..=b'9' => {
            s.i = start;
            s.number()?;
            let number = text.get(start..s.i)?;
            let digits = number.strip_prefix('-').unwrap_or(number);
            // Plain integers as serde_json reads them (`-0` is its float -0.0:
            // left to it, like fractions and exponents).
            let n = match digits.parse::<u64>() {
                Ok(n) if digits.len() < 20 && !number.starts_with('-') => Number::from(n),
                Ok(n) if digits.len() < 19 && n > 0 => Number::from(-i64::try_from(n).ok()?),
                _ => serde_json::from_str::<Number>(number).ok()?,
            };
            Some(Instance::Number(n))
        }
        b't' => s.literal(b"rue").map(|()| Instance::Bool(true)),
        b'f' => s.literal(b"alse").map(|()| Instance::Bool(false)),
        b'n' => s.literal(b"ull").map(|()| Instance::Null),
        _ => None,
    }
}

/// A string's value from where its text is (between its quotes): borrowed
/// without escapes, decoded by serde_json with them (which refuses lone surrogates).
fn string_text(text: &str, at: std::ops::Range<usize>, escaped: bool) -> Option<Cow<'_, str>> {
    if escaped {
        let quoted = text.get(at.start - 1..at.end + 1)?;
        serde_json::from_str::<String>(quoted).ok().map(Cow::Owned)
    } else {
        text.get(at).map(Cow::Borrowed)
    }
}

/// An object of members sorted by key; `Err` with the name of a member that
/// occurs twice. Such an object is refused rather than read last-wins: the
/// text is forwarded as it came, and a parser that keeps the first of two
/// members would see a value the schema never checked.
fn object<'a>(
    mut members: Vec<(Cow<'a, str>, Instance<'a>)>,
) -> Result<Instance<'a>, Cow<'a, str>> {
    if !members.is_sorted_by(|a, b| a.0 < b.0) {
        members.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(pair) = members.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(pair[0].0.clone());
        }
    }
    Ok(Instance::Object(members))
}

/// The error of an object with a member named twice.
pub fn duplicate_member(name: &str) -> String {
    format!("the member {name:?} occurs twice in one object")
}

impl<'de: 'a, 'a> Deserialize<'de> for Instance<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(InstanceVisitor)
    }
}

struct InstanceVisitor;

impl<'de> Visitor<'de> for InstanceVisitor {
    type Value = Instance<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Instance::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Instance::Bool(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Instance::Number(v.into()))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Instance::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        // As `Value` does: JSON text cannot hold a non-finite number.
        Ok(Number::from_f64(v).map_or(Instance::Null, Instance::Number))
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Instance::String(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Instance::String(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Instance::String(Cow::Owned(v)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Instance::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::new();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            members.push((key.0, map.next_value()?));
        }
        object(members).map_err(|name| serde::de::Error::custom(duplicate_member(&name)))
    }
}

/// An object key, borrowed when it holds no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// [`Instance`] as a representation the `jsonschema` validator reads.
pub struct InstanceJson;

impl Json for InstanceJson {
    type Node<'a> = &'a Instance<'a>;
    type PreparedKey = String;
    type StringBuffer = ();
    const ACYCLIC: bool = true;

    fn prepare_key(key: &str) -> String {
        key.to_owned()
    }

    fn with_string_node<T>((): &mut (), string: &str, f: impl FnOnce(Self::Node<'_>) -> T) -> T {
        f(&Instance::String(Cow::Borrowed(string)))
    }
}

impl<'a> Node<'a, InstanceJson> for &'a Instance<'a> {
    type Object = &'a [(Cow<'a, str>, Instance<'a>)];
    type Array = &'a [Instance<'a>];
    type Number = &'a Number;

    fn as_object(&self) -> Option<Self::Object> {
        match self {
            Instance::Object(members) => Some(members),
            _ => None,
        }
    }

    fn as_array(&self) -> Option<Self::Array> {
        match self {
            Instance::Array(items) => Some(items),
            _ => None,
        }
    }

    fn as_string(&self) -> Option<Cow<'a, str>> {
        match self {
            Instance::String(s) => Some(Cow::Borrowed(s.as_ref())),
            _ => None,
        }
    }

    fn as_number(&self) -> Option<&'a Number> {
        match self {
            Instance::Number(n) => Some(n),
            _ => None,
        }
    }

    fn as_boolean(&self) -> Option<bool> {
        match self {
            Instance::Bool(b) => Some(*b),
            _ => None,
        }
    }

    fn is_null(&self) -> bool {
        matches!(self, Instance::Null)
    }

    fn json_type(&self) -> JsonType {
        match self {
            Instance::Null => JsonType::Null,
            Instance::Bool(_) => JsonType::Boolean,
            Instance::Number(_) => JsonType::Number,
            Instance::String(_) => JsonType::String,
            Instance::Array(_) => JsonType::Array,
            Instance::Object(_) => JsonType::Object,
        }
    }

    fn to_value(&self) -> Cow<'a, Value> {
        Cow::Owned(Instance::to_value(self))
    }

    fn identity(&self) -> Option<NodeIdentity> {
        Some(NodeIdentity::new(
            std::ptr::from_ref::<Instance<'a>>(*self) as usize
        ))
    }
}

pub struct Members<'a>(std::slice::Iter<'a, (Cow<'a, str>, Instance<'a>)>);

impl<'a> Iterator for Members<'a> {
    type Item = (&'a str, &'a Instance<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, v)| (k.as_ref(), v))
    }
}

impl<'a> Object<'a, InstanceJson> for &'a [(Cow<'a, str>, Instance<'a>)] {
    type Node = &'a Instance<'a>;
    type MemberName = &'a str;
    type MembersIter = Members<'a>;

    fn len(&self) -> usize {
        <[_]>::len(self)
    }

    fn get(&self, key: &String) -> Option<&'a Instance<'a>> {
        self.binary_search_by(|(k, _)| k.as_ref().cmp(key.as_str()))
            .ok()
            .map(|i| &self[i].1)
    }

    fn members(&self) -> Members<'a> {
        Members(self.iter())
    }
}

impl<'a> Array<'a, InstanceJson> for &'a [Instance<'a>] {
    type Node = &'a Instance<'a>;
    type ElementsIter = std::slice::Iter<'a, Instance<'a>>;

    fn len(&self) -> usize {
        <[_]>::len(self)
    }

    fn elements(&self) -> Self::ElementsIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests;
