//! The /proc stat parser on arbitrary text: never panics; an alive result always carries an
//! all-digit start time and its process start id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proclease_core::proc_stat::{self, ProcStat};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let ProcStat::Alive { raw_start, process_start_id } = proc_stat::parse(text, "b") {
        assert!(!raw_start.is_empty() && raw_start.bytes().all(|c| c.is_ascii_digit()));
        assert_eq!(process_start_id, proclease_core::digest::process_start_id("b", &raw_start));
    }
});
