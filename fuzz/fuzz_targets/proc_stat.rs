//! The /proc stat parser on arbitrary text (`checks::proc_stat`).
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::proc_stat(data));
