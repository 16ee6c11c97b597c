"""The private state store (`state-store` import; spec §3.3 contracts, adapted to paths relative
to the state home), on real files — the same files, lock files and names as the native host's, so
that native proclease, Python proclease and ghostget 0.17.2 can share one state home.

Port of `host/src/imports/state_store/mod.rs` and the modules it is built from, in sections:

* store paths (`state_store/path.rs`),
* the state home (`state_store/home.rs`),
* bounded waits and the per-collection kernel lock (`lock_wait.rs`, `state_store/lock.rs`),
* the store's failures (`StoreError`, `failure_of`),
* the store itself (`StateStore`).

File operations are in `_fsops` (`fsops.rs`); the reference's mutation claims, their arbitration
and the §3.9 crash recovery in `_mutation_claim` (`mutation_claim.rs`, `arbitration.rs`).

Guarantees (as the Rust's module docs state them):

* **Durable and atomic**: a record is written to a temporary in `.proclease/staging/`, fsynced,
  then published by `link` (create: never overwrites) or `rename` (replace), and the collection
  directory is fsynced. A change whose collection fsync fails is undone before the error is
  returned (the old bytes are put back), so a caller told "failed" can retry.
* **Compare-and-swap across processes, ghostget's included**: every mutation of a record holds
  the reference's per-leaf mutation claim (§3.5); a replace or remove happens only if the bytes on
  disk hash to the expected sha256 at that instant. proclease's writers (native and Python) also
  take the collection's kernel lock (`.proclease/locks/`) around the claim, so that they queue for
  each other and a listing never sees a proclease writer's claim files.
* **Collections hold only records** (and, while a mutation runs, its claim): temporaries and
  locks live under `.proclease/`, which no store path can name; a crashed writer's temporary is
  removed by a later operation once its writer is provably dead (its pid and process start id
  are in the temporary's name). Before every write and listing the store also performs the
  reference's crash recovery in the collection (§3.9).
* **No escape**: paths are relative, every directory is opened component by component without
  following symbolic links, and must be owned by the user with mode 0700; every file must be a
  regular, private, owned file.
* **Bounded**: reads take a byte bound; listings at most 10 000 entries; batches at most 1 000
  names; every wait for another process has a bound.
"""

from __future__ import annotations

from ._errors import Error

import contextlib
import errno as _errno
import fcntl
import logging
import os
import threading
import time
import unicodedata
import uuid
from pathlib import PurePosixPath
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

from wasmtime.component import Variant

from . import _fsops
from . import _mutation_claim as claims
from ._mutation_claim import Liveness, Owner, identity_digest, is_digest, sha256_hex
from ._wit import HostError, Rec, failure, os_failure, os_message, rec

log = logging.getLogger("proclease.state_store")
# Like the Rust's `tracing` events: silent until the application configures logging (the
# CLI shows warnings, as the native binary does).
log.addHandler(logging.NullHandler())

# ================================================================================================
# Store paths (state_store/path.rs; spec §3.2, adapted)
#
# A store path has 1..=32 segments; each is non-empty, not `.` or `..`, has no `/`, `\`, NUL or
# control character, and is at most 255 bytes. The first segment must be one of the state
# directory names the reference recognises (§3.1), so the store can never reach its own
# bookkeeping (`.proclease/`) or anything else in the state home.
# ================================================================================================

#: The state directory names of the reference (§3.1, newer list), the only first segments a store
#: path may have.
STATE_DIRECTORIES = (
    "adapter-generations",
    "adapters",
    "auth",
    "browser-snapshots",
    "captures",
    "control",
    "derivations",
    "idempotency",
    "linked-device-stores",
    "menubar",
    "messaging",
    "omni-read-projections",
    "operation-permissions",
    "plan-assets",
    "plans",
    "provider-plugin-state",
    "provider-plugins",
    "read-projection-control",
    "read-projections",
    "recovery",
    "repair-signals",
    "run-journals",
    "runs",
    "session-secrets",
    "tools",
)

#: The most segments a store path may have.
MAX_SEGMENTS = 32


def is_safe_name(name: str) -> bool:
    """Whether `name` is a safe single directory entry name (§3.3 snapshot rules; `path.rs`):
    non-empty, not `.`/`..`, no `/`, `\\`, U+FFFD or control characters (<= U+001F, U+007F),
    <= 255 bytes."""
    return (
        name != ""
        and name not in (".", "..")
        and len(name.encode("utf-8", "surrogatepass")) <= 255
        and not any(c in "/\\\ufffd\x7f" or ord(c) < 0x20 for c in name)
    )


def rust_debug(text: str) -> str:
    """`format!("{text:?}")` of a Rust `&str`: double quotes, `\\t \\r \\n \\\\ \\" \\0`
    escaped, other non-printable characters as `\\u{hex}`. (Python's `isprintable` and
    combining classes stand in for Rust's printable and grapheme-extend tables.)"""
    out = ['"']
    for c in text:
        simple = {"\t": "\\t", "\r": "\\r", "\n": "\\n", "\\": "\\\\", '"': '\\"', "\0": "\\0"}.get(c)
        if simple is not None:
            out.append(simple)
        elif (not c.isprintable() and c != " ") or unicodedata.category(c) in ("Mn", "Me"):
            out.append(f"\\u{{{ord(c):x}}}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def escape_ascii(raw: bytes) -> str:
    """`<[u8]>::escape_ascii` (Rust): printable ASCII as is, `\\t \\r \\n \\\\ \\' \\"`
    escaped, every other byte `\\xNN`."""
    out = []
    for b in raw:
        c = chr(b)
        if c in "\t\r\n":
            out.append({"\t": "\\t", "\r": "\\r", "\n": "\\n"}[c])
        elif c in "\\'\"":
            out.append("\\" + c)
        elif 0x20 <= b <= 0x7E:
            out.append(c)
        else:
            out.append(f"\\x{b:02x}")
    return "".join(out)


class PathRefused(Exception):
    """Why a store path is refused (the Rust's `Err(String)` of `path::segments`)."""


def path_segments(path: str) -> List[str]:
    """Splits and checks a store path (`path::segments`). Raises `PathRefused(reason)`."""
    if path.startswith("/"):
        raise PathRefused("absolute paths are refused: give a path relative to the state home")
    segments = path.split("/")
    if len(segments) > MAX_SEGMENTS:
        raise PathRefused(f"more than {MAX_SEGMENTS} path segments")
    for segment in segments:
        if not is_safe_name(segment):
            raise PathRefused(f"unsafe path segment {rust_debug(segment)} (empty, `.`, `..`, a separator or a control character)")
    if segments[0] not in STATE_DIRECTORIES:
        raise PathRefused(f"state path is outside the owned state layout: {rust_debug(segments[0])} is not a state directory name")
    return segments


# ================================================================================================
# The state home (state_store/home.rs; spec §3.1, in its spirit)
#
# Validation before anything is read or written:
# * never a shared root: `/`, the home directory or its parent, the temporary directory, the
#   working directory, `~/{Desktop,Documents,Downloads,Library,.cache,.config,.local}`,
#   `~/.local/share`, `$XDG_DATA_HOME` itself;
# * the home itself is never a symbolic link; it must be a real directory owned by the user;
# * absent: created (mode 0700) from an existing ancestor that is a real, owned directory not
#   writable by group or others;
# * present and unclaimed: empty, or holding only the reference's state directory names; then
#   made mode 0700 and claimed with the reference's marker `.io-state.json`;
# * a claimed home must already be mode 0700.
# ================================================================================================

#: The reference's ownership marker (§3.1) and its exact content.
MARKER = ".io-state.json"
MARKER_CONTENT = '{"kind":"io-state","schemaVersion":1}\n'


class StateHomeError(Error):
    """Why a state home cannot be used (`StateHomeError`); the message names the path and what
    to do. `kind`: `unconfigured`, `shared-root`, `unsafe` or `io`."""

    def __init__(self, kind: str, message: str, path: Optional[str] = None, error: Optional[OSError] = None) -> None:
        super().__init__(message, kind=kind)
        self.__cause__ = error
        self.path = path
        self.error = error


def _home_unsafe(path: str, reason: str) -> StateHomeError:
    return StateHomeError("unsafe", f"{path}: {reason}", path)


def _home_io(path: str, operation: str, error: OSError) -> StateHomeError:
    return StateHomeError("io", f"{path}: {operation} failed: {os_message(error)}", path, error)


def lexical_absolute(path: str) -> str:
    """`path` made absolute against the working directory and lexically normalised (`.`
    dropped, `..` applied lexically; symbolic links are not resolved; `home::lexical_absolute`)."""
    joined = path if path.startswith("/") else os.path.join(os.getcwd(), path)
    out: List[str] = []
    for part in joined.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out:
                out.pop()
            continue
        out.append(part)
    return "/" + "/".join(out)


def _absolute(path: str) -> str:
    try:
        return lexical_absolute(path)
    except OSError as e:
        raise _home_io(path, "reading the working directory", e) from None


def _physical(path: str) -> str:
    """The physical path: the deepest existing *ancestor* resolved with realpath, the rest
    appended. The final component itself is never resolved (a symbolic link there is refused)."""
    parent, name = os.path.split(path)
    if name == "":
        return path
    existing = parent
    missing: List[str] = []
    while True:
        try:
            os.lstat(existing)
            break
        except OSError:
            last = os.path.basename(existing)
            if not last:
                break
            missing.append(last)
            existing = os.path.dirname(existing)
    try:
        resolved = os.path.realpath(existing, strict=True)
    except OSError as e:
        raise _home_io(existing, "realpath", e) from None
    if not os.path.isdir(resolved):
        raise _home_unsafe(existing, "a state home ancestor is not a directory")
    for part in reversed(missing):
        resolved = os.path.join(resolved, part)
    return os.path.join(resolved, name)


def _is_shared_root(path: str) -> bool:
    def canonical(p: str) -> str:
        try:
            return os.path.realpath(p, strict=True)
        except OSError:
            return p

    # std::env::temp_dir(): $TMPDIR, else /tmp.
    shared = [PurePosixPath("/"), PurePosixPath(canonical(os.environ.get("TMPDIR", "/tmp")))]
    try:
        shared.append(PurePosixPath(canonical(os.getcwd())))
    except OSError:
        pass
    home_var = os.environ.get("HOME")
    if home_var:
        home = PurePosixPath(canonical(home_var))
        if home != home.parent:
            shared.append(home.parent)
        for child in ("Desktop", "Documents", "Downloads", "Library", ".cache", ".config", ".local", ".local/share"):
            shared.append(home / child)
        shared.append(home)
    data = os.environ.get("XDG_DATA_HOME")
    if data:
        shared.append(PurePosixPath(canonical(data)))
    return PurePosixPath(path) in shared


def _is_marker_stage(name: str) -> bool:
    """`^\\.io-state\\.stage-\\d+-[0-9a-f-]{36}\\.json$`: a marker being published (§3.1)."""
    if not (name.startswith(".io-state.stage-") and name.endswith(".json")):
        return False
    pid, sep, rest = name[len(".io-state.stage-") : -len(".json")].partition("-")
    return bool(sep) and claims.is_ascii_digits(pid) and len(rest) == 36 and all(c in "0123456789abcdef-" for c in rest)


def _validate_present(path: str, st: os.stat_result) -> None:
    if _fsops.file_kind(st.st_mode) == _fsops.S_IFLNK:
        raise _home_unsafe(path, "the state home is a symbolic link; point proclease at the real directory")
    if _fsops.file_kind(st.st_mode) != _fsops.S_IFDIR:
        raise _home_unsafe(path, "the state home is not a directory")
    if st.st_uid != _fsops.euid():
        raise _home_unsafe(path, "the state home must be a directory owned by you")
    mode = st.st_mode & 0o777
    try:
        os.lstat(os.path.join(path, MARKER))
        claimed = True
    except OSError:
        claimed = False
    if claimed:
        if mode != 0o700:
            raise _home_unsafe(path, f"the state home must be private (mode 0700, is {mode:o}); run chmod 700 on it")
        return
    try:
        entries = [os.fsdecode(name) for name in os.listdir(path)]
    except OSError as e:
        raise _home_io(path, "list", e) from None
    # Another process may be claiming the same home right now: its marker stage and marker, and
    # the store's own directory, are not foreign (§3.1 allows interrupted marker stages).
    foreign = [n for n in entries if n not in STATE_DIRECTORIES and n not in (".proclease", MARKER) and not _is_marker_stage(n)]
    if foreign:
        shown = foreign[0].encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        raise _home_unsafe(path, f"is not empty and not a state home (it holds {rust_debug(shown)}); choose a dedicated directory")
    if not entries and mode & 0o022 != 0:
        raise _home_unsafe(path, f"an unclaimed state home must not be group/world-writable (mode {mode:o}); use a private directory")
    if entries and mode != 0o700:
        raise _home_unsafe(path, f"the state home must be private (mode 0700, is {mode:o}); run chmod 700 on it")
    try:
        os.chmod(path, 0o700)
    except OSError as e:
        raise _home_io(path, "chmod 700", e) from None


def _create_dir_all(path: str) -> None:
    """`DirBuilder::new().recursive(true).mode(0o700).create(path)`: every missing directory
    created with mode 0700 (less the umask); one that appears meanwhile is fine."""
    try:
        os.mkdir(path, 0o700)
        return
    except FileNotFoundError:
        parent = os.path.dirname(path)
        if parent == path:
            raise
        _create_dir_all(parent)
    except OSError:
        if os.path.isdir(path):
            return
        raise
    try:
        os.mkdir(path, 0o700)
    except OSError:
        if not os.path.isdir(path):
            raise


def _create(path: str) -> None:
    """Creates the state home and any missing ancestors (0700) from the nearest existing
    ancestor, which must be a real, owned directory that group and others cannot write."""
    anchor = path
    while True:
        try:
            os.lstat(anchor)
            break
        except OSError:
            parent = os.path.dirname(anchor)
            if parent == anchor:
                raise _home_unsafe(path, "has no existing ancestor to create it in") from None
            anchor = parent
    try:
        st = os.lstat(anchor)
    except OSError as e:
        raise _home_io(anchor, "lstat", e) from None
    owned = st.st_uid == _fsops.euid()
    if _fsops.file_kind(st.st_mode) != _fsops.S_IFDIR or not owned or st.st_mode & 0o022 != 0:
        raise _home_unsafe(
            anchor,
            f"cannot create the state home {path} here: the nearest existing ancestor must be a real directory owned by you and not writable by group or others",
        )
    try:
        _create_dir_all(path)
    except OSError as e:
        raise _home_io(path, "mkdir", e) from None
    try:
        os.chmod(path, 0o700)
    except OSError as e:
        raise _home_io(path, "chmod 700", e) from None
    try:
        fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def _claim(dir_fd: int, path: str) -> None:
    """Publishes the reference's ownership marker if absent (temp, fsync, link, fsync), and
    checks an existing one is exactly it."""
    marker = os.path.join(path, MARKER)
    try:
        fd = os.open(MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        stage = f".io-state.stage-{os.getpid()}-{uuid.uuid4()}.json"
        try:
            try:
                _fsops.write_new_file(dir_fd, stage, MARKER_CONTENT.encode())
                try:
                    os.link(stage, MARKER, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
                except FileExistsError:
                    pass
            finally:
                try:
                    os.unlink(stage, dir_fd=dir_fd)
                except OSError:
                    pass
        except OSError as e:
            raise _home_io(marker, "publishing the state home marker", e) from None
        try:
            os.fsync(dir_fd)
        except OSError as e:
            raise _home_io(path, "fsync", e) from None
        return
    except OSError as e:
        if e.errno == _errno.ELOOP:
            raise _home_unsafe(marker, "the state home marker is a symbolic link; remove it") from None
        raise _home_io(marker, "open", e) from None
    try:
        try:
            st = os.fstat(fd)
        except OSError as e:
            raise _home_io(marker, "fstat", e) from None
        try:
            text: Optional[str] = os.read(fd, 257).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            text = None
    finally:
        os.close(fd)
    private = st.st_mode & 0o170077 == 0o100000 and st.st_uid == _fsops.euid()
    if text is None or not private or text != MARKER_CONTENT:
        raise _home_unsafe(marker, "the state home marker is not the expected private file; inspect it before going on")


def select_state_home(flag: Optional[str] = None) -> Tuple[str, str]:
    """Chooses the state home path (`StateHome::select`): `flag` > `PROCLEASE_STATE_HOME` >
    `GHOSTGET_STATE_HOME` > `$XDG_DATA_HOME/proclease` > `~/.local/share/proclease` (blank
    variables are ignored); the absolute path and where it came from (`flag`,
    `proclease-variable`, `ghostget-variable`, `default`)."""

    def var(name: str) -> Optional[str]:
        value = os.environ.get(name)
        return value if value is not None and value.strip() != "" else None

    if flag is not None:
        path, source = flag, "flag"
    elif var("PROCLEASE_STATE_HOME"):
        path, source = var("PROCLEASE_STATE_HOME"), "proclease-variable"
    elif var("GHOSTGET_STATE_HOME"):
        path, source = var("GHOSTGET_STATE_HOME"), "ghostget-variable"
    elif var("XDG_DATA_HOME"):
        path, source = os.path.join(var("XDG_DATA_HOME"), "proclease"), "default"
    else:
        home = var("HOME")
        if home is None:
            raise StateHomeError("unconfigured", "no state home: set --state-home or PROCLEASE_STATE_HOME to a dedicated directory")
        path, source = os.path.join(home, ".local/share/proclease"), "default"
    assert path is not None
    return _absolute(path), source


class StateHome:
    """An opened, validated state home (`home::StateHome`): its physical path (for messages)
    and an `O_NOFOLLOW` descriptor whose identity was checked against the path; every store path
    is relative to the descriptor."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def open(cls, path: str) -> "StateHome":
        """Validates, creates or claims (see above) and opens the state home at `path`
        (`StateHome::open`). Raises `StateHomeError`."""
        path = _physical(_absolute(path))
        if _is_shared_root(path):
            raise StateHomeError(
                "shared-root",
                f"{path}: a state home must be a dedicated child directory, not a filesystem, home, temporary, working or shared data root; choose e.g. ~/.local/share/proclease",
                path,
            )
        try:
            st: Optional[os.stat_result] = os.lstat(path)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise _home_io(path, "lstat", e) from None
        if st is not None:
            _validate_present(path, st)
        else:
            _create(path)
        try:
            fd = os.open(path, _fsops.DIR_FLAGS)
        except OSError as e:
            if e.errno == _errno.ELOOP:
                raise _home_unsafe(path, "the state home is a symbolic link; point proclease at the real directory") from None
            raise _home_io(path, "open", e) from None
        try:
            try:
                opened = os.fstat(fd)
            except OSError as e:
                raise _home_io(path, "fstat", e) from None
            try:
                now = os.lstat(path)
            except OSError as e:
                raise _home_io(path, "lstat", e) from None
            if opened.st_dev != now.st_dev or opened.st_ino != now.st_ino:
                raise _home_unsafe(path, "the state home changed while it was opened; retry")
            _claim(fd, path)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# ================================================================================================
# Bounded waits (lock_wait.rs) and the per-collection kernel lock (state_store/lock.rs)
#
# The per-collection writer lock is a kernel `flock` on a lock file under
# `<state home>/.proclease/locks/`, never inside a collection and never unlinked (unlinking a
# lock file lets two writers lock two different inodes). The kernel drops the lock when its
# holder dies, so a crash can never leave a collection locked.
#
# One bound per operation: a host operation may open `operation(bound)` on its thread; every wait
# inside it waits at most what is left of that bound, however many locks and attempts the
# operation takes.
# ================================================================================================

#: How long a wait stays silent.
TELL_AFTER = 1.0
#: How long a writer waits for another live writer of the same collection before giving up with
#: a `contended` error, outside a bounded operation (inside one, the operation's bound governs).
WAIT = 10.0
#: How long one write waits for another program's mutation claim on the same record (a live
#: ghostget holds one for a single write).
CLAIM_WAIT = 0.125
#: What to do about another program's mutation claim that stays.
CLAIM_HINT = (
    "another program (ghostget, or a proclease that predates kernel locks) is writing this record; retry once it is done, "
    "and if its claim stays, that program is stuck: end it (a dead holder's claim is removed by the next write)"
)
#: What to do about a lock's holder that stays.
LOCK_HINT = "continue a stopped holder (`kill -CONT PID`, or `fg` in its terminal) or end it; a holder that dies releases the lock"

_operation = threading.local()


@contextlib.contextmanager
def operation(bound: float) -> Iterator[None]:
    """One operation's bound on this thread (`lock_wait::Operation::begin`), in seconds: every
    wait inside it waits at most what is left of it. An operation opened inside another is part
    of it: the outer bound stays."""
    outermost = getattr(_operation, "deadline", None) is None
    if outermost:
        _operation.deadline = time.monotonic() + bound
    try:
        yield
    finally:
        if outermost:
            _operation.deadline = None


def remaining(own: float) -> float:
    """`own`, or what is left of this thread's operation when that is less
    (`lock_wait::remaining`)."""
    deadline = getattr(_operation, "deadline", None)
    if deadline is None:
        return own
    return min(own, max(0.0, deadline - time.monotonic()))


def operation_bound(own: float) -> float:
    """The bound of a wait whose own bound is `own` when no operation is open: inside an
    operation, what is left of it; `own` outside one (`lock_wait::operation_bound`)."""
    deadline = getattr(_operation, "deadline", None)
    if deadline is None:
        return own
    return max(0.0, deadline - time.monotonic())


def process_words(pid: int) -> str:
    """`pid` as a holder: `pid P (COMMAND, STATE)` from `/proc` (`lock_wait::process`)."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            command = f.read().rstrip()
    except OSError:
        command = "?"
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            stat = f.read()
    except OSError:
        stat = ""
    _, sep, rest = stat.rpartition(") ")
    letter = rest[:1] if sep else ""
    state = {
        "T": "stopped",
        "t": "stopped",
        "R": "running",
        "S": "sleeping",
        "D": "in uninterruptible sleep",
        "Z": "a zombie",
    }.get(letter, "state unknown")
    return f"pid {pid} ({command}, {state})"


def lock_holder(fd: int) -> Optional[int]:
    """The pid `/proc/locks` shows holding a lock on `fd`'s inode (not a waiter), if any
    (`lock_wait::holder`)."""
    try:
        st = os.fstat(fd)
        with open("/proc/locks", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    major, minor, own = os.major(st.st_dev), os.minor(st.st_dev), os.getpid()
    for line in text.splitlines():
        # `N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE 0 EOF`; waiters have `->` after `N:`.
        fields = line.split()
        if len(fields) < 6 or fields[1] == "->":
            continue
        device = fields[5].split(":")
        try:
            same = len(device) >= 3 and int(device[0], 16) == major and int(device[1], 16) == minor and int(device[2]) == st.st_ino
            pid = int(fields[4])
        except ValueError:
            continue
        if same and pid > 0 and pid != own:
            return pid
    return None


def _holder_words(pid: Optional[int]) -> str:
    return process_words(pid) if pid is not None else "another process (not shown in /proc/locks)"


#: The lock every lease of a new directory is made under (`state_store::LEASING_LOCK`).
LEASING_LOCK = "directory-lease-creation.lock"


def wait_for_lock(fd: int, lock: str, bound: float) -> bool:
    """Takes `fd`'s exclusive `flock`, waiting at most `bound` seconds (less inside an
    operation) for another holder (`lock_wait::lock`): True when taken, False at the bound.
    After `TELL_AFTER` the wait logs once who holds the lock. Raises the lock call's OSError."""
    bound = remaining(bound)
    start = time.monotonic()
    pause = 0.0002
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        waited = time.monotonic() - start
        if waited >= bound:
            log.warning("waited %d ms for %s, held by %s: %s", int(waited * 1000), lock, _holder_words(lock_holder(fd)), LOCK_HINT)
            return False
        if not told and waited >= TELL_AFTER:
            told = True
            log.warning("waiting for %s holding %s (for at most %.1f s more)", _holder_words(lock_holder(fd)), lock, bound - waited)
        time.sleep(pause)
        pause = min(pause * 2, 0.020)


class CollectionLock:
    """A held collection lock (`lock::CollectionLock`); `release()` (or leaving its `with`)
    unlocks explicitly — closing the descriptor alone would leave the lock held while a child
    forked meanwhile still has a copy of it — and closes it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            except OSError:
                pass
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "CollectionLock":
        return self

    def __exit__(self, *_: Any) -> None:
        self.release()


def take_lock(locks_fd: int, name: str) -> Optional[CollectionLock]:
    """Locks `name` (created 0600 if absent; opened read-only on a read-only filesystem) in the
    lock directory, waiting at most `WAIT` — or, inside a bounded operation, what is left of the
    operation's bound (`lock::lock`). None at the bound; raises the OSError of the lock file."""
    try:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=locks_fd)
    except OSError as e:
        if e.errno != _errno.EROFS:
            raise
        # A read-only state home: an existing lock file still locks (flock needs no write
        # access), so readers work; without one there is nothing to lock and nothing can be
        # written: the error is the filesystem's (EROFS).
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=locks_fd)
        except FileNotFoundError:
            raise _fsops.errno_error(_errno.EROFS) from None
    try:
        taken = wait_for_lock(fd, f".proclease/locks/{name}", operation_bound(WAIT))
    except BaseException:
        os.close(fd)
        raise
    if not taken:
        os.close(fd)
        return None
    return CollectionLock(fd)


# ================================================================================================
# The store's failures (StoreError and failure_of in state_store/mod.rs)
# ================================================================================================


class StoreError(HostError):
    """A store failure: `str()` is the Rust `StoreError`'s Display, `payload` the WIT `failure`
    record `failure_of` makes of it (kind, message, errno, path, operation). Raising it from a
    `state-store` import returns that failure to the component."""

    @property
    def kind(self) -> str:
        return self.payload.kind


def contended(path: str) -> StoreError:
    """Another live writer held the collection's lock (or a claim) longer than the store waits
    (the reference's `state file mutation is already active`)."""
    message = f"{path}: state file mutation is already active (another process, proclease or ghostget, is writing this record); retry in a moment"
    return StoreError(failure("contended", message, path=path))


def refused(path: str, reason: str) -> StoreError:
    """The path is not a safe relative path inside the state layout."""
    return StoreError(failure("refused", f"{path}: refused: {reason}", path=path))


def unsafe(path: str, reason: str) -> StoreError:
    """Something on disk is not safe to trust; nothing was changed."""
    return StoreError(failure("unsafe", f"{path}: unsafe: {reason}", path=path))


def claim_refused(path: str, reason: str) -> StoreError:
    """The reference's mutation-claim protocol refused to go on (§3.5: an owner that cannot be
    judged, two holders, a malformed claim, …); nothing was changed. Kind `unsafe`."""
    return StoreError(failure("unsafe", f"{path}: {reason}", path=path))


def io_error(path: str, operation: str, error: OSError) -> StoreError:
    """An I/O error: `<path>: <operation> failed: <strerror> (os error N)`, kind from the errno
    (`crate::error::io_failure`); kind `io` without an errno."""
    if error.errno is not None:
        return StoreError(os_failure(error, path, operation))
    return StoreError(failure("io", f"{path}: {operation} failed: {error}", path=path, operation=operation))


def _segments_or_refuse(path: str) -> List[str]:
    try:
        return path_segments(path)
    except PathRefused as e:
        raise refused(path, str(e)) from None


def split(path: str) -> Tuple[List[str], str]:
    """Splits a record path into its parent directory segments and file name (`split`)."""
    segments = _segments_or_refuse(path)
    if len(segments) < 2:
        raise refused(path, "a record must be nested inside a state directory")
    return segments[:-1], segments[-1]


# ================================================================================================
# The store (state_store/mod.rs)
# ================================================================================================

#: The most entries a collection listing returns (§3.3 snapshot).
MAX_ENTRIES = 10_000
#: The most names one batch read takes (§3.3 batch).
MAX_BATCH_NAMES = 1_000
#: The largest record the store writes or reads for a compare-and-swap: 2 MiB (§3.2).
MAX_RECORD_BYTES = 2 << 20
#: The largest per-file bound of a batch read: 2 MiB; aggregate: 64 MiB (§3.3).
MAX_BATCH_FILE_BYTES = 2 << 20
MAX_BATCH_TOTAL_BYTES = 64 << 20

#: How often a store handle's writes sweep the staging directory for crashed writers'
#: temporaries (snapshots for recovery always do), seconds.
STAGING_SWEEP_INTERVAL = 1.0

#: Where the store keeps its own files, inside the state home.
INTERNAL = ".proclease"


def check_hash(path: str, expected: str) -> None:
    if not is_digest(expected):
        raise refused(path, "expected private state content hash is invalid")


def check_size(path: str, content: str) -> None:
    if len(content.encode()) > MAX_RECORD_BYTES:
        raise refused(path, f"content exceeds {MAX_RECORD_BYTES} bytes")


def check_batch(path: str, names: Sequence[str], max_bytes_per_file: int, max_total_bytes: int) -> List[str]:
    """The checks of a batch read's request, before anything is read (§3.3; `check_batch`): the
    directory's segments, or the reference's refusal."""
    segments = _segments_or_refuse(path)
    if max_bytes_per_file > MAX_BATCH_FILE_BYTES:
        raise refused(path, "private state batch per-file byte bound is invalid")
    if max_total_bytes > MAX_BATCH_TOTAL_BYTES:
        raise refused(path, "private state batch aggregate byte bound is invalid")
    if len(names) > MAX_BATCH_NAMES:
        raise refused(path, "private state batch file count is invalid")
    if any(not is_safe_name(n) for n in names):
        raise refused(path, "private state batch contains an invalid file name")
    if len(set(names)) != len(names):
        raise refused(path, "private state batch file names must be unique")
    return segments


def collection_identity(st: os.stat_result) -> Rec:
    """A `collection-identity`: device and inode, decimal."""
    return rec(device=str(st.st_dev), inode=str(st.st_ino))


def parse_u64(text: str) -> Optional[int]:
    """Rust's `str::parse::<u64>`: an optional `+`, then ASCII digits, below 2^64."""
    digits = text[1:] if text.startswith("+") else text
    if not claims.is_ascii_digits(digits):
        return None
    value = int(digits)
    return value if value < 2**64 else None


def temporary_owner(name: str, boot_id: str) -> Optional[Owner]:
    """The writer a staging temporary name `<pid>-<start id>-<uuid>.tmp` records, on this boot
    (`temporary_owner`)."""
    if not name.endswith(".tmp"):
        return None
    pid_text, sep, rest = name[: -len(".tmp")].partition("-")
    if not sep:
        return None
    start, sep, rest_id = rest.partition("-")
    if not sep:
        return None
    pid = parse_u64(pid_text)
    if pid is None or pid == 0:
        return None
    if not (is_digest(start) and len(rest_id.encode()) == 36):
        return None
    return Owner(pid, boot_id, start)


def _same_inode(a_dir: int, a_name: str, b_dir: int, b_name: str) -> bool:
    """Whether `a_name` in `a_dir` and `b_name` in `b_dir` are the same inode."""
    try:
        a, b = _fsops.lstat(a_dir, a_name), _fsops.lstat(b_dir, b_name)
    except OSError:
        return False
    return a is not None and b is not None and a.st_ino == b.st_ino and a.st_dev == b.st_dev


def _unlink_quietly(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def _read_record(dir_fd: int, name: str, path: str, max_bytes: int) -> Optional[bytes]:
    """Reads a record file: None when absent; an error when unsafe or oversized (`read_record`).
    A file that changed while it was read (another process replaced or removed it) is read
    again, a few times, so that a reader racing a writer sees the old file, the new one, or
    none — and only a file that keeps changing is an error."""
    for _ in range(4):
        try:
            fd = _fsops.open_read(dir_fd, name)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == _errno.ELOOP:
                raise unsafe(path, "is a symbolic link; the store never follows them") from None
            raise io_error(path, "open", e) from None
        try:
            try:
                st = os.fstat(fd)
            except OSError as e:
                raise io_error(path, "fstat", e) from None
            reason = _fsops.unsafe_file_reason(st)
            if reason is not None:
                raise unsafe(path, reason)
            try:
                data = _fsops.read_stable(fd, st, max_bytes)
            except OSError as e:
                raise io_error(path, "read", e) from None
        finally:
            os.close(fd)
        if data == _fsops.TOO_LARGE:
            raise unsafe(path, f"larger than {max_bytes} bytes")
        if data == _fsops.CHANGED:
            continue
        assert isinstance(data, bytes)
        return data
    raise unsafe(path, "state file changed while it was read, again and again; retry when its writers are done")


def _invalid(reason: str) -> Variant:
    return Variant("invalid", reason)


def _batch_read_one(dir_fd: int, name: str, per_file: int, remaining_bytes: List[int]) -> Variant:
    """One file of a batch read (`batch_read_one`): `Variant('present', text)`,
    `Variant('absent')` or `Variant('invalid', reason)`; `remaining_bytes[0]` is the aggregate
    budget left."""
    try:
        fd = _fsops.open_read(dir_fd, name)
    except FileNotFoundError:
        return Variant("absent")
    except OSError as e:
        return _invalid("unsafe-file" if e.errno == _errno.ELOOP else "unreadable")
    try:
        try:
            st = os.fstat(fd)
        except OSError:
            return _invalid("unreadable")
        if _fsops.unsafe_file_reason(st) is not None:
            return _invalid("unsafe-file")
        if st.st_size > per_file:
            return _invalid("file-byte-bound")
        if st.st_size > remaining_bytes[0]:
            return _invalid("aggregate-byte-bound")
        try:
            data = _fsops.read_stable(fd, st, per_file)
        except OSError:
            return _invalid("unreadable")
    finally:
        os.close(fd)
    if data == _fsops.TOO_LARGE:
        return _invalid("file-byte-bound")
    if data == _fsops.CHANGED:
        return _invalid("changed-during-read")
    assert isinstance(data, bytes)
    # The name must still be this inode.
    try:
        now = _fsops.lstat(dir_fd, name)
    except OSError:
        now = None
    if now is None or now.st_ino != st.st_ino or now.st_dev != st.st_dev:
        return _invalid("changed-during-read")
    remaining_bytes[0] -= len(data)
    try:
        return Variant("present", data.decode("utf-8"))
    except UnicodeDecodeError:
        return _invalid("invalid-utf8")


def _private_dir(parent_fd: int, name: str, label: str) -> int:
    """Opens (creating 0700 if absent) a private directory of the store's own (`private_dir`)."""
    try:
        _fsops.create_private_dir(parent_fd, name)
    except OSError as e:
        raise io_error(label, "mkdir", e) from None
    try:
        fd = _fsops.open_dir(parent_fd, name)
    except OSError as e:
        if e.errno == _errno.ELOOP:
            raise unsafe(label, "is a symbolic link") from None
        raise io_error(label, "open", e) from None
    try:
        st = os.fstat(fd)
    except OSError as e:
        os.close(fd)
        raise io_error(label, "fstat", e) from None
    if st.st_uid != _fsops.euid() or st.st_mode & 0o777 != 0o700:
        os.close(fd)
        raise unsafe(label, "must be owned by you with mode 0700")
    return fd


@contextlib.contextmanager
def _owned(fd: int) -> Iterator[int]:
    """Closes `fd` when the block ends."""
    try:
        yield fd
    finally:
        os.close(fd)


class StateStore:
    """The private state store on one state home (`state_store::StateStore`).

    `home` is the state home's path, validated, created or claimed like `home.rs` does;
    `processes` gives `self_identity()` (this process's `Rec(pid, boot_id, process_start_id)`,
    which names its temporaries and owns its mutation claims) and `current_boot_id()`; `judge`
    says whether a recorded writer is alive (`exact-live-owner`, `different-or-dead`,
    `unknown`).

    The WIT functions of `state-store` take and return values as wasmtime-py passes them, and
    raise `StoreError` (a `HostError` holding the `failure` record) for the err case."""

    def __init__(self, home: str, processes: Any, judge: Callable[[Rec], str]) -> None:
        self.home = StateHome.open(home)
        self.liveness = Liveness(processes, judge)
        self._staging = -1
        self._locks = -1
        self._leasing = -1
        try:
            internal = _private_dir(self.home.fd, INTERNAL, INTERNAL)
            with _owned(internal):
                self._staging = _private_dir(internal, "staging", ".proclease/staging")
                self._locks = _private_dir(internal, "locks", ".proclease/locks")
        except BaseException:
            self.close()
            raise
        self._opened_at = time.monotonic()
        #: When the staging directory was last swept, in ms since `_opened_at` plus one (0: never).
        self._swept_ms = 0
        self._sweep_guard = threading.Lock()

    @property
    def home_path(self) -> str:
        """The state home's physical path (for messages; all access goes through descriptors)."""
        return self.home.path

    def close(self) -> None:
        """Closes the store's descriptors (the Rust's drop)."""
        for attr in ("_staging", "_locks"):
            fd = getattr(self, attr, -1)
            if fd >= 0:
                os.close(fd)
                setattr(self, attr, -1)
        self.home.close()

    def __enter__(self) -> "StateStore":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    # --- For the host and the catalog -----------------------------------------------------------

    def lock_file(self, name: str) -> int:
        """Opens (creating 0600 if absent) the lock file `name` in the store's own lock directory
        (`.proclease/locks/`, never inside a collection), for a kernel lock of the caller's: its
        descriptor, which the caller closes (`StateStore::lock_file`)."""
        if not is_safe_name(name):
            raise OSError(_errno.EINVAL, "unsafe lock name")
        return os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self._locks)

    def open_directory(self, path: str) -> Optional[int]:
        """The directory at `path` below the state home, opened without following symbolic links
        and checked like every store directory (owned, mode 0700); None when absent. The caller
        closes it (`StateStore::open_directory`)."""
        return self._walk(path, _segments_or_refuse(path), False)

    # --- The WIT functions ------------------------------------------------------------------------

    def read_if_present(self, path: str, max_bytes: int) -> Rec:
        """`read-if-present`: `Rec(text=...)`, text None when the file or a parent is absent."""
        return rec(text=self.read_text_if_present(path, max_bytes))

    def create_if_absent(self, path: str, content: str) -> bool:
        """`create-if-absent` (`createPrivateJsonIfAbsent`, §3.3): True when created, False when
        a file was already there. Never overwrites. Missing parent directories are created
        (0700)."""
        segments, name = split(path)
        check_size(path, content)
        dir_fd = self._walk(path, segments, True)
        if dir_fd is None:
            raise unsafe(path, "parent vanished")
        with _owned(dir_fd), self._lock(path, segments):
            temp = self._stage(path, content.encode())
            try:
                held, created = self._with_claim(path, dir_fd, name, lambda: self._link_new(path, dir_fd, name, temp))
            finally:
                _unlink_quietly(self._staging, temp)
            if not held:
                raise contended(path)
            return created

    def replace_if_unchanged(self, path: str, expected_sha256: str, content: str) -> bool:
        """`replace-if-unchanged` (`writePrivateJsonIfUnchanged`, §3.3): replaces the file with
        `content` only if its bytes hash to `expected_sha256` at the instant of the swap; False
        when the file is absent or differs (or another program's claim stayed)."""
        segments, name = split(path)
        check_hash(path, expected_sha256)
        check_size(path, content)
        dir_fd = self._walk(path, segments, False)
        if dir_fd is None:
            return False
        with _owned(dir_fd), self._lock(path, segments):
            temp = self._stage(path, content.encode())

            def swap() -> bool:
                old = _read_record(dir_fd, name, path, MAX_RECORD_BYTES)
                if old is None or sha256_hex(old) != expected_sha256:
                    return False
                try:
                    os.rename(temp, name, src_dir_fd=self._staging, dst_dir_fd=dir_fd)
                except OSError as e:
                    raise io_error(path, "rename into the collection", e) from None
                try:
                    _fsops.fsync_dir(dir_fd)
                except OSError as e:
                    self._restore(path, dir_fd, name, old, True)
                    raise io_error(path, "fsync of the collection", e) from None
                return True

            try:
                held, replaced = self._with_claim(path, dir_fd, name, swap)
            finally:
                # Gone when it was renamed into place; otherwise it is removed here.
                _unlink_quietly(self._staging, temp)
            return bool(held and replaced)

    def replace_if_unchanged_lazily(self, path: str, expected_sha256: str, content: str) -> bool:
        """`replace-if-unchanged-lazily`: the WIT lets a host skip the collection's fsync for a
        change a power loss makes harmless (a run's phase updates); this host syncs anyway, as
        `replace_if_unchanged` (only slower than the native host)."""
        return self.replace_if_unchanged(path, expected_sha256, content)

    def remove_if_unchanged(self, path: str, expected_sha256: str) -> bool:
        """`remove-if-unchanged` (`removePrivateStateFileIfUnchanged`, §3.3): removes the file
        only if its bytes hash to `expected_sha256` at the instant of removal; False when absent
        or different."""
        segments, name = split(path)
        check_hash(path, expected_sha256)
        dir_fd = self._walk(path, segments, False)
        if dir_fd is None:
            return False
        with _owned(dir_fd), self._lock(path, segments):
            held, removed = self._with_claim(path, dir_fd, name, lambda: self._remove_read(path, dir_fd, name, expected_sha256))
            return bool(held and removed)

    def ensure_private_directory(self, path: str) -> Rec:
        """`ensure-private-directory` (`ensurePrivateStateDirectory`, §3.3): creates (mode 0700)
        each missing directory of `path` and verifies the existing ones (owned, mode 0700, not a
        symbolic link); `Rec(device, inode)` of the last."""
        segments = _segments_or_refuse(path)
        dir_fd = self._walk(path, segments, True)
        if dir_fd is None:
            raise unsafe(path, "vanished while created")
        with _owned(dir_fd):
            try:
                return collection_identity(os.fstat(dir_fd))
            except OSError as e:
                raise io_error(path, "fstat", e) from None

    def snapshot(self, path: str, recover_orphans: bool) -> Rec:
        """`snapshot`: `Rec(snapshot=None | Rec(identity, entries))` (see `snapshot_of`)."""
        return rec(snapshot=self.snapshot_of(path, recover_orphans))

    def lock_leasing(self) -> Rec:
        """`lock-leasing`: takes `.proclease/locks/directory-lease-creation.lock` (the lock every
        lease of a new directory is made under; recovery holds it from its last look at the
        collection until a directory is removed: `docs/deviations.md` 24), waiting at most the
        operation's bound (`state_store::take_leasing_lock`). `Rec(held=True)`.

        Errors: `contended` at the bound (the holder is logged); the lock file's OSError."""
        if self._leasing >= 0:
            return rec(held=True)
        label = f"{self.home_path}/.proclease/locks/{LEASING_LOCK}"
        try:
            fd = self.lock_file(LEASING_LOCK)
        except OSError as e:
            raise io_error(label, "open of the lease-creation lock", e) from None
        try:
            taken = wait_for_lock(fd, label, operation_bound(WAIT))
        except OSError as e:
            os.close(fd)
            raise io_error(label, "lock of the lease-creation lock", e) from None
        if not taken:
            holder = _holder_words(lock_holder(fd))
            os.close(fd)
            raise StoreError(failure("contended", f"waited for {label}, held by {holder}: {LOCK_HINT}", path=label))
        self._leasing = fd
        return rec(held=True)

    def unlock_leasing(self) -> None:
        """`unlock-leasing`: releases what `lock_leasing` took (nothing when not held)."""
        fd, self._leasing = self._leasing, -1
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            except OSError:
                pass
            os.close(fd)

    def read_batch(self, path: str, names: Sequence[str], max_bytes_per_file: int, max_total_bytes: int, expected: Any) -> List[Rec]:
        """`read-batch` (`readPrivateStateFilesBatch`, §3.3): reads files of a collection whose
        identity must be `expected` (`Rec(device, inode)`) before and after; results in request
        order, `Rec(name, status)` with status `Variant('present', text)`, `Variant('absent')`
        or `Variant('invalid', reason)`.

        Errors: bounds out of range (per file <= 2 MiB, total <= 64 MiB, <= 1 000 unique safe
        names); the directory absent or no longer `expected`."""
        names = list(names)
        segments = check_batch(path, names, max_bytes_per_file, max_total_bytes)
        want = (str(expected.device), str(expected.inode))
        dir_fd = self._walk(path, segments, False)
        if dir_fd is None:
            raise unsafe(path, "private state batch directory is absent")

        def changed() -> StoreError:
            return unsafe(path, "private state batch directory changed identity")

        def identity(fd: int) -> Tuple[str, str]:
            st = os.fstat(fd)
            return (str(st.st_dev), str(st.st_ino))

        with _owned(dir_fd):
            try:
                before = identity(dir_fd)
            except OSError as e:
                raise io_error(path, "fstat", e) from None
            if before != want:
                raise changed()
            budget = [max_total_bytes]
            results = [rec(name=name, status=_batch_read_one(dir_fd, name, max_bytes_per_file, budget)) for name in names]
            # The directory must still be the same one at the same path.
            reopened = self._walk(path, segments, False)
            if reopened is None:
                raise changed()
            with _owned(reopened):
                try:
                    now = identity(reopened)
                except OSError as e:
                    raise io_error(path, "fstat", e) from None
            try:
                still = identity(dir_fd)
            except OSError:
                still = None
            if now != want or still != want:
                raise changed()
            return results

    # --- The same, with Python values (for the catalog and the host) -----------------------------

    def read_text_if_present(self, path: str, max_bytes: int) -> Optional[str]:
        """The file's text, or None when it or a parent directory is absent
        (`readPrivateStateFileIfPresent`, §3.3; `StateStore::read_if_present`). The file must be
        a private, owned, regular file of at most `max_bytes`, unchanged while read, and
        UTF-8."""
        segments, name = split(path)
        dir_fd = self._walk(path, segments, False)
        if dir_fd is None:
            return None
        with _owned(dir_fd):
            data = _read_record(dir_fd, name, path, max_bytes)
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise unsafe(path, "not valid UTF-8") from None

    def snapshot_of(self, path: str, recover_orphans: bool) -> Optional[Rec]:
        """Lists a collection directory; None when it (or a parent) is absent
        (`snapshotPrivateStateDirectory`, §3.3; `StateStore::snapshot`). Every listing first
        performs the crash recovery of §3.9 in the collection; with `recover_orphans`, also the
        claims of gone owners (§3.5) and the store's own staged temporaries of provably dead
        writers. Entries sorted by name in UTF-16 code-unit order.

        Errors: more than `MAX_ENTRIES` entries; an unsafe entry name; a sub-directory that is
        not owned with mode 0700."""
        segments = _segments_or_refuse(path)
        if recover_orphans:
            self._remove_dead_temporaries()
        dir_fd = self._walk(path, segments, False)
        if dir_fd is None:
            return None
        # proclease's writers hold this lock with their claims: the listing never sees them.
        with _owned(dir_fd), self._lock(path, segments):
            try:
                claims.recover_directory(dir_fd, self.liveness, recover_orphans)
            except claims.ArbitrationError as e:
                raise claim_refused(path, str(e)) from None
            try:
                st = os.fstat(dir_fd)
            except OSError as e:
                raise io_error(path, "fstat", e) from None
            try:
                raw_names = _fsops.list_names(dir_fd, MAX_ENTRIES)
            except _fsops.BoundExceeded:
                raise unsafe(path, f"the collection has more than {MAX_ENTRIES} entries") from None
            except OSError as e:
                raise io_error(path, "list", e) from None
            entries = []
            for raw in raw_names:
                try:
                    name: Optional[str] = raw.decode("utf-8")
                except UnicodeDecodeError:
                    name = None
                if name is None or not is_safe_name(name):
                    raise unsafe(path, f'state directory contains an unsafe entry name ("{escape_ascii(raw)}"): rename or remove it by hand')
                try:
                    entry = _fsops.lstat(dir_fd, name)
                except OSError as e:
                    raise io_error(path, "lstat", e) from None
                if entry is None:
                    continue  # removed while listed
                kind_bits = _fsops.file_kind(entry.st_mode)
                identity = None
                if kind_bits == _fsops.S_IFREG:
                    kind = "file"
                elif kind_bits == _fsops.S_IFLNK:
                    kind = "symbolic-link"
                elif kind_bits == _fsops.S_IFDIR:
                    if entry.st_uid != _fsops.euid() or entry.st_mode & 0o777 != 0o700:
                        raise unsafe(path, f"sub-directory {name} must be owned by you with mode 0700")
                    kind, identity = "directory", collection_identity(entry)
                else:
                    kind = "other"
                entries.append(rec(name=name, kind=kind, identity=identity))
            entries.sort(key=lambda e: e.name.encode("utf-16-be", "surrogatepass"))
            return rec(identity=collection_identity(st), entries=entries)

    # --- Internals ------------------------------------------------------------------------------

    def _walk(self, path: str, segments: Sequence[str], create: bool) -> Optional[int]:
        """Opens the directory of `segments` below the state home, one component at a time
        without following symbolic links, checking each is owned with mode 0700; creates missing
        ones when `create`. None when one is absent (and not created). The caller closes the
        descriptor (`StateStore::walk`)."""
        try:
            current = os.dup(self.home.fd)
        except OSError as e:
            raise io_error(path, "dup", e) from None
        try:
            for segment in segments:
                # Open first: the directory nearly always exists, and a `mkdirat` that fails
                # with EEXIST costs as much as the open it precedes.
                try:
                    nxt = self._open_segment(path, current, segment, create)
                except FileNotFoundError:
                    os.close(current)
                    return None
                except OSError as e:
                    if e.errno == _errno.ELOOP:
                        raise unsafe(path, f"{segment} is a symbolic link; the store never follows them") from None
                    if e.errno == _errno.ENOTDIR:
                        raise unsafe(path, f"{segment} is not a directory") from None
                    raise io_error(path, "open directory", e) from None
                os.close(current)
                current = nxt
                try:
                    st = os.fstat(current)
                except OSError as e:
                    raise io_error(path, "fstat", e) from None
                if st.st_uid != _fsops.euid() or st.st_mode & 0o777 != 0o700:
                    raise unsafe(path, f"directory {segment} must be owned by you with mode 0700 (chmod 700 it if it is yours)")
        except BaseException:
            os.close(current)
            raise
        return current

    @staticmethod
    def _open_segment(path: str, parent: int, segment: str, create: bool) -> int:
        try:
            return _fsops.open_dir(parent, segment)
        except FileNotFoundError:
            if not create:
                raise
        try:
            _fsops.create_private_dir(parent, segment)
        except OSError as e:
            raise io_error(path, "mkdir", e) from None
        return _fsops.open_dir(parent, segment)

    def _lock(self, path: str, parent: Sequence[str]) -> CollectionLock:
        """Takes the lock of the collection that holds `path`'s file: `.proclease/locks/` +
        `identity_digest("proclease-collection-lock", parent)` + `.lock` (`StateStore::lock`)."""
        name = f"{identity_digest('proclease-collection-lock', '/'.join(parent))}.lock"
        try:
            held = take_lock(self._locks, name)
        except OSError as e:
            raise io_error(path, "lock", e) from None
        if held is None:
            raise contended(path)
        return held

    def _stage(self, path: str, content: bytes) -> str:
        """Writes `content` to a fresh, fsynced temporary in the staging directory, named
        `<pid>-<process start id>-<uuid>.tmp` so that a later operation can prove its writer
        dead (`StateStore::stage`)."""
        self._sweep_staging_now_and_then()
        try:
            own = self.liveness.self_identity()
        except Exception as e:  # noqa: BLE001 - the identity's failure, whatever it is
            raise StoreError(failure("io", f"{path}: reading this process's identity failed: {e}", path=path, operation="reading this process's identity")) from None
        name = f"{own.pid}-{own.process_start_id}-{uuid.uuid4()}.tmp"
        try:
            _fsops.write_new_file(self._staging, name, content)
        except OSError as e:
            _unlink_quietly(self._staging, name)
            raise io_error(path, "write of the temporary", e) from None
        return name

    def _sweep_staging_now_and_then(self) -> None:
        """`_remove_dead_temporaries` at most once per `STAGING_SWEEP_INTERVAL` for this store
        handle: a writer's own temporaries never outlive its write, so only crashed writers leave
        any. A snapshot with `recover_orphans` always sweeps."""
        now = int((time.monotonic() - self._opened_at) * 1000) + 1
        with self._sweep_guard:
            last = self._swept_ms
            if last != 0 and now - last < STAGING_SWEEP_INTERVAL * 1000:
                return
            self._swept_ms = now
        self._remove_dead_temporaries()

    def _remove_dead_temporaries(self) -> None:
        """Removes temporaries whose writer is provably dead (another boot, no such process, or
        another process on that pid). A temporary of a live or unknown writer stays."""
        try:
            names = _fsops.list_names(self._staging, MAX_ENTRIES)
        except (OSError, _fsops.BoundExceeded):
            return
        try:
            boot_id = self.liveness.current_boot_id()
        except Exception:  # noqa: BLE001 - no boot id: nothing is proven
            return
        for raw in names:
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError:
                continue
            owner = temporary_owner(name, boot_id)
            if owner is not None and self.liveness.owner_status(owner) == claims.DIFFERENT_OR_DEAD:
                _unlink_quietly(self._staging, name)

    def _with_claim(self, path: str, dir_fd: int, name: str, mutate: Callable[[], Any]) -> Tuple[bool, Any]:
        """Runs `mutate` holding the reference's mutation claim on `name` in `dir_fd` (§3.5),
        after the crash recovery of `dir_fd` (§3.9) (`StateStore::with_claim`). The caller holds
        the collection's kernel lock, so the only writers this can lose to are other programs'
        (a running ghostget): a lost claim is retried after a short pause for at most
        `CLAIM_WAIT`; then `(False, None)`. Else `(True, what mutate returned)`."""

        def claim_error(e: claims.ArbitrationError) -> StoreError:
            # A failed system call keeps its errno; a refusal of the protocol keeps the
            # reference's message.
            if e.io is not None:
                return io_error(path, "taking the mutation claim", e.io)
            return claim_refused(path, e.message)

        own = claims.own_identity(self.liveness)
        if own is None:
            raise claim_refused(path, claims.IDENTITY_UNAVAILABLE)
        kind = claims.MutationClaim.for_leaf(name)
        try:
            claims.recover_directory(dir_fd, self.liveness, False)
            start = time.monotonic()
            bound = remaining(CLAIM_WAIT)
            pause = 0.001
            while True:
                held = claims.arbitrate(dir_fd, kind, self.liveness, own)
                if held is not None:
                    break
                waited = time.monotonic() - start
                if waited >= bound:
                    holder = claims.live_holder(dir_fd, kind, self.liveness)
                    log.warning("gave up: waited %d ms for the mutation claim of %s, held by %s: %s", int(waited * 1000), path, _holder_words(holder), CLAIM_HINT)
                    return False, None
                time.sleep(pause)
                pause = min(pause * 2, 0.020)
        except claims.ArbitrationError as e:
            raise claim_error(e) from None
        try:
            return True, mutate()
        finally:
            claims.release(dir_fd, held)

    def _link_new(self, path: str, dir_fd: int, name: str, temp: str) -> bool:
        """The create's critical section: links the staged `temp` at `name` and fsyncs the
        collection (`StateStore::link_new`)."""
        try:
            os.link(temp, name, src_dir_fd=self._staging, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            return False
        except OSError as e:
            raise io_error(path, "link into the collection", e) from None
        try:
            _fsops.fsync_dir(dir_fd)
        except OSError as e:
            # The caller is told the create failed, so it must not stay visible: unlink the name
            # again (it is still our inode: the record's claim is held).
            if _same_inode(self._staging, temp, dir_fd, name):
                _unlink_quietly(dir_fd, name)
            raise io_error(path, "fsync of the collection", e) from None
        return True

    def _restore(self, path: str, dir_fd: int, name: str, old: bytes, over_the_name: bool) -> None:
        """Puts `old` back at `name` after a visible change whose collection fsync failed: a
        fresh temporary with the old bytes, published over the name (`rename`, after a replace)
        or at the emptied name (`link`, after a removal: it never overwrites a file that
        appeared meanwhile), and the collection fsynced again. Best effort
        (`StateStore::restore`)."""
        try:
            back = self._stage(path, old)
        except StoreError:
            return
        try:
            if over_the_name:
                os.rename(back, name, src_dir_fd=self._staging, dst_dir_fd=dir_fd)
            else:
                os.link(back, name, src_dir_fd=self._staging, dst_dir_fd=dir_fd, follow_symlinks=False)
            published = True
        except OSError:
            published = False
        if published:
            try:
                _fsops.fsync_dir(dir_fd)
            except OSError:
                pass
        _unlink_quietly(self._staging, back)

    def _remove_read(self, path: str, dir_fd: int, name: str, expected_sha256: str) -> bool:
        """The removal's critical section: reads the record, compares, unlinks the inode read,
        and fsyncs the collection (putting the bytes back if that fails)
        (`StateStore::remove_read`)."""
        try:
            fd = _fsops.open_read(dir_fd, name)
        except FileNotFoundError:
            return False
        except OSError as e:
            if e.errno == _errno.ELOOP:
                raise unsafe(path, "is a symbolic link; remove it by hand after checking it") from None
            raise io_error(path, "open", e) from None
        with _owned(fd):
            try:
                before = os.fstat(fd)
            except OSError as e:
                raise io_error(path, "fstat", e) from None
            reason = _fsops.unsafe_file_reason(before)
            if reason is not None:
                raise unsafe(path, reason)
            try:
                data = _fsops.read_stable(fd, before, MAX_RECORD_BYTES)
            except OSError as e:
                raise io_error(path, "read", e) from None
        if data == _fsops.TOO_LARGE:
            raise unsafe(path, "larger than a record may be")
        if data == _fsops.CHANGED:
            return False
        assert isinstance(data, bytes)
        if sha256_hex(data) != expected_sha256:
            return False
        # Under the claim no cooperating writer can swap the name; still, remove only the inode
        # that was read.
        try:
            now = _fsops.lstat(dir_fd, name)
        except OSError as e:
            raise io_error(path, "lstat", e) from None
        if now is None or now.st_ino != before.st_ino or now.st_dev != before.st_dev:
            return False
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError as e:
            raise io_error(path, "unlink", e) from None
        try:
            _fsops.fsync_dir(dir_fd)
        except OSError as e:
            self._restore(path, dir_fd, name, data, False)
            raise io_error(path, "fsync of the collection", e) from None
        return True
