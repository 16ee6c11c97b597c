//! The start-up baseline for `bench/startup.py`: a minimal native binary that opens the same
//! state home as `proclease doctor` (selection, validation, claim, store) and lists its
//! collections — everything doctor does except the component.

use std::sync::Arc;

use proclease::process_identity::ProcessIdentity;
use proclease::state_home::StateHome;
use proclease::state_store::StateStore;

fn main() -> std::process::ExitCode {
    let Ok((path, _)) = StateHome::select(None) else { return std::process::ExitCode::from(1) };
    let Ok(home) = StateHome::open(&path) else { return std::process::ExitCode::from(1) };
    let Ok(store) = StateStore::open(home, Arc::new(ProcessIdentity::new())) else { return std::process::ExitCode::from(1) };
    let mut entries = 0;
    for collection in ["recovery/beeper-message-like-me-directory-leases", "provider-plugin-state/.invocations"] {
        entries += store.snapshot(collection, false).ok().flatten().map_or(0, |s| s.entries.len());
    }
    let _ = store.read_if_present("recovery/beeper-message-like-me-export-admission/active.json", 16_384);
    println!("{entries}");
    std::process::ExitCode::SUCCESS
}
