//! The `run-refusals` export: proclease-core's `run_refusals`, the words of a run refused before
//! its command started, for the Python and Node hosts' supervisors.

use alloc::string::String;
use alloc::vec::Vec;

use proclease_core::run_refusals as words;

use super::Component;
use super::bindings::exports::proclease::lease::run_refusals as wit;

impl wit::Guest for Component {
    fn interrupted_before_start(signal: i32, left: Vec<String>) -> String {
        words::interrupted_before_start(signal, &left)
    }

    fn left_export_admission(failure: String) -> String {
        words::left_export_admission(&failure)
    }

    fn left_directory_lease(path: String, failure: String) -> String {
        words::left_directory_lease(&path, &failure)
    }

    fn left_creation_intent(entry: String, path: String) -> String {
        words::left_creation_intent(&entry, &path)
    }

    fn left_creation_intent_unknown(path: String, collection: String, failure: String) -> String {
        words::left_creation_intent_unknown(&path, &collection, &failure)
    }

    fn unstartable(program: String, reason: String) -> String {
        words::unstartable(&program, &reason)
    }

    fn lease_collection_full() -> String {
        words::lease_collection_full()
    }
}
