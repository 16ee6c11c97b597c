//! The state store's protocol, written once over the seam ([`Fs`], [`Kernel`]): the
//! compare-and-swap of records (a fsynced temporary in `.proclease/staging/`, published by
//! `link` or `rename`, the collection fsynced, undone when that fails), the reference's
//! mutation claims around every change (§3.5), crash recovery in each collection (§3.9),
//! listings and batch reads (§3.3). The guarantees are those of [`super`]'s module docs.
//!
//! The native store (`proclease`'s `StateStore`) runs it over rustix; `tests/tests/crash_states.rs`
//! runs the same code over a simulated disk that crashes or fails at every call.

use crate::os_error::IoError;
use crate::prelude::*;
use alloc::sync::Arc;

use proclease_core::digest;
use proclease_core::liveness::OwnerStatus;
use proclease_core::records::Owner;

use proclease_core::effects::{BatchInvalid, BatchStatus, CollectionEntry, CollectionIdentity, CollectionSnapshot, EntryKind};

use super::{CLAIM_HINT, CLAIM_WAIT, INTERNAL, MAX_ENTRIES, MAX_RECORD_BYTES, StoreError, arbitration, check_batch, check_hash, check_size, mutation_claim, path, split};
use crate::files::{self, PrivateDirError, StableRead};
use crate::seam::{Errno, FileStat, Fs, Kernel, Locked, S_IFDIR, S_IFLNK, S_IFREG};
use crate::waits::{Behind, LockTimeout};

fn collection_identity(stat: &FileStat) -> CollectionIdentity {
    CollectionIdentity { device: stat.dev.to_string(), inode: stat.ino.to_string() }
}

/// The store's protocol on one state home, over the file system `F` and the kernel `K`.
pub struct StoreProtocol<F: Fs, K: Kernel + ?Sized> {
    fs: F,
    home: F::Dir,
    staging: F::Dir,
    locks: F::Dir,
    kernel: Arc<K>,
    mutation_claims: core::sync::atomic::AtomicBool,
    /// When this handle was opened ([`Kernel::monotonic`]): the origin of `staging_swept_ms`.
    opened_at: core::time::Duration,
    /// When the staging directory was last swept, in ms since `opened_at` plus one (0: never).
    staging_swept_ms: core::sync::atomic::AtomicU64,
}

/// How often a store handle's writes sweep the staging directory for crashed writers'
/// temporaries (snapshots for recovery always do).
const STAGING_SWEEP_INTERVAL: core::time::Duration = core::time::Duration::from_secs(1);

/// The length of a claim id as a collection lock's note records it (a version-4 UUID's text).
const CLAIM_ID_LENGTH: usize = 36;

impl<F: Fs, K: Kernel + ?Sized> StoreProtocol<F, K> {
    /// Opens the store on the state home `home` (a directory the caller has validated),
    /// creating `.proclease/{staging,locks}` (0700).
    ///
    /// Errors: the internal directories cannot be created or are unsafe.
    pub fn open(fs: F, home: F::Dir, kernel: Arc<K>) -> Result<Self, StoreError> {
        let internal = private_dir(&fs, &home, INTERNAL, INTERNAL)?;
        let staging = private_dir(&fs, &internal, "staging", ".proclease/staging")?;
        let locks = private_dir(&fs, &internal, "locks", ".proclease/locks")?;
        let opened_at = kernel.monotonic();
        Ok(StoreProtocol {
            fs,
            home,
            staging,
            locks,
            kernel,
            mutation_claims: core::sync::atomic::AtomicBool::new(true),
            opened_at,
            staging_swept_ms: core::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The directory at `path` below the state home, opened without following symbolic links
    /// and checked like every store directory (owned, mode 0700); `None` when absent.
    pub fn open_directory(&self, path: &str) -> Result<Option<F::Dir>, StoreError> {
        let segments = path::segments(path).map_err(|reason| StoreError::Refused { path: path.into(), reason })?;
        self.walk(path, &segments, false)
    }

    /// The file system the store is on.
    pub fn fs(&self) -> &F {
        &self.fs
    }

    /// The kernel the store judges writers with.
    pub fn kernel(&self) -> &K {
        &self.kernel
    }

    /// The store's own lock directory (`.proclease/locks/`).
    pub fn locks(&self) -> &F::Dir {
        &self.locks
    }

    /// Benchmarks only: turns the reference's mutation claims off (`false`) or on (see
    /// [`super::StateStore::benchmark_mutation_claims`]).
    #[doc(hidden)]
    pub fn benchmark_mutation_claims(&self, on: bool) {
        self.mutation_claims.store(on, core::sync::atomic::Ordering::Relaxed);
    }

    /// The file's text, or `None` when it or a parent directory is absent
    /// (`readPrivateStateFileIfPresent`, §3.3). The file must be a private, owned, regular file
    /// of at most `max_bytes`, unchanged while read, and UTF-8.
    pub fn read_if_present(&self, path: &str, max_bytes: u32) -> Result<Option<String>, StoreError> {
        let (segments, name) = split(path)?;
        let Some(dir) = self.walk(path, &segments, false)? else { return Ok(None) };
        let Some(bytes) = read_record(&self.fs, &dir, name, path, u64::from(max_bytes), true)? else { return Ok(None) };
        String::from_utf8(bytes).map(Some).map_err(|_| StoreError::unsafe_(path, "not valid UTF-8"))
    }

    /// Creates the file with `content` unless it exists (`createPrivateJsonIfAbsent`, §3.3):
    /// `Ok(true)` when created, `Ok(false)` when a file was already there. Never overwrites.
    /// Missing parent directories are created (0700).
    pub fn create_if_absent(&self, path: &str, content: &str) -> Result<bool, StoreError> {
        let (segments, name) = split(path)?;
        check_size(path, content)?;
        let dir = self.walk(path, &segments, true)?.ok_or_else(|| StoreError::unsafe_(path, "parent vanished"))?;
        let lock = self.lock(path, &segments, &dir, Some(name))?;
        let temp = self.stage(path, content.as_bytes())?;
        let unlink_temp = || {
            let _ = self.fs.unlink(&self.staging, &temp);
        };
        let created = self.with_claim(path, &lock, &dir, name, || self.link_new(path, &dir, name, &temp));
        unlink_temp();
        created?.ok_or_else(|| StoreError::Contended { path: path.into() })
    }

    /// The create's critical section: links the staged `temp` at `name` and fsyncs `dir`.
    fn link_new(&self, path: &str, dir: &F::Dir, name: &str, temp: &str) -> Result<bool, StoreError> {
        match self.fs.link(&self.staging, temp, dir, name) {
            Ok(()) => {}
            Err(Errno::EXIST) => return Ok(false),
            Err(e) => return Err(StoreError::io(path, "link into the collection", e)),
        }
        if let Err(e) = self.fs.sync_dir(dir) {
            // The caller is told the create failed, so it must not stay visible: unlink the
            // name again (it is still our inode: the record's claim is held).
            if same_inode(&self.fs, &self.staging, temp, dir, name) {
                let _ = self.fs.unlink(dir, name);
            }
            return Err(StoreError::io(path, "fsync of the collection", e));
        }
        Ok(true)
    }

    /// Runs `mutate` holding the reference's mutation claim on `name` in `dir` (§3.5), after the
    /// crash recovery of `dir` (§3.9). The caller holds the collection's kernel lock, so the
    /// only writers this can lose to are other programs' (a running ghostget): a lost claim is
    /// retried after a short pause for at most [`lock::CLAIM_WAIT`], then `Ok(None)`.
    ///
    /// Errors: the claim protocol's own (an owner that cannot be judged, two holders, a
    /// malformed claim: [`StoreError::Claim`]); this process's identity unavailable; those of
    /// `mutate`.
    fn with_claim<T>(&self, path: &str, lock: &F::Lock, dir: &F::Dir, name: &str, mutate: impl FnOnce() -> Result<T, StoreError>) -> Result<Option<T>, StoreError> {
        if !self.mutation_claims.load(core::sync::atomic::Ordering::Relaxed) {
            return mutate().map(Some);
        }
        // A failed system call keeps its errno (a full or read-only filesystem is told apart from
        // a protocol refusal); a refusal of the protocol keeps the reference's message.
        let claim_error = |e: arbitration::ArbitrationError| match e.io {
            Some(source) => StoreError::Io { path: path.into(), operation: "taking the mutation claim", source },
            None => StoreError::Claim { path: path.into(), reason: e.message.into() },
        };
        let own = mutation_claim::own_identity(&*self.kernel).map_err(|reason| StoreError::Claim { path: path.into(), reason: reason.into() })?;
        mutation_claim::recover_directory(&self.fs, dir, &*self.kernel, false, self.noted_claim(lock).as_deref()).map_err(claim_error)?;
        let kind = mutation_claim::MutationClaim::for_leaf(name);
        let start = self.kernel.monotonic();
        let bound = self.kernel.wait_bound(CLAIM_WAIT);
        let mut pause = core::time::Duration::from_millis(1);
        // The pauses asked for, summed: the wait ends at the bound even where a host's clock
        // stands still or steps back (a WebAssembly host's, not the native one's).
        let mut paused = core::time::Duration::ZERO;
        let held = loop {
            // Noted before it is published, for whoever holds the lock after this process: a
            // claim that outlives this hold of the lock was abandoned (`recover_directory`).
            let claim_id = self.kernel.new_uuid();
            if let Err(e) = self.fs.note_in_lock(lock, claim_id.as_bytes()) {
                tracing::debug!(path, "the mutation claim's id could not be noted in the collection lock ({e}); a trap before its release would leave it until this process exits");
            }
            if let Some(held) = arbitration::arbitrate_as(&self.fs, dir, &kind, &*self.kernel, &own, &claim_id, self.fs.lock_excludes(lock)).map_err(claim_error)? {
                self.kernel.note_taken(&format!("the mutation claim of {path}"));
                break held;
            }
            let waited = self.kernel.monotonic().saturating_sub(start).max(paused);
            // The host may end the wait early (native: a Ctrl-C before a run's command started,
            // `lock_wait::stop_waits_when`): it then has nothing left to give.
            if waited >= bound || self.kernel.wait_bound(bound).is_zero() {
                // Who holds it, for the operation's error: the claim's record names its owner.
                let holder = arbitration::live_holder(&self.fs, dir, &kind, &*self.kernel).map(|pid| self.kernel.holder(pid));
                let timeout =
                    LockTimeout { lock: format!("the mutation claim of {path}"), holder, behind: None, waited_ms: waited.as_millis() as u64, hint: CLAIM_HINT, during: None };
                tracing::warn!("gave up: {timeout}");
                self.kernel.note_timeout(&timeout);
                return Ok(None);
            }
            tracing::trace!(path, "another process holds the mutation claim; waiting");
            self.kernel.pause(pause);
            paused += pause;
            pause = (pause * 2).min(core::time::Duration::from_millis(20));
        };
        let result = mutate();
        arbitration::release(&self.fs, dir, &held.name);
        result.map(Some)
    }

    /// Puts `old` back at `name` after a visible change whose collection fsync failed (the
    /// caller is told the change failed, so it must not stay): a fresh temporary with the old
    /// bytes, published over the name (`rename`, after a replace) or at the emptied name
    /// (`link`, after a removal: it never overwrites a file that appeared meanwhile), and the
    /// collection fsynced again. Best effort: if this fails too, the name holds the old or
    /// the new complete version (or, after a removal, none).
    fn restore(&self, path: &str, dir: &F::Dir, name: &str, old: &[u8], over_the_name: bool) {
        let Ok(back) = self.stage(path, old) else { return };
        let published = if over_the_name { self.fs.rename(&self.staging, &back, dir, name, true) } else { self.fs.link(&self.staging, &back, dir, name) };
        if published.is_ok() {
            let _ = self.fs.sync_dir(dir);
        }
        let _ = self.fs.unlink(&self.staging, &back);
    }

    /// Replaces the file with `content` only if its bytes hash to `expected_sha256` at the
    /// instant of the swap (`writePrivateJsonIfUnchanged`, §3.3): `Ok(false)` when the file is
    /// absent or differs.
    pub fn replace_if_unchanged(&self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, StoreError> {
        self.replace(path, expected_sha256, content, true)
    }

    /// [`Self::replace_if_unchanged`] without the collection's fsync (WIT
    /// `replace-if-unchanged-lazily`): the staged bytes are fsynced before the rename, so the
    /// name never holds a torn or empty record, but a power loss or an OS crash may undo the
    /// rename and leave an earlier complete version. For a change that such a crash makes
    /// harmless (`docs/durability.md`: a run's phase updates).
    pub fn replace_if_unchanged_lazily(&self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, StoreError> {
        self.replace(path, expected_sha256, content, false)
    }

    /// The replace of both: with `sync_collection`, the collection is fsynced after the rename
    /// (and the old bytes put back when that fails).
    fn replace(&self, path: &str, expected_sha256: &str, content: &str, sync_collection: bool) -> Result<bool, StoreError> {
        let (segments, name) = split(path)?;
        check_hash(path, expected_sha256)?;
        check_size(path, content)?;
        let Some(dir) = self.walk(path, &segments, false)? else { return Ok(false) };
        let lock = self.lock(path, &segments, &dir, Some(name))?;
        let temp = self.stage(path, content.as_bytes())?;
        let replaced = self.with_claim(path, &lock, &dir, name, || {
            // Never the record as it was at the open: a compare-and-swap compares what the name
            // holds at its swap, and one replaced during the read is no longer the expected one.
            let Some(old) = read_record(&self.fs, &dir, name, path, MAX_RECORD_BYTES, false)? else { return Ok(false) };
            if digest::sha256_hex(&old) != expected_sha256 {
                return Ok(false);
            }
            self.fs.rename(&self.staging, &temp, &dir, name, true).map_err(|e| StoreError::io(path, "rename into the collection", e))?;
            if !sync_collection {
                return Ok(true);
            }
            if let Err(e) = self.fs.sync_dir(&dir) {
                self.restore(path, &dir, name, &old, true);
                return Err(StoreError::io(path, "fsync of the collection", e));
            }
            Ok(true)
        });
        // Gone when it was renamed into place; otherwise it is removed here.
        let _ = self.fs.unlink(&self.staging, &temp);
        Ok(replaced?.unwrap_or(false))
    }

    /// Removes the file only if its bytes hash to `expected_sha256` at the instant of removal
    /// (`removePrivateStateFileIfUnchanged`, §3.3): `Ok(false)` when absent or different.
    pub fn remove_if_unchanged(&self, path: &str, expected_sha256: &str) -> Result<bool, StoreError> {
        let (segments, name) = split(path)?;
        check_hash(path, expected_sha256)?;
        let Some(dir) = self.walk(path, &segments, false)? else { return Ok(false) };
        let lock = self.lock(path, &segments, &dir, Some(name))?;
        Ok(self.with_claim(path, &lock, &dir, name, || self.remove_read(path, &dir, name, expected_sha256))?.unwrap_or(false))
    }

    /// The removal's critical section: reads the record, compares, unlinks the inode read, and
    /// fsyncs `dir` (putting the bytes back if that fails).
    fn remove_read(&self, path: &str, dir: &F::Dir, name: &str, expected_sha256: &str) -> Result<bool, StoreError> {
        let file = match self.fs.open_file(dir, name) {
            Ok(file) => file,
            Err(Errno::NOENT) => return Ok(false),
            Err(Errno::LOOP) => return Err(StoreError::unsafe_(path, "is a symbolic link; remove it by hand after checking it")),
            Err(e) => return Err(StoreError::io(path, "open", e)),
        };
        let before = self.fs.stat_file(&file).map_err(|e| StoreError::io(path, "fstat", e))?;
        if let Some(reason) = files::unsafe_file_reason(&before, self.fs.euid()) {
            return Err(StoreError::unsafe_(path, reason));
        }
        let bytes = match files::read_stable(&self.fs, &file, &before, MAX_RECORD_BYTES).map_err(|e| StoreError::io(path, "read", e))? {
            StableRead::Bytes(bytes) => bytes,
            StableRead::TooLarge => return Err(StoreError::unsafe_(path, "larger than a record may be")),
            StableRead::Changed | StableRead::StatusChanged(_) => return Ok(false),
        };
        if digest::sha256_hex(&bytes) != expected_sha256 {
            return Ok(false);
        }
        // Under the claim no cooperating writer can swap the name; still, remove only the inode
        // that was read.
        match self.fs.lstat(dir, name).map_err(|e| StoreError::io(path, "lstat", e))? {
            Some(now) if now.same_inode(&before) => {}
            _ => return Ok(false),
        }
        self.fs.unlink(dir, name).map_err(|e| StoreError::io(path, "unlink", e))?;
        if let Err(e) = self.fs.sync_dir(dir) {
            self.restore(path, dir, name, &bytes, false);
            return Err(StoreError::io(path, "fsync of the collection", e));
        }
        Ok(true)
    }

    /// Creates (mode 0700) each missing directory of `path` and verifies the existing ones
    /// (owned, mode 0700, not a symbolic link); returns the identity of the last
    /// (`ensurePrivateStateDirectory`, §3.3).
    pub fn ensure_private_directory(&self, path: &str) -> Result<CollectionIdentity, StoreError> {
        let segments = path::segments(path).map_err(|reason| StoreError::Refused { path: path.into(), reason })?;
        let dir = self.walk(path, &segments, true)?.ok_or_else(|| StoreError::unsafe_(path, "vanished while created"))?;
        let stat = self.fs.stat_dir(&dir).map_err(|e| StoreError::io(path, "fstat", e))?;
        Ok(collection_identity(&stat))
    }

    /// Lists a collection directory; `None` when it (or a parent) is absent
    /// (`snapshotPrivateStateDirectory`, §3.3). Every listing first performs the crash recovery of
    /// §3.9 in the collection (what crashed ghostget writers left there); with `recover_orphans`,
    /// also the claims of gone owners (§3.5) and proclease's own staged temporaries of provably
    /// dead writers.
    ///
    /// Errors: more than [`MAX_ENTRIES`] entries; an unsafe entry name; a sub-directory that is
    /// not owned with mode 0700.
    pub fn snapshot(&self, path: &str, recover_orphans: bool) -> Result<Option<CollectionSnapshot>, StoreError> {
        let segments = path::segments(path).map_err(|reason| StoreError::Refused { path: path.into(), reason })?;
        if recover_orphans {
            self.remove_dead_temporaries();
        }
        let Some(dir) = self.walk(path, &segments, false)? else { return Ok(None) };
        // proclease's writers hold this lock with their claims: the listing never sees them.
        let lock = self.lock(path, &segments, &dir, None)?;
        mutation_claim::recover_directory(&self.fs, &dir, &*self.kernel, recover_orphans, self.noted_claim(&lock).as_deref())
            .map_err(|e| StoreError::Claim { path: path.into(), reason: e.to_string() })?;
        let stat = self.fs.stat_dir(&dir).map_err(|e| StoreError::io(path, "fstat", e))?;
        let names = self.fs.read_names(&dir, MAX_ENTRIES, b"").map_err(|e| match e {
            Some(e) => StoreError::io(path, "list", e),
            None => StoreError::unsafe_(path, format!("the collection has more than {MAX_ENTRIES} entries")),
        })?;
        let mut entries = Vec::with_capacity(names.len());
        for raw in names {
            let name = String::from_utf8(raw.clone()).ok().filter(|n| path::is_safe_name(n)).ok_or_else(|| {
                let shown = raw.escape_ascii().to_string();
                StoreError::unsafe_(path, format!("state directory contains an unsafe entry name (\"{shown}\"): rename or remove it by hand"))
            })?;
            let Some(entry_stat) = self.fs.lstat(&dir, &name).map_err(|e| StoreError::io(path, "lstat", e))? else {
                continue; // removed while listed
            };
            let (kind, identity) = match entry_stat.kind() {
                S_IFREG => (EntryKind::File, None),
                S_IFLNK => (EntryKind::SymbolicLink, None),
                S_IFDIR => {
                    if entry_stat.uid != self.fs.euid() || entry_stat.mode & 0o777 != 0o700 {
                        return Err(StoreError::unsafe_(path, format!("sub-directory {name} must be owned by you with mode 0700")));
                    }
                    (EntryKind::Directory, Some(collection_identity(&entry_stat)))
                }
                _ => (EntryKind::Other, None),
            };
            entries.push(CollectionEntry { name, kind, identity });
        }
        entries.sort_by(|a, b| proclease_core::js::cmp_utf16(&a.name, &b.name));
        Ok(Some(CollectionSnapshot { identity: collection_identity(&stat), entries }))
    }

    /// Reads files of a collection whose identity must be `expected` before and after
    /// (`readPrivateStateFilesBatch`, §3.3). Results are in request order.
    ///
    /// Errors: bounds out of range (per file ≤ 2 MiB, total ≤ 64 MiB, ≤ 1 000 unique safe names);
    /// the directory absent or no longer `expected`.
    pub fn read_batch(
        &self,
        path: &str,
        names: &[String],
        max_bytes_per_file: u32,
        max_total_bytes: u32,
        expected: &CollectionIdentity,
    ) -> Result<Vec<(String, BatchStatus)>, StoreError> {
        let segments = check_batch(path, names, max_bytes_per_file, max_total_bytes)?;
        let dir = self.walk(path, &segments, false)?.ok_or_else(|| StoreError::unsafe_(path, "private state batch directory is absent"))?;
        let identity = |dir: &F::Dir| self.fs.stat_dir(dir).map(|s| collection_identity(&s));
        let changed = || StoreError::unsafe_(path, "private state batch directory changed identity");
        if identity(&dir).map_err(|e| StoreError::io(path, "fstat", e))? != *expected {
            return Err(changed());
        }
        let mut remaining = u64::from(max_total_bytes);
        let mut results = Vec::with_capacity(names.len());
        for name in names {
            let status = batch_read_one(&self.fs, &dir, name, u64::from(max_bytes_per_file), &mut remaining);
            results.push((name.clone(), status));
        }
        // The directory must still be the same one at the same path.
        let reopened = self.walk(path, &segments, false)?.ok_or_else(changed)?;
        let now = identity(&reopened).map_err(|e| StoreError::io(path, "fstat", e))?;
        if now != *expected || identity(&dir).ok().as_ref() != Some(expected) {
            return Err(changed());
        }
        Ok(results)
    }

    /// Opens the directory of `segments` below the state home, one component at a time without
    /// following symbolic links, checking each is owned with mode 0700; creates missing ones
    /// when `create`. `None` when one is absent (and not created).
    fn walk(&self, path: &str, segments: &[&str], create: bool) -> Result<Option<F::Dir>, StoreError> {
        let mut current = self.fs.duplicate(&self.home).map_err(|e| StoreError::io(path, "dup", e))?;
        for segment in segments {
            // Open first: the directory nearly always exists, and a `mkdirat` that fails with
            // EEXIST costs as much as the open it precedes.
            let mut opened = self.fs.open_dir(&current, segment);
            if create && matches!(opened, Err(Errno::NOENT)) {
                files::create_private_dir(&self.fs, &current, segment).map_err(|e| StoreError::io(path, "mkdir", e))?;
                opened = self.fs.open_dir(&current, segment);
            }
            let next = match opened {
                Ok(fd) => fd,
                Err(Errno::NOENT) => return Ok(None),
                Err(Errno::LOOP) => {
                    return Err(StoreError::unsafe_(path, format!("{segment} is a symbolic link; the store never follows them")));
                }
                Err(Errno::NOTDIR) => return Err(StoreError::unsafe_(path, format!("{segment} is not a directory"))),
                Err(e) => return Err(StoreError::io(path, "open directory", e)),
            };
            let stat = self.fs.stat_dir(&next).map_err(|e| StoreError::io(path, "fstat", e))?;
            if stat.uid != self.fs.euid() || stat.mode & 0o777 != 0o700 {
                return Err(StoreError::unsafe_(path, format!("directory {segment} must be owned by you with mode 0700 (chmod 700 it if it is yours)")));
            }
            current = next;
        }
        Ok(Some(current))
    }

    /// Takes the lock of the collection that holds `path`'s file (`leaf` in `dir`; `None` for
    /// the collection itself). A wait that is told, or reaches its bound, also names the live
    /// holder of `leaf`'s mutation claim when that is another process than the lock's holder:
    /// the lock's holder is then itself waiting for it (a stopped ghostget), and is not what
    /// holds everyone up.
    fn lock(&self, path: &str, parent: &[&str], dir: &F::Dir, leaf: Option<&str>) -> Result<F::Lock, StoreError> {
        let name = format!("{}.lock", digest::identity_digest("proclease-collection-lock", &parent.join("/")));
        let behind = |lock_holder: Option<i32>| {
            let leaf = leaf.filter(|_| self.mutation_claims.load(core::sync::atomic::Ordering::Relaxed))?;
            let kind = mutation_claim::MutationClaim::for_leaf(leaf);
            let claim_holder = arbitration::live_holder(&self.fs, dir, &kind, &*self.kernel).filter(|pid| Some(*pid) != lock_holder)?;
            Some(Behind { holder: self.kernel.holder(claim_holder), lock: format!("the mutation claim of {path}") })
        };
        match self.fs.lock(&self.locks, &name, &behind).map_err(|e| StoreError::io(path, "lock", e))? {
            Locked::Held(held) => Ok(held),
            Locked::TimedOut => Err(StoreError::Contended { path: path.into() }),
        }
    }

    /// The claim id the previous holder of the collection `lock` noted before publishing its
    /// mutation claim (`Fs::note_in_lock`), if the lock's file holds one.
    fn noted_claim(&self, lock: &F::Lock) -> Option<String> {
        let note = self.fs.lock_note(lock, CLAIM_ID_LENGTH).ok()?;
        let id = core::str::from_utf8(&note).ok()?;
        proclease_core::js::is_uuid_v4(id).then(|| id.to_string())
    }

    /// Writes `content` to a fresh, fsynced temporary in the staging directory, named
    /// `<pid>-<process start id>-<uuid>.tmp` so that a later operation can prove its writer dead.
    fn stage(&self, path: &str, content: &[u8]) -> Result<String, StoreError> {
        self.sweep_staging_now_and_then();
        let own = self.kernel.self_identity().map_err(|e| StoreError::io(path, "reading this process's identity", IoError::Other(e)))?;
        let name = format!("{}-{}-{}.tmp", own.pid, own.process_start_id, self.kernel.new_uuid());
        files::write_new_file(&self.fs, &self.staging, &name, content, true).map_err(|e| {
            let _ = self.fs.unlink(&self.staging, &name);
            StoreError::io(path, "write of the temporary", e)
        })?;
        Ok(name)
    }

    /// [`remove_dead_temporaries`](Self::remove_dead_temporaries) at most once per
    /// [`STAGING_SWEEP_INTERVAL`] for this store handle: a writer's own temporaries never
    /// outlive its write, so only crashed writers leave any, and listing the staging directory
    /// before every write (with a `/proc` probe per entry) would tax every mutation for them.
    /// A snapshot with `recover_orphans` (recovery, `doctor`) always sweeps.
    fn sweep_staging_now_and_then(&self) {
        use core::sync::atomic::Ordering;
        let now = self.kernel.monotonic().saturating_sub(self.opened_at).as_millis() as u64 + 1;
        let last = self.staging_swept_ms.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < STAGING_SWEEP_INTERVAL.as_millis() as u64 {
            return;
        }
        if self.staging_swept_ms.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            self.remove_dead_temporaries();
        }
    }

    /// Removes temporaries whose writer is provably dead (another boot, no such process, or
    /// another process on that pid). A temporary of a live or unknown writer stays.
    fn remove_dead_temporaries(&self) {
        let Ok(names) = self.fs.read_names(&self.staging, MAX_ENTRIES, b"") else { return };
        let Ok(boot_id) = self.kernel.current_boot_id() else { return };
        for raw in names {
            let Ok(name) = core::str::from_utf8(&raw) else { continue };
            let Some(owner) = temporary_owner(name, &boot_id) else { continue };
            if self.kernel.owner_status(&owner).ok() == Some(OwnerStatus::DifferentOrDead) {
                let _ = self.fs.unlink(&self.staging, name);
            }
        }
    }
}

/// The writer a staging temporary name `<pid>-<start id>-<uuid>.tmp` records, on this boot.
fn temporary_owner(name: &str, boot_id: &str) -> Option<Owner> {
    let stem = name.strip_suffix(".tmp")?;
    let (pid, rest) = stem.split_once('-')?;
    let (start, uuid) = rest.split_once('-')?;
    let pid: u64 = pid.parse().ok().filter(|p| *p > 0)?;
    (proclease_core::js::is_digest(start) && uuid.len() == 36).then(|| Owner { pid, boot_id: boot_id.into(), process_start_id: start.into() })
}

/// Whether `a_name` in `a_dir` and `b_name` in `b_dir` are the same inode.
fn same_inode<F: Fs>(fs: &F, a_dir: &F::Dir, a_name: &str, b_dir: &F::Dir, b_name: &str) -> bool {
    match (fs.lstat(a_dir, a_name), fs.lstat(b_dir, b_name)) {
        (Ok(Some(a)), Ok(Some(b))) => a.same_inode(&b),
        _ => false,
    }
}

/// Reads a record file: `None` when absent; an error when unsafe or oversized.
///
/// A reader racing a writer sees the old record, the new one, or none (`docs/deviations.md`
/// 32; §3.2 fails the read instead):
/// - a file whose ctime alone moved while it was read, and whose name no longer names it
///   afterwards, was replaced (a rename over it) or removed by another writer after it was
///   opened. Its bytes are those of a whole record that was current at the open (a record's
///   inode is never written once it has a name: every writer stages, then links or renames),
///   so they are returned when `as_at_open` (a plain read); a compare-and-swap's read passes
///   false, and reads again;
/// - a file that changed otherwise, or whose name still names it (its link count moved: a
///   creator unlinking its temporary; or an in-place writer that put its mtime back, which
///   only the ctime shows), is read again, a few times, and only a file that keeps changing is
///   an error.
fn read_record<F: Fs>(fs: &F, dir: &F::Dir, name: &str, path: &str, max_bytes: u64, as_at_open: bool) -> Result<Option<Vec<u8>>, StoreError> {
    const ATTEMPTS: usize = 4;
    for _ in 0..ATTEMPTS {
        let file = match fs.open_file(dir, name) {
            Ok(file) => file,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => return Err(StoreError::unsafe_(path, "is a symbolic link; the store never follows them")),
            Err(e) => return Err(StoreError::io(path, "open", e)),
        };
        let stat = fs.stat_file(&file).map_err(|e| StoreError::io(path, "fstat", e))?;
        if let Some(reason) = files::unsafe_file_reason(&stat, fs.euid()) {
            return Err(StoreError::unsafe_(path, reason));
        }
        match files::read_stable(fs, &file, &stat, max_bytes).map_err(|e| StoreError::io(path, "read", e))? {
            StableRead::Bytes(bytes) => return Ok(Some(bytes)),
            StableRead::TooLarge => return Err(StoreError::unsafe_(path, format!("larger than {max_bytes} bytes"))),
            StableRead::Changed => continue,
            StableRead::StatusChanged(_) if !as_at_open => continue,
            StableRead::StatusChanged(bytes) => match fs.lstat(dir, name) {
                Ok(Some(now)) if now.same_inode(&stat) => continue,
                Ok(_) => return Ok(Some(bytes)),
                Err(e) => return Err(StoreError::io(path, "lstat", e)),
            },
        }
    }
    Err(StoreError::unsafe_(path, "state file changed while it was read, again and again; retry when its writers are done"))
}

fn batch_read_one<F: Fs>(fs: &F, dir: &F::Dir, name: &str, per_file: u64, remaining: &mut u64) -> BatchStatus {
    let file = match fs.open_file(dir, name) {
        Ok(file) => file,
        Err(Errno::NOENT) => return BatchStatus::Absent,
        Err(Errno::LOOP) => return BatchStatus::Invalid(BatchInvalid::UnsafeFile),
        Err(_) => return BatchStatus::Invalid(BatchInvalid::Unreadable),
    };
    let Ok(stat) = fs.stat_file(&file) else { return BatchStatus::Invalid(BatchInvalid::Unreadable) };
    if files::unsafe_file_reason(&stat, fs.euid()).is_some() {
        return BatchStatus::Invalid(BatchInvalid::UnsafeFile);
    }
    let size = u64::try_from(stat.size).unwrap_or(u64::MAX);
    if size > per_file {
        return BatchStatus::Invalid(BatchInvalid::FileByteBound);
    }
    if size > *remaining {
        return BatchStatus::Invalid(BatchInvalid::AggregateByteBound);
    }
    let bytes = match files::read_stable(fs, &file, &stat, per_file) {
        Ok(StableRead::Bytes(bytes)) => bytes,
        Ok(StableRead::TooLarge) => return BatchStatus::Invalid(BatchInvalid::FileByteBound),
        Ok(StableRead::Changed | StableRead::StatusChanged(_)) => return BatchStatus::Invalid(BatchInvalid::ChangedDuringRead),
        Err(_) => return BatchStatus::Invalid(BatchInvalid::Unreadable),
    };
    // The name must still be this inode.
    match fs.lstat(dir, name) {
        Ok(Some(now)) if now.same_inode(&stat) => {}
        _ => return BatchStatus::Invalid(BatchInvalid::ChangedDuringRead),
    }
    *remaining -= bytes.len() as u64;
    match String::from_utf8(bytes) {
        Ok(text) => BatchStatus::Present(text),
        Err(_) => BatchStatus::Invalid(BatchInvalid::InvalidUtf8),
    }
}

/// Opens (creating 0700 if absent) a private directory of the store's own
/// ([`files::private_dir`]), worded for the store.
fn private_dir<F: Fs>(fs: &F, parent: &F::Dir, name: &str, label: &str) -> Result<F::Dir, StoreError> {
    files::private_dir(fs, parent, name).map_err(|e| match e {
        PrivateDirError::Step { step: "open", errno: Errno::LOOP } => StoreError::unsafe_(label, "is a symbolic link"),
        PrivateDirError::Step { step, errno } => StoreError::io(label, step, errno),
        PrivateDirError::NotPrivate => StoreError::unsafe_(label, "must be owned by you with mode 0700"),
    })
}
