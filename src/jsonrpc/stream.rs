//! Where the next JSON value of a stream ends, found as its bytes arrive.
//!
//! A session's body, and a body whose first message is looked at while it
//! arrives, are read in pieces. Asking serde after every piece whether a value
//! is complete parses the text again from its first byte each time, which
//! makes a message dripped in small pieces cost time quadratic in its length.
//! [`ValueEnd`] keeps the state of the JSON grammar between pieces, so each
//! byte is looked at once, and says when serde can decide: when the first
//! value has ended, or when the text can no longer be valid JSON. serde then
//! parses that value once, and its answer (the value, or the error) is the
//! one the caller acts on; this type only says when to ask.
//!
//! It agrees with serde_json's stream reader on when a prefix stops being
//! "incomplete" (the property test below holds it to that), so an invalid
//! line is answered as soon as serde would answer it.
//!
//! Longer than most files for its tests (about 185 lines).

/// Where the scan stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the value (white space allowed).
    Start,
    /// A value is expected (after `:`, `,` in an array); `close` also allows `]`.
    Value { close: bool },
    /// A key is expected (after `,` in an object); `close` also allows `}`.
    Key { close: bool },
    /// Inside a string; `key` when it is an object's key.
    Str { key: bool },
    /// After a backslash in a string.
    Escape { key: bool },
    /// Reading the four bytes after `\u`; `left` still to come. serde reads
    /// all four before it checks them, so `bad` waits for the last one.
    Unicode { key: bool, left: u8, bad: bool },
    /// After a key: `:` expected.
    Colon,
    /// After a value in a container: `,` or the container's close expected.
    After,
    /// Inside a number.
    Number(Num),
    /// Inside `true`, `false` or `null`: the bytes still to come.
    Literal(&'static [u8]),
}

/// Where a number stands (JSON's grammar: `-? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Num {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    E,
    ESign,
    Exp,
}

impl Num {
    /// The next state on `b`; `None` when the number cannot take `b`.
    fn next(self, b: u8) -> Option<Num> {
        use Num::*;
        Some(match (self, b) {
            (Minus, b'0') => Zero,
            (Minus, b'1'..=b'9') => Int,
            (Int, b'0'..=b'9') => Int,
            (Zero | Int, b'.') => Dot,
            (Dot | Frac, b'0'..=b'9') => Frac,
            (Zero | Int | Frac, b'e' | b'E') => E,
            (E, b'+' | b'-') => ESign,
            (E | ESign | Exp, b'0'..=b'9') => Exp,
            _ => return None,
        })
    }

    /// Whether a number may end here.
    fn complete(self) -> bool {
        matches!(self, Num::Zero | Num::Int | Num::Frac | Num::Exp)
    }
}

/// What [`ValueEnd::scan`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// The first value has not ended, and the text can still become valid.
    Incomplete,
    /// serde can decide now: the first value ended, or the text is not JSON.
    Decidable,
}

/// The scan of one stream's next value, resumed where it stopped.
#[derive(Debug)]
pub struct ValueEnd {
    /// Bytes of the text already scanned.
    pos: usize,
    state: State,
    /// The open containers, `true` for an object. serde reads a raw value
    /// to any depth, and so does this; a byte a level, bounded by the
    /// caller's message limit.
    open: Vec<bool>,
    decidable: bool,
}

impl Default for ValueEnd {
    fn default() -> Self {
        Self {
            pos: 0,
            state: State::Start,
            open: Vec::new(),
            decidable: false,
        }
    }
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl ValueEnd {
    /// Scans what `text` holds past what was scanned before (`text` is the
    /// same stream, grown at its end, since the last [`reset`](Self::reset)).
    pub fn scan(&mut self, text: &[u8]) -> Scan {
        while !self.decidable && self.pos < text.len() {
            let b = text[self.pos];
            if self.step(b) {
                self.pos += 1;
            }
        }
        if self.decidable {
            Scan::Decidable
        } else {
            Scan::Incomplete
        }
    }

    /// The value was taken (or skipped) from the front of the text: scan
    /// what follows from its start.
    pub fn reset(&mut self) {
        self.pos = 0;
        self.state = State::Start;
        self.open.clear();
        self.decidable = false;
    }

    /// A value ended at the top level, or the text broke the grammar.
    fn decide(&mut self) -> bool {
        self.decidable = true;
        false
    }

    /// A value ended: at the top level the stream's value is complete.
    fn value_ended(&mut self) {
        if self.open.is_empty() {
            self.decidable = true;
        } else {
            self.state = State::After;
        }
    }

    /// Takes one byte; false when it is not consumed (it is looked at again
    /// in the new state, or the scan has become decidable).
    fn step(&mut self, b: u8) -> bool {
        match self.state {
            State::Start | State::Value { .. } if is_ws(b) => true,
            State::Start | State::Value { .. } => self.value(b),
            State::Key { .. } | State::Colon | State::After if is_ws(b) => true,
            State::Key { close } => match b {
                b'"' => {
                    self.state = State::Str { key: true };
                    true
                }
                b'}' if close => self.close(true),
                _ => self.decide(),
            },
            State::Colon => match b {
                b':' => {
                    self.state = State::Value { close: false };
                    true
                }
                _ => self.decide(),
            },
            State::After => match (b, self.open.last()) {
                (b',', Some(true)) => {
                    self.state = State::Key { close: false };
                    true
                }
                (b',', Some(false)) => {
                    self.state = State::Value { close: false };
                    true
                }
                (b'}', Some(true)) => self.close(true),
                (b']', Some(false)) => self.close(false),
                _ => self.decide(),
            },
            State::Str { key } => self.in_string(key, b),
            State::Escape { key } => self.escaped(key, b),
            State::Unicode { key, left, bad } => self.in_unicode(key, left, bad, b),
            State::Number(n) => match n.next(b) {
                Some(n) => {
                    self.state = State::Number(n);
                    true
                }
                None if n.complete() => {
                    // The number ended before `b`, which the new state reads.
                    self.value_ended();
                    false
                }
                None => self.decide(),
            },
            State::Literal(rest) => match rest.split_first() {
                Some((&want, rest)) if want == b => {
                    if rest.is_empty() {
                        self.value_ended();
                    } else {
                        self.state = State::Literal(rest);
                    }
                    true
                }
                _ => self.decide(),
            },
        }
    }

    /// A byte inside a string (a key's when `key`).
    #[inline]
    fn in_string(&mut self, key: bool, b: u8) -> bool {
        match b {
            b'"' => {
                if key {
                    self.state = State::Colon;
                } else {
                    self.value_ended();
                }
                true
            }
            b'\\' => {
                self.state = State::Escape { key };
                true
            }
            0..0x20 => self.decide(),
            _ => true,
        }
    }

    /// The byte after a backslash in a string.
    #[inline]
    fn escaped(&mut self, key: bool, b: u8) -> bool {
        match b {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                self.state = State::Str { key };
                true
            }
            b'u' => {
                self.state = State::Unicode {
                    key,
                    left: 4,
                    bad: false,
                };
                true
            }
            _ => self.decide(),
        }
    }

    /// One of the four hex digits of a `\u` escape; `bad` once one was not.
    #[inline]
    fn in_unicode(&mut self, key: bool, left: u8, bad: bool, b: u8) -> bool {
        let bad = bad || !b.is_ascii_hexdigit();
        if left > 1 {
            self.state = State::Unicode {
                key,
                left: left - 1,
                bad,
            };
        } else if bad {
            return self.decide();
        } else {
            self.state = State::Str { key };
        }
        true
    }

    /// The first byte of a value.
    fn value(&mut self, b: u8) -> bool {
        match b {
            b'{' | b'[' => {
                self.open.push(b == b'{');
                self.state = if b == b'{' {
                    State::Key { close: true }
                } else {
                    State::Value { close: true }
                };
                true
            }
            b']' if self.state == (State::Value { close: true }) => self.close(false),
            b'"' => {
                self.state = State::Str { key: false };
                true
            }
            b'-' => {
                self.state = State::Number(Num::Minus);
                true
            }
            b'0' => {
                self.state = State::Number(Num::Zero);
                true
            }
            b'1'..=b'9' => {
                self.state = State::Number(Num::Int);
                true
            }
            b't' => {
                self.state = State::Literal(b"rue");
                true
            }
            b'f' => {
                self.state = State::Literal(b"alse");
                true
            }
            b'n' => {
                self.state = State::Literal(b"ull");
                true
            }
            _ => self.decide(),
        }
    }

    fn close(&mut self, object: bool) -> bool {
        debug_assert_eq!(self.open.last(), Some(&object));
        self.open.pop();
        self.value_ended();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    /// serde's stream reader on `text`: whether it can say anything yet.
    fn serde_decides(text: &[u8]) -> bool {
        let mut values = serde_json::Deserializer::from_slice(text).into_iter::<&RawValue>();
        match values.next() {
            None => false,
            Some(Ok(_)) => true,
            Some(Err(e)) => !e.is_eof(),
        }
    }

    /// Feeds `text` in pieces of `piece` bytes; the prefix length at which
    /// the scan first became decidable.
    fn decided_at(text: &[u8], piece: usize) -> Option<usize> {
        let mut scan = ValueEnd::default();
        let mut len = 0;
        while len < text.len() {
            len = (len + piece).min(text.len());
            if scan.scan(&text[..len]) == Scan::Decidable {
                return Some(len);
            }
        }
        None
    }

    /// The shortest prefix on which serde can decide. serde reads a number
    /// that the input's end cuts short (`[1.`, `[-`, `[2e+`) as an invalid
    /// number rather than as the end of the input: the scan waits for the
    /// byte after it, so those prefixes are not where serde decides. A
    /// number that no digit could mend (`[-.`) is decided where it breaks.
    fn serde_decided_at(text: &[u8]) -> Option<usize> {
        (1..=text.len()).find(|&n| {
            let p = &text[..n];
            let cut_short = b"-+.eE".contains(&p[n - 1])
                && cut_number(p)
                && !serde_decides(&[p, b"0"].concat());
            serde_decides(p) && !cut_short
        })
    }

    fn cut_number(p: &[u8]) -> bool {
        let mut values = serde_json::Deserializer::from_slice(p).into_iter::<&RawValue>();
        matches!(values.next(), Some(Err(e)) if e.to_string().contains("number"))
    }

    fn agree(text: &[u8]) {
        assert_eq!(
            decided_at(text, 1),
            serde_decided_at(text),
            "{:?}",
            String::from_utf8_lossy(text)
        );
        // However the bytes arrive, the scan ends up at the same place.
        let whole = decided_at(text, 1).is_some();
        for piece in [2, 3, 7, text.len().max(1)] {
            assert_eq!(decided_at(text, piece).is_some(), whole);
        }
    }

    #[test]
    fn agrees_with_serde_on_messages_and_garbage() {
        for text in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"a":[1,2.5e-3,true,null,"x\"\\\u00e9"]}}"#[..],
            b"  \n {}",
            b"[]",
            b"[1, [2, {}], -0.5E+7]",
            b"{\"a\" 1}",
            b"{\"a\":}",
            b"{,}",
            b"[1,]",
            b"[01]",
            b"[1.]",
            b"[1e]",
            b"[-]",
            b"[tru]",
            b"[nul1]",
            b"\"a\nb\"",
            b"\"\\x\"",
            b"\"\\u12g4\"",
            b"}",
            b"]",
            b"x",
            b"{\"a\":1}}",
            b"{\"a\":[1}",
            b"[{\"a\":1]",
            b"\"unterminated",
            b"{\"a\":{\"b\":",
            b"{},{},{},{}",
            "[\"é\"]".as_bytes(),
        ] {
            agree(text);
        }
    }

    #[test]
    fn deep_nesting_is_decidable_as_serde_decides() {
        for depth in [126, 127, 128, 129, 200] {
            agree(&b"[".repeat(depth));
            let mut closed = b"[".repeat(depth);
            closed.extend(b"]".repeat(depth));
            agree(&closed);
        }
    }

    #[test]
    fn resets_for_the_next_value() {
        let text = b"{\"a\":1}\n[2]";
        let mut scan = ValueEnd::default();
        assert_eq!(scan.scan(text), Scan::Decidable);
        let rest = &text[7..];
        scan.reset();
        assert_eq!(scan.scan(&rest[..2]), Scan::Incomplete);
        assert_eq!(scan.scan(rest), Scan::Decidable);
    }

    #[test]
    fn a_dripped_value_is_scanned_once() {
        // `[{},{},...` never ends: each piece only adds its own bytes.
        let mut text = b"[".to_vec();
        let mut scan = ValueEnd::default();
        for _ in 0..100_000 {
            text.extend_from_slice(b"{},");
            assert_eq!(scan.scan(&text), Scan::Incomplete);
        }
        assert_eq!(scan.pos, text.len());
    }

    #[test]
    fn a_number_no_digit_could_mend_is_decided_where_it_breaks() {
        // Found by the property below: `-.` is invalid whatever follows.
        agree(b"[\n-.7lE] .n]\"e ]\\\"\\");
        agree(b"[1.e]");
        assert_eq!(decided_at(b"[-.", 1), Some(3));
        assert_eq!(decided_at(b"[1.", 1), None);
    }

    proptest::proptest! {
        #[test]
        fn agrees_with_serde_on_any_text(text in "[\\[\\]{}:,\" \\\\a-fnu0-9.eE+\\-tlrs\n]{0,40}") {
            // Top-level numbers end only at a delimiter here, where serde
            // takes them at the end of its input.
            let first = text.trim_start().bytes().next();
            proptest::prop_assume!(!matches!(first, Some(b'-' | b'0'..=b'9')));
            agree(text.as_bytes());
        }

        #[test]
        fn agrees_with_serde_on_any_json(value in json_value()) {
            let text = serde_json::to_vec(&value).unwrap();
            proptest::prop_assume!(!value.is_number());
            agree(&text);
            // And on every way of breaking it by one byte.
            for i in 0..text.len() {
                let mut broken = text.clone();
                broken[i] = b'}';
                let first = broken.iter().copied().find(|b| !is_ws(*b));
                if !matches!(first, Some(b'-' | b'0'..=b'9')) {
                    agree(&broken);
                }
            }
        }
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i32>().prop_map(|n| serde_json::json!(n)),
            (-1e6f64..1e6).prop_map(|n| serde_json::json!(n)),
            "[a-z\"\\\\\u{e9}\n]{0,6}".prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map("[a-z]{0,3}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
