//! JSON text passed through by reference, and a validating scanner that finds
//! the members of an object in one pass without building anything.
//!
//! The gateway looks inside a message only at its envelope (`jsonrpc`, `id`,
//! `method`, `params`, `result`, `error`) and at a call's `params`: everything
//! else is forwarded as the text it came as. serde_json's `RawValue` does that
//! too, but finding six members through serde's derived visitor cost more than
//! the rest of the call's JSON work; [`object`] does it with one loop over the
//! bytes. It accepts only what serde_json accepts and answers exactly what
//! serde would (the envelope fuzz target and the tests below hold it to that);
//! whatever it does not handle itself (a duplicate member, a key with escapes,
//! nesting deeper than [`MAX_DEPTH`]) it declines, and the caller reads the
//! message with serde instead, which gives those their proper answers.
//!
//! Here the text types and what callers ask (an object's members, an
//! array's elements); the scanner itself, the grammar's states kept together
//! so that each byte is looked at once, is `scanner`.

use serde_json::value::RawValue;

mod scanner;
pub(crate) use scanner::Scanner;
use scanner::*;

/// Nesting the scanner follows; deeper values are left to serde.
const MAX_DEPTH: u32 = 128;

/// One JSON value as text, exactly as it arrived: never re-encoded, so ids and
/// numbers are echoed byte for byte. Made only from text known to be one valid
/// JSON value (a `RawValue`, or a value [`object`] scanned), without whitespace around it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Json<'a>(&'a str);

impl Json<'static> {
    /// `{}`, the empty object.
    pub const EMPTY_OBJECT: Json<'static> = Json("{}");
}

impl<'a> Json<'a> {
    /// The value's text.
    pub fn get(self) -> &'a str {
        self.0
    }

    /// An owned copy of the text.
    pub fn to_buf(self) -> JsonBuf {
        JsonBuf(self.0.into())
    }

    /// The first byte of the value, which says its type.
    pub(crate) fn first_byte(self) -> u8 {
        self.0.as_bytes().first().copied().unwrap_or(b' ')
    }
}

impl<'a> From<&'a RawValue> for Json<'a> {
    fn from(raw: &'a RawValue) -> Self {
        // serde_json's raw values hold no whitespace around the value.
        Json(raw.get())
    }
}

impl std::fmt::Debug for Json<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// One JSON value as owned text, exactly as it arrived (an upstream's answer).
#[derive(Clone, PartialEq, Eq)]
pub struct JsonBuf(Box<str>);

impl JsonBuf {
    /// The value's text.
    pub fn get(&self) -> &str {
        &self.0
    }

    /// The same text, borrowed.
    pub fn as_json(&self) -> Json<'_> {
        Json(&self.0)
    }

    /// Where `part`, a value found inside this text (by [`members_of`] or a
    /// borrowing serde read of it), lies in it.
    pub fn range_of(&self, part: Json<'_>) -> std::ops::Range<usize> {
        let start = (part.0.as_ptr() as usize).wrapping_sub(self.0.as_ptr() as usize);
        assert!(
            start <= self.0.len() && part.0.len() <= self.0.len() - start,
            "a part of another text"
        );
        start..start + part.0.len()
    }

    /// The value at `range`, one that [`Self::range_of`] gave.
    pub fn sub(&self, range: std::ops::Range<usize>) -> Json<'_> {
        Json(&self.0[range])
    }
}

impl From<Box<RawValue>> for JsonBuf {
    fn from(raw: Box<RawValue>) -> Self {
        JsonBuf(raw.into())
    }
}

impl std::fmt::Debug for JsonBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Scans `text` as exactly one JSON object (whitespace around it allowed) and
/// returns the value of each member named in `keys`, `None` for those absent.
/// Returns `None` when the text is not one valid JSON object, and also, to be
/// read by serde instead, when a named member occurs twice, a key holds an
/// escape, or values nest deeper than [`MAX_DEPTH`].
// Inlined, so that the keys are constants where they are compared (every
// message's envelope is read here).
#[inline(always)]
pub(crate) fn object<'a, const N: usize>(
    text: &'a str,
    keys: [&str; N],
) -> Option<[Option<Json<'a>>; N]> {
    let mut s = Scanner::new(text);
    let mut found = [None; N];
    s.ws();
    s.eat(b'{')?;
    s.members(|s, key, escaped| {
        if escaped {
            return None;
        }
        let value = s.i;
        s.value()?;
        let key = text.as_bytes().get(key)?;
        if let Some(k) = keys.iter().position(|k| k.as_bytes() == key) {
            if found[k].is_some() {
                return None;
            }
            found[k] = Some(Json(text.get(value..s.i)?));
        }
        Some(())
    })?;
    s.ws();
    s.at_end().then_some(found)
}

/// The members named `keys` of an object (`None` for those absent or when
/// it is not an object), read by serde where the fast scan declines (a key
/// with an escape, a member named twice: the last counts).
pub(crate) fn members<'a, const N: usize>(
    value: Option<Json<'a>>,
    keys: [&str; N],
) -> [Option<Json<'a>>; N] {
    let Some(v) = value else {
        return [None; N];
    };
    if let Some(found) = members_of(v, keys) {
        return found;
    }
    type Members<'a> =
        std::collections::HashMap<std::borrow::Cow<'a, str>, &'a serde_json::value::RawValue>;
    match serde_json::from_str::<Members<'a>>(v.get()) {
        Ok(map) => keys.map(|k| map.get(k).map(|raw| Json::from(*raw))),
        Err(_) => [None; N],
    }
}

/// Like [`object`], for a value already known to be valid JSON (every [`Json`]
/// is): the members are found without checking the grammar a second time.
/// Strings are skipped to their closing quote and values to where they end,
/// which is all a valid text needs. Returns `None` when the value is not an
/// object, and, to be read by serde instead, when a named member occurs twice
/// or a key holds an escape.
pub(crate) fn members_of<'a, const N: usize>(
    value: Json<'a>,
    keys: [&str; N],
) -> Option<[Option<Json<'a>>; N]> {
    let text = value.get();
    let b = text.as_bytes();
    if b.first() != Some(&b'{') {
        return None;
    }
    let mut found = [None; N];
    walk_object(b, 0, |key, start| {
        let end = skip_value(b, start)?;
        record(&mut found, named(&keys, key), text, start..end)
    })?;
    Some(found)
}

/// [`members`] of an object and, in the same pass, of the object that is its
/// member `keys[nested]` (a request's params and their `_meta`): the inner
/// object is read where it stands instead of being skipped and read again.
/// Whatever the one pass declines is read as [`members`] reads it.
#[inline(always)]
pub(crate) fn members_nested<'a, const N: usize, const M: usize>(
    value: Option<Json<'a>>,
    keys: [&str; N],
    nested: usize,
    inner: [&str; M],
) -> ([Option<Json<'a>>; N], [Option<Json<'a>>; M]) {
    let one_pass = value.and_then(|v| {
        let text = v.get();
        let b = text.as_bytes();
        if b.first() != Some(&b'{') {
            return None;
        }
        let mut found = [None; N];
        let mut within = [None; M];
        walk_object(b, 0, |key, start| {
            let k = named(&keys, key);
            let end = match (k, b.get(start)) {
                (Some(k), Some(b'{')) if k == nested => walk_object(b, start, |key, start| {
                    let end = skip_value(b, start)?;
                    record(&mut within, named(&inner, key), text, start..end)
                })?,
                _ => skip_value(b, start)?,
            };
            record(&mut found, k, text, start..end)
        })?;
        Some((found, within))
    });
    one_pass.unwrap_or_else(|| {
        let found = members(value, keys);
        (found, members(found[nested], inner))
    })
}

/// Which of `keys` a member's key (the bytes between its quotes) is.
#[inline(always)]
fn named<const N: usize>(keys: &[&str; N], key: &[u8]) -> Option<usize> {
    keys.iter().position(|k| k.as_bytes() == key)
}

/// Keeps the value at `at` in `text` as the member `keys[k]` found, and
/// returns where it ends; `None` when that member was found already (a
/// member named twice is left to serde, which keeps the last).
#[inline(always)]
fn record<'a, const N: usize>(
    found: &mut [Option<Json<'a>>; N],
    k: Option<usize>,
    text: &'a str,
    at: std::ops::Range<usize>,
) -> Option<usize> {
    let end = at.end;
    if let Some(k) = k {
        if found[k].is_some() {
            return None;
        }
        found[k] = Some(Json(text.get(at)?));
    }
    Some(end)
}

/// The members of the object whose `{` is at `b[i]`, in text known to be
/// valid JSON: `member` gets each key (the bytes between its quotes) and
/// where its value starts, and returns where the value ends, or `None` to
/// stop the walk. Returns the index past the object's `}`, or `None` when
/// `member` stopped or a key holds an escape.
#[inline(always)]
fn walk_object(
    b: &[u8],
    i: usize,
    mut member: impl FnMut(&[u8], usize) -> Option<usize>,
) -> Option<usize> {
    let mut i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return Some(i + 1);
    }
    loop {
        // A key: `i` is at its opening quote.
        let (end, escaped) = skip_string(b, i + 1)?;
        if escaped {
            return None;
        }
        let key = b.get(i + 1..end - 1)?;
        // Past the colon, to the value.
        i = member(key, skip_ws(b, skip_ws(b, end) + 1))?;
        i = skip_ws(b, i);
        match b.get(i)? {
            b',' => i = skip_ws(b, i + 1),
            _ => return Some(i + 1),
        }
    }
}

/// The elements of `value`, an array already known to be valid JSON (as for
/// [`members_of`]); `None` when it is not an array.
pub(crate) fn elements_of(value: Json<'_>) -> Option<impl Iterator<Item = Json<'_>>> {
    let text = value.get();
    let b = text.as_bytes();
    if b.first() != Some(&b'[') {
        return None;
    }
    let mut i = skip_ws(b, 1);
    let mut done = b.get(i) == Some(&b']');
    Some(std::iter::from_fn(move || {
        if done {
            return None;
        }
        let start = i;
        let end = skip_value(b, i)?;
        i = skip_ws(b, end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            _ => done = true,
        }
        Some(Json(text.get(start..end)?))
    }))
}

#[cfg(test)]
mod tests;
