//! Every record reader on arbitrary file text (`checks::record_files`).
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::record_files(data));
