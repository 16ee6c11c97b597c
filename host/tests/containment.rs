//! The lease covers the whole command tree (`docs/containment.md`, issue #26), through the
//! `proclease` binary with real processes: a daemon that double-forks, calls `setsid` and
//! closes every descriptor keeps its directory after the supervisor and the command were
//! killed (also when the supervisor runs in a PID namespace of its own); a failed or successful
//! `--stage` run with a detached writer neither removes nor publishes the stage while the
//! writer runs; what a finished run left running is stopped before its lease is released (or
//! waited for); an unprivileged run gets its box through a user namespace.
//!
//! The box needs a PID namespace (root, or an unprivileged user namespace); where it cannot be
//! made these tests print why and pass — unless `PROCLEASE_REQUIRE_NAMESPACES=1` (set by
//! `.ci/run`) makes that a failure.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{Sandbox, kill, namespaces_available, processes_running, sandbox, stderr, unique_seconds, wait_for_process, wait_until_dead};

/// A daemon as postsrsd or ssh-agent start: fork, `setsid`, fork again, close every descriptor
/// above 2, then append to `beat` in its working directory every 50 ms until killed. Its
/// command line is `python3 -c DAEMON <tag>` so that a test finds it.
const DAEMON: &str = r#"
import os, sys, time
if os.fork():
    sys.exit(0)
os.setsid()
if os.fork():
    os._exit(0)
os.closerange(3, 65536)
while True:
    with open("beat", "a") as f:
        f.write("x")
    time.sleep(0.05)
"#;

/// The Python interpreter's own path (`sys.executable`: what its processes' command lines
/// show, whatever shim started it).
fn python() -> Option<&'static str> {
    static PYTHON: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let output = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().ok()?;
            let path = String::from_utf8(output.stdout).ok()?.trim().to_string();
            (output.status.success() && !path.is_empty()).then_some(path)
        })
        .as_deref()
}

/// Whether a box can be made here (a PID namespace); if not, says why (failing under
/// `PROCLEASE_REQUIRE_NAMESPACES`).
fn boxes() -> bool {
    namespaces_available(&["--pid", "--fork", "--mount-proc"])
}

fn recover(s: &Sandbox) -> (u64, u64) {
    let output = s.run(&["recover", "--json"]);
    assert!(output.status.success(), "recover: {output:?}");
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).expect("recover --json");
    let leases = &doc["directoryLeases"];
    (leases["recovered"].as_u64().expect("recovered"), leases["active"].as_u64().expect("active"))
}

/// Runs `recover` until it recovers the one lease (the box's init exits a moment after the last
/// process of its namespace), for up to 10 s after `event`.
fn recovered_once_gone(s: &Sandbox, event: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while recover(s).0 != 1 {
        assert!(Instant::now() < deadline, "never recovered after {event}: {}", common::stdout(&s.run(&["doctor"])));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The parent of `pid` (field 4 of its stat), while it exists.
fn parent(pid: u64) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
}

fn beats(dir: &Path) -> usize {
    std::fs::read(dir.join("beat")).map_or(0, |b| b.len())
}

/// The daemon's pid, once it writes in `dir` (its forks are over then: only it runs).
fn daemon_in(dir: &Path, python: &str, tag: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    while beats(dir) == 0 {
        assert!(Instant::now() < deadline, "the daemon never wrote in {}", dir.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_for_process(&[python, "-c", DAEMON, tag])
}

/// The Python a daemon runs on, where a box can be made (else `None`, after saying why).
fn daemons() -> Option<&'static str> {
    let Some(python) = python() else {
        println!("skipped: no python3 to start a daemon");
        return None;
    };
    boxes().then_some(python)
}

/// With everything else of the tree killed: `recover` keeps `work` while `daemon` still writes
/// there, and removes it once the daemon is gone (its box's init then exits, freeing the
/// witness).
fn kept_until_the_daemon_dies(s: &Sandbox, work: &Path, daemon: u64) {
    still_writes(work);
    assert_eq!(recover(s), (0, 1), "the daemon still runs in the directory: it is kept");
    still_writes(work);
    kill(daemon);
    wait_until_dead(daemon);
    recovered_once_gone(s, "the daemon died");
    assert!(!work.exists(), "recovered once the whole tree is gone");
}

/// Waits until the daemon has written in `dir` again (it runs there).
fn still_writes(dir: &Path) {
    let before = beats(dir);
    let deadline = Instant::now() + Duration::from_secs(10);
    while beats(dir) <= before {
        assert!(Instant::now() < deadline, "the daemon stopped writing in {}", dir.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Input 1: `run --workdir W -- sh -c 'daemon; sleep N'`, then SIGKILL to the supervisor and to
/// the `sh`. The daemon closed its inherited witness, but the box's init holds it: `recover`
/// keeps W while the daemon runs, and removes it once the daemon is gone.
#[test]
fn a_daemon_that_closed_its_descriptors_keeps_its_directory() {
    let Some(python) = daemons() else { return };
    let s = sandbox();
    let work = s.root.join("jobs/daemon");
    let tag = unique_seconds();
    let script = format!("{python} -c '{DAEMON}' {tag}; sleep {tag}");
    let mut supervisor =
        s.command(&["run", "--workdir", work.to_str().expect("utf-8"), "--", "sh", "-c", &script]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
    let daemon = daemon_in(&work, python, &tag);
    let command = wait_for_process(&["sleep", &tag]);
    supervisor.kill().expect("SIGKILL the supervisor");
    supervisor.wait().expect("reap");
    kill(command);
    wait_until_dead(command);
    kept_until_the_daemon_dies(&s, &work, daemon);
}

/// Input 2: the same with the supervisor in a PID namespace of its own, and `recover` run from
/// the machine's: the box's witness is still held, so nothing depends on `/proc` across
/// namespaces.
#[test]
fn a_daemon_of_a_supervisor_in_another_pid_namespace_keeps_its_directory() {
    let Some(python) = daemons() else { return };
    let s = sandbox();
    let work = s.root.join("jobs/nested");
    let tag = unique_seconds();
    let script = format!("{python} -c '{DAEMON}' {tag}; sleep {tag}");
    let inner = format!("{} {} run --workdir {} -- sh -c \"$0\"; sleep {tag}0", common::PROCLEASE, s.global().join(" "), work.display());
    let mut namespace = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL", "sh", "-c", &inner, &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("unshare");
    let daemon = daemon_in(&work, python, &tag);
    let command = wait_for_process(&["sh", "-c", &script]);
    // The command's parent is the box's init, whose parent is the supervisor.
    let supervisor = parent(command).and_then(parent).expect("the supervisor");
    let sleep = wait_for_process(&["sleep", &tag]);
    kill(supervisor);
    wait_until_dead(supervisor);
    kill(command);
    kill(sleep);
    wait_until_dead(command);
    wait_until_dead(sleep);
    // `recover` runs in the machine's namespace, not the supervisor's.
    kept_until_the_daemon_dies(&s, &work, daemon);
    let _ = namespace.kill();
    let _ = namespace.wait();
}

/// Input 3: a `--stage` run whose command starts a detached writer (`setsid -f`) and fails:
/// the writer is stopped before the stage is removed; when it succeeds, before the stage is
/// published — nothing writes into the output afterwards.
#[test]
fn a_stage_is_removed_or_published_only_after_its_detached_writer_is_stopped() {
    if !boxes() {
        return;
    }
    for code in [1, 0] {
        let s = sandbox();
        let stage = s.root.join("exports/.stage");
        let output = s.root.join("exports/published");
        let tag = unique_seconds();
        let writer = format!("while :; do echo x >> beat; sleep 0.05; done; : {tag}");
        let script = format!("setsid -f sh -c '{writer}'; sleep 0.3; exit {code}");
        let run = s.run(&["run", "--grace", "1s", "--stage", stage.to_str().expect("utf-8"), "--output", output.to_str().expect("utf-8"), "--", "sh", "-c", &script]);
        assert_eq!(run.status.code(), Some(code), "{run:?}");
        // The writer's loop, and its `sleep` if it was in one.
        assert!(stderr(&run).contains("proclease: stopped ") && stderr(&run).contains(" the command left running"), "{run:?}");
        assert!(processes_running(&["sh", "-c", &writer]).is_empty(), "the writer is gone when run returns");
        assert!(!stage.exists(), "the stage is removed or published");
        if code == 0 {
            let published = beats(&output);
            assert!(published > 0, "the output has what the writer wrote");
            std::thread::sleep(Duration::from_millis(300));
            assert_eq!(beats(&output), published, "nothing writes into the published output");
        } else {
            assert!(!output.exists(), "a failed stage is not published");
        }
        assert_eq!(recover(&s), (0, 0), "no lease is left");
    }
}

/// Input 4: `run --exclusive -- sh -c 'job &'` returns only once `job` is stopped, and the next
/// exclusive run does not overlap it; the same after a forwarded SIGTERM with `sh -c 'a; b'`.
#[test]
fn a_finished_run_leaves_no_straggler() {
    if !boxes() {
        return;
    }
    let s = sandbox();
    let work = s.root.join("jobs/export");
    let tag = unique_seconds();
    let run = s.run(&["run", "--exclusive", "--workdir", work.to_str().expect("utf-8"), "--", "sh", "-c", &format!("sleep {tag} & echo started")]);
    assert!(run.status.success(), "{run:?}");
    assert!(stderr(&run).contains("stopped 1 process the command left running"), "{run:?}");
    assert!(processes_running(&["sleep", &tag]).is_empty(), "the background job did not outlive the run");

    // A forwarded SIGTERM ends `sh`; `sleep` (its foreground job) would run on.
    let tag = unique_seconds();
    let supervisor = s
        .command(&["run", "--exclusive", "--workdir", work.join("b").to_str().expect("utf-8"), "--", "sh", "-c", &format!("sleep {tag}; echo after")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let sleep = wait_for_process(&["sleep", &tag]);
    let pid = rustix::process::Pid::from_raw(supervisor.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    let finished = supervisor.wait_with_output().expect("wait");
    assert!(!finished.status.success(), "{finished:?}");
    assert!(common::state_of(sleep).is_none_or(|s| s == 'Z'), "the command's job was stopped before the run returned: {finished:?}");
    let next = s.run(&["run", "--exclusive", "--workdir", work.join("c").to_str().expect("utf-8"), "--", "true"]);
    assert!(next.status.success(), "the admission was released once the tree was gone: {next:?}");
}

/// `--stragglers wait`: the run (holding its lease) waits for what the command left running.
#[test]
fn stragglers_wait_keeps_the_lease_until_they_end() {
    if !boxes() {
        return;
    }
    let s = sandbox();
    let work = s.root.join("jobs/wait");
    let run = s.run(&["run", "--stragglers", "wait", "--workdir", work.to_str().expect("utf-8"), "--", "sh", "-c", "(sleep 0.5; echo late > late.txt) & echo early"]);
    assert!(run.status.success(), "{run:?}");
    // The subshell, and its `sleep`.
    assert!(stderr(&run).contains("proclease: waited for 2 processes the command left running"), "{run:?}");
    assert_eq!(std::fs::read_to_string(work.join("late.txt")).ok().as_deref(), Some("late\n"), "it ran to its end");
}

/// The command's view of its box: it is pid 2 of its own `/proc`, where `ps` sees only the box;
/// `-v` says how it runs.
#[test]
fn the_command_sees_its_own_box() {
    if !boxes() {
        return;
    }
    let s = sandbox();
    let work = s.root.join("jobs/view");
    let run = s.run(&["-v", "run", "--workdir", work.to_str().expect("utf-8"), "--", "sh", "-c", "echo $$; ls /proc | grep -c '^[0-9]'"]);
    assert!(run.status.success(), "{run:?}");
    let out = common::stdout(&run);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"2"), "the command is pid 2 (the init is 1): {out}");
    let count: u32 = lines.get(1).and_then(|l| l.trim().parse().ok()).expect("a count");
    assert!(count <= 4, "its /proc shows the box only (init, sh, ls, grep): {out}");
    assert!(stderr(&run).contains("containment=pid namespace pid:["), "{run:?}");

    // Where a cgroup can be made (doctor says so), the command is born in one of its own, which
    // is removed once the run is done.
    let doctor: serde_json::Value = serde_json::from_slice(&s.run(&["doctor", "--json"]).stdout).expect("doctor --json");
    if doctor["cgroup"]["available"] == true {
        let run = s.run(&["-v", "run", "--workdir", work.join("c").to_str().expect("utf-8"), "--", "sh", "-c", "grep '^0::' /proc/self/cgroup"]);
        assert!(run.status.success(), "{run:?}");
        let said = stderr(&run);
        let path = said.split_once(", cgroup ").and_then(|(_, rest)| rest.split_whitespace().next()).expect("-v names the cgroup");
        assert_eq!(common::stdout(&run).trim(), format!("0::{path}"), "the command runs in it: {run:?}");
        assert!(path.rsplit('/').next().is_some_and(|name| name.starts_with("proclease-")), "{path}");
        let own = std::fs::read_to_string("/proc/self/cgroup").expect("own cgroup");
        assert!(own.lines().any(|l| l.starts_with("0::")), "{own}");
        let mount = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        let mount = mount.lines().find(|l| l.contains(" - cgroup2 ")).and_then(|l| l.split(' ').nth(4)).expect("a cgroup2 mount");
        assert!(!Path::new(mount).join(path.trim_start_matches('/')).exists(), "the run removed its cgroup");
    } else {
        println!("no cgroup here: {}", doctor["cgroup"]["reason"]);
    }

    let none = s.run(&["-v", "run", "--containment", "none", "--workdir", work.join("n").to_str().expect("utf-8"), "--", "true"]);
    assert!(none.status.success(), "{none:?}");
    assert!(stderr(&none).contains("containment=none, because --containment none was asked for"), "{none:?}");
}

/// A directory owned by uid 65534 (`nobody`), and `setpriv … proclease -v --state-home … run
/// --workdir <dir>/job -- sh -c script` as that user; `None` (after saying why) where
/// unprivileged user namespaces cannot be made here.
fn unprivileged(script: &str) -> Option<(tempfile::TempDir, std::path::PathBuf, Command)> {
    if !rustix::process::geteuid().is_root() {
        println!("skipped: needs root to run a command as another user (setpriv)");
        return None;
    }
    let probe = Command::new("setpriv").args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "unshare", "--user", "--pid", "--fork", "true"]).output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        assert!(std::env::var_os("PROCLEASE_REQUIRE_NAMESPACES").is_none(), "unprivileged user namespaces are not allowed here: {probe:?}");
        println!("skipped: unprivileged user namespaces are not allowed here ({probe:?})");
        return None;
    }
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("realpath");
    rustix::fs::chown(&root, Some(rustix::process::Uid::from_raw(65534)), Some(rustix::process::Gid::from_raw(65534))).expect("chown");
    let mut command = nobody(&root, &["-v"]);
    command.args(["run", "--workdir"]).arg(root.join("job")).args(["--", "sh", "-c", script]);
    Some((dir, root, command))
}

/// An unprivileged run (`setpriv --reuid 65534`) gets its box through a user namespace where
/// the kernel allows one, and stops what its command left running.
#[test]
fn an_unprivileged_run_gets_a_box_through_a_user_namespace() {
    let tag = unique_seconds();
    let Some((_dir, _root, mut command)) = unprivileged(&format!("echo $$; sleep {tag} &")) else { return };
    let run = command.output().expect("setpriv");
    assert!(run.status.success(), "{run:?}");
    assert_eq!(common::stdout(&run).trim(), "2", "the command is pid 2 of its box");
    assert!(stderr(&run).contains("in a user namespace"), "{run:?}");
    assert!(stderr(&run).contains("stopped 1 process the command left running"), "{run:?}");
    assert!(processes_running(&["sleep", &tag]).is_empty());
}

/// Runs `inner` as a process of a new user namespace (the machine's uids and gids mapped to
/// themselves) in which no further user namespace may be made (`max_user_namespaces` 0): a
/// machine that disallows unprivileged user namespaces, as seen by a user who is not root.
fn without_user_namespaces(inner: &Command) -> std::process::Output {
    spawn_without_user_namespaces(inner, None).wait_with_output().expect("the inner command ends")
}

/// [`without_user_namespaces`], started: the process (whose pid becomes the inner command's,
/// each step `exec`s the next) is moved into the cgroup whose directory is `cgroup` first.
fn spawn_without_user_namespaces(inner: &Command, cgroup: Option<&Path>) -> std::process::Child {
    use std::io::Write as _;
    let mut outer = Command::new("unshare");
    // The shell was started before its ids were mapped, so without capabilities: once they are,
    // it starts itself again as the namespace's root, which may set the namespace's limits.
    let limited = "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"";
    outer.args(["--user", "--", "sh", "-c", "read go && exec sh -c \"$0\" sh \"$@\"", limited]);
    outer.arg(inner.get_program()).args(inner.get_args());
    for (key, value) in inner.get_envs() {
        match value {
            Some(value) => outer.env(key, value),
            None => outer.env_remove(key),
        };
    }
    if let Some(dir) = inner.get_current_dir() {
        outer.current_dir(dir);
    }
    let mut child = outer.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("unshare");
    let ours = std::fs::read_link("/proc/self/ns/user").expect("own user namespace");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_link(format!("/proc/{}/ns/user", child.id())).is_ok_and(|ns| ns == ours) {
        assert!(Instant::now() < deadline, "unshare --user never made its namespace");
        std::thread::sleep(Duration::from_millis(5));
    }
    for map in ["uid_map", "gid_map"] {
        std::fs::write(format!("/proc/{}/{map}", child.id()), "0 0 65536\n").expect("map the ids to themselves");
    }
    if let Some(cgroup) = cgroup {
        std::fs::write(cgroup.join("cgroup.procs"), child.id().to_string()).expect("move into the delegated cgroup");
    }
    child.stdin.take().expect("stdin").write_all(b"go\n").expect("let it go on");
    child
}

/// A cgroup v2 delegated to uid 65534 (`chown` of the directory and its `cgroup.procs`,
/// `cgroup.threads` and `cgroup.subtree_control`, as systemd delegates `user@.service`), under
/// this process's cgroup; removed with what was made in it on drop. `None` (after saying why)
/// where there is no writable cgroup v2 — a failure under `PROCLEASE_REQUIRE_NAMESPACES`.
struct Delegated(std::path::PathBuf);

impl Delegated {
    fn new(tag: &str) -> Option<Delegated> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok().and_then(|text| text.lines().find_map(|l| l.strip_prefix("0::").map(str::to_string)));
        let mount = std::fs::read_to_string("/proc/self/mountinfo").ok().and_then(|text| {
            text.lines().find_map(|line| {
                let (fields, rest) = line.split_once(" - ")?;
                let fields: Vec<&str> = fields.split(' ').collect();
                (rest.starts_with("cgroup2 ") && fields.get(3) == Some(&"/")).then(|| fields.get(4).map(|m| m.to_string()))?
            })
        });
        let (Some(own), Some(mount)) = (own, mount) else {
            assert!(std::env::var_os("PROCLEASE_REQUIRE_NAMESPACES").is_none(), "no cgroup v2 here and PROCLEASE_REQUIRE_NAMESPACES is set");
            println!("skipped: no cgroup v2 mount here");
            return None;
        };
        let dir = Path::new(&mount).join(own.trim_start_matches('/')).join(format!("proclease-test-{tag}"));
        if let Err(e) = std::fs::create_dir(&dir) {
            assert!(std::env::var_os("PROCLEASE_REQUIRE_NAMESPACES").is_none(), "cannot make a cgroup ({e}) and PROCLEASE_REQUIRE_NAMESPACES is set");
            println!("skipped: cannot make a cgroup under {} ({e})", dir.display());
            return None;
        }
        let nobody = (Some(rustix::process::Uid::from_raw(65534)), Some(rustix::process::Gid::from_raw(65534)));
        for file in ["", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"] {
            rustix::fs::chown(dir.join(file), nobody.0, nobody.1).expect("delegate the cgroup");
        }
        Some(Delegated(dir))
    }

    /// The cgroups made in it.
    fn children(&self) -> Vec<std::path::PathBuf> {
        std::fs::read_dir(&self.0).map_or(Vec::new(), |d| d.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()).collect())
    }
}

impl Drop for Delegated {
    /// Kills what is left in it (a failed test's tree) and removes it once empty (within 5 s).
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read_to_string(self.0.join("cgroup.events")).is_ok_and(|e| e.contains("populated 1")) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        for child in self.children() {
            let _ = std::fs::remove_dir(&child);
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// `proclease ARGS` as uid 65534 on the state home and workspace root of `root`.
fn as_nobody(root: &Path, args: &[&str]) -> std::process::Output {
    nobody(root, args).output().expect("setpriv proclease")
}

/// `setpriv … proclease --state-home <root>/state --workspace-root <root> ARGS` as uid 65534,
/// with HOME and the working directory `root` (more arguments may follow).
fn nobody(root: &Path, args: &[&str]) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", common::PROCLEASE, "--state-home"])
        .arg(root.join("state"))
        .arg("--workspace-root")
        .arg(root)
        .args(args)
        .env("HOME", root)
        .current_dir(root);
    command
}

/// Kills `daemon`, the last process of a tree, then runs `recover` as uid 65534 until `dir`
/// is removed (within 10 s).
fn removed_once_the_daemon_dies(root: &Path, dir: &Path, daemon: u64) {
    kill(daemon);
    wait_until_dead(daemon);
    let deadline = Instant::now() + Duration::from_secs(10);
    while dir.exists() {
        assert!(Instant::now() < deadline, "{} was never recovered once the tree was gone: {:?}", dir.display(), as_nobody(root, &["doctor"]));
        let _ = as_nobody(root, &["recover"]);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Where no PID namespace can be made but a cgroup v2 is delegated to the user (systemd's
/// `user@.service`, on a machine that disallows unprivileged user namespaces), the command's
/// tree runs in a cgroup of its own: a daemon that closed its descriptors keeps its directory
/// after the supervisor and the command were killed (input 1 without a box), and a finished
/// run stops what its command left running (input 4 without a box). A `--stage` run's daemon
/// keeps the stage the same way (input 3 without a box).
#[test]
fn without_a_box_a_delegated_cgroup_covers_the_tree() {
    // uid 65534 must be able to run it (not one under /root).
    let python = "/usr/bin/python3";
    if !Path::new(python).exists() {
        println!("skipped: no {python} that another user can run, to start a daemon");
        return;
    }
    let tag = unique_seconds();
    let Some((_dir, root, command)) = unprivileged(&format!("{python} -c '{DAEMON}' {tag} >/dev/null 2>&1; sleep {tag}")) else { return };
    let Some(delegated) = Delegated::new(&tag) else { return };
    let work = root.join("job");
    let mut supervisor = spawn_without_user_namespaces(&command, Some(&delegated.0));
    let deadline = Instant::now() + Duration::from_secs(30);
    while beats(&work) == 0 {
        if Instant::now() > deadline || supervisor.try_wait().is_ok_and(|status| status.is_some()) {
            // Whatever of the tree runs holds the output pipes: kill it first.
            for cgroup in delegated.children() {
                let _ = std::fs::write(cgroup.join("cgroup.kill"), "1");
            }
            let _ = supervisor.kill();
            panic!("the daemon never wrote: {:?}", supervisor.wait_with_output());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let daemon = daemon_in(&work, python, &tag);
    let sleeper = wait_for_process(&["sleep", &tag]);
    let cgroups = delegated.children();
    assert_eq!(cgroups.len(), 1, "the run made one cgroup in the delegated one: {cgroups:?}");
    let members = std::fs::read_to_string(cgroups[0].join("cgroup.procs")).expect("cgroup.procs");
    assert!(members.lines().any(|pid| pid == daemon.to_string()), "the daemon was born in the tree's cgroup: {members}");
    supervisor.kill().expect("SIGKILL the supervisor");
    kill(sleeper);
    wait_until_dead(sleeper);
    // The daemon's output goes to /dev/null: the pipes close with the sleeper.
    let said = supervisor.wait_with_output().expect("reap");
    assert!(stderr(&said).contains("containment=cgroup /"), "run -v names the cgroup: {said:?}");
    assert!(stderr(&said).contains("only (no PID namespace, because"), "and why there is no box: {said:?}");

    // The command and its supervisor are gone and the daemon closed its witness: only its
    // cgroup shows the tree alive.
    still_writes(&work);
    let doctor = as_nobody(&root, &["doctor"]);
    // The supervisor (the lease's owner) is judged first: a process it started still runs in
    // the cgroup recorded with its spawn witness.
    let why = common::stdout(&doctor);
    assert!(why.contains("a process of its cgroup still runs") || why.contains("its cgroup is populated"), "doctor says why the lease is active: {doctor:?}");
    let recovered = as_nobody(&root, &["recover", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&recovered.stdout).expect("recover --json");
    assert_eq!((doc["directoryLeases"]["recovered"].as_u64(), doc["directoryLeases"]["active"].as_u64()), (Some(0), Some(1)), "{recovered:?}");
    still_writes(&work);
    removed_once_the_daemon_dies(&root, &work, daemon);

    // A `--stage` run, whose lease names the supervisor (the command is never captured): with
    // the supervisor and the command killed, the daemon's populated cgroup (recorded with the
    // spawn witness) keeps the stage.
    let stage = root.join("stage");
    let tag = unique_seconds();
    let mut staged = nobody(&root, &["-v", "run", "--stage"]);
    staged.arg(&stage).arg("--output").arg(root.join("published")).args(["--", "sh", "-c", &format!("{python} -c '{DAEMON}' {tag} >/dev/null 2>&1; sleep {tag}")]);
    let mut supervisor = spawn_without_user_namespaces(&staged, Some(&delegated.0));
    let daemon = daemon_in(&stage, python, &tag);
    let sleeper = wait_for_process(&["sleep", &tag]);
    supervisor.kill().expect("SIGKILL the supervisor");
    kill(sleeper);
    wait_until_dead(sleeper);
    let _ = supervisor.wait_with_output();
    still_writes(&stage);
    let recovered = as_nobody(&root, &["recover", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&recovered.stdout).expect("recover --json");
    assert_eq!(doc["directoryLeases"]["recovered"].as_u64(), Some(0), "the stage is kept while the daemon runs: {recovered:?}");
    still_writes(&stage);
    removed_once_the_daemon_dies(&root, &stage, daemon);

    // A finished run: what its command left running is stopped before the lease is released,
    // and its cgroup removed (with the killed supervisors', now empty).
    let tag = unique_seconds();
    let Some((_dir, root, command)) = unprivileged(&format!("sleep {tag} & echo started")) else { return };
    let run = spawn_without_user_namespaces(&command, Some(&delegated.0)).wait_with_output().expect("run");
    assert!(run.status.success(), "{run:?}");
    assert!(stderr(&run).contains("stopped 1 process the command left running"), "{run:?}");
    assert!(processes_running(&["sleep", &tag]).is_empty(), "no straggler after run returned");
    assert!(delegated.children().is_empty(), "every cgroup of the runs is removed: {:?}", delegated.children());
    drop(root);
}

/// Where the kernel allows no user namespace, an unprivileged run cannot have a box: it says so
/// and why (`run -v`, `doctor`), runs its command uncontained as before the box, and
/// `--containment required` refuses before anything is leased or created.
#[test]
fn an_unprivileged_run_without_user_namespaces_says_why_it_has_no_box() {
    let Some((_dir, root, command)) = unprivileged("echo $$ > pid.txt") else { return };
    let run = without_user_namespaces(&command);
    assert!(run.status.success(), "the command ran uncontained: {run:?}");
    let said = stderr(&run);
    assert!(said.contains("containment=none, because"), "run -v says why there is no box: {said}");
    assert!(said.contains("user namespace"), "names the user namespace that was refused: {said}");
    let pid: u32 = std::fs::read_to_string(root.join("job/pid.txt")).expect("the command ran").trim().parse().expect("a pid");
    assert_ne!(pid, 2, "not pid 2 of a box");

    // The same run with `--containment required` (an option of `run`, before its command).
    let args: Vec<String> = command.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    let at = args.iter().position(|a| a == "--workdir").expect("--workdir");
    let mut required = Command::new(command.get_program());
    required.args(&args[..at]).args(["--containment", "required"]);
    required.arg("--workdir").arg(root.join("refused")).args(["--", "sh", "-c", "echo ran > ran.txt"]);
    required.env("HOME", &root).current_dir(&root);
    let refused = without_user_namespaces(&required);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(stderr(&refused).contains("cannot be contained"), "{refused:?}");
    assert!(!root.join("refused").exists(), "nothing was created");

    let mut doctor = Command::new(command.get_program());
    doctor.args(["--reuid", "65534", "--regid", "65534", "--clear-groups", common::PROCLEASE, "--state-home"]).arg(root.join("state")).arg("doctor");
    doctor.env("HOME", &root).current_dir(&root);
    let report = without_user_namespaces(&doctor);
    assert!(report.status.success(), "{report:?}");
    assert!(common::stdout(&report).contains("containment: none, because"), "doctor says the machine gives no box: {report:?}");
}

/// The kill stress (`bench/containment-stress.sh` runs it with `PROCLEASE_CONTAINMENT_KILLS=1000`;
/// the suite runs 12): SIGKILL of the supervisor at a random instant of a run whose command
/// starts a tree of five processes — a daemon that double-forks, calls `setsid` and closes its
/// descriptors, a `setsid` sleep, a command that changed uid with `setpriv`, a grandchild, and
/// the command's own sleep — then `recover`. It must never remove the directory while any
/// process of the tree runs; once the tree is killed (SIGKILL to its init), it recovers it.
#[test]
fn kill_stress_short_form() {
    let Some(python) = python() else {
        println!("skipped: no python3 to start a daemon");
        return;
    };
    if !boxes() || !rustix::process::geteuid().is_root() {
        println!("skipped: the stress tree changes uid with setpriv (root)");
        return;
    }
    let kills: u64 = std::env::var("PROCLEASE_CONTAINMENT_KILLS").ok().and_then(|n| n.parse().ok()).unwrap_or(12);
    let s = sandbox();
    let mut seed = std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15;
    let mut random = move |bound: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % bound
    };
    let (mut kept_live, mut recovered_dead, mut never_started) = (0, 0, 0);
    for trial in 0..kills {
        let work = s.root.join(format!("jobs/{trial}"));
        let tag = unique_seconds();
        let script = format!(
            "{python} -c '{DAEMON}' {tag}; setsid sleep {tag}1 & setpriv --reuid 65534 --regid 65534 --clear-groups sleep {tag}2 & sh -c 'sleep {tag}3; true' & sleep {tag}4"
        );
        let tree: Vec<Vec<String>> =
            std::iter::once(vec![python.to_string(), "-c".into(), DAEMON.into(), tag.clone()]).chain((1..=4).map(|n| vec!["sleep".to_string(), format!("{tag}{n}")])).collect();
        let running = || -> Vec<u64> { tree.iter().flat_map(|argv| processes_running(&argv.iter().map(String::as_str).collect::<Vec<_>>())).collect() };
        let mut supervisor =
            s.command(&["run", "--workdir", work.to_str().expect("utf-8"), "--", "sh", "-c", &script]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
        std::thread::sleep(Duration::from_millis(random(400)));
        supervisor.kill().expect("SIGKILL the supervisor");
        supervisor.wait().expect("reap");
        // The tree may still be starting: let it settle, so that what runs is what recover sees.
        std::thread::sleep(Duration::from_millis(300));
        let before = running();
        let (recovered, _) = recover(&s);
        let after = running();
        if recovered == 1 {
            assert!(before.is_empty() && after.is_empty(), "trial {trial}: the directory was removed while {after:?} of its tree ran");
            recovered_dead += 1;
            continue;
        }
        if !work.exists() {
            // Killed before the directory was made: nothing of the tree ever ran.
            assert!(before.is_empty() && after.is_empty(), "trial {trial}: {after:?} runs without its directory");
            never_started += 1;
            continue;
        }
        kept_live += 1;
        // Kill the tree at once: SIGKILL to its init (the parent of the re-parented daemon, or of
        // anything left), then recover.
        for pid in &after {
            let Some(init) = parent(*pid) else { continue };
            if std::fs::read_to_string(format!("/proc/{init}/comm")).is_ok_and(|c| c.trim() == "proclease-init") {
                kill(init);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !running().is_empty() {
            let left: Vec<String> = running().iter().map(|p| format!("{p} (parent {:?})", parent(*p))).collect();
            assert!(Instant::now() < deadline, "trial {trial}: the tree did not die with its init: {left:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while work.exists() {
            recover(&s);
            assert!(Instant::now() < deadline, "trial {trial}: never recovered once its tree was gone");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    println!(
        "{kills} kills: {kept_live} directories kept while their tree ran (then recovered), {recovered_dead} recovered with no process left, \
         {never_started} killed before the directory was made, 0 removed under a live process"
    );
}

/// A program that counts the SIGINTs it gets in one second, then prints `INT: n`.
const COUNT_INTS: &str = r#"
import signal, time
n = 0
def count(signum, frame):
    global n
    n += 1
signal.signal(signal.SIGINT, count)
print("ready", flush=True)
end = time.monotonic() + 1.5
while time.monotonic() < end:
    time.sleep(0.05)
print("INT: %d" % n, flush=True)
"#;

/// Runs argv on a new pseudo-terminal as its foreground job, types Ctrl-C once the program
/// printed `ready`, and returns everything it printed.
const CTRL_C: &str = r#"
import os, pty, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
out = b""
while b"ready" not in out:
    out += os.read(fd, 1024)
time.sleep(0.2)
os.write(fd, b"\x03")
while True:
    try:
        chunk = os.read(fd, 1024)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
"#;

/// One Ctrl-C on a terminal reaches the command once: the terminal sends it to the whole
/// foreground process group, and neither the supervisor nor the init sends it again.
#[test]
fn a_terminal_ctrl_c_reaches_the_command_once() {
    let Some(python) = python() else {
        println!("skipped: no python3 for a pseudo-terminal");
        return;
    };
    if !boxes() {
        return;
    }
    let s = sandbox();
    let work = s.root.join("jobs/tty");
    let mut argv = vec![python.to_string(), "-c".into(), CTRL_C.into(), common::PROCLEASE.into()];
    argv.extend(s.global());
    argv.extend(["run".into(), "--workdir".into(), work.display().to_string(), "--".into(), python.into(), "-c".into(), COUNT_INTS.into()]);
    let out = Command::new(&argv[0]).args(&argv[1..]).output().expect("pty driver");
    let text = common::stdout(&out);
    assert!(text.contains("INT: 1"), "one Ctrl-C, one SIGINT: {text} {out:?}");
}

/// The command's processes do not hold the tree's witness (its init alone does): none of them
/// can release it for the others (`flock -u` on an inherited descriptor would).
#[test]
fn the_command_does_not_hold_the_witness() {
    if !boxes() {
        return;
    }
    let s = sandbox();
    let work = s.root.join("jobs/fds");
    let run = s.run(&["run", "--workdir", work.to_str().expect("utf-8"), "--", "sh", "-c", "ls -l /proc/$$/fd"]);
    assert!(run.status.success(), "{run:?}");
    let fds = common::stdout(&run);
    assert!(!fds.contains("/.proclease/witnesses/"), "the command holds no witness: {fds}");
    let none = s.run(&["run", "--containment", "none", "--workdir", work.join("n").to_str().expect("utf-8"), "--", "sh", "-c", "ls -l /proc/$$/fd"]);
    assert!(common::stdout(&none).contains("/.proclease/witnesses/"), "uncontained, the command holds it (the check can tell): {none:?}");
}

/// A signal to the supervisor once the command exited stops what it left running at once,
/// also under `--stragglers wait`, and the run returns.
#[test]
fn a_signal_while_waiting_for_stragglers_stops_them() {
    if !boxes() {
        return;
    }
    let s = sandbox();
    let work = s.root.join("jobs/interrupt");
    let tag = unique_seconds();
    let mut supervisor = s
        .command(&["run", "--stragglers", "wait", "--workdir", work.to_str().expect("utf-8"), "--", "sh", "-c", &format!("setsid -f sleep {tag}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let sleep = wait_for_process(&["sleep", &tag]);
    // The command (sh) has exited once the sleep was re-parented to the init.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !parent(sleep).is_some_and(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "proclease-init")) {
        assert!(Instant::now() < deadline, "the command never exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    let pid = rustix::process::Pid::from_raw(supervisor.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
    let status = supervisor.wait().expect("wait");
    assert!(status.success(), "the run returns the command's status: {status:?}");
    assert!(common::state_of(sleep).is_none(), "what the command left running was stopped before the run returned");
    assert_eq!(recover(&s), (0, 0), "and the lease was released");
}

/// A run interrupted while its command runs says so in its exit status, even when the command
/// catches the signal and exits 0 (issue #40 case 6): 128+N, as `su` does.
#[test]
fn an_interrupted_run_exits_128_plus_the_signal_even_when_its_command_exits_0() {
    let s = sandbox();
    let work = s.root.join("jobs/graceful");
    let started = work.join("started");
    let script = "trap 'echo stopped > stopped; exit 0' TERM; echo yes > started; while :; do sleep 0.05; done";
    let supervisor =
        s.command(&["run", "--workdir", work.to_str().expect("utf-8"), "--", "sh", "-c", script]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !started.is_file() {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = rustix::process::Pid::from_raw(supervisor.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    let out = supervisor.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(143), "{out:?}");
    assert!(stderr(&out).contains("the run was interrupted by signal 15; the command exited 0 all the same"), "{}", stderr(&out));
    assert!(work.join("stopped").is_file(), "the command got the signal and ended on its own terms");
}

/// After the supervisor was killed and the command exited, `kill <CHILD>` (SIGTERM to the box's
/// init, as doctor shows it) stops what the command left running, and the lease becomes
/// recoverable.
#[test]
fn sigterm_to_an_orphaned_box_stops_it() {
    if !boxes() {
        return;
    }
    let s = sandbox();
    let work = s.root.join("jobs/orphan");
    let tag = unique_seconds();
    let script = format!("setsid -f sleep {tag}; sleep 0.5; true");
    let mut supervisor =
        s.command(&["run", "--workdir", work.to_str().expect("utf-8"), "--", "sh", "-c", &script]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
    let sleep = wait_for_process(&["sleep", &tag]);
    let init = s.wait_for_phase(&work, "running")["childPid"].as_u64().expect("the init is recorded");
    supervisor.kill().expect("SIGKILL the supervisor");
    supervisor.wait().expect("reap");
    // The command (sh) exits after 0.5 s; the sleep runs on in the box.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_running(&["sh", "-c", &script]).is_empty() {
        assert!(Instant::now() < deadline, "the command never exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(parent(sleep), Some(init));
    assert_eq!(recover(&s), (0, 1), "the box still runs");
    rustix::process::kill_process(rustix::process::Pid::from_raw(init as i32).expect("pid"), rustix::process::Signal::TERM).expect("SIGTERM");
    wait_until_dead(sleep);
    recovered_once_gone(&s, "the box stopped");
}

/// Through a user namespace the recorded child is a relay, the init's parent: if the relay is
/// killed, the box dies with it, and the run does not release its lease while anything of the
/// tree runs.
#[test]
fn a_killed_relay_takes_its_box_along() {
    let tag = unique_seconds();
    let Some((_dir, root, mut command)) = unprivileged(&format!("setsid -f sleep {tag}; sleep 30")) else { return };
    let mut supervisor = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("setpriv");
    let sleep = wait_for_process(&["sleep", &tag]);
    // The relay is the supervisor's child named proclease-relay.
    let deadline = Instant::now() + Duration::from_secs(10);
    let relay = loop {
        let relays: Vec<u64> = std::fs::read_dir("/proc")
            .expect("/proc")
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u64>().ok())
            .filter(|p| parent(*p) == Some(u64::from(supervisor.id())))
            .filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "proclease-relay"))
            .collect();
        if let [relay] = relays[..] {
            break relay;
        }
        assert!(Instant::now() < deadline, "no relay found");
        std::thread::sleep(Duration::from_millis(20));
    };
    kill(relay);
    let status = supervisor.wait().expect("wait");
    assert!(common::state_of(sleep).is_none(), "the box died with its relay before the run returned ({status:?})");
    assert!(!root.join("job").join("beat").exists());
}

/// A run with neither a box nor a cgroup (`--containment none`) is never said to have ended
/// "every process it started" (issue #40 case 6): its witness covers only the processes that
/// keep it. `doctor` says the run is uncontained while it runs, and once its supervisor and
/// command were killed, that only what kept the witness is proven gone; `recover` decides as
/// before (`docs/deviations.md` 25).
#[test]
fn an_uncontained_run_says_so_and_never_claims_its_whole_tree_gone() {
    let s = sandbox();
    let work = s.root.join("jobs/uncontained");
    let tag = unique_seconds();
    let mut supervisor = s
        .command(&["run", "--containment", "none", "--workdir", work.to_str().expect("utf-8"), "--", "sleep", &tag])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let command = wait_for_process(&["sleep", &tag]);
    s.wait_for_phase(&work, "running");
    let live = common::stdout(&s.run(&["doctor"]));
    assert!(live.contains("; uncontained (no box, no cgroup): a process it started that closes its witness cannot be seen"), "{live}");
    supervisor.kill().expect("SIGKILL the supervisor");
    supervisor.wait().expect("reap");
    kill(command);
    wait_until_dead(command);
    let dead = common::stdout(&s.run(&["doctor"]));
    assert!(
        dead.contains(
            "uncontained (no box, no cgroup): every process it started that kept its witness is gone (their witness locks are free), but one that closed it cannot be seen"
        ),
        "{dead}"
    );
    assert!(!dead.contains("every process it started is gone"), "{dead}");
    assert_eq!(recover(&s), (1, 0), "decided as before: the recorded processes are gone");
    // A boxed run killed the same way is wholly gone, and says so.
    let boxed = s.root.join("jobs/boxed");
    if boxes() {
        let mut supervisor =
            s.command(&["run", "--workdir", boxed.to_str().expect("utf-8"), "--", "sleep", &tag]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
        s.wait_for_phase(&boxed, "running");
        supervisor.kill().expect("SIGKILL the supervisor");
        supervisor.wait().expect("reap");
        for pid in processes_running(&["sleep", &tag]) {
            kill(pid);
            wait_until_dead(pid);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = common::stdout(&s.run(&["doctor"]));
            if text.contains("; every process it started is gone (their witness locks are free)") {
                assert!(!text.contains("uncontained"), "{text}");
                break;
            }
            assert!(Instant::now() < deadline, "{text}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
