//! Every record reader on arbitrary file text: never panics, and a file any reader accepts is
//! exactly the canonical file of what it parsed (so re-reading it gives the same record).
#![no_main]

use libfuzzer_sys::fuzz_target;
use proclease_core::records::{detect, directory_lease, export_admission, invocation_lease};

fuzz_target!(|data: &[u8]| {
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
    }
    let _ = detect::inspect_file("active.json", text);
});
