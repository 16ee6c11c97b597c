//! The run journal: what a supervisor saw of the end of the command it ran under a directory
//! lease, kept where a full or frozen state home can still take it (`docs/deviations.md`, "A
//! finished run keeps its directory").
//!
//! One file per supervised run, `<state home>/.proclease/runs/<lease id>.run`, of exactly
//! [`RECORD_BYTES`] bytes: a JSON object padded with spaces and ended by `\n`.
//! - [`RunJournal::begin`] creates it (`"state":"running"`) before the command starts, while
//!   the state home is known to be writable (the lease was just written there). It is not
//!   fsynced: a kill keeps it (the kernel has it), and after a power loss a `running` entry and
//!   no entry mean the same — nothing finished (`docs/durability.md`, step 5);
//! - [`JournalEntry::finished`] overwrites it **in place** (`pwrite` at offset 0, same length),
//!   then makes it durable: `fdatasync` of the file, `fsync` of `.proclease/runs` (whose entry
//!   `begin` left unsynced), once the command's whole tree has ended: no new block, inode or
//!   directory entry is needed, so it still works on a full filesystem, in an immutable
//!   (`chattr +i`) directory, or when the lease collection refuses writes. A torn write parses
//!   as nothing finished — the reference's treatment;
//! - [`RunJournal::forget`] removes it once the lease is gone.
//!
//! The host only reports what the file says ([`RunJournal::finished_run`]); whether that keeps
//! a directory is `proclease-core`'s recovery rule. A state home remounted read-only takes no
//! write at all: `run` then prints `proclease recover --keep DIR`.
//!
//! Written once over the system-call seam ([`crate::seam`]): the native host runs it over rustix,
//! and `tests/tests/crash_states.rs` runs the same code over a simulated disk.

use crate::os_error::IoError;
use crate::prelude::*;
use proclease_core::effects::FinishedRun;
use proclease_core::records::DirectoryIdentity;
use serde_json::{Value, json};

use crate::files;
use crate::seam::{Errno, Fs, S_IFREG};

/// The journal's directory in the state home (for messages).
const ROOT: &str = ".proclease/runs";
/// The size of every journal file, bytes: one sector, so that an in-place overwrite is one write.
pub const RECORD_BYTES: usize = 512;
/// The journal's format version.
const VERSION: u64 = 1;

/// The run journal of one state home, on the file system `F`.
pub struct RunJournal<F: Fs> {
    fs: F,
    root: F::Dir,
}

/// The journal file of one run, open for its in-place update.
pub struct JournalEntry<F: Fs> {
    fs: F,
    /// `.proclease/runs`, synced by [`JournalEntry::finished`].
    root: F::Dir,
    file: F::File,
    lease_id: String,
    directory: DirectoryIdentity,
}

impl<F: Fs> core::fmt::Debug for RunJournal<F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RunJournal").finish_non_exhaustive()
    }
}

impl<F: Fs> core::fmt::Debug for JournalEntry<F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("JournalEntry").field("lease_id", &self.lease_id).field("directory", &self.directory).finish_non_exhaustive()
    }
}

/// A lease id as a file name: a UUID's characters only (anything else is never a journal name).
fn file_name(lease_id: &str) -> Option<String> {
    let plain = !lease_id.is_empty() && lease_id.len() <= 64 && lease_id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    plain.then(|| format!("{lease_id}.run"))
}

/// The record's text, padded to [`RECORD_BYTES`]. `None` when it does not fit (it always does
/// for decimal identities and a UUID).
fn record(value: &Value) -> Option<Vec<u8>> {
    let mut bytes = serde_json::to_vec(value).ok()?;
    if bytes.len() >= RECORD_BYTES {
        return None;
    }
    bytes.resize(RECORD_BYTES - 1, b' ');
    bytes.push(b'\n');
    Some(bytes)
}

fn directory_value(identity: &DirectoryIdentity) -> Value {
    json!({ "device": identity.device, "inode": identity.inode, "birthtimeNs": identity.birthtime_ns })
}

impl<F: Fs + Clone> RunJournal<F> {
    /// Opens (creating, mode 0700) `.proclease/runs` in the state home `home`, on `fs`.
    ///
    /// Errors: the directory cannot be created or opened, or it is not a private directory of
    /// the user.
    pub fn open_at(fs: F, home: &F::Dir) -> Result<RunJournal<F>, IoError> {
        let internal = private_dir(&fs, home, ".proclease")?;
        let root = private_dir(&fs, &internal, "runs")?;
        Ok(RunJournal { fs, root })
    }

    /// Starts the journal entry of the run under lease `lease_id` in the directory `directory`:
    /// the file is created (0600, exclusively) and written in full, without an fsync (what a
    /// power loss may take of it, [`JournalEntry::finished`] makes durable).
    ///
    /// Errors: the lease id is not a UUID; the file exists; any I/O error (a full or read-only
    /// state home: the run must not start then).
    pub fn begin(&self, lease_id: &str, directory: &DirectoryIdentity) -> Result<JournalEntry<F>, IoError> {
        let invalid = || IoError::other("not a lease id");
        let name = file_name(lease_id).ok_or_else(invalid)?;
        let value = json!({ "version": VERSION, "leaseId": lease_id, "directory": directory_value(directory), "state": "running" });
        let bytes = record(&value).ok_or_else(invalid)?;
        let file = self.fs.create_file(&self.root, &name)?;
        let written = self.fs.write_at(&file, &bytes, 0).and_then(|()| self.fs.duplicate(&self.root));
        match written {
            Ok(root) => Ok(JournalEntry { fs: self.fs.clone(), root, file, lease_id: lease_id.to_owned(), directory: directory.clone() }),
            Err(e) => {
                let _ = self.fs.unlink(&self.root, &name);
                Err(e.into())
            }
        }
    }

    /// What the journal says of the run under `lease_id`: `Some` only for a complete, valid
    /// `finished` entry (a `running` one, an absent one or a torn write is `None`).
    ///
    /// Errors: the entry exists but is not a private regular file of the user, or cannot be read.
    pub fn finished_run(&self, lease_id: &str) -> Result<Option<FinishedRun>, String> {
        let Some(name) = file_name(lease_id) else { return Ok(None) };
        let label = format!("{ROOT}/{name}");
        let file = match self.fs.open_file(&self.root, &name) {
            Ok(file) => file,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(format!("{label}: open failed: {e}")),
        };
        let stat = self.fs.stat_file(&file).map_err(|e| format!("{label}: fstat failed: {e}"))?;
        if stat.kind() != S_IFREG || stat.uid != self.fs.euid() || stat.mode & 0o077 != 0 {
            return Err(format!("{label}: not a private regular file of yours"));
        }
        let bytes = self.fs.read_up_to(&file, RECORD_BYTES as u64 + 1, RECORD_BYTES as u64).map_err(|e| format!("{label}: read failed: {e}"))?;
        Ok(parse(&bytes, lease_id))
    }

    /// Removes the entry of `lease_id` (best effort: a leftover entry of a released lease names
    /// no claim and keeps nothing).
    pub fn forget(&self, lease_id: &str) {
        if let Some(name) = file_name(lease_id) {
            let _ = self.fs.unlink(&self.root, &name);
        }
    }
}

/// A `finished` record for `lease_id`, or `None` for anything else (a `running` record, a torn
/// write, another lease's).
pub fn parse(bytes: &[u8], lease_id: &str) -> Option<FinishedRun> {
    if bytes.len() != RECORD_BYTES || bytes.last() != Some(&b'\n') {
        return None;
    }
    let value: Value = serde_json::from_slice(bytes).ok()?;
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    let code = |key: &str| match value.get(key) {
        Some(Value::Null) | None => Some(None),
        Some(v) => v.as_i64().and_then(|n| i32::try_from(n).ok()).map(Some),
    };
    if value.get("version").and_then(Value::as_u64) != Some(VERSION) || text(&value, "leaseId")? != lease_id || text(&value, "state")? != "finished" {
        return None;
    }
    let directory = value.get("directory")?;
    let directory_identity = DirectoryIdentity { device: text(directory, "device")?, inode: text(directory, "inode")?, birthtime_ns: text(directory, "birthtimeNs")? };
    let (exit_code, signal) = (code("exitCode")?, code("signal")?);
    if exit_code.is_none() && signal.is_none() {
        return None;
    }
    Some(FinishedRun { directory_identity, exit_code, signal })
}

impl<F: Fs> JournalEntry<F> {
    /// Records, in place, that the run's command finished with `exit_code` or `signal` and its
    /// whole tree has ended, and makes the entry durable: `fdatasync` of the file, then `fsync`
    /// of the journal's directory, since [`RunJournal::begin`] synced neither (a power loss after
    /// this returns keeps a `finished` entry). Needs no free space and no writable directory.
    ///
    /// Errors: the write or either sync failed (a read-only filesystem, an I/O error).
    pub fn finished(&self, exit_code: Option<i32>, signal: Option<i32>) -> Result<(), IoError> {
        let value = json!({
            "version": VERSION, "leaseId": self.lease_id, "directory": directory_value(&self.directory),
            "state": "finished", "exitCode": exit_code, "signal": signal,
        });
        let bytes = record(&value).ok_or_else(|| IoError::other("journal record too long"))?;
        self.fs.write_at(&self.file, &bytes, 0)?;
        self.fs.sync_file_data(&self.file)?;
        Ok(self.fs.sync_dir(&self.root)?)
    }

    /// The lease this entry is for.
    pub fn lease_id(&self) -> &str {
        &self.lease_id
    }
}

/// Opens (creating, mode 0700, durably) the private directory `name` in `parent`
/// ([`files::private_dir`]), worded for the journal.
fn private_dir<F: Fs>(fs: &F, parent: &F::Dir, name: &str) -> Result<F::Dir, IoError> {
    let failed = |operation: &str, e: IoError| IoError::Other(format!("{ROOT}: {operation}: {e}"));
    files::private_dir(fs, parent, name).map_err(|e| match e {
        files::PrivateDirError::Step { step, errno } => failed(step, errno.into()),
        files::PrivateDirError::NotPrivate => failed("check", IoError::other(files::NOT_PRIVATE)),
    })
}
