//! The scanner: one loop over the bytes of an object, each looked at once,
//! that validates as serde_json would and records the members asked for.

use super::*;

pub(super) fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// Past the string whose content starts at `i` (after its opening quote): the
/// index after its closing quote, and whether it holds escapes.
pub(super) fn skip_string(b: &[u8], mut i: usize) -> Option<(usize, bool)> {
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
pub(super) fn skip_value(b: &[u8], mut i: usize) -> Option<usize> {
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
pub(super) static STRING_STOP: [bool; 256] = {
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
pub(super) fn first_stop(word: u64) -> Option<usize> {
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
    pub(super) fn value(&mut self) -> Option<()> {
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
