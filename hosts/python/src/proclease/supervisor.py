"""`run`: a command in a leased directory, as the lease's recorded child.

The order of effects is the native supervisor's (`host/src/api/supervisor/mod.rs`): lease the
directory (`preparing`, created 0700 if absent), take a spawn witness, record `launching`, start
the command holding the witness, record `running` with its captured identity (the witness is
linked under it), wait, stop what it left running, record `settled`, release, retire the
witnesses. With `exclusive`, the export admission is held around it (`helper-launching` →
`helper-active` → `parent-owned` → released).

What the native supervisor adds and this one does not (README, "Differences from the native
binary"): no PID namespace or cgroup box, so a process the command started is covered only
while it keeps the inherited witness descriptor open — one that closes its descriptors (a
classic daemon) is not; no `--stage`/`--output`; no cluster mode.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any, List, Optional, Sequence, Tuple

from ._binding import ComponentError
from .witness import WitnessError

#: `run`'s exit status when the command ran but its lease could not be released (the native
#: binary's).
UNRELEASED = 6

#: Signals forwarded to the command while it runs (as the native supervisor's).
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

#: How long, in s, the waits for kernel locks may go on once one of them came before the
#: command started: the native supervisor's grace (`docs/deviations.md` 21).
STOP_GRACE = 0.5


class Interrupted(Exception):
    """A signal arrived before the command started: nothing was started, and what was taken for
    it was released — or, when `left` is not empty, each thing it names could not be (the
    native `Refusal::InterruptedLeavingClaims`). `signal` is its number (the exit status is
    128 + it, as a shell reports); the message is the component's (`run-refusals`), worded as
    every host words it."""

    def __init__(self, signum: int, message: str, left: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.signal = signum
        self.left = tuple(left)

    @classmethod
    def worded(cls, host, signum: int, left: Sequence[str] = ()) -> "Interrupted":
        return cls(signum, host.component.run_refusals.interrupted_before_start(signum, list(left)), left)


class StartError(Exception):
    """The command could not be started (`OSError` as its cause); nothing is left behind."""


def holders_of(witness: os.stat_result) -> List[int]:
    """The pids of processes (other than this one) that hold an open descriptor of the file
    `witness` (its `fstat`): what a command left running with its spawn witness
    (docs/witness.md)."""
    st = witness
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        fd_dir = f"/proc/{entry}/fd"
        try:
            for fd in os.listdir(fd_dir):
                try:
                    target = os.stat(f"{fd_dir}/{fd}")
                except OSError:
                    continue
                if (target.st_dev, target.st_ino) == (st.st_dev, st.st_ino):
                    found.append(int(entry))
                    break
        except OSError:
            continue
    return found


def stop_stragglers(witness: os.stat_result, grace: float) -> Tuple[int, List[int]]:
    """Stops what the command left running with its witness: SIGTERM to every holder, then after
    `grace` s SIGKILL, scanning again and again (a holder may fork new ones) until none is left
    or 10 s more have passed. Returns `(how many were found, the pids still holding it)`; the
    lease must not be released while any still does."""
    found = set(holders_of(witness))
    if not found:
        return 0, []
    for pid in found:
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        now = holders_of(witness)
        if not now:
            return len(found), []
        found.update(now)
        time.sleep(0.05)
    deadline = time.monotonic() + 10.0
    while True:
        now = holders_of(witness)
        if not now or time.monotonic() >= deadline:
            return len(found), now
        found.update(now)
        for pid in now:
            _kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def run(host, argv: Sequence[str], workdir: str, *, exclusive: bool = False, recover_after: float = 60.0, grace: float = 5.0, log=None) -> int:
    """Runs `argv` in `workdir` under a directory lease; returns its exit status (128+N when
    signal N ended it). Refusals before it starts raise `proclease.Error` and leave nothing
    behind; a failure to start raises `StartError`."""
    say = log or (lambda _message: None)
    # Signals are caught from the start: before the command runs, one stops the run cleanly
    # (everything leased or created is undone: `Interrupted`); once it runs, it is forwarded.
    state: dict = {"child": None, "pending": None}
    kernel = host.effects.sys_kernel

    def on_signal(signum: int, _frame: Any) -> None:
        if state["child"] is not None:
            _forward(state["child"], signum)
        elif state["pending"] is None:
            state["pending"] = signum
            # A wait for a lock in progress (behind a stopped holder, say) ends within the
            # grace, and so do those of the undo.
            kernel.stop_waits(STOP_GRACE)

    def check_interrupted() -> None:
        if state["pending"] is not None:
            raise Interrupted.worded(host, state["pending"])

    previous = {s: signal.signal(s, on_signal) for s in FORWARDED}
    try:
        return _run(host, argv, workdir, exclusive, recover_after, grace, say, state, check_interrupted)
    finally:
        # The handlers first: a signal between the two would otherwise leave the stop in force.
        for s, handler in previous.items():
            signal.signal(s, handler)
        kernel.stop_waits(None)


def _run(host, argv: Sequence[str], workdir: str, exclusive: bool, recover_after: float, grace: float, say, state: dict, check_interrupted) -> int:
    admission = None
    if exclusive:
        try:
            admission = host.component.resource("export-admission", "admission", host.component.export_admission.acquire())
        except ComponentError:
            # A wait the signal cut short: the signal is what ended the run.
            check_interrupted()
            raise
    lease = None
    spawn = None
    created = _missing_directories(workdir)
    try:
        lease = host.take_directory_lease(workdir, create=True, recover_after=recover_after)
        directory = lease.path
        processes = host.effects.process_identity
        # The run journal's entry first, while the state home takes writes: its end is later
        # recorded in place, so a lease that cannot be released never costs the run its results
        # (`recover` keeps the directory of a finished run).
        journal = _begin_journal(processes, lease)
        spawn = processes.prepare_spawn()
        if spawn is None:
            raise StartError(f"{host.state_home}: no witness directory; the command's processes could not be covered")
        lease.update("launching")
        if admission is not None:
            admission.begin_helper_launch()
        check_interrupted()
        try:
            child = subprocess.Popen(list(argv), cwd=directory, pass_fds=(spawn.fd,))
        except OSError as error:
            reason = f"{os.strerror(error.errno)} (os error {error.errno})" if error.errno else str(error)
            raise StartError(host.component.run_refusals.unstartable(str(argv[0]), reason)) from error
        state["child"] = child
        if state["pending"] is not None:
            # A signal that came while the command was being started: it is the command's now,
            # and the waits after it (settling, releasing) get their whole bound again.
            _forward(child, state["pending"])
            host.effects.sys_kernel.stop_waits(None)
    except BaseException as error:
        # Nothing ran: settle and release everything, and remove what was created for it; what
        # cannot be is named when a signal is reported, never "nothing is left behind".
        left = []
        words = host.component.run_refusals
        if spawn is not None:
            spawn.discard()
        if lease is not None:
            try:
                lease.update("settled")
            except ComponentError:
                pass
            host.effects.process_identity.forget_run(lease.claim.id)
        if lease is not None:
            try:
                lease.release()
            except ComponentError as failure:
                left.append(words.left_directory_lease(str(lease.path), str(failure)))
        for path in reversed(created):
            try:
                host.component.workspace.remove_empty_directory(path, None)
            except Exception:  # best effort: an empty directory of ours is all it could leave
                break
        if admission is not None:
            try:
                _release_admission(admission)
            except ComponentError as failure:
                if not isinstance(error, Interrupted) and state["pending"] is None:
                    raise
                left.append(words.left_export_admission(str(failure)))
        # The signal is what ended the run when one came, whatever the step it cut short
        # failed with (a wait that ended at the grace).
        signum = error.signal if isinstance(error, Interrupted) else state["pending"]
        if signum is not None:
            # A creation intent the lease's creation could not remove in the grace.
            left[0:0] = host.component.exports("store-advice").creation_intents_left(os.path.abspath(workdir))
        if signum is not None and (left or not isinstance(error, Interrupted)):
            raise Interrupted.worded(host, signum, left) from None
        raise
    try:
        witness = os.fstat(spawn.fd)
        # This host runs commands without a box or a cgroup: the witness says so, written while
        # this process still holds it (no probe finds it free without the record).
        try:
            spawn.record_uncontained()
        except WitnessError as error:
            say(f"the command runs uncontained, and its witness cannot say so: {error}")
        # Closes this process's copy (the child holds the lock now); the capture that records
        # the child links the witness under its identity.
        spawn.started(child.pid)
        try:
            lease.update("running", child.pid)
            if admission is not None:
                admission.bind_helper(child.pid)
        except ComponentError:
            # It exited before it could be captured: the lifecycle goes on to settled.
            pass
        status, code, signum = _wait(child)
        left, survivors = stop_stragglers(witness, grace)
        if left:
            say(f"stopped {left} process{'es' if left > 1 else ''} the command left running")
        if survivors:
            # Released now, the lease would let `recover` delete a directory they still use.
            say(
                f"{len(survivors)} process(es) the command started still run ({', '.join(map(str, survivors[:10]))}) and could not be stopped; "
                f"the lease of {directory} stays held by their witness: `proclease recover` removes it once they are gone"
            )
            return UNRELEASED
        journaled = False
        if journal is not None:
            try:
                journal.finished(code, signum)
                journaled = True
            except OSError as error:
                say(f"the run journal could not record the end of the command: {error}")
        lease_id = lease.claim.id
        try:
            lease.update("settled")
            lease.release()
            if admission is not None:
                _release_admission(admission)
        except ComponentError as error:
            # What could not be released stays as it is, for `recover` to judge once this
            # process is gone; the results stay.
            say(f"{error.message}")
            how = f"exited {code}" if code is not None else f"died of signal {signum}"
            if journaled:
                kept = "the run journal recorded that the command finished, so `proclease recover` keeps the directory too"
            else:
                # The state home took no write at all: the finish is marked beside the
                # directory, where the workspace may still take one, as the native
                # supervisor does (`docs/deviations.md` 19). Without it a plain `recover`
                # would take the run for a crashed start and remove its results.
                marker = f"{lease.claim.parent_path.rstrip('/')}/.proclease-finished-{lease.claim.id}"
                try:
                    host.component.workspace.create_private_directory(marker)
                    kept = f"the state home took no write at all (not even the run journal), so the finish is marked by {marker} beside it: `proclease recover` keeps the directory too"
                except Exception as failure:  # noqa: BLE001 (said, and the words below tell what to do)
                    say(f"the finish of the command could not be marked beside its directory either: {failure}")
                    kept = "the state home took no write at all (not even the run journal), so a plain `proclease recover` would remove the directory: use --keep"
            say(f"the command {how}; its results in {directory} are intact, but its lease could not be released and stays in {host.state_home} ({kept})")
            return UNRELEASED
        processes.forget_run(lease_id)
    finally:
        state["child"] = None
    processes.retire()
    return status


def _missing_directories(workdir: str) -> List[str]:
    """The directories `create_with_directory` would create for `workdir`, outermost first."""
    missing = []
    path = os.path.abspath(workdir)
    while not os.path.lexists(path) and path != os.path.dirname(path):
        missing.append(path)
        path = os.path.dirname(path)
    return list(reversed(missing))


def _forward(child: subprocess.Popen, signum: int) -> None:
    try:
        child.send_signal(signum)
    except ProcessLookupError:
        pass


def _wait(child: subprocess.Popen) -> Tuple[int, Optional[int], Optional[int]]:
    """`(exit status as a shell reports it, exit code, signal)`."""
    code = child.wait()
    if code < 0:
        return 128 - code, None, -code
    return code, code, None


def _begin_journal(processes, lease):
    """The run journal's entry, before the command starts. A run whose entry cannot be written
    does not start (as the native `supervisor::start_journal`): after a crash its end could not
    be told from a crashed start, and `recover` would take its results for scratch."""
    try:
        return processes.begin_run(lease.claim.id, lease.claim.directory_identity)
    except OSError as error:
        raise StartError(f"cannot start the run journal: {error.strerror or error}") from error


def _release_admission(admission) -> None:
    try:
        if admission.claim().phase in ("helper-launching", "helper-active"):
            admission.settle_helper()
        admission.release()
    finally:
        admission.drop()
