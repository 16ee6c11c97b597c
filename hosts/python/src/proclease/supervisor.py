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
from typing import List, Optional, Sequence, Tuple

from ._binding import ComponentError

#: `run`'s exit status when the command ran but its lease could not be released (the native
#: binary's).
UNRELEASED = 6

#: Signals forwarded to the command while it runs (as the native supervisor's).
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


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


def stop_stragglers(witness: os.stat_result, grace: float) -> int:
    """SIGTERM, then after `grace` s SIGKILL, every process still holding the witness; returns
    how many there were. Waits (bounded: grace + 5 s) until none is left."""
    pids = holders_of(witness)
    if not pids:
        return 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while holders_of(witness) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in holders_of(witness):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5.0
    while holders_of(witness) and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(pids)


def run(host, argv: Sequence[str], workdir: str, *, exclusive: bool = False, recover_after: float = 60.0, grace: float = 5.0, log=None) -> int:
    """Runs `argv` in `workdir` under a directory lease; returns its exit status (128+N when
    signal N ended it). Refusals before it starts raise `proclease.Error` and leave nothing
    behind; a failure to start raises `StartError`."""
    say = log or (lambda _message: None)
    admission = None
    if exclusive:
        admission = host.component.resource("export-admission", "admission", host.component.export_admission.acquire())
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
        journal = _begin_journal(processes, lease, say)
        spawn = processes.prepare_spawn()
        if spawn is None:
            raise StartError(f"{host.state_home}: no witness directory; the command's processes could not be covered")
        lease.update("launching")
        if admission is not None:
            admission.begin_helper_launch()
        try:
            child = subprocess.Popen(list(argv), cwd=directory, pass_fds=(spawn.fd,))
        except OSError as error:
            spawn.discard()
            spawn = None
            lease.update("settled")
            raise StartError(f"{argv[0]}: could not be started: {error.strerror or error}") from error
    except BaseException:
        # Nothing ran: settle and release everything, and remove what was created for it.
        if lease is not None:
            try:
                lease.release()
            except ComponentError:
                pass
        for path in reversed(created):
            try:
                host.effects.workspace.remove_empty_directory(path, None)
            except Exception:  # best effort: an empty directory of ours is all it could leave
                break
        if admission is not None:
            _release_admission(admission)
        raise
    previous = {s: signal.signal(s, lambda signum, _frame: _forward(child, signum)) for s in FORWARDED}
    try:
        witness = os.fstat(spawn.fd)
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
        left = stop_stragglers(witness, grace)
        if left:
            say(f"stopped {left} process{'es' if left > 1 else ''} the command left running")
        if journal is not None:
            try:
                journal.finished(code, signum)
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
            kept = "the run journal recorded that the command finished, so `proclease recover` keeps the directory too" if journal is not None else "use `recover --keep` so that the directory is kept"
            say(f"the command {how}; its results in {directory} are intact, but its lease could not be released and stays in {host.state_home} ({kept})")
            return UNRELEASED
        processes.forget_run(lease_id)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
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


def _begin_journal(processes, lease, say):
    try:
        return processes.begin_run(lease.claim.id, lease.claim.directory_identity)
    except OSError as error:
        say(f"the run journal could not start an entry ({error}); if the lease cannot be released after the run, use `recover --keep`")
        return None


def _release_admission(admission) -> None:
    try:
        if admission.claim().phase in ("helper-launching", "helper-active"):
            admission.settle_helper()
        admission.release()
    finally:
        admission.drop()
