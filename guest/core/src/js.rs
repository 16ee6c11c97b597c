//! ECMAScript semantics the reference relies on, for values that came from `JSON.parse`.
//!
//! The reference is TypeScript: every number is a double, strings are UTF-16, `trim()` removes
//! whitespace. These helpers reproduce exactly the parts the lease protocols depend on.

use serde_json::Value;

/// The largest safe integer, `Number.MAX_SAFE_INTEGER` (2^53 − 1).
pub const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// The whitespace that the reference's `trim()` and `\s` meet in these protocols: space, `\t`,
/// `\n`, U+000B, U+000C and `\r` (vectors README). Rust's `is_ascii_whitespace` leaves out
/// U+000B, so it is not used. Unicode spaces are deliberately *not* trimmed: an input that only
/// JavaScript would accept is rejected (vectors README, "safest behaviour").
pub fn is_js_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r')
}

/// `String.prototype.trim` restricted to [`is_js_space`].
pub fn trim(text: &str) -> &str {
    text.trim_matches(is_js_space)
}

/// The value of a JSON number as the double JavaScript would hold, or `None` for a non-number.
pub fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        _ => None,
    }
}

/// `Number.isSafeInteger(value)`: the integer it holds, or `None`.
pub fn safe_integer(value: &Value) -> Option<i64> {
    let n = number(value)?;
    if n.is_finite() && libm_trunc(n) == n && n.abs() <= MAX_SAFE_INTEGER { Some(n as i64) } else { None }
}

fn libm_trunc(n: f64) -> f64 {
    // `f64::trunc` lives in std; for |n| < 2^63 the cast round trip truncates exactly, and larger
    // values are integers already.
    if n.abs() < 9_223_372_036_854_775_808.0 { (n as i64) as f64 } else { n }
}

/// The length of a string in UTF-16 code units (`String.prototype.length`).
pub fn utf16_len(text: &str) -> usize {
    text.chars().map(char::len_utf16).sum()
}

/// Compares two strings by UTF-16 code units, as JavaScript's `<` does (and the default
/// `Array.prototype.sort`). Differs from byte order only for astral characters against
/// U+E000..U+FFFF.
pub fn cmp_utf16(a: &str, b: &str) -> core::cmp::Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`: a lowercase UUID v4
/// (spec §6A.1, §6B.1).
pub fn is_uuid_v4(text: &str) -> bool {
    let b = text.as_bytes();
    if b.len() != 36 {
        return false;
    }
    let lower_hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
    b.iter().enumerate().all(|(i, &c)| match i {
        8 | 13 | 18 | 23 => c == b'-',
        14 => c == b'4',
        19 => matches!(c, b'8' | b'9' | b'a' | b'b'),
        _ => lower_hex(c),
    })
}

/// `^[a-f0-9]{64}$`: a lowercase sha256 hex digest.
pub fn is_digest(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// `^\d+$` with ASCII digits, as JavaScript's `\d`.
pub fn is_ascii_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf16_order_puts_astral_before_bmp_private_use() {
        assert_eq!(cmp_utf16("\u{10000}", "\u{FFFF}"), core::cmp::Ordering::Less);
        assert_eq!(cmp_utf16("Z", "a"), core::cmp::Ordering::Less);
    }

    #[test]
    fn uuid_pattern_is_lowercase_v4_only() {
        assert!(is_uuid_v4("11111111-1111-4111-8111-111111111111"));
        assert!(!is_uuid_v4("11111111-1111-4111-c111-111111111111"));
        assert!(!is_uuid_v4("11111111-1111-3111-8111-111111111111"));
        assert!(!is_uuid_v4("AAAAAAAA-1111-4111-8111-111111111111"));
    }

    #[test]
    fn safe_integers_follow_number_semantics() {
        assert_eq!(safe_integer(&serde_json::json!(1.0)), Some(1));
        assert_eq!(safe_integer(&serde_json::json!(1.5)), None);
        assert_eq!(safe_integer(&serde_json::json!(9007199254740992u64)), None);
        assert_eq!(safe_integer(&serde_json::json!(-9007199254740991i64)), Some(-9007199254740991));
        assert_eq!(safe_integer(&serde_json::json!("1")), None);
    }
}
