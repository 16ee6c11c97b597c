//! parse → canonicalize → parse → canonicalize is a fixed point (`checks::canonical_json`).
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::canonical_json(data));
