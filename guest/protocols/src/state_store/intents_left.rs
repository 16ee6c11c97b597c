//! What a lease creation cut short by a signal may have left of this process's work: its
//! creation intents (`docs/deviations.md` 27), when the creation's undo could not remove them
//! within the signal's grace (the intents' collection lock held by a hung process). Every host's
//! supervisor names them in its "interrupted" refusal (proclease-core's `run_refusals`); the
//! native host calls this directly, the Python and Node hosts through the portable artifact's
//! `store-advice` export.

use proclease_core::directory_leases::INTENTS;
use proclease_core::records::creation_intent;
use proclease_core::run_refusals;

use super::StoreProtocol;
use crate::prelude::*;
use crate::seam::{Fs, Kernel};

/// More entries than any number of runs leaves at once: the rest are not read.
const AT_MOST: usize = 1_000;
/// The most bytes read of one entry (an intent is a few hundred).
const MAX_BYTES: u64 = 65_536;

impl<F: Fs, K: Kernel> StoreProtocol<F, K> {
    /// This process's creation intents for the directory `path`, each worded for the
    /// "interrupted" refusal (`run_refusals::left_creation_intent`); when the collection cannot
    /// be read, one item saying that one may be left (`left_creation_intent_unknown`, naming
    /// the collection as `home_shown` + `/recovery/proclease-directory-creations`).
    ///
    /// Read straight from the collection, without its lock: that lock may be the one held. An
    /// intent is this process's when its whole recorded owner is (pid, boot id and start
    /// time: a pid alone could be another PID namespace's process sharing the state home);
    /// without this process's own identity none can be shown to be, and nothing is named.
    pub fn creation_intents_left(&self, path: &str, home_shown: &str) -> Vec<String> {
        let unknown = |failure: &dyn core::fmt::Display| vec![run_refusals::left_creation_intent_unknown(path, &format!("{home_shown}/{INTENTS}"), &failure.to_string())];
        let collection = match self.open_directory(INTENTS) {
            Ok(Some(collection)) => collection,
            Ok(None) => return Vec::new(),
            Err(e) => return unknown(&e),
        };
        let Ok(own) = self.kernel().self_identity() else { return Vec::new() };
        let names = match self.fs().first_names(&collection, AT_MOST) {
            Ok(names) => names,
            Err(e) => return unknown(&e),
        };
        let mine = |name: &str| -> Option<String> {
            let file = self.fs().open_file(&collection, name).ok()?;
            let bytes = self.fs().read_up_to(&file, MAX_BYTES, 0).ok()?;
            let text = core::str::from_utf8(&bytes).ok()?;
            let intent = creation_intent::parse_file(text, name).ok()?.record;
            (intent.path == path && intent.owner == own).then(|| run_refusals::left_creation_intent(&format!("{INTENTS}/{name}"), path))
        };
        names.iter().filter_map(|name| core::str::from_utf8(name).ok()).filter_map(mine).collect()
    }
}
