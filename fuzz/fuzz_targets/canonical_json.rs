//! parse → canonicalize → parse → canonicalize is a fixed point, and never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proclease_core::canonical_json;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(value) = canonical_json::parse(text) else { return };
    let Ok(first) = canonical_json::to_canonical(&value) else { return };
    let again = canonical_json::parse(&first).expect("canonical JSON parses");
    let second = canonical_json::to_canonical(&again).expect("and canonicalizes");
    assert_eq!(first, second, "canonical JSON is idempotent");
});
