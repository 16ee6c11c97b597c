//! Replays the fuzz corpus and every committed crash input through the fuzz targets' checks
//! (`fuzz/checks.rs`), so a fixed crash stays fixed under `cargo test`, without nightly.
//! Inputs: `fuzz/corpus/<target>/` (the committed seeds, plus whatever a local fuzz run added)
//! and `fuzz/regressions/<target>/` (crash inputs, committed once fixed).

#[path = "../../fuzz/checks.rs"]
mod checks;

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut count = 0;
    for dir in [root.join("corpus").join(target), root.join("regressions").join(target)] {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries {
            let path = entry.expect("entry").path();
            let data = std::fs::read(&path).expect("read input");
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(outcome.is_ok(), "{target}: {} fails its check", path.display());
            count += 1;
        }
    }
    count
}

#[test]
fn canonical_json_inputs_pass() {
    assert!(replay("canonical_json", checks::canonical_json) >= 2);
}

#[test]
fn record_file_inputs_pass() {
    assert!(replay("record_files", checks::record_files) >= 4);
}

#[test]
fn proc_stat_inputs_pass() {
    assert!(replay("proc_stat", checks::proc_stat) >= 1);
}
