//! Resource templates (RFC 6570, level 1 and 2) of an upstream of the Model
//! Context Protocol, as the gateway's face offers them and as it reads their
//! expansions: the offered template's expansions are namespaced ids, and a
//! read of one is forwarded only when the upstream's uri it names is an
//! expansion of the upstream's own template. A simple variable's expansion
//! holds no reserved character (RFC 6570 3.2.2 encodes them), so a decoded
//! `../../etc/passwd` is no expansion of `file:///data/{name}` and is never
//! forwarded.

use percent_encoding::utf8_percent_encode;

use super::ESCAPED;

/// A resource template of an upstream as the gateway's face offers it: its
/// expansions are the namespaced ids of the upstream's uris, so they read
/// through the gateway. `prefix` is the namespaced id of an empty uri (what
/// comes before the encoded uri). Literal parts are percent-encoded as an
/// id's uri is; each expression must be one variable, simple (`{x}`) or
/// reserved (`{+x}`): a simple expansion percent-encodes all but the
/// unreserved characters, exactly as an id's uri is encoded, so `{+x}` is
/// offered as `{x}`. Other expressions (`{/x}`, `{?x}`, `{x,y}`, ...) would
/// expand to characters an id cannot hold unencoded: `None`.
pub fn namespaced_template(prefix: &str, template: &str) -> Option<String> {
    let mut out = String::from(prefix);
    for part in parts(template)? {
        match part {
            Part::Literal(l) => out.extend(utf8_percent_encode(l, ESCAPED)),
            Part::Var { name, .. } => {
                out.push('{');
                out.push_str(name);
                out.push('}');
            }
        }
    }
    Some(out)
}

/// One piece of a template the face offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part<'a> {
    Literal(&'a str),
    /// `{name}` (simple) or `{+name}` (reserved).
    Var {
        name: &'a str,
        reserved: bool,
    },
}

/// A template's pieces; `None` when it holds an expression the face does not offer.
fn parts(template: &str) -> Option<Vec<Part<'_>>> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let (literal, tail) = rest.split_at(open);
        if literal.contains('}') {
            return None;
        }
        if !literal.is_empty() {
            out.push(Part::Literal(literal));
        }
        let close = tail.find('}')?;
        let expression = &tail[1..close];
        let (name, reserved) = match expression.strip_prefix('+') {
            Some(name) => (name, true),
            None => (expression, false),
        };
        let one_variable = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'%');
        if !one_variable {
            return None;
        }
        out.push(Part::Var { name, reserved });
        rest = &tail[close + 1..];
    }
    if rest.contains('}') {
        return None;
    }
    if !rest.is_empty() {
        out.push(Part::Literal(rest));
    }
    Some(out)
}

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn reserved(b: u8) -> bool {
    matches!(
        b,
        b':' | b'/'
            | b'?'
            | b'#'
            | b'['
            | b']'
            | b'@'
            | b'!'
            | b'$'
            | b'&'
            | b'\''
            | b'('
            | b')'
            | b'*'
            | b'+'
            | b','
            | b';'
            | b'='
    )
}

/// For each position of `uri`, where the longest run of an expansion that
/// starts there ends: unreserved characters and `%HH` triplets for a simple
/// variable, reserved characters too for a reserved one.
fn reach(uri: &[u8], reserved_too: bool) -> Vec<usize> {
    let n = uri.len();
    let mut end = vec![0; n + 1];
    end[n] = n;
    for i in (0..n).rev() {
        let b = uri[i];
        end[i] = if b == b'%' {
            let triplet =
                i + 2 < n && uri[i + 1].is_ascii_hexdigit() && uri[i + 2].is_ascii_hexdigit();
            if triplet { end[i + 3] } else { i }
        } else if unreserved(b) || (reserved_too && reserved(b)) {
            end[i + 1]
        } else {
            i
        };
    }
    end
}

/// Whether `uri` is an expansion of `template` (one this face offers: see
/// [`namespaced_template`]): its literal parts in order, and for each
/// variable text that its expansion could be (no reserved character in a
/// simple variable's). Linear in the uri's length per part of the template,
/// whatever the uri holds.
pub fn expands_to(template: &str, uri: &str) -> bool {
    let Some(parts) = parts(template) else {
        return false;
    };
    let uri = uri.as_bytes();
    let n = uri.len();
    // Positions of `uri` that the parts so far can end at.
    let mut at = vec![false; n + 1];
    at[0] = true;
    for part in parts {
        let mut next = vec![false; n + 1];
        match part {
            Part::Literal(l) => {
                let l = l.as_bytes();
                for i in (0..=n).filter(|&i| at[i]) {
                    if uri[i..].starts_with(l) {
                        next[i + l.len()] = true;
                    }
                }
            }
            Part::Var { reserved, .. } => {
                // Every end between a reachable start and its run's end: one
                // sweep, carrying the furthest run seen so far.
                let end = reach(uri, reserved);
                let mut furthest: Option<usize> = None;
                for i in 0..=n {
                    if at[i] {
                        furthest = Some(furthest.map_or(end[i], |f| f.max(end[i])));
                    }
                    if furthest.is_some_and(|f| i <= f) {
                        next[i] = true;
                    }
                }
            }
        }
        at = next;
    }
    at[n]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modelcontext::original_id;
    use crate::protocol::Kind;

    #[test]
    fn templates_expand_to_namespaced_ids() {
        let prefix = "mcp://gw/ev/resource/";
        let t = namespaced_template(prefix, "demo://resource/dynamic/text/{resourceId}").unwrap();
        assert_eq!(
            t,
            "mcp://gw/ev/resource/demo%3A%2F%2Fresource%2Fdynamic%2Ftext%2F{resourceId}"
        );
        // Its expansion with 7 is the namespaced id of the upstream's uri.
        let expanded = t.replace("{resourceId}", "7");
        let original = original_id(Kind::Resource, "demo://resource/dynamic/text/7");
        assert_eq!(
            crate::protocol::mcpid::namespace("gw", "ev", &original),
            expanded
        );
        assert_eq!(
            namespaced_template(prefix, "file:///{+path}").unwrap(),
            "mcp://gw/ev/resource/file%3A%2F%2F%2F{path}"
        );
        for unsupported in [
            "x://{/a}",
            "x://{?q}",
            "x://{a,b}",
            "x://{}",
            "x://{a",
            "x://a}",
        ] {
            assert_eq!(
                namespaced_template(prefix, unsupported),
                None,
                "{unsupported}"
            );
        }
    }

    #[test]
    fn uris_match_the_templates_they_expand() {
        let t = "demo://resource/dynamic/text/{resourceId}";
        assert!(expands_to(t, "demo://resource/dynamic/text/7"));
        assert!(expands_to(t, "demo://resource/dynamic/text/"));
        assert!(!expands_to(t, "demo://resource/dynamic/blob/7"));
        assert!(!expands_to(t, "other://resource/dynamic/text/7"));
        let two = "x://{a}/mid/{b}.json";
        assert!(expands_to(two, "x://1/mid/2.json"));
        assert!(!expands_to(two, "x://1/mid/2.txt"));
        assert!(!expands_to(two, "x://1/2.json"));
        // A literal that also occurs inside a variable's value.
        assert!(expands_to("x://{a}.{b}", "x://1.2.3"));
        assert!(expands_to("x://plain", "x://plain"));
        assert!(!expands_to("x://plain", "x://plainer"));
    }

    #[test]
    fn a_simple_variable_never_holds_a_reserved_character() {
        let t = "file:///data/{name}";
        assert!(expands_to(t, "file:///data/readme.txt"));
        // What simple expansion makes of "../../etc/passwd" and of "a b".
        assert!(expands_to(t, "file:///data/..%2F..%2Fetc%2Fpasswd"));
        assert!(expands_to(t, "file:///data/a%20b"));
        for traversal in [
            "file:///data/../../etc/passwd",
            "file:///data/x/../../etc/passwd",
            "file:///data/a?b",
            "file:///data/a#b",
            "file:///data/a b",
            "file:///data/%zz",
            "file:///data/%2",
        ] {
            assert!(!expands_to(t, traversal), "{traversal}");
        }
        // A reserved variable may hold reserved characters, as its expansion does.
        assert!(expands_to("file:///{+path}", "file:///a/b/c.txt"));
        assert!(!expands_to("file:///{+path}", "file:///a b"));
        // Unsupported templates match nothing.
        assert!(!expands_to("x://{/a}", "x:///a"));
    }

    #[test]
    fn matching_is_linear_in_the_uri() {
        // Many variables between short literals, against a long uri that
        // almost matches: a backtracking matcher would take forever here.
        let t = "x://{a}a{b}a{c}a{d}a{e}a{f}a{g}!";
        let uri = format!("x://{}", "a".repeat(200_000));
        assert!(!expands_to(t, &uri));
    }
}
