//! The properties the fuzz targets check, shared with the regression test that replays the
//! corpus and every crash input under `cargo test` (`tests/tests/fuzz_corpus.rs`), so a fixed
//! crash stays fixed without a nightly toolchain.
//!
//! Each function takes arbitrary bytes and panics when a property fails.

use proclease_core::canonical_json;
use proclease_core::proc_stat::{self, ProcStat};
use proclease_core::records::{detect, directory_lease, export_admission, invocation_lease, portable_identity};

/// parse → canonicalize → parse → canonicalize is a fixed point, and nothing panics.
pub fn canonical_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(value) = canonical_json::parse(text) else { return };
    let Ok(first) = canonical_json::to_canonical(&value) else { return };
    let again = canonical_json::parse(&first).expect("canonical JSON parses");
    let second = canonical_json::to_canonical(&again).expect("and canonicalizes");
    assert_eq!(first, second, "canonical JSON is idempotent");
}

/// Every record reader (export admission, directory lease, invocation lease, portable identity,
/// and the kind detector) on arbitrary file text: nothing panics, and a file any reader accepts
/// is exactly the canonical file of what it parsed (so re-reading it gives the same record).
pub fn record_files(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(parsed) = export_admission::parse_file(text) {
        assert_eq!(parsed.canonical, text);
        assert_eq!(export_admission::parse_file(&parsed.canonical).expect("re-read").record, parsed.record);
    }
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(text) {
        let name = value.get("id").and_then(|v| v.as_str()).map(|id| format!("{id}.json")).unwrap_or_default();
        if let Ok(parsed) = directory_lease::parse_file(text, &name) {
            assert_eq!(parsed.canonical, text);
        }
        let lease_name = value.get("leaseId").and_then(|v| v.as_str()).map(|id| format!("{id}.json")).unwrap_or_default();
        if let invocation_lease::Listed::Valid(parsed) = invocation_lease::classify_entry(&lease_name, text) {
            assert_eq!(parsed.canonical, text);
        }
        let _ = portable_identity::parse_value(&value);
        if let Some(identity) = value.get("identity")
            && let Ok(parsed) = portable_identity::parse_value(identity)
        {
            assert_eq!(portable_identity::parse_value(&parsed.to_value()).expect("re-read"), parsed);
        }
    }
    let _ = detect::inspect_file("active.json", text);
}

/// The /proc stat parser on arbitrary text: nothing panics; an alive result always carries an
/// all-digit start time and its process start id.
pub fn proc_stat(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let ProcStat::Alive { raw_start, process_start_id } = proc_stat::parse(text, "b") {
        assert!(!raw_start.is_empty() && raw_start.bytes().all(|c| c.is_ascii_digit()));
        assert_eq!(process_start_id, proclease_core::digest::process_start_id("b", &raw_start));
    }
}
