"""The system-call contract (`wit/sys.wit`: `sys-fs`, `sys-kernel`) on this machine, for the
portable artifact (`host/component/proclease-portable.wasm`, issue #41): one system call per
function, failures as errno numbers. No protocol step and no message is here — the store's
compare-and-swap, the mutation claims and the workspace's identity-bound removal run inside the
artifact. `tests/src/portable.rs` is the same contract in Rust (the reference).

`statx` (for birth times, as the native host records them) and `renameat2` (`RENAME_NOREPLACE`)
have no `os` function; `_linux.py` calls them through ctypes.
"""

from __future__ import annotations

import errno as errnos
import fcntl
import logging
import os
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, List, Optional, Tuple, TypeVar

from . import _linux
from ._binding import HostResource, Variant
from ._wit import HostError, Rec, rec

#: Where a wait's warnings go: silent until the application configures logging (the CLI shows
#: warnings, as the native binary does).
_log = logging.getLogger("proclease.waits")
_log.addHandler(logging.NullHandler())

T = TypeVar("T")

OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _entry(name: bytes) -> bytes:
    """`name` when it is one directory entry; `EINVAL` otherwise (a NUL would cut it short in
    the C calls, a `/` would walk out of the directory)."""
    if not name or b"\0" in name or b"/" in name:
        raise OSError(errnos.EINVAL, "not a directory entry name")
    return name


def _code(error: OSError) -> int:
    return error.errno if error.errno is not None else errnos.EIO


def _result(call: Callable[[], T]) -> T:
    """A `result<T, errno>`: the value, or the call's errno raised as the error case."""
    try:
        return call()
    except OSError as error:
        raise HostError(_code(error)) from None


def _outcome(call: Callable[[], Any]) -> Optional[int]:
    """An `outcome`: none on success, else the errno."""
    try:
        call()
    except OSError as error:
        return _code(error)
    return None


def _statx(fd: int, name: bytes, flags: int) -> Optional[Rec]:
    """`statx` of `name` in `fd` as a `file-stat`; None when it is absent. Where there is no
    statx (`ENOSYS`), `lstat` without a birth time, as the native host falls back."""
    try:
        buf = _linux.statx(fd, name, flags | _linux.AT_NO_AUTOMOUNT)
    except OSError as error:
        if error.errno != errnos.ENOSYS:
            raise
        try:
            return _stat_record(os.stat(fd) if flags & _linux.AT_EMPTY_PATH else os.stat(name, dir_fd=fd, follow_symlinks=False))
        except FileNotFoundError:
            return None
    if buf is None:
        return None
    birth = (buf.stx_btime.tv_sec, buf.stx_btime.tv_nsec) if buf.stx_mask & _linux.STATX_BTIME else None
    return rec(
        dev=os.makedev(buf.stx_dev_major, buf.stx_dev_minor),
        ino=buf.stx_ino,
        size=buf.stx_size,
        mtime=(buf.stx_mtime.tv_sec, buf.stx_mtime.tv_nsec),
        ctime=(buf.stx_ctime.tv_sec, buf.stx_ctime.tv_nsec),
        mode=buf.stx_mode,
        uid=buf.stx_uid,
        birth=birth,
    )


def _stat_record(s: os.stat_result) -> Rec:
    """A `file-stat` from `stat(2)`: no birth time."""
    return rec(
        dev=s.st_dev,
        ino=s.st_ino,
        size=s.st_size,
        mtime=divmod(s.st_mtime_ns, 1_000_000_000),
        ctime=divmod(s.st_ctime_ns, 1_000_000_000),
        mode=s.st_mode,
        uid=s.st_uid,
        birth=None,
    )


def _attempt(fd: int) -> Variant:
    """A `lock-attempt` on the open file `fd` (taken: the lock keeps `fd`)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return Variant("held", None)
    except OSError:
        os.close(fd)
        raise
    return Variant("taken", Lock(fd))


class _Fd(HostResource):
    """An open descriptor, closed when the component drops its handle or it is collected."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.release()
        except OSError:
            pass


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view, at = memoryview(data), offset
    while view:
        written = os.pwrite(fd, view, at)
        view, at = view[written:], at + written


class Lock(_Fd):
    """A held `flock`: released when the component drops it.

    Unlocked explicitly (`LOCK_UN`) before the descriptor is closed: closing alone leaves the
    lock held while a child forked meanwhile (another thread's `os.fork()`, `multiprocessing`)
    keeps a copy of the descriptor, for the child's whole life. Only by the process that took
    it: a forked child that releases its copy (at its exit, a finalizer) must not unlock its
    parent's lock in the middle of a write."""

    wit_name = "lock"

    def __init__(self, fd: int) -> None:
        super().__init__(fd)
        self._taker = os.getpid()

    def release(self) -> None:
        if self.fd >= 0 and os.getpid() == self._taker:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            except OSError:
                pass
        super().release()

    def note(self, note: bytes) -> Optional[int]:
        return _outcome(lambda: _pwrite_all(self.fd, note, 0))

    def noted(self, length: int) -> bytes:
        def read() -> bytes:
            chunks: List[bytes] = []
            at = 0
            while at < length:
                chunk = os.pread(self.fd, length - at, at)
                if not chunk:
                    break
                chunks.append(chunk)
                at += len(chunk)
            return b"".join(chunks)

        return _result(read)


class File(_Fd):
    """`sys-fs.file`: an open regular file."""

    wit_name = "file"

    def stat(self) -> Rec:
        return _result(lambda: _stat_record(os.fstat(self.fd)))

    def read_up_to(self, limit: int, expected: int) -> bytes:
        def read() -> bytes:
            chunks: List[bytes] = []
            left = limit
            while left > 0:
                chunk = os.read(self.fd, min(left, max(expected + 1, 65536)))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks)

        return _result(read)

    def write_all(self, data: bytes) -> Optional[int]:
        def write() -> None:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view) :]

        return _outcome(write)

    def write_at(self, data: bytes, offset: int) -> Optional[int]:
        return _outcome(lambda: _pwrite_all(self.fd, data, offset))

    def sync(self) -> Optional[int]:
        return _outcome(lambda: os.fsync(self.fd))

    def sync_data(self) -> Optional[int]:
        return _outcome(lambda: os.fdatasync(self.fd))


class Directory(_Fd):
    """`sys-fs.directory`: an open directory; every name is one entry in it, never followed."""

    wit_name = "directory"

    def duplicate(self) -> "Directory":
        return _result(lambda: Directory(os.dup(self.fd)))

    def stat(self) -> Rec:
        def stat() -> Rec:
            found = _statx(self.fd, b"", _linux.AT_EMPTY_PATH)
            if found is None:
                raise OSError(errnos.ENOENT, "gone")
            return found

        return _result(stat)

    def open_dir(self, name: bytes) -> "Directory":
        def open_dir() -> Directory:
            try:
                return Directory(os.open(_entry(name), OPEN_DIR, dir_fd=self.fd))
            except NotADirectoryError:
                found = _statx(self.fd, name, _linux.AT_SYMLINK_NOFOLLOW)
                if found is not None and (found.mode & 0o170000) == 0o120000:
                    raise OSError(errnos.ELOOP, "a symbolic link") from None
                raise

        return _result(open_dir)

    def lstat(self, name: bytes) -> Rec:
        return _result(lambda: rec(stat=_statx(self.fd, _entry(name), _linux.AT_SYMLINK_NOFOLLOW)))

    def open_file(self, name: bytes) -> File:
        return _result(lambda: File(os.open(_entry(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.fd)))

    def _names(self, at_most: int, prefix: bytes) -> List[bytes]:
        """Up to `at_most` names starting with `prefix` (the listing stops there)."""
        names: List[bytes] = []
        with os.scandir(self.fd) as entries:
            for entry in entries:
                name = os.fsencode(entry.name)
                if name.startswith(prefix):
                    if len(names) == at_most:
                        break
                    names.append(name)
        return names

    def read_names(self, prefix: bytes, bound: int) -> List[bytes]:
        try:
            names = self._names(bound + 1, prefix)
        except OSError as error:
            raise HostError(Variant("failed", _code(error))) from None
        if len(names) > bound:
            raise HostError(Variant("too-many", None))
        return names

    def first_names(self, at_most: int) -> List[bytes]:
        return _result(lambda: self._names(at_most, b""))

    def create_file(self, name: bytes) -> File:
        def create() -> File:
            file = File(os.open(_entry(name), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self.fd))
            os.fchmod(file.fd, 0o600)  # on failure, collecting `file` closes it
            return file

        return _result(create)

    def make_dir(self, name: bytes) -> "Directory":
        def make() -> Directory:
            os.mkdir(_entry(name), 0o700, dir_fd=self.fd)
            try:
                made = Directory(os.open(name, OPEN_DIR, dir_fd=self.fd))
                os.fchmod(made.fd, 0o700)
                return made
            except OSError:
                try:
                    os.rmdir(name, dir_fd=self.fd)
                except OSError:
                    pass
                raise

        return _result(make)

    def sync(self) -> Optional[int]:
        return _outcome(lambda: os.fsync(self.fd))

    def link(self, source: bytes, target_dir: "Directory", target: bytes) -> Optional[int]:
        return _outcome(lambda: os.link(_entry(source), _entry(target), src_dir_fd=self.fd, dst_dir_fd=target_dir.fd, follow_symlinks=False))

    def rename(self, source: bytes, target_dir: "Directory", target: bytes, replace: bool) -> Optional[int]:
        def rename() -> None:
            if replace:
                os.rename(_entry(source), _entry(target), src_dir_fd=self.fd, dst_dir_fd=target_dir.fd)
            else:
                _linux.rename_noreplace(self.fd, _entry(source), target_dir.fd, _entry(target))

        return _outcome(rename)

    def unlink(self, name: bytes) -> Optional[int]:
        return _outcome(lambda: os.unlink(_entry(name), dir_fd=self.fd))

    def remove_dir(self, name: bytes) -> Optional[int]:
        return _outcome(lambda: os.rmdir(_entry(name), dir_fd=self.fd))

    def try_lock(self, name: bytes) -> Variant:
        def attempt() -> Variant:
            try:
                fd = os.open(_entry(name), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self.fd)
            except OSError as error:
                if error.errno != errnos.EROFS:
                    raise
                # A read-only file system: an existing lock file still serialises readers.
                try:
                    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
                except FileNotFoundError:
                    raise error from None
            return _attempt(fd)

        return _result(attempt)

    def try_lock_directory(self) -> Variant:
        return _result(lambda: _attempt(os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.fd)))


class SysFs:
    """`sys-fs`: the state home and workspace roots this host grants, and the effective uid.

    Each is opened once, here (OSError when one cannot be), and handed out as a new descriptor
    on each call: `state_home` a directory the caller validated (as `Host` does), each root by
    its realpath, without following a symbolic link."""

    def __init__(self, state_home: str, workspace_roots: List[str]) -> None:
        self._home = Directory(os.open(state_home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        self._home_path = os.fsencode(os.path.realpath(state_home))
        self._roots: List[Tuple[str, Directory]] = []
        for root in workspace_roots:
            resolved = os.path.realpath(root)
            self._roots.append((resolved, Directory(os.open(resolved, OPEN_DIR))))

    def euid(self) -> int:
        return os.geteuid()

    def state_home(self) -> Directory:
        return Directory(os.dup(self._home.fd))

    def state_home_path(self) -> bytes:
        return self._home_path

    def granted_roots(self) -> List[Tuple[str, Directory]]:
        return [(root, Directory(os.dup(opened.fd))) for root, opened in self._roots]


#: The longest wait `lock-wait-ns` answers (a signed 64-bit count of ns, about 292 years).
_MAX_WAIT_NS = 2**63 - 1
#: The longest sleep of a `pause` between looks at `stop_waits` (ns).
_PAUSE_SLICE_NS = 20_000_000


class SysKernel:
    """`sys-kernel`: this process's pid, a monotonic clock, randomness, sleep, `kill(pid, 0)`,
    the bound of a wait for a kernel lock (`lock_timeout`, s), the warnings a wait gives (to the
    `proclease` logger, which the CLI shows), and `/proc/locks` and `/proc/<pid>/stat` for
    naming a lock's holder."""

    def __init__(self, lock_timeout: float = 10.0) -> None:
        self.lock_timeout = lock_timeout
        # The deadline (monotonic ns) of the operation this thread is in, and how deep: an
        # operation is one call into the component, calls it makes into another instance
        # (judging an owner from inside an import) included.
        self._operation = threading.local()
        # Once a stopping signal came (`stop_waits`): the thread whose waits it ends, and the
        # monotonic ns by which they end.
        self._stop: Optional[Tuple[int, int]] = None

    def stop_waits(self, grace: Optional[float]) -> None:
        """A stopping signal came (Ctrl-C, SIGTERM): every wait for a kernel lock of the calling
        thread (the one a signal handler runs in: the main thread, which runs `run`), those in
        progress included, ends within `grace` s, as the native supervisor's do
        (`docs/deviations.md` 21), so that what was taken can be undone and the run end as
        interrupted instead of waiting out `lock_timeout`. Other threads' waits keep their
        bound. `None` lifts it (the command started, or the run is over)."""
        self._stop = None if grace is None else (threading.get_ident(), time.monotonic_ns() + int(grace * 1e9))

    def _stopped_within(self, left_ns: int) -> int:
        """`left_ns`, or less when this thread's waits must end sooner (`stop_waits`)."""
        stop = self._stop
        if stop is None or stop[0] != threading.get_ident():
            return left_ns
        return min(left_ns, stop[1] - time.monotonic_ns())

    @contextmanager
    def operation(self) -> Iterator[None]:
        """One operation (an export call or a resource's drop): every wait for a kernel lock in
        it shares one bound of `lock_timeout` s, as the native host's (`docs/deviations.md` 21),
        so an acquire's retries cannot each wait the whole bound again."""
        depth = getattr(self._operation, "depth", 0)
        if depth == 0:
            self._operation.deadline_ns = time.monotonic_ns() + self._whole_bound_ns()
            self._operation.timed_out = None
        self._operation.depth = depth + 1
        try:
            yield
        finally:
            self._operation.depth = depth

    def pid(self) -> int:
        return os.getpid()

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()

    def random_bytes(self) -> bytes:
        return os.urandom(16)

    def pause(self, ns: int) -> None:
        # In slices, so that `stop_waits` ends a pause in progress too (a signal handler runs
        # between them; `time.sleep` itself resumes after one).
        end = time.monotonic_ns() + ns
        while True:
            left = self._stopped_within(end - time.monotonic_ns())
            if left <= 0:
                return
            time.sleep(min(left, _PAUSE_SLICE_NS) / 1e9)

    def pid_gone(self, pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except (OSError, OverflowError):
            return False
        return False

    def lock_wait_ns(self) -> int:
        """What is left of the current operation's bound (`operation`), or the whole bound
        outside one."""
        left = self._whole_bound_ns() if getattr(self._operation, "depth", 0) == 0 else self._operation.deadline_ns - time.monotonic_ns()
        return max(0, min(_MAX_WAIT_NS, self._stopped_within(left)))

    def _whole_bound_ns(self) -> int:
        """`lock_timeout` in ns, as the contract's u64 can carry it: 0 for 0, a negative number
        or NaN; `math.inf` (or more than about 292 years) waits as long as a u64 can say."""
        seconds = self.lock_timeout
        if not seconds > 0:
            return 0
        if seconds * 1e9 >= _MAX_WAIT_NS:
            return _MAX_WAIT_NS
        return int(seconds * 1e9)

    def warn(self, message: str) -> None:
        # The first lock timeout of an operation only (`sys-kernel.warn`): its later waits, the
        # bound spent, time out at once and would say it again.
        if message.startswith("waited ") and getattr(self._operation, "depth", 0) > 0:
            if self._operation.timed_out is not None:
                return
            self._operation.timed_out = message
        _log.warning("%s", message)

    def lock_timed_out(self, message: str) -> None:
        # A wait whose failure carries its words (`sys-kernel.lock-timed-out`): kept as the
        # operation's first timeout, shown by whoever reports the failure.
        if getattr(self._operation, "depth", 0) > 0 and self._operation.timed_out is None:
            self._operation.timed_out = message

    def timed_out(self) -> Optional[str]:
        """The first lock timeout (`waited N ms for …, held by …`) of this thread's last
        operation, or None: kept after the operation ends, so that its caller can tell that
        a failure was that wait's (the native host's `Error::LockTimeout`, exit status 5)."""
        return getattr(self._operation, "timed_out", None)

    def proc_locks(self) -> Optional[bytes]:
        return _read_or_none("/proc/locks")

    def proc_stat(self, pid: int) -> Optional[bytes]:
        return _read_or_none(f"/proc/{pid}/stat")

    def proc_pids(self) -> List[int]:
        try:
            return [int(name) for name in os.listdir("/proc") if name.isdigit()]
        except OSError:
            return []

    def proc_fdinfos(self, pid: int) -> Optional[List[bytes]]:
        where = f"/proc/{pid}/fdinfo"
        try:
            names = os.listdir(where)
        except OSError:
            return None
        texts = (_read_or_none(f"{where}/{name}") for name in names)
        return [text for text in texts if text is not None]


def _read_or_none(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None
