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
//! Longer than most files: one scanner, the grammar's states kept together so
//! that each byte is looked at once; about 230 of its lines are its tests.

use serde_json::value::RawValue;

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

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// Past the string whose content starts at `i` (after its opening quote): the
/// index after its closing quote, and whether it holds escapes.
fn skip_string(b: &[u8], mut i: usize) -> Option<(usize, bool)> {
    let mut escaped = false;
    loop {
        match b.get(i..i + 8) {
            Some(chunk) => {
                let word = u64::from_le_bytes(chunk.try_into().ok()?);
                match first_stop(word) {
                    Some(k) => i += k,
                    None => {
                        i += 8;
                        continue;
                    }
                }
            }
            None => {
                while !STRING_STOP[usize::from(*b.get(i)?)] {
                    i += 1;
                }
            }
        }
        match b.get(i)? {
            b'"' => return Some((i + 1, escaped)),
            // The escaped byte is never the closing quote.
            b'\\' => {
                escaped = true;
                i += 2;
            }
            // A control character cannot be here in valid JSON; passed over.
            _ => i += 1,
        }
    }
}

/// Past the value that starts at `i`: the index right after it.
fn skip_value(b: &[u8], mut i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => skip_string(b, i + 1).map(|(end, _)| end),
        b'{' | b'[' => {
            let mut depth = 0u32;
            loop {
                match b.get(i)? {
                    b'"' => {
                        i = skip_string(b, i + 1)?.0;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        // A number or a literal: up to what ends it.
        _ => {
            while let Some(c) = b.get(i) {
                if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                    break;
                }
                i += 1;
            }
            Some(i)
        }
    }
}

/// A position in JSON text, and the steps to read it (also used by
/// [`crate::protocol::instance`] to read a value in one pass).
pub(crate) struct Scanner<'a> {
    b: &'a [u8],
    pub(crate) i: usize,
}

/// Bytes that end the plain run of a string: a quote, a backslash, or a control
/// character (which JSON forbids unescaped).
static STRING_STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        t[c] = true;
        c += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Where the first byte of [`STRING_STOP`] is among the eight bytes of `word`
/// (read little-endian), if any: the classic tests for a byte below n and for
/// a zero byte, whose lowest flagged byte is exact (a borrow only runs upward).
fn first_stop(word: u64) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGH;
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let flagged = below(word, 0x20) | below(quote, 1) | below(backslash, 1);
    (flagged != 0).then(|| (flagged.trailing_zeros() / 8) as usize)
}

impl<'a> Scanner<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Scanner {
            b: text.as_bytes(),
            i: 0,
        }
    }

    /// Whether the whole text was read.
    pub(crate) fn at_end(&self) -> bool {
        self.i == self.b.len()
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    pub(crate) fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    pub(crate) fn eat(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    /// JSON's whitespace: space, tab, line feed and carriage return, nothing else.
    pub(crate) fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// The rest of a string whose opening quote was read: where its content
    /// starts, and whether it holds escapes. Leaves the position after the closing quote.
    pub(crate) fn string(&mut self) -> Option<(usize, bool)> {
        let start = self.i;
        let mut escaped = false;
        loop {
            // Past the plain bytes, eight at a time, to the next stop.
            loop {
                match self.b.get(self.i..self.i + 8) {
                    Some(chunk) => {
                        let word = u64::from_le_bytes(chunk.try_into().ok()?);
                        if let Some(k) = first_stop(word) {
                            self.i += k;
                            break;
                        }
                        self.i += 8;
                    }
                    None => {
                        while !STRING_STOP[usize::from(self.peek()?)] {
                            self.i += 1;
                        }
                        break;
                    }
                }
            }
            let c = self.next()?;
            match c {
                b'"' => return Some((start, escaped)),
                b'\\' => {
                    escaped = true;
                    match self.next()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => {
                            let hex = self.b.get(self.i..self.i + 4)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.i += 4;
                        }
                        _ => return None,
                    }
                }
                _ => return None, // a control character
            }
        }
    }

    fn digits(&mut self) -> Option<()> {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        (self.i > start).then_some(())
    }

    /// A number: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    pub(crate) fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => {
                while let Some(b'0'..=b'9') = self.peek() {
                    self.i += 1;
                }
            }
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            self.digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            self.digits()?;
        }
        Some(())
    }

    pub(crate) fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.b.get(self.i..self.i + word.len())? != word {
            return None;
        }
        self.i += word.len();
        Some(())
    }

    /// The members of an object whose `{` was read, up to its `}`: `member`
    /// gets the scanner at each value, with where the key's text is (between
    /// its quotes) and whether it holds escapes, and reads the value.
    // Inlined into each caller with its closure, which then compiles into
    // the loop instead of being called once per member.
    #[inline(always)]
    pub(crate) fn members(
        &mut self,
        mut member: impl FnMut(&mut Self, std::ops::Range<usize>, bool) -> Option<()>,
    ) -> Option<()> {
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Some(());
        }
        loop {
            self.eat(b'"')?;
            let (start, escaped) = self.string()?;
            let key = start..self.i - 1;
            self.ws();
            self.eat(b':')?;
            self.ws();
            member(self, key, escaped)?;
            self.ws();
            match self.next()? {
                b',' => self.ws(),
                b'}' => return Some(()),
                _ => return None,
            }
        }
    }

    /// A key and its colon, inside an object, before its value.
    fn key(&mut self) -> Option<()> {
        self.eat(b'"')?;
        self.string()?;
        self.ws();
        self.eat(b':')
    }

    /// One value of any kind, nested to at most [`MAX_DEPTH`], without recursion:
    /// the open containers are a stack of bits (1 for an object).
    fn value(&mut self) -> Option<()> {
        let mut open: u128 = 0;
        let mut depth: u32 = 0;
        loop {
            // A value is expected here.
            self.ws();
            match self.next()? {
                c @ (b'{' | b'[') => {
                    self.ws();
                    let close = if c == b'{' { b'}' } else { b']' };
                    if self.peek() == Some(close) {
                        self.i += 1;
                    } else {
                        if depth == MAX_DEPTH {
                            return None;
                        }
                        open = (open << 1) | u128::from(c == b'{');
                        depth += 1;
                        if c == b'{' {
                            self.key()?;
                        }
                        continue;
                    }
                }
                b'"' => {
                    self.string()?;
                }
                b'-' | b'0'..=b'9' => {
                    self.i -= 1;
                    self.number()?;
                }
                b't' => self.literal(b"rue")?,
                b'f' => self.literal(b"alse")?,
                b'n' => self.literal(b"ull")?,
                _ => return None,
            }
            // A value ended: close what it ends, or go on to the next one.
            loop {
                if depth == 0 {
                    return Some(());
                }
                let in_object = open & 1 == 1;
                self.ws();
                match self.next()? {
                    b',' => {
                        if in_object {
                            self.ws();
                            self.key()?;
                        }
                        break;
                    }
                    b'}' if in_object => {}
                    b']' if !in_object => {}
                    _ => return None,
                }
                open >>= 1;
                depth -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arrays_elements_are_what_serde_reads_and_lie_in_its_text() {
        for text in [
            "[]",
            "[ ]",
            "[1]",
            r#"[ {"type":"text","text":"a,]}"} , [1,[2]],"\"]",null ,-1.5e3]"#,
            "[\n\t{}\r\n]",
        ] {
            let raw: &RawValue = serde_json::from_str(text).unwrap();
            let buf = Json::from(raw).to_buf();
            let ours: Vec<&str> = elements_of(buf.as_json()).unwrap().map(Json::get).collect();
            let serde: Vec<&RawValue> = serde_json::from_str(text).unwrap();
            let serde: Vec<&str> = serde.iter().map(|v| v.get()).collect();
            assert_eq!(ours, serde, "{text}");
            for element in elements_of(buf.as_json()).unwrap() {
                assert_eq!(buf.sub(buf.range_of(element)).get(), element.get());
            }
        }
        assert!(elements_of(Json(r#"{"a":[]}"#)).is_none());
    }

    const KEYS: [&str; 3] = ["a", "b", "c"];

    fn scan(text: &str) -> Option<Vec<Option<String>>> {
        object(text, KEYS).map(|f| f.iter().map(|v| v.map(|v| v.get().to_owned())).collect())
    }

    /// What serde_json reads for the same members, as raw values (`None` when it refuses).
    fn serde(text: &str) -> Option<Vec<Option<String>>> {
        // A member present as `null` is `Some`, as the envelope reads it.
        fn present<'de, D: serde::Deserializer<'de>>(
            d: D,
        ) -> Result<Option<&'de RawValue>, D::Error> {
            serde::Deserialize::deserialize(d).map(Some)
        }
        #[derive(serde::Deserialize)]
        struct Three<'a> {
            #[serde(borrow, default, deserialize_with = "present")]
            a: Option<&'a RawValue>,
            #[serde(borrow, default, deserialize_with = "present")]
            b: Option<&'a RawValue>,
            #[serde(borrow, default, deserialize_with = "present")]
            c: Option<&'a RawValue>,
        }
        let text = text.trim_start_matches([' ', '\t', '\n', '\r']);
        if !text.starts_with('{') {
            return None;
        }
        let t: Three<'_> = serde_json::from_str(text).ok()?;
        Some(
            [t.a, t.b, t.c]
                .iter()
                .map(|v| v.map(|v| v.get().to_owned()))
                .collect(),
        )
    }

    #[test]
    fn members_of_skips_values_to_their_end() {
        let text = r#"{ "z" : "}\",]" , "a":[{"b":"]"},[]] ,"b" :-1.5e3 ,"c":true}"#;
        let raw: &RawValue = serde_json::from_str(text).unwrap();
        let got = members_of(Json::from(raw), KEYS)
            .unwrap()
            .map(|v| v.map(Json::get));
        assert_eq!(
            got,
            [Some(r#"[{"b":"]"},[]]"#), Some("-1.5e3"), Some("true")]
        );
        let empty: &RawValue = serde_json::from_str("{ }").unwrap();
        assert_eq!(members_of(Json::from(empty), KEYS), Some([None; 3]));
        let array: &RawValue = serde_json::from_str(r#"[{"a":1}]"#).unwrap();
        assert_eq!(members_of(Json::from(array), KEYS), None);
    }

    #[test]
    fn members_are_found_as_their_text() {
        let got = scan(r#" { "a" : 1 , "x": [1, {"a": 2}], "c": {"k": "v\"}"} } "#).unwrap();
        assert_eq!(
            got,
            vec![Some("1".into()), None, Some(r#"{"k": "v\"}"}"#.into())]
        );
        assert_eq!(scan("{}").unwrap(), vec![None, None, None]);
        assert_eq!(scan(r#"{"b":null}"#).unwrap()[1].as_deref(), Some("null"));
    }

    #[test]
    fn agrees_with_serde_on_what_it_accepts() {
        for text in [
            r#"{"a":-0.5e+3,"b":"\u00e9\n","c":[true,false,null,[],{}]}"#,
            r#"{"a":"é ✓","b":1E9}"#,
            "{\"a\":1}\n",
            r#"{"a":1,}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":.5}"#,
            r#"{"a":-}"#,
            r#"{"a":1e}"#,
            r#"{"a":[1,]}"#,
            r#"{"a":[1 2]}"#,
            r#"{"a":{"k" 1}}"#,
            r#"{"a":{"k":1,}}"#,
            r#"{"a":tru}"#,
            r#"{"a":nul}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":"\u12G4"}"#,
            "{\"a\":\"tab\tin\"}",
            r#"{"a":1}{}"#,
            r#"{"a":1} x"#,
            r#"{"a":[}]}"#,
            r#"{"a":{]}"#,
            r#"{"a":1"#,
            r#"{"a""#,
            "{\"a\":1}\u{c}",
            r#"[{"a":1}]"#,
            r#""a""#,
            r#"{"a":1e400}"#,
            r#"{"a":"\ud800"}"#,
        ] {
            let got = scan(text);
            let want = serde(text);
            assert!(
                got.is_none() || got == want,
                "{text:?}: {got:?} vs {want:?}"
            );
            if want.is_none() {
                assert!(got.is_none(), "{text:?} accepted");
            }
        }
    }

    #[test]
    fn declines_what_serde_reads_differently() {
        // A duplicate member (serde refuses it), an escaped key (serde reads it as
        // `a`), deep nesting: serde decides these.
        assert_eq!(scan(r#"{"a":1,"a":2}"#), None);
        assert_eq!(scan(r#"{"\u0061":1}"#), None);
        let deep = format!(r#"{{"a":{}1{}}}"#, "[".repeat(200), "]".repeat(200));
        assert_eq!(scan(&deep), None);
        let ok = format!(r#"{{"a":{}1{}}}"#, "[".repeat(128), "]".repeat(128));
        assert_eq!(scan(&ok), serde(&ok));
        // Unnamed members may repeat (serde ignores them).
        assert_eq!(scan(r#"{"x":1,"x":2}"#), serde(r#"{"x":1,"x":2}"#));
    }

    proptest::proptest! {
        /// Eight bytes at a time, the same first stop as the table byte by byte.
        #[test]
        fn first_stop_is_the_table_for_eight_bytes(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::prelude::any::<u8>(),
                    proptest::sample::select(vec![0u8, 0x1f, 0x20, b'"', b'\\', 0x21, 0x5b, 0x5d, 0x7f, 0x80, 0xff]),
                ],
                8,
            )
        ) {
            let word = u64::from_le_bytes(bytes.clone().try_into().unwrap());
            let want = bytes.iter().position(|&b| STRING_STOP[usize::from(b)]);
            proptest::prop_assert_eq!(first_stop(word), want);
        }

        /// Whatever the text, what the scanner accepts serde accepts, with the same members.
        #[test]
        fn never_accepts_what_serde_refuses(text in r#"[ {}\[\]",:abc0-9.eE+\-tfnrul\\]{0,40}"#) {
            if let Some(got) = scan(&text) {
                proptest::prop_assert_eq!(Some(got), serde(&text));
            }
        }

        /// On valid JSON (what every `Json` holds), the reading that trusts the
        /// grammar finds what the validating one finds, and declines what it
        /// declines (a named member twice, an escaped key).
        #[test]
        fn members_of_finds_what_object_finds(
            members in proptest::collection::vec(
                (
                    proptest::sample::select(vec!["a", "b", "c", "x", "\\u0061", "a\\n", ""]),
                    json_value(),
                    "[ \t\n\r]{0,2}",
                ),
                0..5,
            ),
            end in "[ \t\n\r]{0,2}",
        ) {
            let body: Vec<String> = members
                .iter()
                .map(|(k, v, w)| format!("{w}\"{k}\"{w}:{w}{v}{w}"))
                .collect();
            let text = format!("{{{}{end}}}", body.join(","));
            let raw: &RawValue = serde_json::from_str(&text).unwrap();
            proptest::prop_assert_eq!(members_of(Json::from(raw), KEYS), object(&text, KEYS));
        }

        /// One pass over an object and its nested member finds what reading
        /// the object, then that member, finds: also when the member is
        /// named twice, is not an object, or holds an escaped key.
        #[test]
        fn members_nested_finds_what_members_finds_twice(
            outer in proptest::collection::vec(
                (proptest::sample::select(vec!["a", "b", "m", "x", "\\u0061"]), json_value()),
                0..4,
            ),
            inner in proptest::collection::vec(
                (proptest::sample::select(vec!["a", "b", "c", "x", "a\\n"]), json_value(), "[ \t\n\r]{0,2}"),
                0..4,
            ),
            nested_at in 0usize..4,
            nested_kind in 0u8..3,
        ) {
            let inner: Vec<String> =
                inner.iter().map(|(k, v, w)| format!("{w}\"{k}\"{w}:{w}{v}{w}")).collect();
            let nested = match nested_kind {
                0 => format!("{{{}}}", inner.join(",")),
                1 => format!("[{{{}}}]", inner.join(",")),
                _ => "\"m\"".to_owned(),
            };
            let mut body: Vec<String> = outer.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            body.insert(nested_at.min(body.len()), format!("\"m\" : {nested}"));
            let text = format!("{{{}}}", body.join(","));
            let raw: &RawValue = serde_json::from_str(&text).unwrap();
            let value = Some(Json::from(raw));
            let keys = ["m", "a", "b"];
            let found = members(value, keys);
            let got = members_nested(value, keys, 0, KEYS);
            proptest::prop_assert_eq!(got, (found, members(found[0], KEYS)));
        }

        /// Any JSON value under a named member is found, whatever it holds.
        #[test]
        fn finds_any_value(v in json_value()) {
            let text = format!(r#"{{"x":[{v}],"b":{v}}}"#);
            proptest::prop_assert_eq!(scan(&text), serde(&text));
            proptest::prop_assert!(scan(&text).is_some());
        }
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just("null".to_owned()),
            any::<bool>().prop_map(|b| b.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            any::<f64>().prop_map(|n| serde_json::to_string(&n).unwrap()),
            any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap()),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5)
                    .prop_map(|v| format!("[{}]", v.join(" , "))),
                proptest::collection::vec((any::<String>(), inner), 0..5).prop_map(|v| {
                    let members: Vec<String> = v
                        .iter()
                        .map(|(k, v)| format!("{}:{v}", serde_json::to_string(k).unwrap()))
                        .collect();
                    format!("{{ {} }}", members.join(","))
                }),
            ]
        })
    }
}
