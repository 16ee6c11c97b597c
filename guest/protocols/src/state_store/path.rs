//! Store paths: relative, `/`-separated paths below the state home (spec §3.2, adapted).
//!
//! A store path has 1..=32 segments; each is non-empty, not `.` or `..`, has no `/`, `\`, NUL or
//! control character, and is at most 255 bytes. The first segment must be one of the state
//! directory names the reference recognises (§3.1), so the store can never reach its own
//! bookkeeping (`.proclease/`) or anything else in the state home.

use crate::prelude::*;

/// The state directory names of the reference (§3.1, newer list), the only first segments a
/// store path may have.
pub const STATE_DIRECTORIES: &[&str] = &[
    "adapter-generations",
    "adapters",
    "auth",
    "browser-snapshots",
    "captures",
    "control",
    "derivations",
    "idempotency",
    "linked-device-stores",
    "menubar",
    "messaging",
    "omni-read-projections",
    "operation-permissions",
    "plan-assets",
    "plans",
    "provider-plugin-state",
    "provider-plugins",
    "read-projection-control",
    "read-projections",
    "recovery",
    "repair-signals",
    "run-journals",
    "runs",
    "session-secrets",
    "tools",
];

/// The most segments a store path may have.
pub const MAX_SEGMENTS: usize = 32;

/// Whether `name` is a safe single directory entry name (§3.3 snapshot rules): non-empty, not
/// `.`/`..`, no `/`, `\`, U+FFFD or control characters (≤ U+001F, U+007F), ≤ 255 bytes.
pub fn is_safe_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && name.len() <= 255 && !name.chars().any(|c| matches!(c, '/' | '\\' | '\u{FFFD}' | '\u{7F}') || (c as u32) < 0x20)
}

/// Splits and checks a store path. Errors: the reason, for a `refused` store error.
pub fn segments(path: &str) -> Result<Vec<&str>, String> {
    if path.starts_with('/') {
        return Err("absolute paths are refused: give a path relative to the state home".into());
    }
    let segments: Vec<&str> = path.split('/').collect();
    if segments.len() > MAX_SEGMENTS {
        return Err(format!("more than {MAX_SEGMENTS} path segments"));
    }
    if let Some(bad) = segments.iter().find(|s| !is_safe_name(s)) {
        return Err(format!("unsafe path segment {bad:?} (empty, `.`, `..`, a separator or a control character)"));
    }
    if !STATE_DIRECTORIES.contains(&segments[0]) {
        return Err(format!("state path is outside the owned state layout: {:?} is not a state directory name", segments[0]));
    }
    Ok(segments)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_escapes_and_foreign_roots() {
        assert!(segments("recovery/x/active.json").is_ok());
        for bad in ["/etc/passwd", "../x", "recovery/../x", "recovery//x", "recovery/./x", ".proclease/locks", "etc", "recovery/a\nb", ""] {
            assert!(segments(bad).is_err(), "{bad:?}");
        }
    }
}
