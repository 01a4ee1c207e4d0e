//! Cutting a result to a budget in bytes of its compact JSON: content
//! blocks kept in order while they fit, the first that does not cut if it
//! is text; a structured value cut by dropping array items from the end and
//! shortening strings, its shape (every member of every object) kept.
//! Each cut's JSON fits the budget it was given.

use serde_json::Value;

/// The bytes of `v` written as compact JSON.
pub fn size(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a Value to a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, v);
    count.0
}

/// Content blocks kept in order while the array of them fits `budget`
/// bytes; the first that does not fit is cut if it is a text block, and
/// the rest are left out.
pub fn blocks(blocks: &[Value], budget: usize) -> Vec<Value> {
    let mut kept = Vec::new();
    let mut used = 2; // []
    for block in blocks {
        let comma = usize::from(!kept.is_empty());
        let n = size(block);
        if used + comma + n <= budget {
            kept.push(block.clone());
            used += comma + n;
            continue;
        }
        if let Some(cut) = text_block_within(block, budget.saturating_sub(used + comma)) {
            kept.push(cut);
        }
        break;
    }
    kept
}

/// A text block cut to fit `room` bytes, if it is one and any of its text fits.
fn text_block_within(block: &Value, room: usize) -> Option<Value> {
    if block.get("type").and_then(Value::as_str) != Some("text") {
        return None;
    }
    let whole = block.get("text")?.as_str()?;
    let mut empty = block.clone();
    empty["text"] = Value::from("");
    let room = room.checked_sub(size(&empty))?;
    let kept = str_within(whole, room);
    if kept.is_empty() {
        return None;
    }
    empty["text"] = Value::from(kept);
    Some(empty)
}

/// The bytes `c` takes inside a JSON string as serde_json writes it.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// The longest start of `s` whose escaped text takes at most `room` bytes,
/// never ending inside a character; cut after a line break when one lies
/// in the last eighth of it, so a cut text ends on a whole line.
pub fn str_within(s: &str, room: usize) -> &str {
    let mut used = 0;
    let mut end = s.len();
    for (at, c) in s.char_indices() {
        used += escaped_len(c);
        if used > room {
            end = at;
            break;
        }
    }
    let kept = &s[..end];
    if end == s.len() {
        return kept;
    }
    match kept.rfind('\n') {
        Some(nl) if nl + 1 >= end - end / 8 => &kept[..=nl],
        _ => kept,
    }
}

/// The smallest `v` can be cut to: every string empty, every array empty,
/// every member kept.
fn floor(v: &Value) -> usize {
    match v {
        Value::String(_) | Value::Array(_) => 2,
        Value::Object(members) => {
            let inner: usize = members
                .iter()
                .map(|(k, v)| size(&Value::from(k.as_str())) + 1 + floor(v))
                .sum();
            2 + inner + members.len().saturating_sub(1)
        }
        other => size(other),
    }
}

/// `v` cut to fit `room` bytes; `None` when even its floor does not.
pub fn value(v: &Value, room: usize) -> Option<Value> {
    if size(v) <= room {
        return Some(v.clone());
    }
    match v {
        Value::String(s) => Some(Value::from(str_within(s, room.checked_sub(2)?))),
        Value::Array(items) => {
            let mut kept = Vec::new();
            let mut used = 2;
            if room < used {
                return None;
            }
            for item in items {
                let comma = usize::from(!kept.is_empty());
                let n = size(item);
                if used + comma + n <= room {
                    kept.push(item.clone());
                    used += comma + n;
                    continue;
                }
                if let Some(cut) = room
                    .checked_sub(used + comma)
                    .and_then(|left| value(item, left))
                {
                    kept.push(cut);
                }
                break;
            }
            Some(Value::Array(kept))
        }
        Value::Object(members) => {
            let mut extra = room.checked_sub(floor(v))?;
            let mut out = serde_json::Map::new();
            for (k, member) in members {
                let least = floor(member);
                let cut = value(member, least + extra)?;
                extra -= size(&cut) - least;
                out.insert(k.clone(), cut);
            }
            Some(Value::Object(out))
        }
        _ => None,
    }
}

/// `text` in consecutive slices of at most `page` bytes, each ending
/// between characters.
pub fn pages(text: &str, page: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = page.min(rest.len());
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        // A page smaller than one character: take the character whole.
        if end == 0 {
            end = rest.chars().next().map_or(rest.len(), char::len_utf8);
        }
        out.push(&rest[..end]);
        rest = &rest[end..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blocks_are_kept_while_they_fit_and_the_first_text_that_does_not_is_cut() {
        let all = vec![
            json!({"type": "text", "text": "one"}),
            json!({"type": "image", "data": "AAAA", "mimeType": "image/png"}),
            json!({"type": "text", "text": "line 1\nline 2\nline 3 is long enough"}),
            json!({"type": "text", "text": "never"}),
        ];
        let two = size(&json!([all[0], all[1]]));
        for budget in [two, two + 20, two + 40, two + 60] {
            let kept = blocks(&all, budget);
            assert!(size(&Value::Array(kept.clone())) <= budget, "{budget}");
            assert_eq!(kept[..2], all[..2]);
            assert!(kept.len() <= 3);
        }
        // Near a line break, the cut text ends on a whole line.
        let lines = format!("{}\n", "x".repeat(99)).repeat(3);
        assert_eq!(str_within(&lines, 106), &lines[..100]);
        assert_eq!(
            str_within(&lines, 160).len(),
            159,
            "the break is too far back"
        );
        // An image that does not fit ends the result: it is never cut.
        assert_eq!(blocks(&all[1..], 20), Vec::<Value>::new());
    }

    #[test]
    fn a_string_is_never_cut_inside_a_character_or_an_escape() {
        let s = "é\"ab✓";
        for room in 0..12 {
            let kept = str_within(s, room);
            assert!(size(&Value::from(kept)) <= room + 2, "{room}: {kept}");
            assert!(s.starts_with(kept));
        }
        assert_eq!(str_within(s, 2), "é");
        assert_eq!(str_within(s, 3), "é");
        assert_eq!(str_within(s, 4), "é\"");
    }

    #[test]
    fn a_value_keeps_its_members_drops_items_from_the_end_and_shortens_strings() {
        let v = json!({"id": 7, "items": [{"n": "aaaaaaaaaa"}, {"n": "bbbbbbbbbb"}, {"n": "cccccccccc"}], "note": "xxxxxxxxxxxxxxxxxxxx"});
        for room in 30..size(&v) {
            let Some(cut) = value(&v, room) else {
                assert!(room < floor(&v), "{room}");
                continue;
            };
            assert!(size(&cut) <= room, "{room}: {cut}");
            assert_eq!(cut["id"], 7);
            assert!(cut["items"].is_array() && cut["note"].is_string(), "{cut}");
            let items = cut["items"].as_array().unwrap();
            for (i, item) in items.iter().enumerate() {
                let whole = v["items"][i]["n"].as_str().unwrap();
                assert!(whole.starts_with(item["n"].as_str().unwrap()));
            }
        }
        assert_eq!(value(&json!(12345), 3), None);
        assert_eq!(value(&v, floor(&v) - 1), None);
    }

    #[test]
    fn pages_split_between_characters() {
        let text = "ab✓cd✓";
        let pages = pages(text, 4);
        assert_eq!(pages.concat(), text);
        assert!(pages.iter().all(|p| p.len() <= 4));
        assert_eq!(pages, ["ab", "✓c", "d✓"]);
    }
}
