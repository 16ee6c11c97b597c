"""The Python host's `run` on real processes and directories: what it refuses before anything
is leased (the native binary's checks: a recovered directory is deleted with all it holds), a
signal before the command starts, and what the command leaves running."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest


def command() -> List[str]:
    script = Path(sys.executable).parent / "proclease"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "proclease.cli"]


class Place:
    def __init__(self, root: Path) -> None:
        self.dir = root
        self.home = root / "state"
        self.ws = root / "ws"
        self.ws.mkdir(mode=0o700)

    def run(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run([*command(), "--state-home", str(self.home), "--workspace-root", str(self.dir), *args], capture_output=True, text=True, timeout=120, **kw)

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([*command(), "--state-home", str(self.home), "--workspace-root", str(self.dir), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def leases(self) -> List[Path]:
        collection = self.home / "recovery" / "beeper-message-like-me-directory-leases"
        return sorted(collection.iterdir()) if collection.is_dir() else []

    def await_lease(self, phase: str, seconds: float = 30) -> dict:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for path in self.leases():
                try:
                    claim = json.loads(path.read_text())
                except (OSError, ValueError):
                    continue
                if claim.get("phase") == phase:
                    return claim
            time.sleep(0.02)
        raise AssertionError(f"no {phase} lease within {seconds} s")


@pytest.fixture
def place() -> Iterator[Place]:
    root = Path(tempfile.mkdtemp(prefix="proclease-run-"))
    os.chmod(root, 0o700)
    yield Place(root)
    shutil.rmtree(root, ignore_errors=True)


def test_a_directory_with_content_is_refused_and_kept(place: Place) -> None:
    job = place.ws / "job"
    job.mkdir(mode=0o700)
    (job / "precious").write_text("x")
    out = place.run("run", "--workdir", str(job), "--", "true")
    assert out.returncode == 1
    assert f"{job}: refused: not empty." in out.stderr
    assert (job / "precious").read_text() == "x"
    assert place.leases() == []


def test_a_directory_another_run_holds_is_refused(place: Place) -> None:
    job = place.ws / "job"
    first = place.start("run", "--workdir", str(job), "--", "sleep", "30")
    try:
        claim = place.await_lease("running")
        second = place.run("run", "--workdir", str(job), "--", "true")
        assert second.returncode == 1, second.stderr
        assert f"{job}: refused: already leased by pid {first.pid} (lease {claim['id']}): its owner is alive" in second.stderr
        assert len(place.leases()) == 1
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)
    assert place.leases() == []


def test_the_state_home_and_what_holds_it_are_refused(place: Place) -> None:
    for target in (place.home, place.home / "recovery", place.dir):
        out = place.run("run", "--workdir", str(target), "--", "true")
        assert out.returncode == 1, (target, out.stderr)
        assert "refused: a leased directory may be removed by `recover`, so it can be neither the state home" in out.stderr
    assert place.leases() == []


def test_a_symbolic_link_is_refused(place: Place) -> None:
    (place.ws / "real").mkdir(mode=0o700)
    (place.ws / "link").symlink_to(place.ws / "real")
    out = place.run("run", "--workdir", str(place.ws / "link"), "--", "true")
    assert out.returncode == 1
    assert "refused: it exists and is not a directory" in out.stderr
    assert place.leases() == []


def test_commands_that_end_normally_leave_no_witness_behind(place: Place) -> None:
    # As the native CLI: each `recover` used to leave its witness, one file per call.
    witnesses = place.home / ".proclease" / "witnesses"
    for args in (["doctor"], ["recover"], ["recover", "--dry-run"], ["run", "--workdir", str(place.ws / "job"), "--", "true"]) * 2:
        done = place.run(*args)
        assert done.returncode == 0, (args, done.stderr)
        left = [p for boot in witnesses.iterdir() for p in boot.iterdir()] if witnesses.is_dir() else []
        assert left == [], (args, left)


def test_a_signal_before_the_command_starts_leaves_nothing(place: Place) -> None:
    # Stopped (SIGSTOP) right after it leased: the SIGTERM is pending when it resumes.
    job = place.ws / "job"
    supervisor = place.start("run", "--workdir", str(job), "--", "sleep", "30")
    deadline = time.monotonic() + 30
    while not place.leases() and time.monotonic() < deadline:
        time.sleep(0.001)
    supervisor.send_signal(signal.SIGSTOP)
    supervisor.send_signal(signal.SIGTERM)
    supervisor.send_signal(signal.SIGCONT)
    _, err = supervisor.communicate(timeout=30)
    assert supervisor.returncode in (0, 143), err
    if supervisor.returncode == 143 and "before the command started" in err:
        assert not job.exists(), "the directory it created is removed"
    assert place.leases() == [], "nothing is left behind either way"


def test_a_signal_before_the_command_starts_names_what_could_not_be_released(place: Place, monkeypatch) -> None:
    # The signal's instant and a release that fails (a lock held for ever, a state home that
    # stopped taking writes) are what a test cannot make a real run meet on demand: the signal
    # comes as the witness is prepared, and the lease's release is made to fail. The message must
    # name the lease left behind, never say "nothing is left behind".
    from proclease import Host
    from proclease._binding import ComponentError
    from proclease.host import DirectoryLease
    from proclease.process_identity import ProcessIdentity
    from proclease.supervisor import Interrupted
    from proclease.supervisor import run as supervise

    prepare = ProcessIdentity.prepare_spawn

    def signalled(self):
        os.kill(os.getpid(), signal.SIGTERM)
        return prepare(self)

    def refused(self):
        raise ComponentError("storage", "waited 10000 ms for the lock")

    monkeypatch.setattr(ProcessIdentity, "prepare_spawn", signalled)
    monkeypatch.setattr(DirectoryLease, "release", refused)
    host = Host(state_home=place.home, workspace_roots=[place.dir])
    job = place.ws / "job"
    with pytest.raises(Interrupted) as info:
        supervise(host, ["touch", "ran"], str(job))
    said = str(info.value)
    assert info.value.signal == signal.SIGTERM
    assert said.startswith("interrupted by signal 15 before the command started; nothing was started, but not all it held could be released in time: "), said
    assert f"the lease of {job} (" in said and "`proclease recover` removes it once this process has exited" in said, said
    assert "nothing is left behind" not in said
    assert not (job / "ran").exists(), "the command never ran"
    assert len(place.leases()) == 1, "the lease it names is there"


def _admission_lock_held(place: Place) -> subprocess.Popen:
    """The export admission collection's kernel lock held by flock(1) (as a stopped or stuck
    proclease would hold it): the lock every `run --exclusive` waits for first."""
    from proclease.process_identity import identity_digest

    warm = place.run("run", "--exclusive", "--workdir", str(place.ws / "warm"), "--", "true")
    assert warm.returncode == 0, warm.stderr
    lock = place.home / ".proclease" / "locks" / f"{identity_digest('proclease-collection-lock', 'recovery/beeper-message-like-me-export-admission')}.lock"
    assert lock.is_file(), sorted(os.listdir(lock.parent))
    return _held_by_flock(lock)


def _held_by_flock(lock: Path) -> subprocess.Popen:
    """`lock` held by flock(1) in a session of its own (kill its group to free it)."""
    holder = subprocess.Popen(["flock", "-o", "-x", str(lock), "-c", "echo locked; exec sleep 300"], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    return holder


def _warm_with_strace(place: Place, why: str) -> None:
    """strace there (else skipped, or failed where CI requires it: `PROCLEASE_REQUIRE_NAMESPACES`),
    and the state home made by a first run, so that what is staged next meets only the run."""
    if shutil.which("strace") is None:
        if os.environ.get("PROCLEASE_REQUIRE_NAMESPACES"):
            pytest.fail("strace is required (PROCLEASE_REQUIRE_NAMESPACES)")
        pytest.skip(f"needs strace to {why}")
    warm = place.run("run", "--workdir", str(place.ws / "warm"), "--", "true")
    assert warm.returncode == 0, warm.stderr


def _started_waiting(place: Place, *args: str) -> Tuple[subprocess.Popen, List[str]]:
    """`args` started, once it says whom it waits for (after 1 s of a wait), and what it said."""
    run = place.start(*args)
    assert run.stderr is not None
    said: List[str] = []
    while not any(line.startswith("proclease: waiting for pid ") for line in said):
        line = run.stderr.readline()
        assert line, ("ended before it waited", said)
        said.append(line)
    return run, said


def test_ctrl_c_ends_a_wait_for_a_held_lock_before_the_command_within_the_grace(place: Place) -> None:
    """A `run` waiting for a lock another process keeps (here behind a ten-minute bound) ends
    at Ctrl-C as the native binary's does: the wait is cut within its 500 ms grace, nothing
    ran, nothing is left, exit 130 — not after the whole bound, and not as a lock failure."""
    holder = _admission_lock_held(place)
    try:
        job = place.ws / "job"
        run, said = _started_waiting(place, "run", "--lock-timeout", "10m", "--exclusive", "--workdir", str(job), "--", "touch", "ran")
        run.send_signal(signal.SIGINT)
        _, rest = run.communicate(timeout=60)  # the bound is 10 minutes: ending at all is the cut
        said.append(rest)
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    assert run.returncode == 130, said
    assert "".join(said).endswith("proclease: interrupted by signal 2 before the command started; nothing was started and nothing is left behind\n"), said
    # It says how long it really waited, not the bound it was cut short of.
    waited = [line for line in "".join(said).splitlines() if line.startswith("proclease: waited ")]
    assert len(waited) == 1 and int(waited[0].split()[2]) < 600_000, said
    assert not job.exists(), "the directory it would have created is not there"
    assert place.leases() == []
    again = place.run("run", "--exclusive", "--workdir", str(job), "--", "touch", "ran")
    assert again.returncode == 0 and (job / "ran").exists(), again.stderr


def test_ctrl_c_that_cannot_release_the_admission_in_the_grace_names_it_and_exits_130(place: Place) -> None:
    """Ctrl-C while the run (holding the admission) waits for the directory leases' lock, with
    the admission's own lock held too by then: the undo cannot release the admission within the
    grace, so the message names it — and what becomes of it — and the exit is the signal's."""
    from proclease.process_identity import identity_digest

    holder = _admission_lock_held(place)
    os.killpg(holder.pid, signal.SIGKILL)
    holder.wait()
    locks = place.home / ".proclease" / "locks"
    leases_lock = locks / f"{identity_digest('proclease-collection-lock', 'recovery/beeper-message-like-me-directory-leases')}.lock"
    admission_lock = locks / f"{identity_digest('proclease-collection-lock', 'recovery/beeper-message-like-me-export-admission')}.lock"
    holders = [_held_by_flock(leases_lock)]
    try:
        job = place.ws / "job"
        run, said = _started_waiting(place, "run", "--lock-timeout", "10m", "--exclusive", "--workdir", str(job), "--", "touch", "ran")
        holders.append(_held_by_flock(admission_lock))
        run.send_signal(signal.SIGINT)
        _, rest = run.communicate(timeout=60)
        said.append(rest)
    finally:
        for each in holders:
            os.killpg(each.pid, signal.SIGKILL)
            each.wait()
    last = "".join(said).splitlines()[-1]
    assert run.returncode == 130, said
    assert last.startswith("proclease: interrupted by signal 2 before the command started; nothing was started, but not all it held could be released in time: the export admission ("), said
    assert last.endswith("): the next `run --exclusive` takes it over once this process has exited"), said
    assert not (job / "ran").exists()
    # As said: the next exclusive run takes the dead run's admission over.
    again = place.run("run", "--exclusive", "--workdir", str(job), "--", "touch", "ran")
    assert again.returncode == 0 and (job / "ran").exists(), again.stderr


def test_a_signal_that_cuts_a_lease_creation_short_names_the_creation_intent_it_leaves(place: Place) -> None:
    """As the native test of the same name: the workdir's `mkdirat` delayed by strace, the
    creation intents' lock taken meanwhile, then SIGINT: the undo cannot remove the intent
    within the grace, and the message names it (the artifact's `store-advice`) instead of
    saying "nothing is left behind"; `recover` then finishes it."""
    from proclease.process_identity import identity_digest

    _warm_with_strace(place, "delay the workdir's mkdirat")
    intents = place.home / "recovery" / "proclease-directory-creations"
    lock = place.home / ".proclease" / "locks" / f"{identity_digest('proclease-collection-lock', 'recovery/proclease-directory-creations')}.lock"
    assert lock.is_file()
    job = place.ws / "job"
    traced = subprocess.Popen(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-P", str(place.ws), "-e", "trace=mkdir,mkdirat", "-e", "inject=mkdir,mkdirat:delay_enter=5000000", "--",
         *command(), "--state-home", str(place.home), "--workspace-root", str(place.dir), "run", "--workdir", str(job), "--", "touch", "ran"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    holder = None
    try:
        deadline = time.monotonic() + 60
        while not any(name.endswith(".json") for name in (os.listdir(intents) if intents.is_dir() else [])):
            assert time.monotonic() < deadline and traced.poll() is None, "the run never recorded its creation intent"
            time.sleep(0.01)
        holder = _held_by_flock(lock)
        with open(f"/proc/{traced.pid}/task/{traced.pid}/children") as children:
            run_pid = int(children.read().split()[0])
        os.kill(run_pid, signal.SIGINT)
        _, said = traced.communicate(timeout=60)
    finally:
        if holder is not None:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait()
        if traced.poll() is None:
            traced.kill()
    assert traced.returncode == 130, said
    left = os.listdir(intents)
    assert len(left) == 1, left
    assert said.endswith(
        "proclease: interrupted by signal 2 before the command started; nothing was started, but not all it held could be released in time: "
        f"the creation intent recovery/proclease-directory-creations/{left[0]} of {job}: `proclease recover` finishes it once this process has exited\n"
    ), said
    assert not (job / "ran").exists()
    recover = place.run("recover")
    assert recover.returncode == 0, recover.stderr
    assert os.listdir(intents) == [] and not job.exists(), "recover finished it"


def test_a_signal_while_the_command_is_being_started_is_the_command_s_and_cuts_no_later_wait(place: Place) -> None:
    """A Ctrl-C that arrives while the command is being started (its `execve` delayed by
    strace) goes to the command, as once it runs; the waits after it (recording it, settling,
    releasing the lease behind a lock held for a few seconds) keep their whole bound: the lease
    is released, not left with exit 6 as when the stop stayed in force."""
    from proclease.process_identity import identity_digest

    _warm_with_strace(place, "delay the command's execve")
    sleep = os.path.realpath(shutil.which("sleep") or "/bin/sleep")
    lock = place.home / ".proclease" / "locks" / f"{identity_digest('proclease-collection-lock', 'recovery/beeper-message-like-me-directory-leases')}.lock"
    traced = subprocess.Popen(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-P", sleep, "-e", "trace=execve", "-e", "inject=execve:delay_enter=3000000", "--",
         *command(), "--state-home", str(place.home), "--workspace-root", str(place.dir), "run", "--workdir", str(place.ws / "job"), "--", sleep, "5"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        place.await_lease("launching")
        time.sleep(0.5)  # in the delayed execve now (3 s)
        with open(f"/proc/{traced.pid}/task/{traced.pid}/children") as children:
            run_pid = int(children.read().split()[0])
        os.kill(run_pid, signal.SIGINT)
        # The lease collection's lock held for 4 s from then: past the execve's end, while the
        # run records `running`, settles and releases (each may wait the whole 10 s bound).
        held = subprocess.run(["flock", "-x", str(lock), "sleep", "4"], timeout=60)
        assert held.returncode == 0
        _, said = traced.communicate(timeout=60)
    finally:
        if traced.poll() is None:
            traced.kill()
    assert traced.returncode == 130, said
    assert place.leases() == [], said


def test_a_lock_held_past_lock_timeout_fails_with_status_5_naming_the_holder(place: Place) -> None:
    holder = _admission_lock_held(place)
    try:
        out = place.run("--lock-timeout", "300ms", "run", "--exclusive", "--workdir", str(place.ws / "job"), "--", "true")
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    assert out.returncode == 5, out.stderr
    last = out.stderr.splitlines()[-1]
    assert last.startswith("proclease: Beeper Message Like Me recovery: export admission could not be acquired after bounded contention: waited "), out.stderr
    assert f"held by pid {holder.pid} (flock, sleeping): continue a stopped holder" in last, out.stderr
    assert place.leases() == []


def test_recover_past_lock_timeout_exits_5_naming_the_holder_without_advising_a_skip(place: Place) -> None:
    """As the native `host/tests/waits.rs`: `recover` behind another recoverer's turn, or behind
    the lease collection's lock, exits 5 naming the holder — said once — and never advises
    `--skip-invalid`, which cannot help (the words are proclease-core's `recovery_advice`);
    the same for a `run` behind the lease-creation lock, and for `doctor`, which fails rather
    than show the held collection as invalid. Once the holder is gone, it recovers."""
    from proclease.process_identity import identity_digest

    warm = place.run("run", "--workdir", str(place.ws / "warm"), "--", "true")
    assert warm.returncode == 0, "the state home and its collections are made: " + warm.stderr
    locks = place.home / ".proclease" / "locks"
    collection = f"{identity_digest('proclease-collection-lock', 'recovery/beeper-message-like-me-directory-leases')}.lock"
    for lock, args, last_words in [
        ("directory-lease-recovery.lock", ["recover"], "proclease: waited "),
        (collection, ["recover"], "proclease: recovery stopped: Beeper Message Like Me recovery: directory lease recovery failed safely: waited "),
        (collection, ["recover", "--dry-run"], "proclease: recovery would stop: Beeper Message Like Me recovery: directory lease recovery failed safely: waited "),
        (collection, ["doctor"], "proclease: the survey could not read everything: waited "),
        ("directory-lease-creation.lock", ["run", "--workdir", str(place.ws / "job"), "--", "true"], "proclease: waited "),
    ]:
        (locks / lock).touch()
        holder = _held_by_flock(locks / lock)
        try:
            out = place.run("--lock-timeout", "300ms", *args)
        finally:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait()
        assert out.returncode == 5, (lock, args, out.stderr)
        lines = out.stderr.splitlines()
        assert lines[-1].startswith(last_words), (lock, args, out.stderr)
        assert f"{lock}, held by pid {holder.pid} (flock, sleeping): continue a stopped holder" in lines[-1], out.stderr
        assert "--skip-invalid" not in out.stderr, out.stderr
        assert len(lines) == len(set(lines)), ("said once", out.stderr)
    assert not (place.ws / "job").exists()
    done = place.run("recover")
    assert done.returncode == 0, done.stderr


def test_a_lock_whose_taker_exited_is_said_to_be_held_by_the_process_keeping_its_descriptor(place: Place) -> None:
    """`/proc/locks` names the process that took a `flock`; one taken by a child that exited
    (`exec 9>f; flock 9`, as a Node host takes every lock) is held by whoever keeps the open
    file, which `/proc/<pid>/fdinfo` shows: the wait names that process (through this host's
    `proc-pids` and `proc-fdinfos`), not the exited taker as `?, state unknown`."""
    warm = place.run("doctor")
    assert warm.returncode == 0, warm.stderr
    lock = place.home / ".proclease" / "locks" / "directory-lease-recovery.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(["sh", "-c", f"exec 9>'{lock}'; flock 9; echo held; exec sleep 300"], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        out = place.run("--lock-timeout", "300ms", "recover")
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    assert out.returncode == 5, out.stderr
    assert f"directory-lease-recovery.lock, held by pid {holder.pid} (sleep, sleeping)" in out.stderr, out.stderr


def test_a_command_that_cannot_start_is_named_as_every_host_names_it_and_leaves_nothing(place: Place) -> None:
    job = place.ws / "x" / "y"
    out = place.run("run", "--workdir", str(job), "--", "/nonexistent/program")
    assert out.returncode == 1, out.stderr
    # The native binary's and the Node host's words, from the component's `run-refusals`.
    assert out.stderr == "proclease: /nonexistent/program: cannot start the command: No such file or directory (os error 2)\n"
    assert not (place.ws / "x").exists(), "the directories it created are removed again"
    assert place.leases() == []
    # An empty program name is said as such, as every host says it (not `Permission denied`).
    out = place.run("run", "--workdir", str(job), "--", "")
    assert (out.returncode, out.stderr) == (1, "proclease: cannot start the command: its program name is empty\n")
    assert not (place.ws / "x").exists()


def test_what_the_command_leaves_running_is_stopped_before_the_lease_is_released(place: Place) -> None:
    job = place.ws / "job"
    # A background job that ignores SIGTERM and keeps the inherited witness.
    out = place.run("run", "--grace", "0.5", "--workdir", str(job), "--", "sh", "-c", "trap '' TERM; (trap '' TERM; sleep 300) & echo $! > bg.pid; exit 0")
    assert out.returncode == 0, out.stderr
    assert "stopped 1 process the command left running" in out.stderr
    pid = int((job / "bg.pid").read_text())
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] if Path(f"/proc/{pid}").exists() else "gone"
    assert state in ("gone", "Z"), "the straggler was killed"
    assert place.leases() == []


@pytest.mark.parametrize(
    "name, said",
    [
        ("witnesses", "a witness for the command cannot be taken: .proclease/witnesses"),
        ("runs", "cannot start the run journal: .proclease/runs: check"),
    ],
)
def test_a_state_home_whose_witnesses_or_journal_cannot_be_kept_starts_nothing(place: Place, name: str, said: str) -> None:
    # As the native `cli::a_run_refuses_a_state_home_whose_witnesses_or_journal_cannot_be_kept`:
    # a directory there but not private (0755 after a careless `chmod -R`) would leave the run
    # unprotected (nothing proves its processes alive; its end could not be recorded).
    first = place.run("run", "--workdir", str(place.ws / "first"), "--", "true")
    assert first.returncode == 0, first.stderr
    directory = place.home / ".proclease" / name
    os.chmod(directory, 0o755)
    job = place.ws / "job"
    out = place.run("run", "--workdir", str(job), "--", "touch", "ran")
    os.chmod(directory, 0o700)
    assert out.returncode != 0, out
    assert said in out.stderr, out.stderr
    assert "must be a directory owned by you with mode 0700" in out.stderr, out.stderr
    assert not job.exists(), "nothing was started or created"
    assert place.leases() == []
    again = place.run("run", "--workdir", str(job), "--", "touch", "ran")
    assert again.returncode == 0, again.stderr
    assert (job / "ran").exists()


def test_an_unusable_witness_directory_of_this_boot_keeps_a_live_background_process(place: Place) -> None:
    # As the native `recovery_cli::an_unusable_witness_directory_keeps_a_live_background_process_s_directory`:
    # this boot's witness directory replaced by a symbolic link was taken for "no witness", the
    # owner judged dead from /proc, and the directory of a process still working in it removed.
    job = place.ws / "job"
    marker = str(4000 + os.getpid() % 1000)
    supervisor = place.start("run", "--workdir", str(job), "--", "sh", "-c", f"echo data > keep.txt; sleep {marker} & sleep 1.5")
    try:
        place.await_lease("running")
        time.sleep(0.3)
        supervisor.kill()
        supervisor.wait()
        time.sleep(2)  # `sh` ends; its background `sleep` holds the witness
        witnesses = place.home / ".proclease" / "witnesses"
        boot = next(p for p in witnesses.iterdir() if p.is_dir())
        moved = place.home / "moved-boot"
        boot.rename(moved)
        boot.symlink_to(moved)
        try:
            out = place.run("recover")
        finally:
            boot.unlink()
            moved.rename(boot)
        assert out.returncode != 0, out
        assert "cannot be told" in out.stdout + out.stderr, out
        assert (job / "keep.txt").read_text() == "data\n"
        assert len(place.leases()) == 1
    finally:
        subprocess.run(["pkill", "-f", f"^sleep {marker}$"], check=False)


def test_when_not_even_the_journal_takes_a_write_a_marker_beside_the_directory_keeps_it(place: Place) -> None:
    # As the native `finished_runs::when_not_even_the_journal_takes_a_write_a_marker_beside_the_directory_keeps_it`:
    # the command makes the lease collection and its journal entry immutable, so neither the
    # release nor the journal's "finished" can be written. Before, the Python `run` said the
    # journal had recorded the finish, and a later `recover` removed the results.
    first = place.run("run", "--workdir", str(place.ws / "first"), "--", "true")
    assert first.returncode == 0, first.stderr
    collection = place.home / "recovery" / "beeper-message-like-me-directory-leases"
    runs = place.home / ".proclease" / "runs"
    probe = place.dir / "chattr-probe"
    probe.mkdir()
    if subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i does not work here")
    subprocess.run(["chattr", "-i", str(probe)], check=True)
    job = place.ws / "job"
    script = f"echo result > result.txt; chattr +i {collection} {runs}/*.run; sleep 0.2"
    try:
        out = place.run("run", "--workdir", str(job), "--", "sh", "-c", script)
    finally:
        subprocess.run(f"chattr -i {collection} {runs}/*.run", shell=True, check=False)
    assert out.returncode == 6, out
    # The lease record (a mutation claim the failed release left may sit beside it).
    (record,) = [path for path in place.leases() if path.suffix == ".json"]
    marker = place.ws / f".proclease-finished-{json.loads(record.read_text())['id']}"
    assert f"the finish is marked by {marker} beside it" in out.stderr, out.stderr
    assert "the run journal recorded that the command finished" not in out.stderr, out.stderr
    assert marker.is_dir()
    recovered = place.run("recover")
    assert recovered.returncode == 0, recovered
    assert (job / "result.txt").read_text() == "result\n", "the results stay"
    assert place.leases() == [], "the lease, and any claim its failed release left, are gone"
    assert not marker.exists(), "the marker goes with the claim"
