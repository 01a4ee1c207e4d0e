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
mod tests;
