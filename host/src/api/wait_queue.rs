//! A first-come, first-served queue of the processes that wait for one thing on the file store
//! — today the export admission (`proclease run --exclusive --wait`) — and the waits that wake
//! when what they wait for is released or its holder dies, instead of polling (issue #44).
//!
//! ```text
//! <state home>/.proclease/queues/<name>/
//!     <sequence, 20 digits>-<uuid>.ticket    one waiter; {"enqueuedAtMs":…,"pid":…}\n
//!     .tmp-<uuid>                            a ticket being made (never in the order)
//! ```
//!
//! **The rules.**
//! - A ticket is held: its waiter keeps an exclusive `flock` on it from before it gets its name
//!   until it leaves (it removes the name, then closes the file). A ticket is never locked
//!   again once free, so a free ticket's waiter is gone for good — it left or died — and anyone
//!   may remove it. A waiter killed in the queue thus loses its place at once.
//! - The order is the sequence, then the name: a new ticket takes 1 + the largest sequence in
//!   the queue. Waiters that join within the same few microseconds may tie; the name (a fresh
//!   uuid) breaks the tie.
//! - A waiter waits for the nearest held ticket ahead of it (a CLH queue lock on files):
//!   `inotify` on that ticket wakes it when the ticket's last writable descriptor closes
//!   (`IN_CLOSE_WRITE`: its waiter left or died) or its name goes (`IN_ATTRIB`,
//!   `IN_DELETE_SELF`). Only the head of the queue tries to take what it waits for.
//! - [`Watch`] is how the head waits for the holder: a change in a directory (the admission's
//!   record created, replaced or removed) or the close of the holder's witness
//!   (`docs/witness.md`: the holder died).
//!
//! Every wait also wakes after a fallback pause (50 ms growing to 1 s) where `inotify` says
//! nothing — another machine's writes on a network filesystem, a holder without a witness
//! (ghostget) that dies — so a missing event costs time, never correctness.
//!
//! **Not a lease rule.** The queue orders proclease's own waiters only: the record's
//! compare-and-swap (reference §6A.5) still decides who holds the admission, so a queue that is
//! wrong — a ticket deleted by hand, a filesystem whose locks are not shared — costs fairness,
//! never a second holder. A run without `--wait`, ghostget, and the Python and Node hosts do not
//! queue: they may take the admission between two waiters. Nothing here is fsynced: after a
//! power loss every waiter is gone.

use std::fs::{File, TryLockError};
use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::inotify::{self, WatchFlags};
use rustix::fs::{AtFlags, Mode, OFlags};

use crate::fsops;

/// The queues' directory in the state home.
const QUEUES: &str = "queues";
/// The suffix of a ticket's name.
const TICKET: &str = ".ticket";
/// The prefix of a ticket being made.
const TEMPORARY: &str = ".tmp-";
/// The most tickets a queue lists (a bound on what a reader reads, as everywhere in the store).
const MAX_TICKETS: usize = 10_000;
/// The largest sequence a ticket's name may carry: a name with a larger one (never made by a
/// waiter: each takes 1 + the largest in the queue) is not a ticket, so that `+ 1` never
/// overflows.
const MAX_SEQUENCE: u64 = 1_000_000_000_000_000_000;
/// How old a free `.tmp-` ticket must be before a joiner removes it: one is free for the
/// microseconds between its creation and its lock.
const ABANDONED_AFTER: Duration = Duration::from_secs(10);
/// The largest ticket content read.
const MAX_TICKET_BYTES: u64 = 1024;
/// The first fallback pause of a wait; it doubles up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
/// The longest fallback pause of a wait.
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// The queue of the export admission's waiters.
pub const EXPORT_ADMISSION: &str = "export-admission";

/// One queue of a state home: `.proclease/queues/<name>` (see the module docs).
#[derive(Debug)]
pub struct WaitQueue {
    /// The queue's directory (0700).
    dir: OwnedFd,
    /// Its path, for `inotify` and messages.
    path: PathBuf,
}

/// A waiter of a queue, as [`WaitQueue::waiters`] lists them (for `doctor`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiter {
    /// The ticket's file name.
    pub ticket: String,
    /// The waiter's pid, as its ticket says (`None` when the ticket cannot be read).
    pub pid: Option<u64>,
    /// When it joined (ms since the epoch), as its ticket says.
    pub enqueued_at_ms: Option<u64>,
    /// Whether its waiter is still there (its ticket is held). A free ticket's place is skipped
    /// by the waiters behind it, which remove it.
    pub waiting: bool,
    /// Whether its waiter is stopped (Ctrl-Z, SIGSTOP): the waiters behind it pass it over while
    /// it is.
    pub stopped: bool,
}

impl WaitQueue {
    /// Opens the queue `name` of the state home whose directory is `home` (at `home_path`),
    /// creating `.proclease/queues/<name>` (0700) when needed.
    ///
    /// Errors: a directory cannot be created, or is not a private directory of the user.
    pub fn open(home: impl AsFd, home_path: &Path, name: &str) -> std::io::Result<WaitQueue> {
        let private =
            |parent: &dyn AsFd, child: &str| fsops::private_dir(parent.as_fd(), child).map_err(|(operation, e)| std::io::Error::new(e.kind(), format!("{operation} {child}: {e}")));
        let internal = private(&home, ".proclease")?;
        let queues = private(&internal, QUEUES)?;
        let dir = private(&queues, name)?;
        Ok(WaitQueue { dir, path: home_path.join(".proclease").join(QUEUES).join(name) })
    }

    /// The queue `name` of the state home at `home_path` if it exists; creates nothing (for
    /// readers such as `doctor`).
    pub fn open_if_present(home_path: &Path, name: &str) -> Option<WaitQueue> {
        let path = home_path.join(".proclease").join(QUEUES).join(name);
        let dir = rustix::fs::open(&path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).ok()?;
        Some(WaitQueue { dir, path })
    }

    /// The queue's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Joins the queue: a held ticket at its end. The places of waiters that left or died (free
    /// tickets, and tickets a killed joiner was still making) are removed first.
    ///
    /// Errors: the ticket cannot be made (a full or read-only state home).
    pub fn join(&self) -> std::io::Result<Ticket<'_>> {
        self.sweep();
        let temporary = format!("{TEMPORARY}{}", uuid::Uuid::new_v4());
        let fd = rustix::fs::openat(&self.dir, temporary.as_str(), OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))?;
        let mut file = File::from(fd);
        let remove_temporary = || {
            let _ = rustix::fs::unlinkat(&self.dir, temporary.as_str(), AtFlags::empty());
        };
        let content = serde_json::json!({ "enqueuedAtMs": now_ms(), "pid": std::process::id() }).to_string() + "\n";
        let locked = file.write_all(content.as_bytes()).and_then(|()| match file.try_lock() {
            Ok(()) => Ok(()),
            Err(TryLockError::WouldBlock) => Err(std::io::Error::other("a fresh ticket was locked")),
            Err(TryLockError::Error(e)) => Err(e),
        });
        if let Err(e) = locked {
            remove_temporary();
            return Err(e);
        }
        // The name, taken only now that the ticket is held: a ticket in the order is never free
        // while its waiter waits.
        let sequence = self.tickets().last().map_or(0, |(sequence, _)| *sequence).saturating_add(1);
        let name = format!("{sequence:020}-{}{TICKET}", uuid::Uuid::new_v4());
        let linked = rustix::fs::linkat(&self.dir, temporary.as_str(), &self.dir, name.as_str(), AtFlags::empty());
        remove_temporary();
        linked?;
        Ok(Ticket { queue: self, name, sequence, file })
    }

    /// Removes the free tickets (their waiters left or died) and the abandoned `.tmp-` ones.
    pub fn sweep(&self) {
        let names = fsops::list_names(&self.dir, MAX_TICKETS).unwrap_or_default();
        for name in names.into_iter().filter_map(|name| String::from_utf8(name).ok()) {
            let ticket = sequence_of(&name).is_some();
            if !ticket && !name.starts_with(TEMPORARY) {
                continue;
            }
            let Some(file) = self.open_ticket(&name) else { continue };
            let old_enough = || file.metadata().ok().and_then(|meta| meta.modified().ok()).and_then(|at| at.elapsed().ok()).is_some_and(|age| age >= ABANDONED_AFTER);
            if ticket || old_enough() {
                self.remove_if_free(&name, &file);
            }
        }
    }

    /// The tickets in the queue, in order: (sequence, name). Names that are not tickets are
    /// left out.
    fn tickets(&self) -> Vec<(u64, String)> {
        let mut tickets: Vec<(u64, String)> = fsops::list_names(&self.dir, MAX_TICKETS)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|name| String::from_utf8(name).ok())
            .filter_map(|name| Some((sequence_of(&name)?, name)))
            .collect();
        tickets.sort();
        tickets
    }

    /// Every waiter of the queue, in order, with whether it is still there. Changes nothing.
    pub fn waiters(&self) -> Vec<Waiter> {
        self.tickets()
            .into_iter()
            .filter_map(|(_, name)| {
                let file = self.open_ticket(&name)?;
                let content = read_content(&file);
                let field = |key: &str| content.as_ref().and_then(|c| c.get(key)).and_then(serde_json::Value::as_u64);
                let waiting = held(&file);
                Some(Waiter { pid: field("pid"), enqueued_at_ms: field("enqueuedAtMs"), waiting, stopped: waiting && stopped(&file), ticket: name })
            })
            .collect()
    }

    /// Ticket `name`, opened to test its lock (read-only: closing it wakes no one); `None`
    /// once it is gone, or when it is not a regular file (a link, a directory, a FIFO made
    /// under a ticket's name is no waiter's, and is left alone).
    fn open_ticket(&self, name: &str) -> Option<File> {
        let fd = rustix::fs::openat(&self.dir, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK, Mode::empty()).ok()?;
        let stat = rustix::fs::fstat(&fd).ok()?;
        (fsops::file_kind(stat.st_mode) == fsops::S_IFREG).then(|| File::from(fd))
    }

    /// Removes ticket `name` if its lock is free (its waiter left or died).
    fn remove_if_free(&self, name: &str, file: &File) {
        if !held(file) {
            let _ = rustix::fs::unlinkat(&self.dir, name, AtFlags::empty());
        }
    }
}

/// This process's place in a [`WaitQueue`]: held until dropped, which leaves the queue (the
/// ticket's name is removed, then its lock dropped, which wakes the waiter behind).
#[derive(Debug)]
pub struct Ticket<'q> {
    queue: &'q WaitQueue,
    name: String,
    sequence: u64,
    /// Open for writing and locked: its close is the `IN_CLOSE_WRITE` the next waiter wakes on.
    /// Only held, never read (but by the tests).
    #[cfg_attr(not(test), allow(dead_code))]
    file: File,
}

/// Why [`Ticket::await_head`] returned without reaching the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotYet {
    /// The deadline passed; the waiters ahead are still there.
    Deadline {
        /// How many of them.
        ahead: usize,
    },
    /// `interrupted` said to stop.
    Interrupted,
}

impl Ticket<'_> {
    /// The ticket's file name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many held tickets are ahead of this one now (0: it is the head).
    pub fn ahead(&self) -> usize {
        self.live_ahead().len()
    }

    /// The held tickets ahead of this one whose waiters are not stopped, nearest last; free
    /// ones found on the way are removed.
    ///
    /// A waiter stopped where it waits (Ctrl-Z, SIGSTOP) is passed over while it is stopped,
    /// as if it had left: otherwise it would hold up everyone behind it, the admission free or
    /// not. Continued, it waits on from its place, behind whoever took the admission meanwhile.
    fn live_ahead(&self) -> Vec<(String, File)> {
        let own = (self.sequence, self.name.clone());
        self.queue
            .tickets()
            .into_iter()
            .filter(|ticket| *ticket < own)
            .filter_map(|(_, name)| {
                let file = self.queue.open_ticket(&name)?;
                if !held(&file) {
                    self.queue.remove_if_free(&name, &file);
                    None
                } else if stopped(&file) {
                    None
                } else {
                    Some((name, file))
                }
            })
            .collect()
    }

    /// Waits until no held ticket is ahead of this one (this waiter is the head), at most
    /// until `deadline`, sleeping on `watch` (one [`Watch`] for the whole wait: making and
    /// closing one costs the kernel a grace period, milliseconds). `interrupted` is asked at
    /// every wake (a signal wakes the wait). `on_wait` is called once, with the number of
    /// waiters ahead, if the wait blocks at all.
    ///
    /// Errors: [`NotYet`] — the deadline passed or `interrupted` said so.
    pub fn await_head(&self, watch: &mut Watch, deadline: Instant, interrupted: &dyn Fn() -> bool, on_wait: &mut dyn FnMut(usize)) -> Result<(), NotYet> {
        let mut told = false;
        let mut pause = FIRST_PAUSE;
        loop {
            let mut ahead = self.live_ahead();
            let Some((name, file)) = ahead.pop() else { return Ok(()) };
            if !std::mem::replace(&mut told, true) {
                on_wait(ahead.len() + 1);
            }
            if interrupted() {
                return Err(NotYet::Interrupted);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(NotYet::Deadline { ahead: ahead.len() + 1 });
            }
            // Watch the nearest waiter ahead, then look again: a ticket freed between the two is
            // seen by the look, one freed after it by the watch.
            watch.clear();
            watch.file(&self.queue.path.join(&name), WatchFlags::CLOSE_WRITE | WatchFlags::ATTRIB | WatchFlags::DELETE_SELF);
            if held(&file) && self.queue.open_ticket(&name).is_some() {
                if !watch.wait(pause.min(deadline - now)) {
                    pause = (pause * 2).min(LONGEST_PAUSE);
                }
            } else {
                pause = FIRST_PAUSE;
            }
            drop(file);
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        // The name first, then the lock (the close of `file`): a waiter behind never finds this
        // name free while it is there.
        let _ = rustix::fs::unlinkat(&self.queue.dir, self.name.as_str(), AtFlags::empty());
    }
}

/// A set of `inotify` watches that a waiter blocks on: a directory's entries changing, a file
/// closed for writing. Where `inotify` is unavailable (too many instances, an old kernel) the
/// wait is its fallback pause.
///
/// Closing an `inotify` instance waits for the kernel's SRCU grace period (5–15 ms measured
/// here): keep one for a whole wait ([`Watch::clear`] between uses), and its drop closes it on
/// a thread of its own, so that the waiter's command does not start that much later.
pub struct Watch {
    fd: Option<OwnedFd>,
    /// The watch descriptors added since the last [`Watch::clear`].
    added: Vec<i32>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(fd) = self.fd.take() {
            // The close blocks for a grace period; nothing waits for it.
            if std::thread::Builder::new().name("proclease-inotify-close".into()).spawn(move || drop(fd)).is_err() {
                // No thread to be had: close here, later but all the same.
            }
        }
    }
}

impl Default for Watch {
    fn default() -> Self {
        Self::new()
    }
}

impl Watch {
    /// An empty set.
    pub fn new() -> Watch {
        Watch { fd: inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).ok(), added: Vec::new() }
    }

    /// Removes every watch (they no longer wake the next wait), keeping the instance.
    pub fn clear(&mut self) {
        if let Some(fd) = &self.fd {
            for wd in self.added.drain(..) {
                // A watch whose file is gone was removed by the kernel already.
                let _ = inotify::remove_watch(fd, wd);
            }
            self.drain();
        }
    }

    /// Reads the pending events, so that the next wait blocks until a new one.
    fn drain(&self) {
        if let Some(fd) = &self.fd {
            let mut buffer = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
            let mut reader = inotify::Reader::new(fd, &mut buffer);
            while reader.next().is_ok() {}
        }
    }

    /// Also wakes when an entry of directory `path` is created, removed or renamed.
    pub fn directory(&mut self, path: &Path) {
        self.file(path, WatchFlags::CREATE | WatchFlags::DELETE | WatchFlags::MOVED_FROM | WatchFlags::MOVED_TO | WatchFlags::DELETE_SELF);
    }

    /// Also wakes when the last descriptor that had `path` open for writing closes — a
    /// witness's holder died, a ticket's waiter left — or when it is removed.
    pub fn closed_for_writing(&mut self, path: &Path) {
        self.file(path, WatchFlags::CLOSE_WRITE | WatchFlags::DELETE_SELF);
    }

    fn file(&mut self, path: &Path, flags: WatchFlags) {
        // A path gone already (the caller looks again after watching) or not watchable is
        // covered by the fallback pause.
        if let Some(fd) = &self.fd
            && let Ok(wd) = inotify::add_watch(fd, path, flags)
        {
            self.added.push(wd);
        }
    }

    /// Blocks until an event or `timeout`; true when woken by an event or a signal (`EINTR`),
    /// false at the timeout. Reads the events, so that the next wait blocks again.
    pub fn wait(&mut self, timeout: Duration) -> bool {
        let Some(fd) = &self.fd else {
            std::thread::sleep(timeout);
            return false;
        };
        let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
        let timeout = rustix::event::Timespec::try_from(timeout).ok();
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(0) => false,
            Ok(_) => {
                self.drain();
                true
            }
            Err(_) => true,
        }
    }
}

/// Whether `file`'s lock is held by another open file description (a non-blocking shared lock
/// is refused). A lock that cannot be tested counts as held: the safe answer for a queue is to
/// wait, bounded by the fallback pause.
fn held(file: &File) -> bool {
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(_) => true,
    }
}

/// Whether the process `/proc/locks` shows holding `file`'s lock is stopped (`T` or `t` in its
/// `/proc/<pid>/stat`). `false` when no holder can be seen (another PID namespace's, or this
/// process's own).
fn stopped(file: &File) -> bool {
    crate::lock_wait::holder(file).is_some_and(|holder| holder.state == "stopped")
}

/// The sequence of ticket `name`, or `None` when it is not a ticket's name.
fn sequence_of(name: &str) -> Option<u64> {
    let (sequence, rest) = name.split_once('-')?;
    (sequence.len() == 20 && rest.ends_with(TICKET)).then_some(())?;
    sequence.parse().ok().filter(|sequence| *sequence <= MAX_SEQUENCE)
}

/// A ticket's content, when it is the JSON object a ticket holds.
fn read_content(file: &File) -> Option<serde_json::Value> {
    use std::io::Read;
    let mut text = String::new();
    Read::take(file, MAX_TICKET_BYTES).read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(dir: &tempfile::TempDir) -> WaitQueue {
        let home = dir.path().join("state");
        std::fs::create_dir(&home).unwrap();
        std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        let fd = rustix::fs::open(&home, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap();
        WaitQueue::open(&fd, &home, EXPORT_ADMISSION).unwrap()
    }

    #[test]
    fn tickets_queue_in_the_order_they_join_and_a_leaver_wakes_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let queue = queue(&dir);
        let first = queue.join().unwrap();
        let second = queue.join().unwrap();
        let third = queue.join().unwrap();
        assert_eq!((first.ahead(), second.ahead(), third.ahead()), (0, 1, 2));
        let names: Vec<String> = queue.waiters().into_iter().map(|w| w.ticket).collect();
        assert_eq!(names, [first.name(), second.name(), third.name()]);
        assert!(queue.waiters().iter().all(|w| w.waiting && w.pid == Some(std::process::id() as u64)));
        // The second waits for the first; the first leaving wakes it.
        let mut told = None;
        std::thread::scope(|scope| {
            scope.spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                drop(first);
            });
            second.await_head(&mut Watch::new(), Instant::now() + Duration::from_secs(30), &|| false, &mut |ahead| told = Some(ahead)).unwrap();
        });
        assert_eq!(told, Some(1));
        assert_eq!(third.ahead(), 1);
        // At its deadline a waiter is told how many are still ahead.
        let mut watch = Watch::new();
        assert_eq!(third.await_head(&mut watch, Instant::now() + Duration::from_millis(50), &|| false, &mut |_| {}), Err(NotYet::Deadline { ahead: 1 }));
        assert_eq!(third.await_head(&mut watch, Instant::now() + Duration::from_secs(5), &|| true, &mut |_| {}), Err(NotYet::Interrupted));
    }

    #[test]
    fn a_free_ticket_is_skipped_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let queue = queue(&dir);
        let ahead = queue.join().unwrap();
        let behind = queue.join().unwrap();
        // As if its waiter died: the lock dropped, the name left behind.
        let name = ahead.name().to_string();
        ahead.file.unlock().unwrap();
        std::mem::forget(ahead);
        assert!(!queue.waiters()[0].waiting);
        assert_eq!(behind.ahead(), 0);
        assert!(!queue.path().join(&name).exists(), "the free ticket was removed");
        behind.await_head(&mut Watch::new(), Instant::now(), &|| false, &mut |_| panic!("the head never waits")).unwrap();
    }

    #[test]
    fn a_joiner_removes_the_places_of_waiters_gone_behind_and_leaves_what_is_no_ticket() {
        let dir = tempfile::tempdir().unwrap();
        let queue = queue(&dir);
        // A waiter that died at the tail, with no one behind it.
        let gone = queue.join().unwrap();
        let gone_name = gone.name().to_string();
        gone.file.unlock().unwrap();
        std::mem::forget(gone);
        // A joiner killed while making its ticket, long ago; and one making it now.
        let (stale, fresh) = (queue.path().join(".tmp-stale"), queue.path().join(".tmp-fresh"));
        std::fs::write(&stale, "").unwrap();
        let long_ago = std::time::SystemTime::now() - Duration::from_secs(60);
        std::fs::File::options().write(true).open(&stale).unwrap().set_modified(long_ago).unwrap();
        std::fs::write(&fresh, "").unwrap();
        // A directory under a ticket's name is no waiter's.
        let not_a_ticket = queue.path().join("00000000000000000003-d.ticket");
        std::fs::create_dir(&not_a_ticket).unwrap();
        let joined = queue.join().unwrap();
        assert!(!queue.path().join(&gone_name).exists() && !stale.exists(), "the places of the gone were removed");
        assert!(fresh.exists(), "a ticket being made is left to its maker");
        assert!(not_a_ticket.is_dir());
        assert_eq!(queue.waiters().len(), 1, "only the joiner is in line");
        assert_eq!(joined.ahead(), 0);
    }

    #[test]
    fn names_that_are_not_tickets_are_not_in_the_order() {
        assert_eq!(sequence_of("00000000000000000007-x.ticket"), Some(7));
        assert_eq!(sequence_of("7-x.ticket"), None);
        assert_eq!(sequence_of(".tmp-00000000000000000007-x.ticket"), None);
        assert_eq!(sequence_of("00000000000000000007-x.tmp"), None);
        assert_eq!(sequence_of("18446744073709551615-x.ticket"), None, "past the largest sequence");
    }
}
