//! Waiting for a kernel lock (`flock`) another process holds, with a bound and a voice: after
//! [`TELL_AFTER`] the wait says once (a `tracing` warning, on standard error in the CLI) who
//! holds the lock — read from `/proc/locks` and the holder's `/proc/<pid>/stat` — and at the
//! bound it fails with that holder in the error. A stopped holder (Ctrl-Z, SIGSTOP) is named as
//! stopped: it keeps the lock until it is continued or killed.
//!
//! **One bound per operation.** A host operation ([`Host`](crate::Host)'s methods, a `run`'s
//! acquisition) opens an [`Operation`] on its thread with its bound: every wait inside it —
//! kernel locks of the state home, collection locks, another program's mutation claims — waits
//! at most what is left of that bound, however many locks and attempts the operation takes. The
//! waits that timed out are noted in the operation ([`Operation::timed_out`]), so that the
//! operation's error names the holder even where the component only saw `contended`.

use std::cell::RefCell;
use std::fs::{File, TryLockError};
use std::os::unix::fs::MetadataExt as _;
use std::time::{Duration, Instant};

/// How long a wait stays silent.
pub const TELL_AFTER: Duration = Duration::from_secs(1);

/// The default bound of one wait for a lock held by another process.
pub const DEFAULT_BOUND: Duration = Duration::from_secs(10);

pub use proclease_protocols::waits::{Behind, During, Holder, LockError, LockTimeout, holder_words};

/// The [`During`] of a timeout the operation ended in `error` because of: a refusal's own
/// message (its cause, shown by its Display too, is the timeout's source), or `error`'s.
pub fn during(error: crate::Error) -> Box<During> {
    let message = match &error {
        crate::Error::Lease(refusal) => refusal.message().to_string(),
        other => other.to_string(),
    };
    Box::new(During { message, error: std::sync::Arc::new(error) })
}

/// The operation a thread is in: its deadline, and the waits that timed out in it.
struct Current {
    deadline: Instant,
    timed_out: Option<LockTimeout>,
    /// A timeout of this operation was shown to the user ([`Operation::first_timeout`]).
    said_timeout: bool,
}

thread_local! {
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// One operation's bound on its thread (see the module docs); it ends when dropped. An
/// operation opened inside another is part of it: the outer bound stays.
#[must_use = "the operation's bound lasts while this value lives"]
pub struct Operation {
    outermost: bool,
    /// The operation is its thread's: dropped on another, it would end that thread's.
    _thread: std::marker::PhantomData<*const ()>,
}

impl Operation {
    /// Opens an operation bounded by `bound` on this thread (or joins the one already open).
    pub fn begin(bound: Duration) -> Operation {
        CURRENT.with(|current| {
            let mut current = current.borrow_mut();
            let outermost = current.is_none();
            if outermost {
                // An absurd bound (years) means no bound, not a panic.
                let deadline = Instant::now().checked_add(bound).unwrap_or_else(|| Instant::now() + Duration::from_secs(100 * 365 * 86_400));
                *current = Some(Current { deadline, timed_out: None, said_timeout: false });
            }
            Operation { outermost, _thread: std::marker::PhantomData }
        })
    }

    /// Whether a timeout about to be shown is the first of this thread's operation (always
    /// outside one): the attempts that follow a timeout (an admission's acquire makes eight)
    /// find the bound spent and time out at once, `waited 0 ms`, and would repeat the words
    /// that the operation's error says again anyway.
    pub fn first_timeout() -> bool {
        CURRENT.with(|current| match current.borrow_mut().as_mut() {
            Some(c) => !std::mem::replace(&mut c.said_timeout, true),
            None => true,
        })
    }

    /// The last wait of this thread's operation that reached its bound, if one did.
    pub fn timed_out() -> Option<LockTimeout> {
        CURRENT.with(|current| current.borrow().as_ref().and_then(|c| c.timed_out.clone()))
    }
}

impl Drop for Operation {
    fn drop(&mut self) {
        if self.outermost {
            CURRENT.with(|current| current.borrow_mut().take());
        }
    }
}

/// A stop of this thread's waits ([`stop_waits_when`]): the check, and when it was first seen
/// to answer true.
struct Stop {
    check: std::rc::Rc<dyn Fn() -> bool>,
    seen: Option<Instant>,
}

/// How long after a stop every wait of the thread may still last, in all: enough for the
/// undoing of what the stopped operation did (giving up a lease it wrote, releasing the
/// admission) to take a lock another proclease process holds for a moment; short enough that a
/// run ends promptly when a stuck process holds it.
pub const STOP_GRACE: Duration = Duration::from_millis(500);

thread_local! {
    static STOP: RefCell<Option<Stop>> = const { RefCell::new(None) };
}

/// Bounds this thread's waits while it lives ([`stop_waits_when`]); the stop it replaced comes
/// back when it is dropped.
#[must_use = "waits stop early only while this value lives"]
pub struct StopWaits {
    previous: Option<Stop>,
    /// The stop is its thread's: dropped on another, it would end that thread's.
    _thread: std::marker::PhantomData<*const ()>,
}

/// Once `stop` answers true, every wait of this thread — the one it is in, and those it begins
/// while the returned guard lives — ends at most [`STOP_GRACE`] after that moment, as at its
/// bound: a lock wait ([`lock_behind`]) gives up at its next look (within 20 ms) with a
/// [`LockTimeout`]; [`remaining`] and [`operation_bound`] give no more than what is left of the
/// grace. The waits that undo what the stopped operation did share that grace: a lock held for a
/// moment is still taken, one held for ever is not waited for (what could not be undone is then
/// left as a killed process would leave it, for `recover` or a takeover).
///
/// For a caller that can tell why better than the timeout does: `run` stops its acquisition's
/// waits on a Ctrl-C before its command started and reports the signal (exit 130), not the
/// timeout (`docs/deviations.md` 21). `stop` is asked at each look of a wait until it first
/// answers true: it must be cheap (an atomic load).
pub fn stop_waits_when(stop: impl Fn() -> bool + 'static) -> StopWaits {
    let previous = STOP.with(|current| current.borrow_mut().replace(Stop { check: std::rc::Rc::new(stop), seen: None }));
    StopWaits { previous, _thread: std::marker::PhantomData }
}

impl Drop for StopWaits {
    fn drop(&mut self) {
        let previous = self.previous.take();
        STOP.with(|current| *current.borrow_mut() = previous);
    }
}

/// The instant by which this thread's waits must end because of a stop ([`stop_waits_when`]),
/// once its check answered true.
fn stop_deadline() -> Option<Instant> {
    let (check, seen) = STOP.with(|current| current.borrow().as_ref().map(|stop| (stop.check.clone(), stop.seen)))?;
    if let Some(seen) = seen {
        return Some(seen + STOP_GRACE);
    }
    if !check() {
        return None;
    }
    let now = Instant::now();
    STOP.with(|current| {
        if let Some(stop) = current.borrow_mut().as_mut() {
            stop.seen.get_or_insert(now);
        }
    });
    Some(now + STOP_GRACE)
}

/// `own`, capped by what is left of a stop's grace ([`stop_waits_when`]).
fn within_stop(own: Duration) -> Duration {
    match stop_deadline() {
        Some(deadline) => own.min(deadline.saturating_duration_since(Instant::now())),
        None => own,
    }
}

/// `own`, or what is left of this thread's operation when that is less, or of a stop's grace
/// ([`stop_waits_when`]).
pub fn remaining(own: Duration) -> Duration {
    let own = within_stop(own);
    CURRENT.with(|current| match current.borrow().as_ref() {
        Some(c) => own.min(c.deadline.saturating_duration_since(Instant::now())),
        None => own,
    })
}

/// The bound of a wait whose own bound is `own` when no operation is open: inside an operation,
/// what is left of it (so a host's [`lock_timeout`](crate::HostBuilder::lock_timeout) longer
/// than `own` is honoured), `own` outside one; capped by what is left of a stop's grace
/// ([`stop_waits_when`]).
pub fn operation_bound(own: Duration) -> Duration {
    within_stop(CURRENT.with(|current| match current.borrow().as_ref() {
        Some(c) => c.deadline.saturating_duration_since(Instant::now()),
        None => own,
    }))
}

/// Notes that a wait for `lock` succeeded in this thread's operation: a timeout noted for that
/// lock before (a write its caller then retried with success) explains nothing any more.
pub fn note_taken(lock: &str) {
    CURRENT.with(|current| {
        if let Some(c) = current.borrow_mut().as_mut()
            && c.timed_out.as_ref().is_some_and(|t| t.lock == lock)
        {
            c.timed_out = None;
        }
    });
}

/// Notes a wait that reached its bound in this thread's operation; the waits for one lock add
/// up (a write retried by its caller waits for the same claim again).
pub fn note(timeout: &LockTimeout) {
    CURRENT.with(|current| {
        if let Some(c) = current.borrow_mut().as_mut() {
            let before = c.timed_out.as_ref().filter(|t| t.lock == timeout.lock).map_or(0, |t| t.waited_ms);
            c.timed_out = Some(LockTimeout { waited_ms: before + timeout.waited_ms, ..timeout.clone() });
        }
    });
}

use proclease_protocols::waits::LOCK_HINT as HINT;

/// Takes `file`'s exclusive `flock`, waiting at most `bound` for another holder (see the module
/// docs); `lock` names it in messages.
///
/// Errors: [`LockTimeout`] at the bound, or at the end of a stop's grace
/// ([`stop_waits_when`]); an I/O error of the lock itself is [`LockError::Io`].
pub fn lock(file: &File, lock: &str, bound: Duration) -> Result<(), LockError> {
    lock_behind(file, lock, bound, &|_| None)
}

/// [`lock`], where `behind` tells, for messages, what the holder (its pid, when `/proc/locks`
/// shows it) itself waits for, if anything. Called only when the wait is told or reaches its
/// bound.
///
/// Errors: as [`lock`].
pub fn lock_behind(file: &File, lock: &str, bound: Duration, behind: &dyn Fn(Option<i32>) -> Option<Behind>) -> Result<(), LockError> {
    let bound = remaining(bound);
    let start = Instant::now();
    let mut pause = Duration::from_micros(200);
    let mut told = false;
    loop {
        match file.try_lock() {
            Ok(()) => {
                note_taken(lock);
                return Ok(());
            }
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => return Err(LockError::Io(e.into())),
        }
        let waited = start.elapsed();
        if waited >= bound || stop_deadline().is_some_and(|deadline| Instant::now() >= deadline) {
            let holder = holder(file);
            let behind = behind(holder.as_ref().map(|h| h.pid)).map(Box::new);
            let timeout = LockTimeout { lock: lock.into(), holder, behind, waited_ms: waited.as_millis() as u64, hint: HINT, during: None };
            note(&timeout);
            return Err(LockError::TimedOut(timeout));
        }
        if !told && waited >= TELL_AFTER {
            told = true;
            let holder = holder(file);
            let behind = behind(holder.as_ref().map(|h| h.pid)).map(|words| format!(", which itself waits for {words}")).unwrap_or_default();
            tracing::warn!("waiting for {} holding {lock}{behind} (for at most {:.1} s more)", holder_words(&holder), (bound - waited).as_secs_f64());
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// The process `/proc/locks` shows holding a lock on `file`'s inode (not a waiter), if any
/// (`proclease_protocols::waits::flock_holder`); when that process has exited, the one whose
/// open descriptor keeps the lock (`proclease_protocols::waits::descriptor_holder`).
pub fn holder(file: &File) -> Option<Holder> {
    let meta = file.metadata().ok()?;
    let device = (rustix::fs::major(meta.dev()), rustix::fs::minor(meta.dev()));
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    let own = std::process::id() as i32;
    let taker = proclease_protocols::waits::flock_holder(&text, device, meta.ino(), own)?;
    if std::path::Path::new(&format!("/proc/{taker}")).exists() {
        return Some(process(taker));
    }
    // The taker exited and the lock lives on in a descriptor another process holds (a Node
    // host's locks are taken by a `flock(1)` child): that process is the holder.
    let holder = proclease_protocols::waits::descriptor_holder(proc_pids(), fdinfos, device, meta.ino(), own);
    Some(process(holder.unwrap_or(taker)))
}

/// The pids `/proc` lists.
fn proc_pids() -> Vec<i32> {
    std::fs::read_dir("/proc").map_or_else(|_| Vec::new(), |entries| entries.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok()).collect())
}

/// The texts of `/proc/<pid>/fdinfo/*`; `None` when the directory cannot be read (gone, another
/// user's).
fn fdinfos(pid: i32) -> Option<Vec<Vec<u8>>> {
    let entries = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).ok()?;
    Some(entries.filter_map(|entry| std::fs::read(entry.ok()?.path()).ok()).collect())
}

/// `pid` as a holder: its command and scheduler state from `/proc/<pid>/stat`
/// (`proclease_protocols::waits::holder_from_stat`).
pub fn process(pid: i32) -> Holder {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
    proclease_protocols::waits::holder_from_stat(pid, stat.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_holder_is_named_and_the_wait_ends_at_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        std::fs::write(&path, b"").unwrap();
        let mut holder_process = std::process::Command::new("flock").arg("-o").arg(&path).args(["sleep", "60"]).spawn().unwrap();
        let file = File::open(&path).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while holder(&file).is_none() {
            assert!(Instant::now() < deadline, "flock never took the lock");
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid = holder(&file).unwrap().pid;
        assert_eq!(pid, holder_process.id() as i32);
        rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), rustix::process::Signal::STOP).unwrap();
        let error = match lock(&file, ".proclease/locks/x.lock", Duration::from_millis(300)) {
            Err(LockError::TimedOut(timeout)) => timeout,
            other => panic!("{other:?}"),
        };
        assert_eq!(error.holder.as_ref().map(|h| (h.pid, h.command.as_str(), h.state)), Some((pid, "flock", "stopped")), "{error}");
        assert!(error.to_string().contains(&format!("held by pid {pid} (flock, stopped)")), "{error}");
        let _ = holder_process.kill();
        let _ = holder_process.wait();
        lock(&file, "x", Duration::from_secs(5)).expect("free once its holder is gone");
    }

    /// A lock file in a temporary directory, its `flock` held through the returned file.
    fn held_lock() -> (tempfile::TempDir, std::path::PathBuf, File) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("held.lock");
        std::fs::write(&path, b"").unwrap();
        let ours = File::open(&path).unwrap();
        ours.lock().unwrap();
        (dir, path, ours)
    }

    fn timed_out(result: Result<(), LockError>) -> LockTimeout {
        match result {
            Err(LockError::TimedOut(timeout)) => timeout,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn waits_inside_one_operation_share_its_bound_and_the_timeout_is_noted() {
        let (_dir, path, _ours) = held_lock();
        let theirs = || File::open(&path).unwrap();
        assert!(Operation::timed_out().is_none(), "no operation: nothing noted");
        {
            let _operation = Operation::begin(Duration::from_millis(400));
            // Each wait asks for 10 s; the first takes what the operation has, the second gets
            // what is left of it (nothing), and a nested operation does not extend it.
            let first = timed_out(lock(&theirs(), "a", Duration::from_secs(10)));
            let _inner = Operation::begin(Duration::from_secs(60));
            let second = timed_out(lock(&theirs(), "b", Duration::from_secs(10)));
            assert!(first.waited_ms < 10_000 && second.waited_ms < first.waited_ms, "{first} / {second}");
            assert_eq!(Operation::timed_out().map(|t| t.lock), Some("b".to_string()), "the last timeout is noted");
        }
        assert!(Operation::timed_out().is_none(), "the operation ended with its outermost guard");
        assert!(remaining(Duration::from_secs(3)) == Duration::from_secs(3), "outside an operation a wait has its own bound");
    }

    #[test]
    fn a_stop_ends_the_wait_in_progress_and_those_after_it_within_its_grace() {
        let (_dir, path, ours) = held_lock();
        let theirs = || File::open(&path).unwrap();
        let signalled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = signalled.clone();
        let guard = stop_waits_when(move || flag.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(remaining(Duration::from_secs(3)), Duration::from_secs(3), "no stop yet");
        // A wait of an hour, stopped from another thread while it waits.
        let stopper = {
            let signalled = signalled.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                signalled.store(true, std::sync::atomic::Ordering::SeqCst);
            })
        };
        let first = timed_out(lock(&theirs(), "a", Duration::from_secs(3600)));
        stopper.join().unwrap();
        assert!(first.waited_ms < 3_600_000, "{first}");
        // The waits after it (say, giving up a lease) share the grace, which is spent by now.
        let second = timed_out(lock(&theirs(), "b", Duration::from_secs(3600)));
        assert!(second.waited_ms < 3_600_000, "{second}");
        assert!(remaining(Duration::from_secs(3)) <= STOP_GRACE && operation_bound(Duration::from_secs(3)) <= STOP_GRACE);
        drop(guard);
        assert_eq!(remaining(Duration::from_secs(3)), Duration::from_secs(3), "dropped, the stop is gone");
        // Within the grace, a lock held for a moment is still taken.
        let _guard = stop_waits_when(|| true);
        assert!(remaining(Duration::from_secs(3)) <= STOP_GRACE);
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            ours.unlock().unwrap();
        });
        lock(&theirs(), "c", Duration::from_secs(5)).expect("released within the grace");
        releaser.join().unwrap();
    }

    #[test]
    fn a_collection_wait_inside_an_operation_gets_the_operation_s_whole_bound() {
        assert_eq!(operation_bound(Duration::from_secs(10)), Duration::from_secs(10), "outside an operation: its own bound");
        let _operation = Operation::begin(Duration::from_secs(60));
        let bound = operation_bound(Duration::from_secs(10));
        assert!(bound > Duration::from_secs(50), "a host lock timeout longer than the wait's own bound is honoured: {bound:?}");
        let _inner = Operation::begin(Duration::from_millis(1));
        assert!(operation_bound(Duration::from_secs(10)) > Duration::from_secs(50), "a nested operation joins the outer one");
    }

    #[test]
    fn a_timeout_during_an_operation_keeps_what_the_operation_s_error_wrapped() {
        use std::error::Error as _;
        let refusal = proclease_core::LeaseError::new(proclease_core::LeaseCode::ExportAdmissionCouldNotBeAcquiredSafely).with_cause(proclease_core::Failure::os(
            "EROFS",
            "recovery/x",
            "writing the record",
            "Read-only file system",
        ));
        let timeout =
            LockTimeout { lock: "the mutation claim of x".into(), holder: None, behind: None, waited_ms: 10, hint: HINT, during: Some(during(crate::Error::Lease(refusal))) };
        let shown = timeout.to_string();
        assert!(shown.starts_with("Beeper Message Like Me recovery: export admission could not be acquired safely: waited 10 ms for the mutation claim of x"), "{shown}");
        assert_eq!(timeout.source().map(ToString::to_string).as_deref(), Some("Read-only file system"), "the cause is the source");
    }
}
