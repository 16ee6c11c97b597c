"""Directories under the workspace roots the user granted: the `workspace` import
(`wit/proclease.wit`, interface `workspace`; spec §6A.4 and §3.3 `removePrivateDirectoryTree`).

A port of `host/src/imports/workspace/mod.rs`. Two primitives, both confined to the granted
roots (opened once, as `O_NOFOLLOW` descriptors) and both walking paths component by component
without following a symbolic link:

* `Workspace.inspect` reports the physical facts of a directory (statx: device, inode, birth
  time, owner, mode; whether the path is its own realpath). The lease rules over those facts are
  the component's.
* `Workspace.remove_tree` removes a directory tree only while it still has the expected (device,
  inode, birth time): it renames the target to a quarantine name in its parent, re-verifies, and
  deletes descriptor-relative, never following a symbolic link and never crossing into another
  filesystem. Renames into quarantine and scans for quarantines hold a `flock` on the parent, so
  concurrent recoveries never miss a tree being removed. An interrupted quarantine of the same
  identity is completed only when its remover is provably dead (or is this process, and no
  thread of it is still deleting it). Quarantine names are the reference's
  (`.io-remove-<pid>-<uuid>.quarantine`), so ghostget, the native host and this one complete each
  other's.

Failures are raised as `HostError(failure)` (`types.failure`, kinds `refused`,
`identity-changed`, `io`, `permission`), their `path` the absolute workspace path, their
messages the native host's (`<path>: refused: <reason>`, `<path>: <reference message>`,
`<path>: <operation> failed: <strerror> (os error N)`).

Birth times come from `statx(2)` (`STATX_BTIME`), called through `ctypes` (`_linux.py`: glibc
>= 2.28, or the raw system call), as the native host does through rustix; a filesystem that
reports none gives `"0"`, as the WIT says.
"""

from __future__ import annotations

import errno as _errno
import os
import re
import stat as _stat
import threading
import uuid
from typing import Iterator, List, NamedTuple, Optional, Sequence, Tuple

from . import _linux
from ._fsops import open_dir
from ._wit import HostError, Rec, failure, os_failure

__all__ = ["Workspace", "MAX_SCAN_ENTRIES", "MAX_REMOVAL_ENTRIES", "directory_identity_of"]

#: The most entries a quarantine scan of a parent directory looks at (§3.3).
MAX_SCAN_ENTRIES = 100_000
#: The most entries one removal deletes before it gives up (a tree still growing under it).
MAX_REMOVAL_ENTRIES = 10_000_000
#: How deep a deletion descends while holding directory descriptors; deeper subtrees are first
#: moved up into the quarantine root (a rename inside the quarantine, never outside it).
MAX_OPEN_DEPTH = 64
#: How many names a deletion reads from a directory at a time.
NAMES_PER_READ = 4096
#: `MAX_PATH_UTF16` of proclease-core's `directory_lease::is_bounded_path`.
MAX_PATH_UTF16 = 4096

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


# --- statx and renameat2 (`_linux.py`) -----------------------------------------------------


class Statx(NamedTuple):
    """What `statx(2)` (or, where there is none, `lstat`) says of one file."""

    mode: int
    uid: int
    ino: int
    #: `st_dev` as `stat(2)` (and Node) report it: makedev of statx's major/minor pair.
    dev: int
    #: Birth time in ns since the epoch, 0 when the filesystem reports none.
    birthtime_ns: int


def _fs(name: str) -> bytes:
    return os.fsencode(name)


def statx(dir_fd: int, name: str, empty_path: bool = False) -> Optional[Statx]:
    """`statx(dir_fd, name, AT_SYMLINK_NOFOLLOW, BASIC_STATS | BTIME)` (or `AT_EMPTY_PATH` on
    `dir_fd` itself); None when absent (`ENOENT`). Port of `workspace/mod.rs::statx` and
    `fsops::directory_identity`'s birth-time rule.

    Raises OSError for any other error."""
    flags = _linux.AT_EMPTY_PATH if empty_path else _linux.AT_SYMLINK_NOFOLLOW
    try:
        buf = _linux.statx(dir_fd, _fs(name), flags)
    except OSError as error:
        if error.errno == _errno.ENOSYS:
            return _lstat_fallback(dir_fd, name, empty_path)
        raise
    if buf is None:
        return None
    birth = 0
    if buf.stx_mask & _linux.STATX_BTIME:
        birth = buf.stx_btime.tv_sec * 1_000_000_000 + buf.stx_btime.tv_nsec
    return Statx(buf.stx_mode, buf.stx_uid, buf.stx_ino, os.makedev(buf.stx_dev_major, buf.stx_dev_minor), birth)


def _lstat_fallback(dir_fd: int, name: str, empty_path: bool) -> Optional[Statx]:
    """Where the kernel has no statx: `lstat`, with a birth time only where `os.stat` gives one."""
    try:
        st = os.stat(dir_fd) if empty_path else os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    birth = getattr(st, "st_birthtime_ns", None)
    if birth is None and getattr(st, "st_birthtime", None) is not None:
        birth = int(st.st_birthtime * 1_000_000_000)
    return Statx(st.st_mode, st.st_uid, st.st_ino, st.st_dev, birth or 0)


def rename_noreplace(dir_fd: int, old: str, new_dir_fd: int, new: str) -> None:
    """`renameat2(…, RENAME_NOREPLACE)`: fails with `EEXIST` instead of replacing `new`.

    Raises OSError."""
    _linux.rename_noreplace(dir_fd, _fs(old), new_dir_fd, _fs(new))


# --- Descriptor-relative helpers (host/src/imports/fsops.rs) ---------------------------------


def _file_kind(mode: int) -> int:
    return mode & 0o170000


def _scan(dir_fd: int) -> Iterator[str]:
    """The names in a directory (without `.` and `..`), read through a fresh open of `.` (its
    own offset), as `fsops::names_where` / `some_names` do. Names are `str` with
    surrogateescape, so any byte name round-trips to the system calls."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                yield entry.name
    finally:
        os.close(fd)


class _BoundExceeded(Exception):
    """`fsops::list_names`'s `Err(None)`: more names than the bound."""


def list_names(dir_fd: int, bound: int) -> List[str]:
    """At most `bound` names of a directory (`fsops::list_names`). Raises `_BoundExceeded` beyond
    the bound, OSError on a read error."""
    names: List[str] = []
    for name in _scan(dir_fd):
        if len(names) == bound:
            raise _BoundExceeded()
        names.append(name)
    return names


def some_names(dir_fd: int, at_most: int) -> List[str]:
    """The first `at_most` names of a directory (`fsops::some_names`)."""
    names: List[str] = []
    if at_most <= 0:
        return names
    generator = _scan(dir_fd)
    try:
        for name in generator:
            names.append(name)
            if len(names) >= at_most:
                break
    finally:
        generator.close()
    return names


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def directory_identity_of(st: Statx) -> Rec:
    """The physical identity statx gives (§6A.4), `types.directory-identity`: device, inode,
    birth time in ns (`"0"` when the filesystem reports none). `fsops::directory_identity`."""
    return Rec(device=str(st.dev), inode=str(st.ino), birthtime_ns=str(st.birthtime_ns))


def _identity_tuple(identity: object) -> Tuple[str, str, str]:
    """A `directory-identity` record (a `Rec`, or any record with the WIT's kebab-case
    attributes) as a comparable tuple."""

    def field(name: str) -> str:
        for attribute in (name, name.replace("_", "-")):
            try:
                return getattr(identity, attribute)
            except AttributeError:
                continue
        raise TypeError(f"a directory identity has no {name}")

    return (field("device"), field("inode"), field("birthtime_ns"))


def _matches(st: Statx, expected: object) -> bool:
    """Identity equality: device and inode, and birth time (§6A.4). `workspace/mod.rs::matches`."""
    return (str(st.dev), str(st.ino), str(st.birthtime_ns)) == _identity_tuple(expected)


def _is_private_owned_dir(st: Statx) -> bool:
    return _file_kind(st.mode) == _stat.S_IFDIR and st.uid == os.geteuid() and st.mode & 0o777 == 0o700


def _facts(st: Statx, canonical: bool) -> Rec:
    """`workspace.directory-facts` of a statx (`workspace/mod.rs::facts`)."""
    return Rec(
        canonical=canonical,
        is_directory=_file_kind(st.mode) == _stat.S_IFDIR,
        owned=st.uid == os.geteuid(),
        mode=st.mode & 0o7777,
        identity=directory_identity_of(st),
    )


def _not_physical() -> Rec:
    """The facts of a path an ancestor of which is a symbolic link or not a directory."""
    return Rec(canonical=False, is_directory=False, owned=False, mode=0, identity=Rec(device="0", inode="0", birthtime_ns="0"))


def _utf16_len(text: str) -> int:
    return sum(2 if ord(c) > 0xFFFF else 1 for c in text)


def is_bounded_path(path: str) -> bool:
    """proclease-core's `directory_lease::is_bounded_path`: absolute and normalised (no trailing
    `/`, no `//`, `.` or `..`), at most 4096 UTF-16 code units, no NUL, CR or LF."""
    normalised = path == "/" or (path.startswith("/") and not path.endswith("/") and all(seg not in ("", ".", "..") for seg in path[1:].split("/")))
    return normalised and _utf16_len(path) <= MAX_PATH_UTF16 and not any(c in path for c in "\0\r\n")


# --- Failures (WorkspaceError and failure_of in workspace/mod.rs) -----------------------------


def _refused(path: str, reason: str) -> HostError:
    return HostError(failure("refused", f"{path}: refused: {reason}", path=path))


def _identity_changed(path: str, message: str) -> HostError:
    return HostError(failure("identity-changed", f"{path}: {message}", path=path))


def _io(path: str, operation: str, error: OSError) -> HostError:
    return HostError(os_failure(error, path, operation))


def _errno_error(code: int) -> OSError:
    return OSError(code, os.strerror(code))


# --- Quarantines ------------------------------------------------------------------------------

_QUARANTINE = re.compile(r"\.io-remove-([1-9][0-9]{0,9})-([0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12})\.quarantine")


def quarantine_pid(name: str) -> Optional[int]:
    """`^\\.io-remove-([1-9][0-9]{0,9})-<uuid v4>\\.quarantine$` → the remover's pid (a u32)."""
    match = _QUARANTINE.fullmatch(name)
    if match is None or not match.group(1).isascii():
        return None
    pid = int(match.group(1))
    return pid if pid <= 0xFFFFFFFF else None


def definitely_dead(pid: int) -> bool:
    """The kernel says no such process (`kill(pid, 0)` → `ESRCH`); anything else is no proof. A
    pid beyond i32 names no process."""
    if pid <= 0 or pid > 0x7FFFFFFF:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


class _ParentLock:
    """A kernel `flock` on a directory, through a descriptor of its own (released on `close`, or
    when the process dies). Serialises proclease processes' renames into and out of quarantine
    with their scans for quarantines in that directory; ghostget does not take it."""

    def __init__(self, parent_fd: int, path: str) -> None:
        # Anyone may take it (a user's `flock ~/jobs`): the wait is bounded and voiced like every
        # wait for another process (`workspace::ParentLock::take`, docs/deviations.md 21).
        from .state_store import WAIT, _holder_words, lock_holder, operation_bound, wait_for_lock

        self.fd: Optional[int] = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=parent_fd)
        label = f"the lock of {path}'s parent directory"
        try:
            taken = wait_for_lock(self.fd, label, operation_bound(WAIT))
        except OSError:
            self.close()
            raise
        if not taken:
            holder = _holder_words(lock_holder(self.fd))
            self.close()
            raise HostError(failure("contended", f"{path}: waited for {label}, held by {holder}", path=path, operation="lock of the parent"))

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


#: The quarantines this process is deleting right now (names carry a fresh UUID, so a name alone
#: identifies one): tells this process's abandoned quarantines (a removal that failed and
#: returned) from ones another thread is deleting.
_REMOVING: set = set()
_REMOVING_LOCK = threading.Lock()


def _removing_start(name: str) -> None:
    with _REMOVING_LOCK:
        _REMOVING.add(name)


def _removing_end(name: str) -> None:
    with _REMOVING_LOCK:
        _REMOVING.discard(name)


def _removing_active(name: str) -> bool:
    with _REMOVING_LOCK:
        return name in _REMOVING


# --- Deletion (delete_tree and remove_emptied in workspace/mod.rs) ----------------------------


class _Budget:
    def __init__(self, entries: int) -> None:
        self.left = entries

    def take(self) -> None:
        if self.left == 0:
            raise _errno_error(_errno.ENOSPC)
        self.left -= 1


def _unlinkat(dir_fd: int, name: str, directory: bool = False) -> None:
    if directory:
        os.rmdir(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def delete_tree(parent: int, name: str, device: int, budget: _Budget) -> None:
    """Deletes the tree `name` in `parent` (a quarantine the caller identified),
    descriptor-relative and iteratively: directories are opened `O_NOFOLLOW` (a directory
    swapped for a symbolic link is unlinked as a link, its target untouched), a directory on
    another device (a mount point) is refused (`EXDEV`), at most `MAX_OPEN_DEPTH` descriptors are
    open at once, and at most `MAX_REMOVAL_ENTRIES` entries are deleted (`ENOSPC` beyond).
    Port of `workspace/mod.rs::delete_tree`. Raises OSError."""
    root = open_dir(parent, name)
    stack: List[int] = [root]
    try:
        if os.fstat(root).st_dev != device:
            raise _errno_error(_errno.EXDEV)
        flattened = 0
        while stack:
            names = some_names(stack[-1], NAMES_PER_READ)
            if not names:
                # Empty: it is removed from its parent (the frame below) on the next read there,
                # or at the root by remove_emptied.
                os.close(stack.pop())
                continue
            for entry in names:
                budget.take()
                top = stack[-1]
                try:
                    st = os.stat(entry, dir_fd=top, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                is_dir = _stat.S_ISDIR(st.st_mode)
                if is_dir and st.st_dev != device:
                    # A mount point (stat sees the mounted root): never touch another filesystem.
                    raise _errno_error(_errno.EXDEV)
                if not is_dir:
                    try:
                        _unlinkat(top, entry)
                        continue
                    except FileNotFoundError:
                        continue
                    except IsADirectoryError:
                        pass  # swapped for a directory: handled below
                # A directory: remove it if empty, else descend (or flatten when too deep).
                try:
                    _unlinkat(top, entry, directory=True)
                    continue
                except FileNotFoundError:
                    continue
                except NotADirectoryError:
                    _unlinkat(top, entry)
                    continue
                except OSError as error:
                    if error.errno not in (_errno.ENOTEMPTY, _errno.EEXIST):
                        raise
                if len(stack) >= MAX_OPEN_DEPTH:
                    flattened += 1
                    rename_noreplace(top, entry, stack[0], f".proclease-flat-{flattened}-{uuid.uuid4()}")
                    continue
                try:
                    child = os.open(entry, _DIR_FLAGS, dir_fd=top)
                except FileNotFoundError:
                    continue
                except OSError as error:
                    if error.errno in (_errno.ELOOP, _errno.ENOTDIR):
                        # Swapped for a symbolic link or a file since the lstat: unlink that.
                        _unlinkat(top, entry)
                        continue
                    raise
                stack.append(child)
                if os.fstat(child).st_dev != device:
                    raise _errno_error(_errno.EXDEV)
                break
    finally:
        for fd in stack:
            os.close(fd)
    # Every directory below is gone but emptied directories may remain: remove them bottom-up.
    remove_emptied(parent, name, budget)


def remove_emptied(parent: int, name: str, budget: _Budget) -> None:
    """Removes the (now file-free) directory tree `name` in `parent`: `rmdir` bottom-up,
    iteratively, with the bounds of `delete_tree`. Port of `workspace/mod.rs::remove_emptied`."""
    while True:
        try:
            _unlinkat(parent, name, directory=True)
            return
        except FileNotFoundError:
            return
        except OSError as error:
            if error.errno not in (_errno.ENOTEMPTY, _errno.EEXIST):
                raise
        # Descend to a leaf directory and remove it; repeat from the top.
        stack: List[int] = [open_dir(parent, name)]
        try:
            while True:
                top = stack[-1]
                names = some_names(top, 1)
                if not names:
                    break
                budget.take()
                entry = names[0]
                try:
                    _unlinkat(top, entry, directory=True)
                    continue
                except FileNotFoundError:
                    continue
                except NotADirectoryError:
                    _unlinkat(top, entry)
                    continue
                except OSError as error:
                    if error.errno not in (_errno.ENOTEMPTY, _errno.EEXIST):
                        raise
                if len(stack) < MAX_OPEN_DEPTH:
                    stack.append(os.open(entry, _DIR_FLAGS, dir_fd=top))
                else:
                    rename_noreplace(top, entry, stack[0], f".proclease-flat-{uuid.uuid4()}")
        finally:
            for fd in stack:
                os.close(fd)


# --- The workspace ----------------------------------------------------------------------------


class _GrantedRoot(NamedTuple):
    path: str
    fd: int


# What `_walk` found (`workspace/mod.rs::Walk`).
_OPEN, _ABSENT, _NOT_PHYSICAL, _FAILED = "open", "absent", "not-physical", "failed"


def _walk(root_fd: int, components: Sequence[str]) -> Tuple[str, object]:
    """Opens `components` below `root_fd`, one at a time, never following a symbolic link:
    (`open`, fd — the caller closes it), (`absent`, None), (`not-physical`, None) for a component
    that is a symbolic link or not a directory, (`failed`, OSError)."""
    try:
        current = os.dup(root_fd)
    except OSError as error:
        return (_FAILED, error)
    for component in components:
        try:
            following = open_dir(current, component)
        except FileNotFoundError:
            os.close(current)
            return (_ABSENT, None)
        except OSError as error:
            os.close(current)
            if error.errno in (_errno.ELOOP, _errno.ENOTDIR):
                return (_NOT_PHYSICAL, None)
            return (_FAILED, error)
        os.close(current)
        current = following
    return (_OPEN, current)


class Workspace:
    """The granted workspace roots, and the `workspace` import's four functions
    (`host/src/imports/workspace/mod.rs`, `Workspace`)."""

    @staticmethod
    def default_roots() -> List[str]:
        """The roots granted when none is given: `$HOME` and the temporary directory (`$TMPDIR`,
        else `/tmp`, as Rust's `std::env::temp_dir`)."""
        roots = []
        home = os.environ.get("HOME")
        if home:
            roots.append(home)
        roots.append(os.environ.get("TMPDIR") or "/tmp")
        return roots

    def __init__(self, roots: Sequence[str]) -> None:
        """Grants `roots` (each resolved with realpath and opened `O_NOFOLLOW`).

        Raises HostError (an `io` / `permission` failure): a root that does not exist or is not a
        directory."""
        self._roots: List[_GrantedRoot] = []
        try:
            for root in roots:
                label = str(root)
                try:
                    path = os.path.realpath(root, strict=True)
                except OSError as error:
                    raise _io(label, "realpath of a workspace root", error) from None
                try:
                    fd = os.open(path, _DIR_FLAGS)
                except OSError as error:
                    raise _io(label, "open of a workspace root", error) from None
                self._roots.append(_GrantedRoot(path, fd))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Closes the roots' descriptors (the workspace is unusable afterwards)."""
        for root in self._roots:
            os.close(root.fd)
        self._roots = []

    @property
    def roots(self) -> List[str]:
        """The granted roots, resolved."""
        return [root.path for root in self._roots]

    # §6A.4 inspection ------------------------------------------------------------------------

    def inspect(self, path: str) -> Rec:
        """`workspace.inspect`: `directory-lookup{facts}` — the facts of the directory at `path`
        (lstat/statx, no symbolic link followed), none when it (or an ancestor below the root)
        does not exist. `canonical` is true when no component of the path is a symbolic link
        (the root is its realpath, and the walk below it follows none); a path through a symbolic
        link or a non-directory gives facts with every field false / zero.
        Port of `Workspace::inspect`.

        Raises HostError: `refused` when `path` is not absolute and normalised or not under a
        granted root; `io` / `permission`."""
        root, rest = self._locate(path, allow_root=True)
        if not rest:
            try:
                st = statx(root.fd, "", empty_path=True)
            except OSError as error:
                raise _io(path, "statx", error) from None
            return Rec(facts=None if st is None else _facts(st, True))
        *parent, name = rest
        kind, value = _walk(root.fd, parent)
        if kind == _ABSENT:
            return Rec(facts=None)
        if kind == _NOT_PHYSICAL:
            return Rec(facts=_not_physical())
        if kind == _FAILED:
            raise _io(path, "open of an ancestor", value) from None
        parent_fd = value
        try:
            st = statx(parent_fd, name)
        except OSError as error:
            raise _io(path, "statx", error) from None
        finally:
            os.close(parent_fd)
        if st is None:
            return Rec(facts=None)
        return Rec(facts=_facts(st, _file_kind(st.mode) != _stat.S_IFLNK))

    # Creation and the removal of an empty directory -----------------------------------------

    def create_private_directory(self, path: str) -> List[str]:
        """`workspace.create-private-directory`: creates `path` (mode 0700) and its missing
        ancestors below its granted root, walking from the root without following a symbolic
        link; the directories created, outermost first (empty when `path` existed).
        Port of `Workspace::create_private_directory`.

        Raises HostError: `refused` outside the granted roots, or for a component that is a
        symbolic link (`is a symbolic link; give the real path`) or not a directory; `io` /
        `permission` (`mkdir`, `open`, `chmod`)."""
        root, rest = self._locate(path, allow_root=False)
        try:
            current = os.dup(root.fd)
        except OSError as error:
            raise _io(path, "dup", error) from None
        created: List[str] = []
        walked = root.path
        try:
            for component in rest:
                walked = os.path.join(walked, component)
                here = walked
                try:
                    os.mkdir(component, 0o700, dir_fd=current)
                    created.append(here)
                except FileExistsError:
                    pass
                except OSError as error:
                    raise _io(here, "mkdir", error) from None
                try:
                    following = open_dir(current, component)
                except OSError as error:
                    if error.errno == _errno.ELOOP:
                        raise _refused(here, "is a symbolic link; give the real path") from None
                    if error.errno == _errno.ENOTDIR:
                        raise _refused(here, "is not a directory") from None
                    raise _io(here, "open", error) from None
                os.close(current)
                current = following
                if created and created[-1] == here:
                    try:
                        os.fchmod(current, 0o700)
                    except OSError as error:
                        raise _io(here, "chmod", error) from None
        finally:
            os.close(current)
        return created

    def remove_empty_directory(self, path: str, expected: Optional[object]) -> bool:
        """`workspace.remove-empty-directory`: removes the directory `path` if it is empty and,
        when `expected` (a `directory-identity`) is given, still that directory — `rmdir` through
        its granted root, no symbolic link followed. False when it is absent, another directory,
        or not empty. Port of `Workspace::remove_empty_directory`.

        Raises HostError: `refused` outside the granted roots; `io` / `permission` other than
        "not empty"."""
        root, rest = self._locate(path, allow_root=False)
        if not rest:
            return False
        *parent, name = rest
        kind, value = _walk(root.fd, parent)
        if kind != _OPEN:
            return False
        fd = value
        try:
            try:
                st = statx(fd, name)
            except OSError as error:
                raise _io(path, "statx", error) from None
            if st is None:
                return False
            if _file_kind(st.mode) != _stat.S_IFDIR or (expected is not None and not _matches(st, expected)):
                return False
            try:
                _unlinkat(fd, name, directory=True)
                return True
            except OSError as error:
                if error.errno in (_errno.ENOENT, _errno.ENOTEMPTY, _errno.EEXIST):
                    return False
                raise _io(path, "rmdir", error) from None
        finally:
            os.close(fd)

    # The identity-bound removal (§3.3 removePrivateDirectoryTree) ----------------------------

    def remove_tree(self, path: str, expected: object) -> bool:
        """`workspace.remove-tree`: removes the directory tree at `path` only while it is still
        `expected` (a `directory-identity`); completes an interrupted quarantine of `expected`
        whose remover is provably dead. True when a tree was removed, false when neither the
        target nor a quarantine of it exists. Port of `Workspace::remove_tree` (§3.3 (a)–(c)).

        Raises HostError, kind `identity-changed` with the reference's messages: `private
        recursive removal target is too broad`, `recursive removal parent is absent for an
        identity-bound target`, `directory path no longer matches its validated identity`,
        `recursive removal target changed identity`, `recursive removal quarantine is not a
        private current-user directory`, `recursive removal quarantine owner is live or cannot
        be proven dead`, `recursive removal identity has multiple quarantine paths`, `recursive
        removal recovery exceeds its 100000 entry bound`; `refused` outside the granted roots;
        `io` / `permission`."""
        if len([s for s in path.split("/") if s]) < 2:
            raise _identity_changed(path, "private recursive removal target is too broad")
        root, rest = self._locate(path, allow_root=False)
        if not rest:
            raise _identity_changed(path, "private recursive removal target is too broad")
        *parent, name = rest
        kind, value = _walk(root.fd, parent)
        if kind == _ABSENT:
            raise _identity_changed(path, "recursive removal parent is absent for an identity-bound target")
        if kind == _NOT_PHYSICAL:
            raise _identity_changed(path, "directory path no longer matches its validated identity")
        if kind == _FAILED:
            raise _io(path, "open of the parent", value) from None
        parent_fd = value
        try:
            # Renames into and out of quarantine, and the scan for quarantines, happen under the
            # parent's lock: a scan racing a rename could otherwise see neither the target nor
            # its quarantine and report "nothing left" while the tree is still being removed.
            try:
                guard = _ParentLock(parent_fd, path)
            except OSError as error:
                raise _io(path, "lock of the parent", error) from None
            try:
                try:
                    st = statx(parent_fd, name)
                except OSError as error:
                    raise _io(path, "statx", error) from None
                if st is not None:
                    if not _is_private_owned_dir(st) or not _matches(st, expected):
                        raise _identity_changed(path, "recursive removal target changed identity")
                    self._quarantine_and_delete(path, parent_fd, name, expected, guard)
                    return True
                return self._complete_quarantine(path, parent_fd, expected, guard)
            finally:
                guard.close()
        finally:
            os.close(parent_fd)

    def _quarantine_and_delete(self, path: str, parent: int, name: str, expected: object, guard: _ParentLock) -> None:
        """Renames `name` to a fresh quarantine in the parent, re-verifies it, releases the
        parent's lock, and deletes it (`Workspace::quarantine_and_delete`)."""
        quarantine = f".io-remove-{os.getpid()}-{uuid.uuid4()}.quarantine"
        _removing_start(quarantine)
        try:
            try:
                rename_noreplace(parent, name, parent, quarantine)
            except OSError as error:
                raise _io(path, "rename to quarantine", error) from None
            try:
                moved = statx(parent, quarantine)
            except OSError as error:
                raise _io(path, "statx of the quarantine", error) from None
            if moved is None or not (_is_private_owned_dir(moved) and _matches(moved, expected)):
                # Swapped between the check and the rename: put it back untouched.
                try:
                    rename_noreplace(parent, quarantine, parent, name)
                except OSError:
                    pass
                raise _identity_changed(path, "recursive removal target changed identity")
            guard.close()
            try:
                os.fsync(parent)
            except OSError as error:
                raise _io(path, "fsync of the parent", error) from None
            try:
                delete_tree(parent, quarantine, moved.dev, _Budget(MAX_REMOVAL_ENTRIES))
            except OSError as error:
                if error.errno == _errno.EXDEV:
                    raise _io(path, "removal (a filesystem is mounted inside the tree: unmount it, then recover again)", error) from None
                raise _io(path, "removal", error) from None
            try:
                os.fsync(parent)
            except OSError as error:
                raise _io(path, "fsync of the parent", error) from None
        finally:
            _removing_end(quarantine)

    def _complete_quarantine(self, path: str, parent: int, expected: object, guard: _ParentLock) -> bool:
        """§3.3 (c): the target is absent; finishes an interrupted quarantine of exactly
        `expected` whose remover is provably dead (`Workspace::complete_quarantine`)."""
        try:
            names = list_names(parent, MAX_SCAN_ENTRIES)
        except _BoundExceeded:
            raise _identity_changed(path, f"recursive removal recovery exceeds its {MAX_SCAN_ENTRIES} entry bound") from None
        except OSError as error:
            raise _io(path, "scan of the parent", error) from None
        found: Optional[Tuple[str, int]] = None
        for name in names:
            if not _is_utf8(name):
                continue
            pid = quarantine_pid(name)
            if pid is None:
                continue
            try:
                st = statx(parent, name)
            except OSError as error:
                raise _io(path, "statx", error) from None
            if st is None or not _matches(st, expected):
                continue
            if not _is_private_owned_dir(st):
                raise _identity_changed(path, "recursive removal quarantine is not a private current-user directory")
            if found is not None:
                raise _identity_changed(path, "recursive removal identity has multiple quarantine paths")
            found = (name, pid)
        if found is None:
            return False
        name, pid = found
        # A quarantine of this process that no thread of it is deleting was left by a removal
        # that failed (an I/O error): this process may finish it.
        abandoned_own = pid == os.getpid() and not _removing_active(name)
        if not abandoned_own and not definitely_dead(pid):
            raise _identity_changed(path, "recursive removal quarantine owner is live or cannot be proven dead")
        self._quarantine_and_delete(path, parent, name, expected, guard)
        return True

    # Paths -------------------------------------------------------------------------------------

    def _locate(self, path: str, allow_root: bool) -> Tuple[_GrantedRoot, List[str]]:
        """The granted root `path` lies in, and the components below it; `allow_root` lets
        `path` be the root itself (`Workspace::locate`).

        Raises HostError `refused`."""
        if not isinstance(path, str) or not is_bounded_path(path):
            raise _refused(str(path), "not an absolute, normalised path (no trailing /, //, . or ..)")
        for root in self._roots:
            if root.path == "/":
                below = path[1:]
            elif path == root.path:
                below = ""
            elif path.startswith(root.path + "/"):
                below = path[len(root.path) + 1 :]
            else:
                continue
            rest = [s for s in below.split("/") if s]
            if not rest and not allow_root:
                continue
            return root, rest
        roots = ", ".join(root.path for root in self._roots)
        raise _refused(
            path,
            f"outside the granted workspace roots ({roots}); grant its parent (`--workspace-root DIR` on the command line, "
            "`HostBuilder::workspace_root(DIR)` in the library)",
        )
