"""The Python host: the proclease component with real effects, and a Pythonic API over it.

    from proclease import Host

    host = Host()                                   # the state home and workspace roots the
    with host.directory_lease("/tmp/jobs/build", create=True) as lease:   # native binary uses
        ...                                         # the directory is leased to this process

Everything a lease rule decides, and every protocol that keeps state safe — the store's
compare-and-swap, ghostget's mutation claims, the workspace's identity-bound removal — is the
portable artifact's (`proclease-portable.wasm`: the native binary's component with the store and
workspace protocols composed in, issue #41); this module grants it the system calls
(`_sys`), the process facts (`process_identity`), the clock and randomness, and turns its exports
into context managers and reports.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
import warnings
import weakref
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Sequence, Union, cast

from ._binding import ComponentError, GuestResource, Proclease
from ._errors import Error, system_error
from ._wit import Rec, rec
from .process_identity import ProcessIdentity
from .records import AdmissionClaim, AdmissionSurvey, DirectoryLeaseClaim, Liveness, Owner, OwnerStatus, RawPhase
from ._sys import SysFs, SysKernel
from .state_home import GrantedStateHome

#: The component (world `proclease`), installed next to this file (in the repository a link to
#: `host/component/proclease.wasm`): for embedders that provide its store and workspace
#: imports themselves (the conformance harness does).
PACKAGED_COMPONENT = Path(__file__).resolve().parent / "proclease.wasm"

#: The portable artifact `Host` loads (world `proclease-portable`), installed next to this file
#: (in the repository a link to `host/component/proclease-portable.wasm`).
PACKAGED_ARTIFACT = Path(__file__).resolve().parent / "proclease-portable.wasm"

#: `raw-working` leases whose owner died while `launching` become recoverable this long after
#: they were taken, as the native `run`'s default `--recover-after` (s).
DEFAULT_RECOVER_AFTER_S = 60.0

#: A path as the API takes it: text, or anything `os.fspath` turns into text (`pathlib.Path`).
StrPath = Union[str, "os.PathLike[str]"]


def default_state_home() -> Path:
    """$PROCLEASE_STATE_HOME, $GHOSTGET_STATE_HOME, $XDG_DATA_HOME/proclease,
    ~/.local/share/proclease: the native binary's order."""
    for variable in ("PROCLEASE_STATE_HOME", "GHOSTGET_STATE_HOME"):
        if os.environ.get(variable):
            return Path(os.environ[variable])
    if os.environ.get("XDG_DATA_HOME"):
        return Path(os.environ["XDG_DATA_HOME"]) / "proclease"
    return Path.home() / ".local" / "share" / "proclease"


def default_workspace_roots() -> List[str]:
    """Your home directory and the temporary directory, as the native binary grants them."""
    return [os.path.realpath(Path.home()), os.path.realpath(tempfile.gettempdir())]


def component_path(wasm: Optional[StrPath] = None) -> Path:
    """`wasm`, $PROCLEASE_WASM, or the component packaged with this module."""
    chosen = Path(wasm) if wasm is not None else Path(os.environ["PROCLEASE_WASM"]) if os.environ.get("PROCLEASE_WASM") else PACKAGED_COMPONENT
    if not chosen.is_file():
        raise Error(f"{chosen}: no proclease component; install the package from a clone of the repository (`pip install hosts/python`: src/proclease/proclease.wasm links to host/component/proclease.wasm) or set PROCLEASE_WASM", kind="no-component")
    return chosen


def artifact_path(wasm: Optional[StrPath] = None) -> Path:
    """`wasm`, $PROCLEASE_PORTABLE_WASM, or the portable artifact packaged with this module."""
    chosen = Path(wasm) if wasm is not None else Path(os.environ["PROCLEASE_PORTABLE_WASM"]) if os.environ.get("PROCLEASE_PORTABLE_WASM") else PACKAGED_ARTIFACT
    if not chosen.is_file():
        raise Error(f"{chosen}: no proclease portable artifact; install the package from a clone of the repository (`pip install hosts/python`: src/proclease/proclease-portable.wasm links to host/component/proclease-portable.wasm) or set PROCLEASE_PORTABLE_WASM", kind="no-component")
    return chosen


class Clock:
    """The `clock` import: wall-clock ms since the Unix epoch."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class Entropy:
    """The `entropy` import: the kernel's CSPRNG."""

    def random_bytes(self, length: int) -> bytes:
        return os.urandom(length)


class Effects:
    """The object the artifact's imports are bound to: one attribute per imported interface
    (snake_case), each a real effect on this machine.

    `state_home` is not an import: it validates, creates or claims the state home (as the
    native binary does) before the artifact is granted it, and opens this host's own kernel
    locks' files. The store, the workspace and the plugin catalog (its file and the §5 mutation
    lock) are the artifact's own."""

    def __init__(self, state_home: Path, workspace_roots: Sequence[str], lock_timeout: float = 10.0) -> None:
        # Validated (or created and claimed) first: nothing is written into a directory that
        # is then refused as a state home, witnesses included.
        self.state_home = GrantedStateHome(str(state_home))
        self.process_identity = ProcessIdentity(self.state_home.home_path)
        try:
            self.sys_fs = SysFs(self.state_home.home_path, list(workspace_roots))
        except OSError as error:
            raise system_error(error, "opening a granted directory") from error
        self.sys_kernel = SysKernel(lock_timeout)
        self.clock = Clock()
        self.entropy = Entropy()


class Host:
    """One process's handle on a state home: the component with real effects.

    `state_home`: default `default_state_home()` (created 0700 if absent, as the native binary
    does). `workspace_roots`: the directories under which leased directories may be inspected,
    created and removed (default `default_workspace_roots()`). `wasm`: the portable artifact
    (default `artifact_path()`: $PROCLEASE_PORTABLE_WASM or the packaged one).

    Errors from every method are `proclease.Error` (see there).
    """

    def __init__(self, state_home: Optional[StrPath] = None, workspace_roots: Optional[Sequence[StrPath]] = None, wasm: Optional[StrPath] = None, lock_timeout: float = 10.0) -> None:
        self._lock_timeout = lock_timeout
        # Threads of this process that recover through this Host take turns here: the turn the
        # artifact takes (`recovery-turn`) is this instance's, so its `take` cannot keep them apart.
        self._recovering = threading.Lock()
        # Made (0700, with missing parents) and claimed by the store when absent, as natively.
        self.state_home = Path(os.path.abspath(state_home if state_home is not None else default_state_home()))
        roots = [_granted_root(r) for r in workspace_roots] if workspace_roots else default_workspace_roots()
        self.workspace_roots = roots
        wasm_path = artifact_path(wasm)
        self.effects = Effects(self.state_home, roots, lock_timeout)
        try:
            self.component = Proclease(wasm_path, self.effects, self.effects.sys_kernel.operation, self.effects.sys_kernel.timed_out)
        except Error:
            raise
        except Exception as error:  # wasmtime's own (a component that does not load or link)
            raise Error(
                f"{wasm_path}: the proclease portable artifact cannot be loaded: {error}; Host loads `proclease-portable.wasm` "
                "(`proclease component --portable -o FILE`), not the component `proclease.wasm`, which needs a store of its host's",
                kind="system",
            ) from error
        # A second instance for the pure `judge-owner` export (`liveness`), so that judging an
        # owner never re-enters, nor waits for, a call of the first.
        self._judge = Proclease(wasm_path, self.effects, self.effects.sys_kernel.operation, self.effects.sys_kernel.timed_out)

    @property
    def lock_timeout(self) -> float:
        """How long the waits of one call into the component for locks of the state home
        another process holds may last all together (s): this host's own locks and every wait
        inside the artifact's store (an admission's eight attempts share it). Settable."""
        return self._lock_timeout

    @lock_timeout.setter
    def lock_timeout(self, seconds: float) -> None:
        self._lock_timeout = seconds
        self.effects.sys_kernel.lock_timeout = seconds

    # --- liveness ---------------------------------------------------------------------------

    def judge(self, owner: Owner) -> OwnerStatus:
        """The owner status of a recorded process (`exact-live-owner`, `different-or-dead`,
        `unknown`): what `/proc` and its witness show, judged by the component."""
        return self.liveness(owner).status

    def liveness(self, owner: Owner) -> Liveness:
        """What probing a recorded process proves (`status`, `lineage_gone`, `proof`:
        `dispositions.judge-owner`)."""
        facts = self.effects.process_identity.probe(owner)
        return cast(Liveness, self._judge.dispositions.judge_owner(owner, facts))

    # --- directory leases (§6A.6) ------------------------------------------------------------

    @contextmanager
    def directory_lease(self, path: StrPath, *, create: bool = False, recover_after: float = DEFAULT_RECOVER_AFTER_S) -> Iterator["DirectoryLease"]:
        """Leases the directory `path` (a `raw-working` lease) to this process for the `with`
        block and releases it after — a `running` lease whose recorded command has ended is
        settled first — unless a command may still run in the directory (`launching`, or
        `running` with its command alive): then it stays held, with a `RuntimeWarning`, as the
        native handle's drop leaves it, since releasing would let another run lease the
        directory beside that command. `create`: make it (0700, with missing parents) when
        absent, recording the intent first so that a crash leaves nothing `recover` cannot
        clean up. The directory must be empty or yours, mode 0700, under a workspace root.

        A lease this process holds is judged `active` by every proclease and ghostget while
        it lives; if it dies holding it, `recover` (any host's) removes the directory."""
        lease = self.take_directory_lease(path, create=create, recover_after=recover_after)
        try:
            yield lease
        finally:
            lease._leave(self.judge)

    def take_directory_lease(self, path: StrPath, *, create: bool = False, recover_after: float = DEFAULT_RECOVER_AFTER_S) -> "DirectoryLease":
        """The lease of `directory_lease` without the `with`: call `release()` when done.

        With `create` (the way `run` leases), the component's `lease-new-directory` checks first,
        as it does for every host: the directory is neither the state home, inside it, nor holds
        it; it is absent or an empty directory (not a file, not a symbolic link); and no other
        lease, live or not, claims it — under the lease-creation lock every host takes, so that
        two runs never lease one directory. Refusals raise `Refused` and leave nothing behind; a
        wait for that lock past `lock_timeout` raises `LockTimeout`."""
        target = os.path.abspath(os.fspath(path))
        now_ms = self.effects.clock.now_ms()
        request = rec(role="raw-working", path=target, output_root=None, recover_after_ms=float(now_ms + int(recover_after * 1000)), now_ms=float(now_ms))
        if not create:
            handle = self.component.directory_leases.create(request)
            return DirectoryLease(self.component.resource("directory-leases", "directory-lease", handle))
        # The component's `lease-new-directory`: the checks (state home, not a directory, not
        # empty, claimed by another lease), their order and their words, and the lease-creation
        # lock around them, as every host leases a new directory.
        try:
            # The physical path (`realpath`): the check compares paths, and `target` is physical
            # wherever the lease can be made (the workspace walks without following links).
            handle = self.component.directory_leases.lease_new_directory(request, self.effects.state_home.home_path)
        except ComponentError as error:
            # wasmtime-py lifts `new-directory-error` untagged: a refusal arrives as its record
            # (kind, message), as a failure record would; its kinds tell them apart.
            if error.failure is not None and error.failure.kind in _NEW_DIRECTORY_REFUSALS:
                raise Refused(error.message) from None
            # The lock's own wait past `lock_timeout` (its words: `waited N ms for …`); another
            # `contended` failure (a record mid-mutation) stays what it is, as natively.
            if error.failure is not None and error.failure.kind == "contended" and error.message.startswith("waited "):
                raise LockTimeout(error.message) from None
            raise
        return DirectoryLease(self.component.resource("directory-leases", "directory-lease", handle))

    # --- the export admission (§6A.5) --------------------------------------------------------

    @contextmanager
    def admission(self) -> Iterator["Admission"]:
        """Holds the export admission (the singleton slot) for the `with` block. Refused with
        `another export is active` while a live process holds it. Leaving the block — however
        it ends — releases it unless a helper may still run (`Admission`)."""
        admission = Admission(self.component.resource("export-admission", "admission", self.component.export_admission.acquire()), self.liveness, self.effects.process_identity)
        try:
            yield admission
        finally:
            admission._leave()

    def survey_admission(self) -> Optional[AdmissionSurvey]:
        """The admission claim on disk as an acquirer would judge it (`claim`, `disposition`,
        `reason`), None when none is held."""
        return cast(Optional[AdmissionSurvey], self.component.export_admission.survey())

    # --- recovery ---------------------------------------------------------------------------

    def recover(self, *, dry_run: bool = False, skip_invalid: bool = False, keep: Sequence[str] = ()) -> "Recovery":
        """Recovers what provably belongs to dead owners, as the native `proclease recover`:
        directory leases (their directories removed by identity), directory-creation intents,
        then invocation leases (`repair`, tombstones of dead owners included). `dry_run`
        changes nothing. Recoverers take turns (the artifact's `recovery-turn`, the native
        host's `.proclease/locks/directory-lease-recovery.lock`; threads sharing this Host wait
        for each other's recovery first). Its waits for other processes share one bound of
        `lock_timeout` s (`Recovery.lock_timeout` says when one reached it).

        Raises `ComponentError` (with `lock_timeout` set) when the turn stayed held past the
        bound; `RecoveryIncomplete` when the creation intents or the invocation leases failed
        (e.g. `portable plugin catalog mutation is already locked` while another process mutates
        the plugin catalog) after the directory leases were dealt with: its `done` is what was."""
        options = rec(dry_run=dry_run, skip_invalid=skip_invalid, concurrent=True, keep=list(keep), past_bound=True)
        kernel = self.effects.sys_kernel
        with nullcontext() if dry_run else self._recovering, kernel.operation():
            turn = None if dry_run else self.component.recovery_turn.take()
            try:
                run = self.component.directory_leases.recover_each(None, options)
                # A wait that reached its bound and stopped recovery, or made it leave a lease
                # as it is (the native `Recovery::lock_timeout`).
                refused = run.stopped is not None or any(o.action.tag == "skip" for o in run.outcomes)
                done = Recovery(run=run, creations=[], invocations=None, dry_run=dry_run, lock_timeout=kernel.timed_out() if refused else None)
                # The directories removed (and the intents finished) stay reported when a later
                # step fails.
                step = "creation-intents"
                try:
                    done.creations = self.component.directory_leases.recover_creations(dry_run)
                    if run.stopped is None:
                        step = "invocation-leases"
                        done.invocations = self.component.invocation_leases.preview_repair(True) if dry_run else self.component.invocation_leases.repair(True)
                except Error as error:
                    raise RecoveryIncomplete(step, done, error) from error
            finally:
                if turn is not None:
                    self.component.recovery_turn.end()
        return done

    # --- invocation leases (§6B) -------------------------------------------------------------

    def invocation_leases(self) -> List[Any]:
        """The invocation-lease collection (§6B.3): `Variant('valid', snapshot)` or
        `Variant('invalid', lease_id)` entries in name order."""
        return cast(List[Any], self.component.invocation_leases.list())


class Refused(Error):
    """A directory `run` (or `take_directory_lease(create=True)`) will not lease, before anything
    was leased or created: the message says why and what to do (the native `Refusal`). Kind
    `refused`."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="refused")


class RecoveryIncomplete(Error):
    """`Host.recover` dealt with the directory leases, then failed at `step`
    (`"creation-intents"` or `"invocation-leases"`; the native `Error::RecoveryIncomplete`):
    `done` is what it did (directory leases recovered, their directories removed, and, failing at
    the invocation leases, creation intents finished; `done.invocations` is None), `error` why it
    could not go on (also `__cause__`). Its message, kind, code, failure and `lock_timeout` are
    `error`'s."""

    def __init__(self, step: str, done: "Recovery", error: Error) -> None:
        super().__init__(error.message, kind=error.kind, code=error.code, failure=error.failure)
        self.step = step
        self.done = done
        self.error = error
        #: As `ComponentError.lock_timeout`: a wait's words when one reached the bound.
        self.lock_timeout: Optional[str] = getattr(error, "lock_timeout", None)


class LockTimeout(Error):
    """A lock of the state home stayed held by another process past the host's bound (the
    native exit status 5). Kind `lock-timeout`."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="lock-timeout")


def _granted_root(root: StrPath) -> str:
    """The physical path of a workspace root the user grants; `Error` (kind `system`) in the
    native binary's words when it cannot be resolved."""
    try:
        return os.path.realpath(root, strict=True)
    except OSError as error:
        raise Error(f"{os.fspath(root)}: realpath of a workspace root failed: {error.strerror} (os error {error.errno})", kind="system") from error


#: The cases of the component's `new-directory-refusal` (`directory-leases.lease-new-directory`).
_NEW_DIRECTORY_REFUSALS = ("state-home", "not-a-directory", "not-empty", "already-leased", "inside-leased", "undecided-lease")


#: The phases of a raw directory lease in which no command can run in its directory (§6A.1):
#: a lease forgotten in one of them is released when its handle is collected.
_NO_COMMAND_PHASES = ("preparing", "settled")

#: The admission phases in which a helper may have been started (§6A.5).
_HELPER_PHASES = ("helper-launching", "helper-active")


def _forgotten_lease(resource: GuestResource, pid: int) -> None:
    # The collector may run this in the middle of a call into the same instance (an import
    # that allocates): the instance is entered once that call has ended.
    resource._owner.defer(lambda: _let_go_of_lease(resource, pid))


def _let_go_of_lease(resource: GuestResource, pid: int) -> None:
    """A `DirectoryLease` collected (or left at interpreter exit) without `release()`: released
    while no command can run in its directory, as the Rust handle's drop does; otherwise left,
    with a warning, for `recover` to judge once this process is gone. Never in a forked child:
    the lease is its parent's."""
    if resource.handle is None or os.getpid() != pid:
        return
    try:
        phase = resource.claim().phase
        if phase in _NO_COMMAND_PHASES:
            resource.release()
            warnings.warn(f"a directory lease of {resource.claim().path} was never released: released now (use `with host.directory_lease(...)`)", ResourceWarning, stacklevel=2)
        else:
            warnings.warn(
                f"a directory lease in phase {phase} was never released: it is left (active while this process lives; `recover` judges its command once it is gone)",
                ResourceWarning,
                stacklevel=2,
            )
    except Exception as error:  # noqa: BLE001 (a finalizer must not raise; it says why instead)
        warnings.warn(f"a forgotten directory lease could not be released ({error}): `recover` judges it once this process is gone", ResourceWarning, stacklevel=2)
    finally:
        resource.drop()


class DirectoryLease:
    """A held directory lease. `claim` is the record (`Rec`: `id`, `path`, `phase`, `owner`,
    …); `update(phase, child_pid)` steps a raw lease's lifecycle (§6A.1: preparing →
    launching → running(child) → settled); `release()` removes the claim (never the
    directory) and is idempotent.

    A handle collected without `release()` (or still held at interpreter exit) releases the
    lease while no command can run in it (`preparing`, `settled`) and warns
    (`ResourceWarning`); otherwise it warns and leaves the lease for `recover` to judge. A
    `fork()`ed child never releases its parent's lease: its `release()` does nothing."""

    def __init__(self, resource: GuestResource) -> None:
        self._resource = resource
        self._pid = os.getpid()
        self._finalizer = weakref.finalize(self, _forgotten_lease, resource, self._pid)

    @property
    def claim(self) -> DirectoryLeaseClaim:
        """The claim this handle last wrote."""
        return cast(DirectoryLeaseClaim, self._resource.claim())

    @property
    def path(self) -> str:
        return self.claim.path

    def update(self, phase: RawPhase, child_pid: Optional[int] = None) -> None:
        self._resource.update(phase, child_pid)

    def release(self) -> None:
        if self._resource.handle is None or os.getpid() != self._pid:
            return
        self._finalizer.detach()
        try:
            self._resource.release()
        finally:
            self._resource.drop()

    def _leave(self, judge: Callable[[Owner], OwnerStatus]) -> None:
        """Leaving `with host.directory_lease()`: settles a `running` lease whose command has
        ended and releases, or leaves the lease held with a warning while a command may still
        run in the directory (`judge`: an owner's status)."""
        if self._resource.handle is None or os.getpid() != self._pid:
            return
        claim = self.claim
        child = claim.child_owner
        may_run = claim.phase == "launching" or (claim.phase == "running" and (child is None or judge(child) != "different-or-dead"))
        if may_run:
            self._finalizer.detach()
            self._resource.drop()
            warnings.warn(
                f"the directory lease of {claim.path} ends in phase {claim.phase} while its command may still run: it stays held "
                "(recover judges it once this process and the command are gone); wait for the command, "
                "lease.update('settled'), then leave the block",
                RuntimeWarning,
                stacklevel=4,
            )
            return
        if claim.phase == "running":
            try:
                self.update("settled")
            except Error:
                pass  # Released below all the same; a refusal here changed nothing on disk.
        self.release()


class HelperMayRun(Error):
    """The export admission cannot be released: its recorded helper may still run (alive, or
    not provably gone), so releasing would let another export start beside it (§6A.5). Wait
    for the helper to end, then release. Kind `helper-may-run`."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="helper-may-run")


class Admission:
    """The held export admission: `begin_helper_launch()`, `bind_helper(pid)`,
    `settle_helper()`, `release()` (§6A.5), `claim`.

    While a helper may run (`helper-launching`, or `helper-active` with a helper not provably
    gone) the admission is never released: `release()` raises `HelperMayRun`, and leaving
    `with host.admission()` leaves it held with a `RuntimeWarning` (held while this process
    lives; judged by its helper once it is gone) — call `release()` once the helper ended. A
    `fork()`ed child never releases its parent's admission."""

    def __init__(self, resource: GuestResource, liveness: Any, processes: Any = None) -> None:
        self._resource = resource
        self._judge = liveness
        self._processes = processes
        self._pid = os.getpid()

    @property
    def claim(self) -> AdmissionClaim:
        """The claim this handle last wrote."""
        return cast(AdmissionClaim, self._resource.claim())

    def begin_helper_launch(self) -> None:
        self._resource.begin_helper_launch()

    def bind_helper(self, pid: int) -> None:
        """Records `pid` as the helper (§6A.5 helper-launching → helper-active). A helper
        recorded this way has no witness: should this process and the helper die, nothing
        proves that what the helper started is gone too, and the admission stays refused
        (`prior export owner cannot be inspected safely`) until a reboot. Prefer
        `launch_helper`, which starts the helper under a witness."""
        self._resource.bind_helper(pid)

    def launch_helper(self, argv: Sequence[str], **popen: Any) -> "subprocess.Popen[Any]":
        """Starts the helper `argv` (`subprocess.Popen(argv, **popen)`) holding a witness, and
        records it: the native `Admission::launch_helper`. Once this process and the helper are
        gone, the next acquirer — on any host — proves the helper's whole tree gone by its
        witness and takes the admission over. A helper that cannot start leaves the admission
        `parent-owned` (`Error`, kind `system`, the `OSError` as its cause); one that exits at
        once is no failure."""
        if self._processes is None:
            raise Error("this admission has no process identity to take a witness with; use Host.admission()", kind="invalid-argument")
        spawn = self._processes.prepare_spawn()
        if spawn is None:
            raise Error("no witness directory in the state home: the helper could not be covered", kind="system")
        try:
            self._resource.begin_helper_launch()
        except BaseException:
            spawn.discard()
            raise
        try:
            fds = tuple(popen.pop("pass_fds", ())) + (spawn.fd,)
            child = subprocess.Popen(list(argv), pass_fds=fds, **popen)
        except BaseException as error:
            # Nothing started (a system error, or arguments Popen refused): back to
            # parent-owned, the witness removed.
            spawn.discard()
            self._resource.settle_helper()
            if isinstance(error, OSError):
                raise Error(f"cannot start the helper {argv[0] if argv else ''}: {error.strerror or error}", kind="system") from error
            raise
        try:
            spawn.record_uncontained()
        except Exception as error:  # noqa: BLE001 (the helper runs; the record is a refinement)
            warnings.warn(f"the helper runs uncontained, and its witness cannot say so: {error}", RuntimeWarning, stacklevel=2)
        spawn.started(child.pid)
        try:
            self._resource.bind_helper(child.pid)
        except Error:
            if child.poll() is None:
                # Alive and not recorded: it must not run beside an admission that does not name it.
                child.kill()
                child.wait()
                self._resource.settle_helper()
                raise
            # It exited before it could be captured: nothing runs; the admission goes on.
        return child

    def settle_helper(self) -> None:
        self._resource.settle_helper()

    def helper_may_run(self) -> Optional[str]:
        """Why a helper may still run (None when none can): the claim is `helper-launching` (a
        helper may have started before it was recorded), or its recorded helper is not
        provably gone."""
        claim = self.claim
        if claim.phase == "helper-launching":
            # `launch_helper` leaves this phase when its helper exited before it could be
            # recorded: its spawn witness, free once everything that kept it is gone, then
            # proves that nothing it started runs (as the component judges it for another
            # acquirer: every spawn witness of the owner free).
            if self._spawn_witnesses() == "free":
                return None
            return "a helper launch began and no helper was recorded: one may run unrecorded"
        if claim.phase == "helper-active" and claim.helper_owner is not None:
            # Gone means the helper and all it started: its own pid being dead is not enough
            # (the component's rule, `dispositions`: a dead helper counts only with its lineage
            # proven gone by its witness).
            seen = self._judge(claim.helper_owner)
            if seen.status == "exact-live-owner":
                return f"its helper (pid {claim.helper_owner.pid}) is alive"
            if seen.status != "different-or-dead" or not seen.lineage_gone:
                return (
                    f"its helper (pid {claim.helper_owner.pid}) is not provably gone with all it started "
                    "(a helper recorded by bind_helper has no witness: once you know it and its children ended, call settle_helper() first)"
                )
        return None

    def _spawn_witnesses(self) -> Optional[str]:
        """The aggregate state of the spawn witnesses this process took (`free` when there are
        some and all are free); None when it cannot be told."""
        if self._processes is None:
            return None
        witnesses = self._processes.witnesses
        if witnesses is None:
            return None
        try:
            state, _ = witnesses.test_spawned(self._processes.self_identity())
        except Exception:  # noqa: BLE001 (not told: the caller keeps the admission)
            return None
        return str(state)

    def release(self) -> None:
        """Settles a helper that is provably gone and releases the admission; idempotent. Raises
        `HelperMayRun` while a helper may run (the admission stays held)."""
        if self._resource.handle is None or os.getpid() != self._pid:
            return
        why = self.helper_may_run()
        if why is not None:
            raise HelperMayRun(f"the export admission is not released: {why}; wait for it to end, then release")
        if self.claim.phase in _HELPER_PHASES:
            self._resource.settle_helper()
        try:
            self._resource.release()
        finally:
            self._resource.drop()

    def _leave(self) -> None:
        """Leaving `with host.admission()`: releases, or leaves the admission held with a
        warning while a helper may run."""
        if self._resource.handle is None or os.getpid() != self._pid:
            return
        try:
            self.release()
        except HelperMayRun as refusal:
            warnings.warn(f"{refusal} (it stays held while this process lives)", RuntimeWarning, stacklevel=3)


class Recovery:
    """What a recovery did (or, dry, would do): the component's `recovery-run` (`run`), its
    creation outcomes (`creations`) and invocation repair (`invocations`, None when the
    directory-lease recovery stopped)."""

    def __init__(self, run: Rec, creations: List[Rec], invocations: Optional[Rec], dry_run: bool, lock_timeout: Optional[str] = None) -> None:
        self.run = run
        self.creations = creations
        self.invocations = invocations
        self.dry_run = dry_run
        #: The words of a wait for another process's lock that reached the bound and stopped
        #: recovery or made it leave a lease as it is (`waited N ms for …, held by pid P …`),
        #: else None: the native `Recovery::lock_timeout` (exit status 5).
        self.lock_timeout = lock_timeout

    @property
    def stopped(self) -> Optional[Any]:
        return self.run.stopped
