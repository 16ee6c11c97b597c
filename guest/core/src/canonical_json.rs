//! Canonical JSON (spec §1.1) and the "canonical file" check (§1.5).
//!
//! Canonical JSON is ECMAScript `JSON.stringify` output with object members sorted by UTF-16
//! code units and no whitespace; numbers print as ECMAScript Number-to-String does (shortest
//! round trip: `100`, `1e+21`, `0.30000000000000004`, `-0` → `0`). A *canonical file* is that
//! text followed by one `\n`; its sha256 is a record's `contentSha256`.
//!
//! Parsing follows `JSON.parse`: a duplicate object member keeps the **last** occurrence; every
//! number is read as the double JavaScript would hold. Where JavaScript and a Rust parser differ
//! (vectors README), the safer behaviour is chosen: a lone UTF-16 surrogate escape (`"\ud800"`)
//! is rejected as not valid JSON, where JavaScript would accept it.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;
use serde_json::Value;

use crate::js;

/// The error for a number that canonical JSON cannot represent (§1.1).
pub const NON_FINITE: &str = "canonical JSON cannot represent a non-finite number";

/// Parses JSON text as `JSON.parse` would (last duplicate member wins).
///
/// Errors: the text is not JSON (including a lone surrogate escape, see the module docs). The
/// error carries serde_json's description; callers map it to the reference's message.
pub fn parse(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str(text)
}

/// The canonical JSON text of a value, with no trailing newline (§1.1).
///
/// Errors: [`NON_FINITE`] for a non-finite number (cannot come from parsed JSON).
pub fn to_canonical(value: &Value) -> Result<String, &'static str> {
    let mut out = String::new();
    write_value(&mut out, value)?;
    Ok(out)
}

/// The canonical *file* text of a value: [`to_canonical`] followed by `\n` (§1.1, §6A.2).
pub fn to_canonical_file(value: &Value) -> Result<String, &'static str> {
    let mut out = to_canonical(value)?;
    out.push('\n');
    Ok(out)
}

/// Whether `text` is exactly the canonical file of `value` (§1.5).
pub fn is_canonical_file(text: &str, value: &Value) -> bool {
    matches!(to_canonical_file(value), Ok(canonical) if canonical == text)
}

fn write_value(out: &mut String, value: &Value) -> Result<(), &'static str> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(_) => write_number(out, js::number(value).ok_or(NON_FINITE)?)?,
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item)?;
            }
            out.push(']');
        }
        Value::Object(members) => {
            let mut keys: Vec<&String> = members.keys().collect();
            keys.sort_by(|a, b| js::cmp_utf16(a, b));
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, &members[key.as_str()])?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// ECMAScript Number-to-String (shortest round trip), which ryu-js implements to the letter.
fn write_number(out: &mut String, n: f64) -> Result<(), &'static str> {
    if !n.is_finite() {
        return Err(NON_FINITE);
    }
    let mut buffer = ryu_js::Buffer::new();
    out.push_str(buffer.format_finite(n));
    Ok(())
}

/// `JSON.stringify` string escaping (well-formed variant, §1.1).
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0C}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn golden_nesting_from_the_reference() {
        let v = json!({"b":1, "a":{"d":4, "c":[3,{"f":6,"e":5}]}});
        assert_eq!(to_canonical(&v).unwrap(), r#"{"a":{"c":[3,{"e":5,"f":6}],"d":4},"b":1}"#);
    }

    #[test]
    fn numbers_print_as_ecmascript() {
        let v = parse("[1.5,1e21,1e20,0.30000000000000004,1e-7,0.000001,100,9007199254740992,-5,1.0,-0]").unwrap();
        assert_eq!(to_canonical(&v).unwrap(), "[1.5,1e+21,100000000000000000000,0.30000000000000004,1e-7,0.000001,100,9007199254740992,-5,1,0]");
    }

    #[test]
    fn strings_escape_as_json_stringify() {
        let v = Value::String("a\u{1}\"\\\n/é\u{2028}\u{7f}".into());
        assert_eq!(to_canonical(&v).unwrap(), "\"a\\u0001\\\"\\\\\\n/é\u{2028}\u{7f}\"");
    }

    #[test]
    fn duplicate_members_keep_the_last() {
        assert_eq!(to_canonical(&parse(r#"{"a":1,"a":2}"#).unwrap()).unwrap(), r#"{"a":2}"#);
    }

    #[test]
    fn lone_surrogates_are_rejected() {
        assert!(parse(r#""\ud800""#).is_err());
    }
}
