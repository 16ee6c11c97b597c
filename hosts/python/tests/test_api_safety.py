"""The library misused the way people misuse locks (#43 cases 1 and 2): an exception or a
`fork()` inside `with host.admission()` while a helper runs, and a directory lease never
released. Real processes, a real state home; a second `Host` (another instance, as another
program would be) is the other acquirer."""

from __future__ import annotations

import gc
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

from proclease import Admission, Error, HelperMayRun, Host


@pytest.fixture
def place() -> Iterator[Tuple[Path, Path]]:
    root = Path(tempfile.mkdtemp(prefix="proclease-api-"))
    os.chmod(root, 0o700)
    (root / "ws").mkdir(mode=0o700)
    try:
        yield root / "state", root / "ws"
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


def refused_by_the_holder(home: Path, ws: Path) -> bool:
    """Whether another program's acquire of the export admission is refused now."""
    other = Host(state_home=home, workspace_roots=[ws])
    try:
        with other.admission():
            return False
    except Error as error:
        assert error.code == "another-export-is-active", error
        return True


def sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"])


def end(helper: subprocess.Popen) -> None:
    helper.send_signal(signal.SIGKILL)
    helper.wait()


def test_an_exception_while_the_helper_runs_leaves_the_admission_held(place: Tuple[Path, Path]) -> None:
    home, ws = place
    host = Host(state_home=home, workspace_roots=[ws])
    helper = sleeper()
    try:
        with pytest.warns(RuntimeWarning, match=r"not released: its helper \(pid \d+\) is alive"):
            with pytest.raises(ValueError):
                with host.admission() as admission:
                    admission.begin_helper_launch()
                    admission.bind_helper(helper.pid)
                    raise ValueError("the export failed while its helper runs")
        assert refused_by_the_holder(home, ws), "a second export started beside the live helper"
        with pytest.raises(HelperMayRun):
            admission.release()
        assert refused_by_the_holder(home, ws)
    finally:
        end(helper)
    # A helper recorded by bind_helper has no witness: its death does not prove what it started
    # gone, so release still refuses until the caller settles it (it waited for the helper).
    with pytest.raises(HelperMayRun, match="not provably gone with all it started"):
        admission.release()
    admission.settle_helper()
    admission.release()
    assert not refused_by_the_holder(home, ws), "released once the helper is settled"


def release_once_gone(admission: Admission) -> None:
    """Releases `admission` once what its helper started is gone (the kernel lets go of a killed
    process's witness a moment after the kill): refused with `HelperMayRun` until then, for at
    most 10 s."""
    deadline = time.monotonic() + 10
    while True:
        try:
            admission.release()
            return
        except HelperMayRun:
            assert time.monotonic() < deadline, "never released once what the helper started was gone"
            time.sleep(0.05)


def test_a_helper_launched_under_a_witness_releases_once_it_and_its_children_are_gone(place: Tuple[Path, Path]) -> None:
    home, ws = place
    host = Host(state_home=home, workspace_roots=[ws])
    with host.admission() as admission:
        # The helper starts a child that outlives it and keeps the witness.
        helper = admission.launch_helper(["sh", "-c", "sleep 60 & echo $!"], stdout=subprocess.PIPE, text=True)
        grandchild = int(helper.stdout.readline())
        helper.wait()
        with pytest.raises(HelperMayRun):
            admission.release()
        os.kill(grandchild, signal.SIGKILL)
        release_once_gone(admission)
    assert not refused_by_the_holder(home, ws)


def test_a_helper_that_cannot_start_leaves_the_admission_releasable(place: Tuple[Path, Path]) -> None:
    home, ws = place
    host = Host(state_home=home, workspace_roots=[ws])
    with host.admission() as admission:
        with pytest.raises(ValueError):
            admission.launch_helper(["true", "a\0b"])
        with pytest.raises(Error) as missing:
            admission.launch_helper(["/nonexistent/helper"])
        assert missing.value.kind == "system" and isinstance(missing.value.__cause__, FileNotFoundError)
        assert admission.claim.phase == "parent-owned"
    assert not refused_by_the_holder(home, ws), "released"


def test_a_helper_launch_that_recorded_no_helper_is_not_released(place: Tuple[Path, Path]) -> None:
    home, ws = place
    host = Host(state_home=home, workspace_roots=[ws])
    with pytest.warns(RuntimeWarning, match="no helper was recorded"):
        with host.admission() as admission:
            admission.begin_helper_launch()
    assert refused_by_the_holder(home, ws), "a helper may run unrecorded"


def test_a_forked_child_leaving_the_with_block_keeps_the_parents_admission(place: Tuple[Path, Path]) -> None:
    home, ws = place
    host = Host(state_home=home, workspace_roots=[ws])
    with host.admission():
        pid = os.fork()
        if pid == 0:  # the child leaves the block too, then exits at once
            child = True
        else:
            child = False
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0
            assert refused_by_the_holder(home, ws), "the child released its parent's admission"
    if child:
        os._exit(0)
    assert not refused_by_the_holder(home, ws), "the parent released it"


def test_a_forgotten_directory_lease_is_released_when_collected_and_its_directory_kept(place: Tuple[Path, Path]) -> None:
    home, ws = place
    host = Host(state_home=home, workspace_roots=[ws])
    job = ws / "job"
    lease = host.take_directory_lease(job, create=True)
    (job / "result.txt").write_text("built")
    with pytest.warns(ResourceWarning, match="was never released: released now"):
        del lease
        gc.collect()
    assert list((home / "recovery" / "beeper-message-like-me-directory-leases").iterdir()) == []
    host.recover()
    assert (job / "result.txt").read_text() == "built", "recover deleted the results of a lease its process forgot"


def test_a_lease_forgotten_until_the_interpreter_exits_is_released_and_its_results_kept(place: Tuple[Path, Path]) -> None:
    home, ws = place
    job = ws / "job"
    script = textwrap.dedent(
        f"""
        from proclease import Host
        host = Host(state_home={str(home)!r}, workspace_roots=[{str(ws)!r}])
        lease = host.take_directory_lease({str(job)!r}, create=True)
        open({str(job / "result.txt")!r}, "w").write("built")
        """
    )
    done = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "was never released: released now" in done.stderr, done.stderr
    assert list((home / "recovery" / "beeper-message-like-me-directory-leases").iterdir()) == []
    Host(state_home=home, workspace_roots=[ws]).recover()
    assert (job / "result.txt").read_text() == "built"


def test_a_forgotten_lease_whose_command_may_run_is_left_for_recover(place: Tuple[Path, Path]) -> None:
    home, ws = place
    host = Host(state_home=home, workspace_roots=[ws])
    job = ws / "job"
    command = sleeper()
    try:
        lease = host.take_directory_lease(job, create=True)
        lease.update("launching")
        lease.update("running", command.pid)
        with pytest.warns(ResourceWarning, match="in phase running was never released: it is left"):
            del lease
            gc.collect()
        [claim] = (home / "recovery" / "beeper-message-like-me-directory-leases").iterdir()
        assert json.loads(claim.read_text())["phase"] == "running"
    finally:
        end(command)


def test_every_failure_is_a_proclease_error_with_its_cause(place: Tuple[Path, Path]) -> None:
    """#43 case 7: `except proclease.Error` (the README's) catches every failure the package
    raises — a lease rule's, a refusal before anything is leased, a lock held too long, a state
    home that cannot be used, a system call's — each with its kind, and its cause chained."""
    import fcntl

    from proclease import LockTimeout, Refused, StateHomeError

    home, ws = place
    host = Host(state_home=home, workspace_roots=[ws], lock_timeout=0.2)

    with pytest.raises(Error) as refused:
        host.take_directory_lease(home / "inside", create=True)
    assert isinstance(refused.value, Refused) and refused.value.kind == "refused", refused.value

    # Outside the granted roots: the workspace refuses to look, and the message names the path.
    with pytest.raises(Error) as failed:
        host.take_directory_lease(Path("/etc/passwd/below"), create=True)
    assert failed.value.kind == "storage" and failed.value.failure.kind == "refused", repr(failed.value)
    assert "/etc/passwd/below" in failed.value.message, failed.value.message

    lock = os.open(home / ".proclease" / "locks" / "directory-lease-creation.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        blocker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], pass_fds=(lock,))
    finally:
        os.close(lock)
    try:
        with pytest.raises(Error) as timed_out:
            host.take_directory_lease(ws / "job", create=True)
        assert isinstance(timed_out.value, LockTimeout) and timed_out.value.kind == "lock-timeout", timed_out.value
    finally:
        end(blocker)
    assert not (ws / "job").exists(), "nothing was created"

    with host.admission():
        with pytest.raises(Error) as active:
            with Host(state_home=home, workspace_roots=[ws]).admission():
                pass
        assert (active.value.kind, active.value.code) == ("lease", "another-export-is-active"), active.value

    shared = ws / "shared"
    shared.mkdir(mode=0o700)
    os.chmod(shared, 0o777)
    with pytest.raises(Error) as unusable:
        Host(state_home=shared, workspace_roots=[ws]).recover()
    assert isinstance(unusable.value, StateHomeError), repr(unusable.value)


THREADS_SCRIPT = """
import os, sys, threading
from proclease import Error, Host
root, ws = sys.argv[1], sys.argv[2]
host = Host(state_home=os.path.join(root, "state"), workspace_roots=[ws])
failures = []
def worker(n):
    try:
        for i in range(25):
            with host.directory_lease(os.path.join(ws, f"job-{n}-{i}"), create=True) as lease:
                assert lease.claim.path.endswith(f"job-{n}-{i}")
            try:
                with host.admission():
                    pass
            except Error as error:
                if error.code != "another-export-is-active":
                    raise
    except BaseException as error:
        failures.append(repr(error))
threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print("failures:", failures)
sys.exit(1 if failures else 0)
"""


def test_one_host_shared_by_four_threads_queues_their_calls(place: Tuple[Path, Path]) -> None:
    """#43 case 4: one `Host` used by four threads at once raised `WasmtimeError` (a resource
    drop and an export lookup entered the store outside the call lock; with more threads a
    wasmtime panic or a segfault). In a child process, so that a crash fails this test only."""
    home, ws = place
    done = subprocess.run([sys.executable, "-c", THREADS_SCRIPT, str(home.parent), str(ws)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stdout}{done.stderr}"
    assert list((home / "recovery" / "beeper-message-like-me-directory-leases").iterdir()) == []
    assert not (home / "recovery" / "beeper-message-like-me-export-admission" / "active.json").exists()


def test_threads_sharing_a_host_take_the_recovery_turn_one_after_another(place: Tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The artifact's recovery turn belongs to the instance, so a second thread's `take` would
    find it taken and go on, and the first thread's `end` would free it under the second's
    recovery (found by review, 2026-12-07). Threads sharing a `Host` wait for each other's
    recovery: their takes and ends alternate, each pair on one thread."""
    import threading

    from proclease import _binding

    home, ws = place
    host = Host(home, [ws])
    host.recover()
    events: List[Tuple[str, int]] = []
    real = _binding.Proclease.recovery_turn

    class Recorded:
        def __init__(self, exports: object) -> None:
            self._exports = exports

        def take(self) -> object:
            turn = self._exports.take()  # type: ignore[attr-defined]
            events.append(("take", threading.get_ident()))
            time.sleep(0.2)  # held a while: another thread comes in now if it can
            return turn

        def end(self) -> None:
            events.append(("end", threading.get_ident()))
            self._exports.end()  # type: ignore[attr-defined]

    monkeypatch.setattr(_binding.Proclease, "recovery_turn", property(lambda self: Recorded(real.fget(self))))
    threads = [threading.Thread(target=host.recover) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert [kind for kind, _ in events] == ["take", "end"] * 3, events
    assert all(events[i][1] == events[i + 1][1] for i in range(0, 6, 2)), events


@pytest.mark.parametrize("instant", ["conflict", "create"])
def test_a_directory_another_run_filled_between_the_checks_is_refused_and_its_lease_given_up(place: Tuple[Path, Path], instant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that finishes and releases while this leaser checks: it saw the directory empty,
    that run wrote its results and released, and no lease claims the directory any more.
    Leasing it would let a later `recover` delete those results. The other run's write is made,
    through this host's own system calls, at the two instants the race allows: after the check
    that no lease claims the directory, just before the component looks at the directory's
    entries again (`conflict`); and once this leaser's own lease has landed in the collection
    (`create`)."""
    from proclease import Refused
    from proclease import _sys

    home, ws = place
    host = Host(state_home=home, workspace_roots=[ws])
    job = ws / "job"
    job.mkdir(mode=0o700)
    leases = home / "recovery" / "beeper-message-like-me-directory-leases"
    wrote: List[str] = []
    looks = []

    def other_run_finishes() -> None:
        if not wrote:
            (job / "result.txt").write_text("the other run finished")
            wrote.append(instant)

    def where(directory: object) -> str:
        return os.readlink(f"/proc/self/fd/{directory.fd}")  # type: ignore[attr-defined]

    first_names, link, rename = _sys.Directory.first_names, _sys.Directory.link, _sys.Directory.rename

    def looking(self: object, at_most: int) -> object:
        if where(self) == str(job):
            looks.append(at_most)
            # The first look is the one before the lease-creation lock; the second follows the
            # check that no lease claims the directory.
            if instant == "conflict" and len(looks) == 2:
                other_run_finishes()
        return first_names(self, at_most)  # type: ignore[arg-type]

    def landed(outcome: object, target_dir: object, target: bytes) -> object:
        # A lease file (`<id>.json`) landing in the collection; not a mutation claim (`.io-mutation-…`).
        lease_file = not target.startswith(b".") and target.endswith(b".json")
        if instant == "create" and outcome is None and where(target_dir) == str(leases) and lease_file:
            other_run_finishes()
        return outcome

    monkeypatch.setattr(_sys.Directory, "first_names", looking)
    monkeypatch.setattr(_sys.Directory, "link", lambda self, source, target_dir, target: landed(link(self, source, target_dir, target), target_dir, target))
    monkeypatch.setattr(_sys.Directory, "rename", lambda self, source, target_dir, target, replace: landed(rename(self, source, target_dir, target, replace), target_dir, target))
    with pytest.raises(Refused, match=r"refused: not empty\. `run` leases only a directory it creates or an empty one"):
        host.take_directory_lease(job, create=True)
    assert wrote == [instant], f"the race was staged at {instant} (looks at the directory: {len(looks)})"
    assert (job / "result.txt").read_text() == "the other run finished", "the results stay"
    assert not leases.exists() or list(leases.iterdir()) == [], "no lease is left"


def test_a_with_block_that_ends_while_its_command_runs_keeps_the_lease_and_releases_once_it_ended(place: Tuple[Path, Path]) -> None:
    """Leaving `with host.directory_lease()` while the command it started still runs would let
    another run lease the directory beside it: the lease stays held, with a warning. A command
    that has ended is settled and the lease released."""
    home, ws = place
    host = Host(state_home=home, workspace_roots=[ws])
    leases = home / "recovery" / "beeper-message-like-me-directory-leases"
    job = ws / "job"
    with host.directory_lease(job, create=True) as lease:
        lease.update("launching")
        done = subprocess.Popen(["sh", "-c", "read line"], cwd=job, stdin=subprocess.PIPE)
        lease.update("running", done.pid)
        done.communicate(b"end\n")  # it ends before the block does
    assert list(leases.iterdir()) == [], "a command that ended: settled and released"
    command = sleeper()
    try:
        with pytest.warns(RuntimeWarning, match="while its command may still run: it stays held"):
            with pytest.raises(RuntimeError, match="the work failed"):
                with host.directory_lease(job, create=True) as lease:
                    lease.update("launching")
                    lease.update("running", command.pid)
                    raise RuntimeError("the work failed")
        [claim] = leases.iterdir()
        assert json.loads(claim.read_text())["phase"] == "running", "still held while its command runs"
        with pytest.raises(Error, match="already leased"):
            host.take_directory_lease(job, create=True)
    finally:
        end(command)


def test_a_helper_that_exits_before_it_is_recorded_lets_the_admission_go_once_what_it_started_is_gone(place: Tuple[Path, Path]) -> None:
    """`launch_helper`'s helper may exit before it can be recorded (its child keeps running with
    the witness): the admission stays `helper-launching` and may not be released while that
    child runs, and is released once it is gone — proven by the spawn witness. The helper's exit
    is made to come first here; under load it does by itself."""
    home, ws = place
    host = Host(state_home=home, workspace_roots=[ws])
    with host.admission() as admission:
        real_bind = admission._resource.bind_helper
        started = []

        def bind_after_it_exited(pid: int) -> object:
            os.waitpid(pid, 0)  # the helper is gone (reaped) before it is recorded
            return real_bind(pid)

        admission._resource.bind_helper = bind_after_it_exited
        helper = admission.launch_helper(["sh", "-c", "sleep 60 & echo $!"], stdout=subprocess.PIPE, text=True)
        started.append(int(helper.stdout.readline()))
        assert admission.claim.phase == "helper-launching", "the helper exited before it was recorded"
        with pytest.raises(HelperMayRun, match="a helper launch began and no helper was recorded"):
            admission.release()
        os.kill(started[0], signal.SIGKILL)
        release_once_gone(admission)
    assert not refused_by_the_holder(home, ws)


def test_a_state_home_named_through_a_symbolic_link_is_still_never_leased(place: Tuple[Path, Path]) -> None:
    """The state-home check compares physical paths: a state home given through a symbolic link
    (a `$HOME` that is one) must not let a directory inside it, or the lease collection itself,
    be leased — `recover` would then meet a directory in the collection and stop."""
    from proclease import Refused

    home, ws = place
    home.mkdir(mode=0o700)
    link = home.parent / "link"
    link.symlink_to(home.parent)
    host = Host(state_home=link / "state", workspace_roots=[home.parent])
    for target in (home / "sub", home / "recovery" / "beeper-message-like-me-directory-leases" / "x", home):
        with pytest.raises(Refused, match=r"refused: a leased directory may be removed by `recover`, so it can be neither the state home \(" + re.escape(str(home)) + r"\)"):
            host.take_directory_lease(target, create=True)
    assert not (home / "sub").exists(), "nothing was created"
    leases = home / "recovery" / "beeper-message-like-me-directory-leases"
    assert not leases.exists() or list(leases.iterdir()) == [], "no lease, and no directory in the collection"
