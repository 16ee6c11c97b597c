//! The run journal on this machine's file systems: the protocol
//! (`proclease_protocols::run_journal`, `docs/deviations.md` 19) over [`NativeFs`].

use std::os::fd::AsFd as _;

pub use proclease_protocols::run_journal::{RECORD_BYTES, parse};

use crate::seam::NativeFs;
use crate::state_store::home::StateHome;

/// The run journal of one state home ([`proclease_protocols::run_journal::RunJournal`]).
pub type RunJournal = proclease_protocols::run_journal::RunJournal<NativeFs>;

/// The journal file of one run ([`proclease_protocols::run_journal::JournalEntry`]).
pub type JournalEntry = proclease_protocols::run_journal::JournalEntry<NativeFs>;

/// Opens (creating, mode 0700) `.proclease/runs` in the state home.
///
/// Errors: the directory cannot be created or opened, or it is not a private directory of
/// the user.
pub fn open(home: &StateHome) -> std::io::Result<RunJournal> {
    let home = home.dir().as_fd().try_clone_to_owned()?;
    Ok(RunJournal::open_at(NativeFs, &home)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proclease_core::records::DirectoryIdentity;

    fn identity() -> DirectoryIdentity {
        DirectoryIdentity { device: "2049".into(), inode: "1234567".into(), birthtime_ns: "1700000000000000001".into() }
    }

    #[test]
    fn a_finished_entry_reads_back_and_anything_else_is_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let home = StateHome::open(&dir.path().join("state")).unwrap();
        let journal = open(&home).unwrap();
        let id = "0b8f5a3e-2f4c-4b7e-9d2a-7c1e5f3a9b10";
        let entry = journal.begin(id, &identity()).unwrap();
        let path = dir.path().join("state/.proclease/runs").join(format!("{id}.run"));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), RECORD_BYTES as u64);
        assert_eq!(journal.finished_run(id).unwrap(), None, "a running entry proves nothing");
        entry.finished(Some(0), None).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), RECORD_BYTES as u64, "overwritten in place");
        let run = journal.finished_run(id).unwrap().expect("finished");
        assert!(run.succeeded() && run.directory_identity == identity());
        assert_eq!(journal.finished_run("0b8f5a3e-2f4c-4b7e-9d2a-7c1e5f3a9b11").unwrap(), None);
        // A torn write (half the new record over the old) is nothing finished.
        let mut torn = std::fs::read(&path).unwrap();
        torn[10..40].fill(b'x');
        std::fs::write(&path, &torn).unwrap();
        assert_eq!(journal.finished_run(id).unwrap(), None);
        assert!(journal.begin(id, &identity()).is_err(), "never two entries for one lease");
        journal.forget(id);
        assert!(!path.exists());
        assert!(journal.begin("../escape", &identity()).is_err());
    }
}
