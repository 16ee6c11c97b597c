//! The `/proc/<pid>/stat` parser (spec §2.3), the single source of that rule for every host.
//!
//! The host only reads the bytes; this decides whether they show a live process and, if so,
//! its start time (stat field 22) and process start id.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::{digest, js};

/// What a `/proc/<pid>/stat` line says about its process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcStat {
    /// A live (non-zombie) process started at `raw_start` (clock ticks after boot, decimal text),
    /// whose `process_start_id` is `identityDigest("io-process-start", bootId ‖ 0 ‖ raw_start)`.
    Alive {
        /// stat field 22, `starttime`, as decimal text.
        raw_start: String,
        /// The process start id (64 lowercase hex).
        process_start_id: String,
    },
    /// A zombie or dead process (state `Z`, `X` or `x`).
    Dead,
    /// The line does not prove either (unknown state, missing or malformed start time).
    Unknown,
}

/// Parses the whole content of `/proc/<pid>/stat` for a system whose boot id is `boot_id` (§2.3).
///
/// Rules: trim; the **last** `)` must be at index ≥ 1; the rest after it, trimmed, split on runs
/// of whitespace: field 0 is the state, field 19 the start time. `Z`/`X`/`x` → dead; a state not
/// in `R S D T t W K P I` → unknown; a start time missing or not ASCII digits → unknown.
pub fn parse(stat: &str, boot_id: &str) -> ProcStat {
    let Some(fields) = fields(stat) else { return ProcStat::Unknown };
    match fields.first().copied() {
        Some("Z" | "X" | "x") => return ProcStat::Dead,
        Some("R" | "S" | "D" | "T" | "t" | "W" | "K" | "P" | "I") => {}
        _ => return ProcStat::Unknown,
    }
    match fields.get(19) {
        Some(start) if js::is_ascii_digits(start) => ProcStat::Alive { raw_start: start.to_string(), process_start_id: digest::process_start_id(boot_id, start) },
        _ => ProcStat::Unknown,
    }
}

/// The fields after the command name (the last `)`), split on runs of whitespace: field 0 is
/// the state. `None` when there is no `)` at index ≥ 1.
fn fields(stat: &str) -> Option<Vec<&str>> {
    let text = js::trim(stat);
    let close = match text.rfind(')') {
        Some(index) if index >= 1 => index,
        _ => return None,
    };
    Some(js::trim(&text[close + 1..]).split(js::is_js_space).filter(|f| !f.is_empty()).collect())
}

/// Stat field 22 (`starttime`) as decimal text, whatever the state: a zombie thread-group
/// leader whose other threads still run keeps its start time (`liveness::inspect`).
pub fn start_field(stat: &str) -> Option<&str> {
    fields(stat)?.get(19).copied().filter(|start| js::is_ascii_digits(start))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT: &str = "2e428f285ab5c7529544f882ab5704fda290111df77d659381ffdf07d68f8572";

    #[test]
    fn reference_examples() {
        let alive = parse("42 (worker ) name) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242", BOOT);
        assert_eq!(alive, ProcStat::Alive { raw_start: "424242".into(), process_start_id: "1ff6d3c4b880467f02b3aa0cb9c4445150c501b47f5619cf383edc23f4af801f".into() });
        assert_eq!(parse("42 (worker) Z", BOOT), ProcStat::Dead);
        assert_eq!(parse("42 (worker) Q 1", BOOT), ProcStat::Unknown);
        assert_eq!(parse("42 (worker) R", BOOT), ProcStat::Unknown);
        assert_eq!(parse(")", BOOT), ProcStat::Unknown);
        assert_eq!(start_field("42 (w) Z 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99 0"), Some("99"));
        assert_eq!(start_field("42 (w) Z"), None);
    }
}
