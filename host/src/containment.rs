//! The box a supervised command runs in (`docs/containment.md`): a new PID namespace whose
//! pid 1 is a small proclease *init*, so that the lease covers every process the command
//! starts, however it detaches (`setsid`, double fork), whatever descriptors it closes and
//! whatever credentials it takes on.
//!
//! - **Nothing escapes.** A PID namespace cannot be left: every process the command starts is
//!   in it, and orphans are re-parented to its init, never to the machine's. When the init
//!   dies the kernel kills every process of the namespace (`pid_namespaces(7)`).
//! - **The init holds the tree's witness.** The spawn witness (`docs/witness.md`) is inherited
//!   by the init, which never closes it and never changes credentials, and which exits only
//!   once the namespace is empty (it reaps every orphan). So the witness is held exactly while
//!   any process of the box lives, whatever the command's processes close: a free witness is
//!   proof that the whole tree is gone.
//! - **It reports and forwards.** The init tells the supervisor the command's wait status, and
//!   whether anything of the tree was still running at that instant, through a pipe; it
//!   forwards the signals other processes send it (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1,
//!   SIGUSR2, SIGWINCH) to the command — a terminal's signals reach the command directly.
//! - **The command's view stays sane.** Where a mount namespace can be made (root), the box
//!   mounts its own `/proc`, so `ps`, `$$` and `kill %1` see the box; the command is pid 2.
//!
//! The box is made by unsharing the PID namespace of a short-lived spawner thread (a thread's
//! namespace for children is its own: the rest of the process is untouched), whose
//! `std::process::Command` child is then pid 1 of the new namespace: it forks the command and
//! becomes the init, all between fork and exec with async-signal-safe system calls only. The
//! spawner thread lives until the init is reaped, because `PR_SET_PDEATHSIG` fires when the
//! *thread* that forked a process exits.
//!
//! Where no PID namespace can be made (no `CAP_SYS_ADMIN`), [`Containment::Auto`] runs the
//! command as before, without a box, and says why; [`Containment::Required`] refuses.

use std::fs::File;
use std::io::Read as _;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::{Child, Command, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use crate::imports::process_identity::cgroup_tree::CgroupTree;
use std::time::{Duration, Instant};

/// Whether a supervised command runs in a box.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Containment {
    /// A box where the kernel allows one, else the command runs without (and the run says
    /// why: [`Tree::containment`]).
    #[default]
    Auto,
    /// A box, or the run is refused before anything is leased ([`crate::Refusal::NoContainment`]).
    Required,
    /// No box: the lease covers the processes it records and those that keep its witness
    /// (`docs/witness.md`), as before `docs/containment.md`.
    None,
}

/// What happens to processes the command left running when it exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stragglers {
    /// Each gets SIGTERM (and SIGCONT); once `grace` has passed, whatever is left of the box is
    /// killed (SIGKILL to its init: the kernel kills the whole namespace). The lease is released
    /// only after.
    Stop {
        /// How long they may take to exit after SIGTERM.
        grace: Duration,
    },
    /// They run on, and the run — holding its lease — waits until the last one exited.
    Wait,
}

impl Default for Stragglers {
    /// [`Stragglers::Stop`] with a 5 s grace.
    fn default() -> Self {
        Stragglers::Stop { grace: Duration::from_secs(5) }
    }
}

/// How the command runs: in a box, or not and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Contained {
    /// In the PID namespace whose nsfs inode this is (`/proc/<init>/ns/pid`), with its own
    /// `/proc` when `own_proc`.
    PidNamespace {
        /// The namespace's inode (what `readlink /proc/<pid>/ns/pid` shows as `pid:[N]`).
        inode: u64,
        /// The cgroup v2 the command's tree runs in (its path), if one could be made.
        cgroup: Option<String>,
        /// Whether the box mounted its own `/proc` (in its own mount namespace).
        own_proc: bool,
        /// Whether the box is in a user namespace of its own (an unprivileged run: the
        /// recorded child is then a relay outside the box, the init's parent).
        user_namespace: bool,
    },
    /// Without a box, because of the reason given (e.g. `creating a PID namespace was refused
    /// (Operation not permitted): run as root`), or because [`Containment::None`] was asked.
    None {
        /// Why.
        reason: String,
        /// The cgroup v2 the command's tree runs in (its path), if one could be made: it keeps
        /// the lease active while any process of the tree lives, even without a box.
        cgroup: Option<String>,
    },
}

impl std::fmt::Display for Contained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Contained::PidNamespace { inode, cgroup, own_proc, user_namespace } => {
                write!(f, "pid namespace pid:[{inode}]")?;
                if *user_namespace {
                    f.write_str(" in a user namespace")?;
                }
                f.write_str(if *own_proc { " with its own /proc" } else { " (the machine's /proc)" })?;
                if let Some(cgroup) = cgroup {
                    write!(f, ", cgroup {cgroup}")?;
                }
                Ok(())
            }
            Contained::None { reason, cgroup: None } => write!(f, "none, because {reason}"),
            Contained::None { reason, cgroup: Some(cgroup) } => write!(f, "cgroup {cgroup} only (no PID namespace, because {reason})"),
        }
    }
}

/// What the box's spawn needs besides the command.
#[derive(Debug, Clone, Default)]
pub struct BoxOptions {
    /// [`Containment`].
    pub containment: Containment,
    /// Descriptors the init must keep open (the spawn witness); everything else above 2, and
    /// standard input, output and error, it closes once the command started.
    pub keep: Vec<RawFd>,
    /// Kill the whole tree when the spawning thread (and so this process) dies:
    /// `PR_SET_PDEATHSIG` = SIGKILL on the init (cluster mode, `docs/cluster.md`).
    pub die_with_supervisor: bool,
    /// The cgroup v2 to start the command in (`clone3(CLONE_INTO_CGROUP)` from the init; a
    /// `cgroup.procs` write without a box): everything the command starts is born in it.
    pub cgroup: Option<Arc<CgroupTree>>,
}

/// A started command and everything it starts.
pub struct Tree {
    child: Child,
    contained: Contained,
    /// The box's report pipe (read end), while it is open.
    events: Option<File>,
    /// The command's wait status, once known.
    status: Option<ExitStatus>,
    /// Whether the box was empty but for its init when the command exited.
    empty: bool,
    /// Dropped once the init is reaped: ends the spawner thread.
    keepalive: Option<std::sync::mpsc::Sender<()>>,
    /// In a user namespace: the init's pid (`child` is the relay, its parent).
    init: Option<u32>,
    /// The cgroup the command's tree runs in; removed once the tree is done.
    cgroup: Option<Arc<CgroupTree>>,
}

impl std::fmt::Debug for Tree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tree").field("pid", &self.child.id()).field("contained", &self.contained).field("status", &self.status).finish()
    }
}

/// Starts `command` in a box (see the module docs), or without one where
/// [`Containment::Auto`] allows it and no box can be made.
///
/// Errors: the command could not be started (as [`Command::spawn`]); with
/// [`Containment::Required`] and no box possible, [`std::io::ErrorKind::Unsupported`] with the
/// reason.
pub fn spawn(command: &mut Command, options: &BoxOptions) -> std::io::Result<Tree> {
    if options.containment == Containment::None {
        let options = BoxOptions { cgroup: None, ..options.clone() };
        return spawn_plain(command, &options, "--containment none was asked for".into());
    }
    // The spawner thread takes the command and gives it back.
    let taken = std::mem::replace(command, Command::new(""));
    let (report, received) = std::sync::mpsc::channel();
    let (keepalive, hold) = std::sync::mpsc::channel::<()>();
    let init_options = options.clone();
    let supervisor = rustix::process::getpid().as_raw_nonzero().get();
    let spawner = std::thread::Builder::new().name("proclease-box".into()).spawn(move || {
        let mut command = taken;
        let outcome = spawn_in_new_namespace(&mut command, &init_options, supervisor);
        let started = matches!(outcome, Ok(Ok(_)));
        let _ = report.send((command, outcome));
        if started {
            // Until the init is reaped (PR_SET_PDEATHSIG is bound to this thread).
            let _ = hold.recv();
        }
    });
    if let Err(e) = spawner {
        return Err(std::io::Error::other(format!("cannot start the box's spawner thread: {e}")));
    }
    let Ok((returned, outcome)) = received.recv() else {
        return Err(std::io::Error::other("the box's spawner thread ended without a word"));
    };
    *command = returned;
    match outcome {
        Ok(Ok((child, events, init))) => {
            let pid = init.unwrap_or(child.id());
            let inode = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok().and_then(|link| nsfs_inode(&link.to_string_lossy())).unwrap_or(0);
            let own_proc = std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok() != std::fs::read_link("/proc/self/ns/mnt").ok();
            let cgroup = options.cgroup.clone();
            let contained = Contained::PidNamespace { inode, cgroup: cgroup.as_ref().map(|c| c.path().to_string()), own_proc, user_namespace: init.is_some() };
            Ok(Tree { child, contained, events: Some(events), status: None, empty: false, keepalive: Some(keepalive), init, cgroup })
        }
        Ok(Err(reason)) if options.containment == Containment::Auto => spawn_plain(command, options, reason),
        Ok(Err(reason)) => Err(std::io::Error::new(std::io::ErrorKind::Unsupported, format!("the command cannot be contained: {reason}"))),
        Err(e) => Err(e),
    }
}

/// The command without a box (today's behaviour: `docs/witness.md`); in cluster mode it gets
/// `PR_SET_PDEATHSIG` itself, which a credential change clears.
fn spawn_plain(command: &mut Command, options: &BoxOptions, reason: String) -> std::io::Result<Tree> {
    if options.die_with_supervisor {
        let supervisor = rustix::process::getpid();
        // SAFETY: runs in the forked child before exec; prctl(PR_SET_PDEATHSIG) and getppid are
        // async-signal-safe system calls touching only the child. The parent check closes the
        // race of a supervisor that died between fork and prctl.
        unsafe {
            command.pre_exec(move || {
                rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL)).map_err(std::io::Error::from)?;
                if rustix::process::getppid() != Some(supervisor) {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
    // The command joins its cgroup before exec, so that everything it starts is born in it
    // (a `Command` cannot be cloned into a cgroup: one write to `cgroup.procs`).
    // The hook stays on the caller's `Command`: it owns the descriptor it writes to, so a later
    // spawn of the same `Command` writes to that cgroup again, never to a reused number.
    if let Some(procs) = options.cgroup.as_ref().and_then(|cgroup| cgroup.open_procs().ok()) {
        let procs = Arc::new(procs);
        // SAFETY: runs in the forked child before exec; write(2) is async-signal-safe. A failed
        // write leaves the command outside the cgroup, which the check below sees.
        unsafe {
            command.pre_exec(move || {
                let _ = libc::write(procs.as_raw_fd(), b"0".as_ptr().cast(), 1);
                Ok(())
            });
        }
    }
    let child = command.spawn()?;
    let cgroup = options.cgroup.clone().filter(|cgroup| {
        // In it, or already gone: only a command seen outside its cgroup did not join.
        let joined = procfs::process::Process::new(child.id() as i32).and_then(|p| p.cgroups()).map(|groups| {
            // Paths as this process's cgroup namespace shows them, as the cgroup's own.
            groups.0.iter().any(|g| g.hierarchy == 0 && g.controllers.is_empty() && g.pathname == cgroup.path())
        });
        !matches!(joined, Ok(false))
    });
    if let (Some(unused), None) = (&options.cgroup, &cgroup) {
        tracing::warn!("the command could not join its cgroup: only its witness covers what it leaves running");
        unused.remove();
    }
    let contained = Contained::None { reason, cgroup: cgroup.as_ref().map(|c| c.path().to_string()) };
    Ok(Tree { child, contained, events: None, status: None, empty: false, keepalive: None, init: None, cgroup })
}

/// A started box: the child to wait for, the report pipe, and (through a user namespace) the
/// init's pid.
type Started = (Child, File, Option<u32>);

/// On the spawner thread: unshares its PID namespace for children and spawns the init; where
/// that is refused and this process is not root, spawns a relay that makes a user namespace
/// and the PID namespace in it (a multi-threaded process cannot enter a user namespace).
/// `Ok(Err(reason))` when no namespace could be made (nothing was started).
fn spawn_in_new_namespace(command: &mut Command, options: &BoxOptions, supervisor: i32) -> std::io::Result<Result<Started, String>> {
    // SAFETY: unshare(2) of this thread's PID namespace for children; it changes nothing else.
    let relay = if unsafe { libc::unshare(libc::CLONE_NEWPID) } == 0 {
        None
    } else {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EPERM) {
            return Ok(Err(format!("creating a PID namespace failed ({e})")));
        }
        if rustix::process::geteuid().is_root() {
            return Ok(Err(format!("creating a PID namespace was refused ({e}), and root does not make user namespaces for a box")));
        }
        Some(Relay { uid: rustix::process::geteuid().as_raw(), gid: rustix::process::getegid().as_raw() })
    };
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here alone.
    let (events, report) = unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut keep = options.keep.clone();
    keep.push(report.as_raw_fd());
    keep.sort_unstable();
    let cgroup = options.cgroup.as_ref().map(|cgroup| cgroup.dir_fd());
    let init = Init { keep, report: report.as_raw_fd(), supervisor: options.die_with_supervisor.then_some(supervisor), relay, cgroup };
    // A `Command` cannot shed a pre-exec hook, and the command goes back to the caller, which
    // spawns it without a box when this one cannot be made: the hook is disarmed then, or it
    // would run again in that child and write to a descriptor number long closed here (std's
    // own error pipe, by then: "short read on the CLOEXEC pipe"). The child reads its copy of
    // the flag, as it was when it was forked.
    let armed = std::sync::Arc::new(AtomicBool::new(true));
    let hook = std::sync::Arc::clone(&armed);
    // SAFETY: the closure runs in the forked child before exec and calls only async-signal-safe
    // system calls (see `Init::become_init`; an atomic load); it allocates nothing.
    unsafe {
        command.pre_exec(move || if hook.load(Ordering::SeqCst) { init.become_init() } else { Ok(()) });
    }
    let spawned = command.spawn();
    let disarm = || armed.store(false, Ordering::SeqCst);
    drop(report);
    let mut events = events;
    let Some(_) = relay else { return Ok(Ok((spawned?, events, None))) };
    // The relay's first message: the init's pid, or why no user namespace could be made.
    let mut message = [0u8; 5];
    let got = read_message(&mut events, &mut message)?;
    let value = i32::from_ne_bytes([message[1], message[2], message[3], message[4]]);
    match (spawned, got, message[0]) {
        (Ok(child), true, b'P') => Ok(Ok((child, events, u32::try_from(value).ok()))),
        (_, true, b'F') => {
            disarm();
            let e = std::io::Error::from_raw_os_error(value);
            Ok(Err(format!("creating a PID namespace was refused, and so was a user namespace for it ({e}): run as root, or allow unprivileged user namespaces")))
        }
        (Err(e), _, _) => Err(e),
        (Ok(mut child), _, _) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(std::io::Error::other("the box's relay ended without a word"))
        }
    }
}

/// Reads one 5-byte message; whether it was whole (false at end of file).
fn read_message(events: &mut File, message: &mut [u8; 5]) -> std::io::Result<bool> {
    let mut got = 0;
    while got < message.len() {
        match events.read(&mut message[got..]) {
            Ok(0) => return Ok(false),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// An unprivileged box: the user namespace's one mapping (this user and group to themselves).
#[derive(Clone, Copy)]
struct Relay {
    uid: u32,
    gid: u32,
}

/// What the init needs, copied into the forked child.
#[derive(Clone)]
struct Init {
    /// Descriptors kept open in the init, sorted.
    keep: Vec<RawFd>,
    /// The write end of the report pipe.
    report: RawFd,
    /// With `PR_SET_PDEATHSIG`: the supervisor's pid, to check it is still the parent.
    supervisor: Option<i32>,
    /// Through a user namespace: the relay makes it and the PID namespace, then the init.
    relay: Option<Relay>,
    /// The cgroup directory to start the command in (`clone3(CLONE_INTO_CGROUP)`).
    cgroup: Option<RawFd>,
}

/// Where the forwarded signals go: the command's pid in the init, the init's in the relay (each is
/// its own copy of the address space).
static COMMAND: AtomicI32 = AtomicI32::new(0);

/// The signals the init forwards to the command (and the relay to the init): those the
/// supervisor forwards (`supervisor::signals`).
pub(crate) const FORWARDED: [libc::c_int; 8] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2, libc::SIGWINCH, libc::SIGALRM];

/// The signals that stop a box whose command is gone.
const STOPPING: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// In the init: how many stopping signals arrived once the command was gone.
static STOPS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Init {
    /// In the forked child, pid 1 of the new namespace: forks the command (which returns
    /// `Ok(())` and goes on to exec) and becomes its init (never returns). Only
    /// async-signal-safe system calls: this process is a fork of a multi-threaded one.
    fn become_init(&self) -> std::io::Result<()> {
        // SAFETY: (the whole function) raw system calls on this process's own state; no
        // allocation, no lock.
        unsafe {
            let mut supervisor = self.supervisor;
            if let Some(relay) = self.relay {
                // The relay: in the supervisor's namespaces, single-threaded.
                if let Some(parent) = supervisor {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    if libc::getppid() != parent {
                        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                    }
                }
                if let Err(errno) = relay.enter() {
                    message(self.report, b'F', errno);
                    return Err(std::io::Error::from_raw_os_error(errno));
                }
                let own = libc::getpid();
                let mut all: libc::sigset_t = std::mem::zeroed();
                let mut before: libc::sigset_t = std::mem::zeroed();
                libc::sigfillset(&mut all);
                libc::sigprocmask(libc::SIG_SETMASK, &all, &mut before);
                let init = libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_long, 0 as libc::c_long, 0 as libc::c_long, 0 as libc::c_long, 0 as libc::c_long);
                if init < 0 {
                    let e = std::io::Error::last_os_error();
                    libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
                    return Err(e);
                }
                if init > 0 {
                    message(self.report, b'P', init as i32);
                    self.relay_loop(init as libc::pid_t);
                }
                // The init, pid 1 of the new namespace, child of the relay: it dies with the
                // relay, always (the relay is the recorded child and waits for it).
                libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
                supervisor = Some(own);
            }
            libc::prctl(libc::PR_SET_NAME, c"proclease-init".as_ptr(), 0, 0, 0);
            if let Some(supervisor) = supervisor {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // getppid() is 0 for a namespace's init: read the parent from the machine's /proc.
                if parent_from_proc().is_some_and(|parent| parent != supervisor) {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
            }
            // The box's own /proc, in its own mount namespace (where allowed). Slave, not
            // private: the machine's mounts and unmounts still reach the box; its own stay in it.
            if libc::unshare(libc::CLONE_NEWNS) == 0 && libc::mount(c"none".as_ptr(), c"/".as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_SLAVE, std::ptr::null()) == 0 {
                let _ = libc::mount(c"proc".as_ptr(), c"/proc".as_ptr(), c"proc".as_ptr(), libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, std::ptr::null());
            }
            // Signals wait until the init's handlers are in place; the command gets the mask
            // it had (std emptied it before the pre-exec closures).
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut before: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::sigprocmask(libc::SIG_SETMASK, &all, &mut before);
            let command = match self.cgroup {
                // Born in its cgroup; where the kernel refuses (no clone3, no permission), as
                // before, and the report says so.
                Some(cgroup) => match clone_into_cgroup(cgroup) {
                    failed if failed < 0 => {
                        OUTSIDE_CGROUP.store(true, Ordering::SeqCst);
                        libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_long, 0 as libc::c_long, 0 as libc::c_long, 0 as libc::c_long, 0 as libc::c_long)
                    }
                    pid => pid,
                },
                None => libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_long, 0 as libc::c_long, 0 as libc::c_long, 0 as libc::c_long, 0 as libc::c_long),
            };
            if command == 0 {
                // The command: the init alone holds the witness, so that no process of the box
                // can release it for the tree (`flock -u` on an inherited descriptor would).
                for &fd in &self.keep {
                    if fd != self.report {
                        libc::close(fd);
                    }
                }
                libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
                return Ok(());
            }
            if command < 0 {
                let e = std::io::Error::last_os_error();
                libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
                return Err(e);
            }
            self.init_loop(command as libc::pid_t)
        }
    }

    /// The relay: forwards signals to the init, and exits once it exited.
    unsafe fn relay_loop(&self, init: libc::pid_t) -> ! {
        // SAFETY: async-signal-safe system calls on this process's own state (a fork of the
        // supervisor, single-threaded); no allocation, no lock.
        unsafe {
            libc::prctl(libc::PR_SET_NAME, c"proclease-relay".as_ptr(), 0, 0, 0);
            forward_to(init);
            // Only the witness stays open here (the init reports through its own copy).
            close_all_but(&self.keep, Some(self.report));
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            loop {
                let mut status: libc::c_int = 0;
                if libc::waitpid(init, &mut status, 0) == init {
                    libc::_exit(0);
                }
                if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                    libc::_exit(0);
                }
            }
        }
    }

    /// The init: forwards signals to the command, reaps every process of the box, reports the
    /// command's status, and exits once the box is empty.
    unsafe fn init_loop(&self, command: libc::pid_t) -> ! {
        // SAFETY: async-signal-safe system calls on this process's own state (pid 1 of the box,
        // single-threaded); no allocation, no lock.
        unsafe {
            forward_to(command);
            // A report to a supervisor that died must not kill the init (std left SIGPIPE at
            // its default for the command).
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
            // Close all but the kept descriptors: std's exec-error pipe (so the parent's spawn
            // returns once the command exec'd), standard input and output (so a reader of the
            // command's output sees its end when the command's processes close it).
            close_all_but(&self.keep, None);
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            let mut reported = false;
            loop {
                let mut status: libc::c_int = 0;
                let pid = libc::waitpid(-1, &mut status, 0);
                if pid < 0 {
                    if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                        continue;
                    }
                    // ECHILD: nothing of the box is left.
                    if !reported {
                        report(self.report, status, true);
                    }
                    libc::_exit(0);
                }
                if pid == command && !reported {
                    COMMAND.store(0, Ordering::SeqCst);
                    // Reap what already exited, then say whether anything still runs.
                    let empty = loop {
                        let mut other: libc::c_int = 0;
                        match libc::waitpid(-1, &mut other, libc::WNOHANG) {
                            0 => break false,
                            n if n > 0 => continue,
                            _ if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => continue,
                            _ => break true,
                        }
                    };
                    report(self.report, status, empty);
                    reported = true;
                    if empty {
                        libc::_exit(0);
                    }
                }
            }
        }
    }
}

/// Installs [`forward`] for the [`FORWARDED`] signals, to `target` (in the init or the relay).
unsafe fn forward_to(target: libc::pid_t) {
    COMMAND.store(target, Ordering::SeqCst);
    // SAFETY: sigaction(2) of this process's own handlers; a zeroed sigaction is valid.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = forward as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigfillset(&mut action.sa_mask);
        for signal in FORWARDED {
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// The init's (and the relay's) handler: a signal another process sent (`si_code` ≤ 0: `kill`,
/// `sigqueue`, `tgkill`) goes on to the command; the kernel's own (a terminal's) reached it
/// already. Once the command is gone (the init's target is 0), SIGINT, SIGTERM, SIGHUP or
/// SIGQUIT stop the box: the signal (and SIGCONT) to every process of the namespace, and at the
/// second one SIGKILL — this is how the supervisor stops what the command left running, and
/// how `kill <CHILD>` ends a box whose supervisor died.
extern "C" fn forward(signal: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    let command = COMMAND.load(Ordering::SeqCst);
    // SAFETY: `info` is the kernel's siginfo for this delivery (SA_SIGINFO); kill(2) is
    // async-signal-safe.
    unsafe {
        if info.is_null() || (*info).si_code > 0 {
            return;
        }
        if command > 0 {
            libc::kill(command, signal);
        } else if STOPPING.contains(&signal) {
            // kill(-1) from a namespace's init reaches every process of the namespace but itself.
            if STOPS.fetch_add(1, Ordering::SeqCst) == 0 {
                libc::kill(-1, signal);
                libc::kill(-1, libc::SIGCONT);
            } else {
                libc::kill(-1, libc::SIGKILL);
            }
        }
    }
}

/// In the init: the command could not be started in its cgroup.
static OUTSIDE_CGROUP: AtomicBool = AtomicBool::new(false);

/// `struct clone_args` of `clone3(2)` (`CLONE_ARGS_SIZE_VER2`: up to `cgroup`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `CLONE_INTO_CGROUP` (Linux 5.7).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// A fork (no new stack: the child returns here, as from `fork`) whose child is born in the
/// cgroup whose directory `cgroup` is. The raw result: the child's pid, 0 in the child, < 0
/// when the kernel refused.
unsafe fn clone_into_cgroup(cgroup: RawFd) -> libc::c_long {
    let args = CloneArgs { flags: CLONE_INTO_CGROUP, exit_signal: libc::SIGCHLD as u64, cgroup: cgroup as u64, ..CloneArgs::default() };
    // SAFETY: clone3 with a valid clone_args of its declared size, no stack (fork semantics).
    unsafe { libc::syscall(libc::SYS_clone3, &args as *const CloneArgs, std::mem::size_of::<CloneArgs>()) }
}

/// Writes the report: the command's raw wait status (4 bytes, native order) and a byte whose
/// bit 0 says the box was not empty and bit 1 that the command could not be started in its
/// cgroup, in one write (atomic on a pipe).
unsafe fn report(fd: RawFd, status: libc::c_int, empty: bool) {
    let mut message = [0u8; 5];
    message[..4].copy_from_slice(&status.to_ne_bytes());
    message[4] = u8::from(!empty) | (u8::from(OUTSIDE_CGROUP.load(Ordering::SeqCst)) << 1);
    // SAFETY: `fd` is the report pipe's write end, kept open in the init.
    unsafe {
        let _ = libc::write(fd, message.as_ptr().cast(), message.len());
    }
}

/// Closes every descriptor but those of `keep` (sorted), and `also` too.
unsafe fn close_all_but(keep: &[RawFd], also: Option<RawFd>) {
    let mut low: libc::c_uint = 0;
    for &fd in keep {
        if fd < 0 || (fd as libc::c_uint) < low || Some(fd) == also {
            continue;
        }
        if fd as libc::c_uint > low {
            // SAFETY: closes descriptors of this process only.
            unsafe { close_range(low, fd as libc::c_uint - 1) };
        }
        low = fd as libc::c_uint + 1;
    }
    // SAFETY: as above.
    unsafe { close_range(low, libc::c_uint::MAX) };
}

impl Relay {
    /// In the relay: a user namespace mapping this user and group to themselves, and the PID
    /// and mount namespaces in it (for the relay's children). The errno on failure.
    unsafe fn enter(&self) -> Result<(), libc::c_int> {
        // SAFETY: system calls on this process's own namespaces and /proc files.
        unsafe {
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNS) != 0 {
                return Err(errno());
            }
            write_file(c"/proc/self/setgroups", b"deny")?;
            let mut line = [0u8; 40];
            write_file(c"/proc/self/uid_map", id_map(&mut line, self.uid))?;
            let mut line = [0u8; 40];
            write_file(c"/proc/self/gid_map", id_map(&mut line, self.gid))?;
            Ok(())
        }
    }
}

/// `"ID ID 1\n"` in `buffer`, without allocating.
fn id_map(buffer: &mut [u8; 40], id: u32) -> &[u8] {
    let mut digits = [0u8; 10];
    let mut n = id;
    let mut count = 0;
    loop {
        digits[count] = b'0' + (n % 10) as u8;
        count += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut at = 0;
    for _ in 0..2 {
        for i in (0..count).rev() {
            buffer[at] = digits[i];
            at += 1;
        }
        buffer[at] = b' ';
        at += 1;
    }
    buffer[at] = b'1';
    buffer[at + 1] = b'\n';
    &buffer[..at + 2]
}

/// Writes `text` to the file at `path` in one write.
unsafe fn write_file(path: &std::ffi::CStr, text: &[u8]) -> Result<(), libc::c_int> {
    // SAFETY: open/write/close of a /proc file of this process.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(errno());
        }
        let written = libc::write(fd, text.as_ptr().cast(), text.len());
        let e = errno();
        libc::close(fd);
        if written != text.len() as isize {
            return Err(if written < 0 { e } else { libc::EIO });
        }
        Ok(())
    }
}

fn errno() -> libc::c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// A relay's message: a tag and a number, in one write.
unsafe fn message(fd: RawFd, tag: u8, value: i32) {
    let mut message = [tag, 0, 0, 0, 0];
    message[1..].copy_from_slice(&value.to_ne_bytes());
    // SAFETY: `fd` is the report pipe's write end.
    unsafe {
        let _ = libc::write(fd, message.as_ptr().cast(), message.len());
    }
}

/// close_range(2), or close(2) one by one up to 4096 where the kernel lacks it.
unsafe fn close_range(low: libc::c_uint, high: libc::c_uint) {
    // SAFETY: closes descriptors of this process only.
    unsafe {
        if libc::syscall(libc::SYS_close_range, low as libc::c_long, high as libc::c_long, 0 as libc::c_long) != 0 {
            for fd in low..=high.min(4096) {
                libc::close(fd as libc::c_int);
            }
        }
    }
}

/// This process's parent from the machine's `/proc/self/stat` (field 4), without allocating.
unsafe fn parent_from_proc() -> Option<i32> {
    let mut buffer = [0u8; 1024];
    // SAFETY: open/read/close into a local buffer.
    let read = unsafe {
        let fd = libc::open(c"/proc/self/stat".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len());
        libc::close(fd);
        n
    };
    let text = buffer.get(..usize::try_from(read).ok()?)?;
    let close = text.iter().rposition(|&b| b == b')')?;
    // ") S PPID ..."
    let rest = text.get(close + 4..)?;
    let mut parent: i32 = 0;
    let mut digits = 0;
    for &b in rest {
        if !b.is_ascii_digit() {
            break;
        }
        parent = parent.checked_mul(10)?.checked_add(i32::from(b - b'0'))?;
        digits += 1;
    }
    (digits > 0).then_some(parent)
}

/// The inode of an nsfs link's text (`pid:[4026531836]`).
fn nsfs_inode(link: &str) -> Option<u64> {
    link.split_once(":[")?.1.strip_suffix(']')?.parse().ok()
}

impl Tree {
    /// The pid to record: the box's init (as this process's PID namespace sees it), or the
    /// command itself without a box.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// How the command runs.
    pub fn containment(&self) -> &Contained {
        &self.contained
    }

    /// Whether the command runs with neither a box nor a cgroup: its witness then covers only
    /// the processes that keep it (`docs/witness.md`, "Uncontained runs").
    pub fn uncontained(&self) -> bool {
        matches!(self.contained, Contained::None { cgroup: None, .. })
    }

    /// Waits up to `timeout` (forever with `None`) for the command to exit; its status, or
    /// `None` if it still runs. With a box the command's status comes from the init; if the
    /// init died first (it was killed, and the kernel killed the box with it), the init's.
    ///
    /// Errors: waiting failed (`waitpid`, `poll`).
    pub fn wait_command(&mut self, timeout: Option<Duration>) -> std::io::Result<Option<ExitStatus>> {
        if let Some(status) = self.status {
            return Ok(Some(status));
        }
        let Some(events) = self.events.as_mut() else {
            let status = match timeout {
                None => Some(self.child.wait()?),
                Some(timeout) => wait_child_for(&mut self.child, timeout)?,
            };
            self.status = status;
            self.empty = status.is_some();
            return Ok(status);
        };
        let mut poll = libc::pollfd { fd: events.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let millis = timeout.map_or(-1, |t| libc::c_int::try_from(t.as_millis()).unwrap_or(libc::c_int::MAX));
        // SAFETY: one pollfd on a descriptor this Tree owns.
        let ready = unsafe { libc::poll(&mut poll, 1, millis) };
        if ready < 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::Interrupted { Ok(None) } else { Err(e) };
        }
        if ready == 0 {
            return Ok(None);
        }
        let mut message = [0u8; 5];
        let whole = read_message(events, &mut message)?;
        self.events = None;
        if whole {
            let raw = i32::from_ne_bytes([message[0], message[1], message[2], message[3]]);
            self.status = Some(ExitStatus::from_raw(raw));
            self.empty = message[4] & 1 == 0;
            if message[4] & 2 != 0 {
                tracing::warn!("the kernel refused to start the command in its cgroup: the box alone contained it");
            }
        } else {
            // The init died without a report: the kernel killed the box with it.
            let status = self.child.wait()?;
            self.reaped();
            self.status = Some(status);
            self.empty = true;
        }
        Ok(self.status)
    }

    /// Waits for the command to exit ([`Tree::wait_command`] without a timeout).
    ///
    /// Errors: waiting failed.
    pub fn wait(&mut self) -> std::io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.wait_command(None)? {
                return Ok(status);
            }
        }
    }

    /// Sends `signal` to the command (through the init, which forwards it).
    pub fn signal_command(&self, signal: rustix::process::Signal) {
        if let Some(pid) = i32::try_from(self.child.id()).ok().and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }

    /// Kills the whole tree at once: `cgroup.kill` of its cgroup (if it has one), and SIGKILL
    /// to the init (the kernel kills every process of the box; through a user namespace, to the
    /// relay, whose death kills the init), or to the command without a box.
    pub fn kill(&mut self) {
        if let Some(cgroup) = &self.cgroup {
            // Atomically, what the command started; the init's death takes the rest.
            let _ = cgroup.kill();
        }
        let _ = self.child.kill();
    }

    /// Once the command exited ([`Tree::wait_command`]), deals with what it left running by
    /// `policy` and waits until the box is empty; `abort` is asked every 20 ms, and once it
    /// answers true what is left is killed at once (a signal to the supervisor, a lapsed
    /// cluster presence). The processes that were still running, as counted when the
    /// command's exit was seen (0 when it left none; 0 without a box or cgroup, which cannot tell).
    ///
    /// Stopping goes through the init (`kill(-1)` inside the namespace: no pid is signalled
    /// from outside, so none can have been reused): SIGTERM and SIGCONT to every process of the
    /// box, then, once `grace` has passed, SIGKILL to the init — the kernel kills the rest.
    ///
    /// Errors: waiting failed.
    pub fn finish(&mut self, policy: Stragglers, abort: &dyn Fn() -> bool) -> std::io::Result<usize> {
        if self.status.is_none() {
            self.wait()?;
        }
        if self.keepalive.is_none() {
            // No box (only a cgroup can tell), or its init is already reaped.
            let count = self.finish_cgroup(policy, abort);
            self.remove_cgroup();
            return Ok(count);
        }
        if self.empty {
            self.child.wait()?;
            self.reaped();
            self.remove_cgroup();
            return Ok(0);
        }
        let count = descendants(self.init.unwrap_or(self.child.id()));
        let until = match policy {
            Stragglers::Wait => {
                tracing::warn!(count, "waiting for the processes the command left running (the lease stays held until they end)");
                None
            }
            Stragglers::Stop { grace } => {
                tracing::info!(count, "stopping the processes the command left running");
                self.signal_command(rustix::process::Signal::TERM);
                Some(Instant::now() + grace)
            }
        };
        loop {
            if self.child.try_wait()?.is_some() {
                break;
            }
            if abort() || until.is_some_and(|until| Instant::now() >= until) {
                self.kill();
                self.child.wait()?;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.reaped();
        self.remove_cgroup();
        Ok(count)
    }

    /// Without a box: what the command left in its cgroup (if it has one) is dealt with by
    /// `policy`, as [`Tree::finish`] does through a box's init: SIGTERM and SIGCONT to each
    /// process of the cgroup (and of the cgroups below it), then `cgroup.kill`. The run goes on
    /// only once the cgroup is empty; past 10 s after SIGKILL it says every 10 s what it waits
    /// for. The processes found; 0 without a cgroup.
    fn finish_cgroup(&mut self, policy: Stragglers, abort: &dyn Fn() -> bool) -> usize {
        let Some(cgroup) = self.cgroup.clone() else { return 0 };
        // Unreadable `cgroup.events` (a transient error): the processes listed decide.
        let populated = || cgroup.populated().unwrap_or_else(|| !cgroup.pids().is_empty());
        if !populated() {
            return 0;
        }
        let count = cgroup.pids().len();
        let mut until = match policy {
            Stragglers::Wait => {
                tracing::warn!(count, cgroup = cgroup.path(), "waiting for the processes the command left running (the lease stays held until they end)");
                None
            }
            Stragglers::Stop { grace } => {
                tracing::info!(count, cgroup = cgroup.path(), "stopping the processes the command left running");
                cgroup.signal_all(rustix::process::Signal::TERM);
                cgroup.signal_all(rustix::process::Signal::CONT);
                Some(Instant::now() + grace)
            }
        };
        let mut killed: Option<Instant> = None;
        let mut said = Instant::now();
        while populated() {
            if killed.is_none() && (abort() || until.is_some_and(|until| Instant::now() >= until)) {
                killed = Some(Instant::now());
                until = None;
            }
            if let Some(since) = killed {
                if cgroup.kill().is_err() {
                    // An older kernel without cgroup.kill: one by one, until none is left.
                    cgroup.signal_all(rustix::process::Signal::KILL);
                }
                if since.elapsed() >= KILL_BOUND && said.elapsed() >= KILL_BOUND {
                    said = Instant::now();
                    let left = cgroup.pids();
                    tracing::warn!(
                        cgroup = cgroup.path(),
                        ?left,
                        "processes of the command's cgroup outlived SIGKILL (stuck in the kernel, or out of this user's reach): the lease stays held until they are gone"
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        count
    }

    /// Removes the tree's cgroup once it is empty (kept otherwise: its record still tells).
    fn remove_cgroup(&mut self) {
        if let Some(cgroup) = self.cgroup.take()
            && !cgroup.remove()
        {
            tracing::debug!(cgroup = cgroup.path(), "the command's cgroup is not empty yet: left in place");
        }
    }

    /// The init was reaped: the spawner thread may end.
    fn reaped(&mut self) {
        self.keepalive = None;
    }
}

impl Drop for Tree {
    /// A tree dropped before [`Tree::finish`] (an error path): its box is killed and reaped.
    fn drop(&mut self) {
        if self.keepalive.is_some() {
            self.kill();
            let _ = self.child.wait();
        }
        self.remove_cgroup();
    }
}

/// How long processes killed with SIGKILL may take to leave their cgroup before the run says
/// what it waits for (a process stuck in the kernel cannot die sooner), and how often it says
/// so again.
const KILL_BOUND: Duration = Duration::from_secs(10);

/// Waits up to `timeout` for `child`, polling.
fn wait_child_for(child: &mut Child, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
    let until = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        std::thread::sleep(left.min(Duration::from_millis(10)));
    }
}

/// How many live descendants `root` has (not counting `root`), from one scan of `/proc`; a
/// zombie leader whose threads run counts as live.
fn descendants(root: u32) -> usize {
    let Ok(all) = procfs::process::all_processes() else { return 0 };
    let parents: Vec<(u32, u32)> = all
        .filter_map(Result::ok)
        .filter_map(|p| p.stat().ok())
        .filter(|s| s.state != 'Z' || s.num_threads > 1)
        .filter_map(|s| Some((u32::try_from(s.pid).ok()?, u32::try_from(s.ppid).ok()?)))
        .collect();
    let mut found = vec![root];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        found.extend(parents.iter().filter(|(_, p)| *p == parent).map(|(pid, _)| *pid));
        next += 1;
    }
    found.len() - 1
}

/// Whether this process can make a box (a PID namespace, directly or through a user
/// namespace), and why not: what [`spawn`] with [`Containment::Auto`] would do, without
/// starting the command.
pub fn available() -> Result<(), String> {
    let direct = std::thread::spawn(|| {
        // SAFETY: unshare(2) of this short-lived thread's PID namespace for children.
        if unsafe { libc::unshare(libc::CLONE_NEWPID) } == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
    })
    .join()
    .unwrap_or_else(|_| Err(std::io::Error::other("the probe thread panicked")));
    let e = match direct {
        Ok(()) => return Ok(()),
        Err(e) if e.raw_os_error() != Some(libc::EPERM) => return Err(format!("creating a PID namespace failed ({e})")),
        Err(e) if rustix::process::geteuid().is_root() => {
            return Err(format!("creating a PID namespace was refused ({e}), and root does not make user namespaces for a box"));
        }
        Err(e) => e,
    };
    // Unprivileged: what the relay does, in a throw-away child.
    // SAFETY: a fork-like clone; the child makes only async-signal-safe system calls and exits.
    let child = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_long, 0 as libc::c_long, 0 as libc::c_long, 0 as libc::c_long, 0 as libc::c_long) };
    if child == 0 {
        // SAFETY: in the child: unshare, then _exit.
        unsafe {
            let code = if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNS) == 0 { 0 } else { 1 };
            libc::_exit(code);
        }
    }
    let mut status: libc::c_int = 0;
    // SAFETY: waits for the child just cloned.
    let waited = child > 0 && unsafe { libc::waitpid(child as libc::pid_t, &mut status, 0) } == child as libc::pid_t;
    if waited && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else {
        Err(format!("creating a PID namespace was refused ({e}), and so was a user namespace for it: run as root, or allow unprivileged user namespaces"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nsfs_links_name_their_inode() {
        assert_eq!(nsfs_inode("pid:[4026531836]"), Some(4026531836));
        assert_eq!(nsfs_inode("pid:4026531836"), None);
    }

    #[test]
    fn id_maps_map_an_id_to_itself() {
        let mut line = [0u8; 40];
        assert_eq!(id_map(&mut line, 65534), b"65534 65534 1\n");
        let mut line = [0u8; 40];
        assert_eq!(id_map(&mut line, 0), b"0 0 1\n");
        let mut line = [0u8; 40];
        assert_eq!(id_map(&mut line, u32::MAX), b"4294967295 4294967295 1\n");
    }

    #[test]
    fn the_parent_is_read_from_proc() {
        // SAFETY: reads this test process's own stat.
        let parent = unsafe { parent_from_proc() };
        assert_eq!(parent, rustix::process::getppid().map(|p| p.as_raw_nonzero().get()));
    }
}
