"""Single-component, descriptor-relative file operations the store is built from.

Port of `host/src/imports/fsops.rs`. Every name passed here is one already-validated entry name
(no `/`), resolved relative to a directory descriptor (`dir_fd`), and never followed if it is a
symbolic link. Failures are `OSError`s carrying the errno the kernel gave, as the Rust's
`rustix::io::Errno` / `std::io::Error` do; callers branch on `error.errno`.
"""

from __future__ import annotations

import errno as _errno
import os
from typing import Callable, List, Optional, Union

from . import _linux

S_IFMT = 0o170000
S_IFREG = 0o100000
S_IFDIR = 0o040000
S_IFLNK = 0o120000

#: `O_RDONLY|O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC`: a directory, never through a symbolic link.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def euid() -> int:
    """The effective uid of this process: "owned" means owned by it (`fsops::euid`)."""
    return os.geteuid()


def file_kind(mode: int) -> int:
    """The `S_IFMT` bits of a mode (`fsops::file_kind`)."""
    return mode & S_IFMT


def errno_error(code: int, name: Optional[Union[str, bytes]] = None) -> OSError:
    """An `OSError` for `code`, as the kernel would have raised it."""
    if name is None:
        return OSError(code, os.strerror(code))
    return OSError(code, os.strerror(code), name)


def fingerprint(st: os.stat_result) -> tuple:
    """The fields whose change between two `fstat`s means a file changed while it was read
    (§3.2; `fsops::Fingerprint`): device, inode, size, mtime, ctime, mode."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


def open_read(dir_fd: int, name: Union[str, bytes]) -> int:
    """Opens `name` in `dir_fd` for reading without following a symbolic link and without
    blocking on a FIFO (`O_NOFOLLOW|O_NONBLOCK`); `ELOOP` means the name is a symbolic link
    (`fsops::open_read`)."""
    return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)


def lstat(dir_fd: int, name: Union[str, bytes]) -> Optional[os.stat_result]:
    """`lstat` of `name` in `dir_fd`; None when absent (`fsops::lstat`)."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def unsafe_file_reason(st: os.stat_result) -> Optional[str]:
    """Why a regular state file is not safe to trust, or None when it is: a regular file owned
    by this user with no group or other permission bits (§3.2; `fsops::unsafe_file_reason`)."""
    if file_kind(st.st_mode) != S_IFREG:
        return "not a regular file"
    if st.st_uid != euid():
        return "not owned by the current user"
    if st.st_mode & 0o077 != 0:
        return "readable or writable by group or others (expected mode 0600)"
    return None


#: What `read_stable` gives besides the bytes (`fsops::StableRead`).
TOO_LARGE = "too-large"
CHANGED = "changed"


def read_stable(fd: int, before: os.stat_result, max_bytes: int) -> Union[bytes, str]:
    """Reads at most `max_bytes` from an open file, checking that it did not change meanwhile
    (`fsops::read_stable`): the bytes, `TOO_LARGE` or `CHANGED`."""
    if before.st_size < 0 or before.st_size > max_bytes:
        return TOO_LARGE
    limit = max_bytes + 1
    chunks: List[bytes] = []
    total = 0
    while total < limit:
        chunk = os.read(fd, min(limit - total, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        return TOO_LARGE
    after = os.fstat(fd)
    if fingerprint(before) != fingerprint(after) or len(data) != after.st_size:
        return CHANGED
    return data


def write_new_file(dir_fd: int, name: str, data: bytes) -> None:
    """Creates `name` in `dir_fd` exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600), writes
    `data` and fsyncs it (`fsops::write_new_file`)."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(fd: int) -> None:
    """fsync of a directory after a record change, making the entries created, renamed or
    removed in it durable (`fsops::fsync_dir`). Tests replace this function (the Rust's
    `fail_next_directory_fsyncs` seam) to drive the store's undo paths."""
    os.fsync(fd)


def fsync_claim_dir(fd: int) -> None:
    """fsync of a directory after the catalog lock's publication or release (§5), or after the
    §3.9 recovery removed a dead writer's leftovers (`fsops::fsync_claim_dir`); not the record
    changes' fsync, so a test failing `fsync_dir` leaves it alone."""
    os.fsync(fd)


def create_private_dir(dir_fd: int, name: str) -> bool:
    """Creates directory `name` in `dir_fd` with mode 0700 (`mkdirat` then `fchmod`, as the umask
    may have narrowed it), fsyncs it and `dir_fd`; False when it already existed. If anything
    after the `mkdirat` fails, the directory is removed again (`fsops::create_private_dir`)."""
    try:
        os.mkdir(name, 0o700, dir_fd=dir_fd)
    except FileExistsError:
        return False
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        try:
            os.fchmod(fd, 0o700)
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(dir_fd)
    except OSError:
        # Not made durable: remove it again, so that a retry creates (and fsyncs) it anew
        # instead of finding it and trusting it.
        try:
            os.rmdir(name, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    return True


def open_dir(dir_fd: int, name: Union[str, bytes]) -> int:
    """Opens directory `name` in `dir_fd` without following a symbolic link (`fsops::open_dir`).
    A symbolic link gives `ELOOP` (Linux itself reports `ENOTDIR` for `O_DIRECTORY|O_NOFOLLOW` on
    a link; an `lstat` tells the two apart), anything else that is not a directory `ENOTDIR`."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except NotADirectoryError:
        try:
            st = lstat(dir_fd, name)
        except OSError:
            st = None
        if st is not None and file_kind(st.st_mode) == S_IFLNK:
            raise errno_error(_errno.ELOOP, name) from None
        raise


# --- renameat2(RENAME_NOREPLACE) ---------------------------------------------------------------
#
# The Rust renames claims with `renameat_with(.., RenameFlags::NOREPLACE)`; Python's `os` has no
# renameat2, so `_linux.py` calls it through ctypes.


def rename_noreplace(src_dir: int, src: str, dst_dir: int, dst: str) -> None:
    """`renameat2(src_dir, src, dst_dir, dst, RENAME_NOREPLACE)`: `EEXIST` when `dst` exists.

    Where there is no renameat2 (`ENOSYS`) this falls back to `link` + `unlink` (also never
    replacing; for an instant both names exist)."""
    try:
        _linux.rename_noreplace(src_dir, os.fsencode(src), dst_dir, os.fsencode(dst))
        return
    except OSError as error:
        if error.errno != _errno.ENOSYS:
            raise errno_error(error.errno, src) from None
    os.link(src, dst, src_dir_fd=src_dir, dst_dir_fd=dst_dir, follow_symlinks=False)
    os.unlink(src, dir_fd=src_dir)


# --- Listings ----------------------------------------------------------------------------------


class BoundExceeded(Exception):
    """A listing found more names than its bound (the Rust's `Err(None)`)."""


def _names_where(dir_fd: int, bound: int, keep: Callable[[bytes], bool]) -> List[bytes]:
    """The names in a directory that `keep` accepts, as raw bytes, at most `bound` of them
    (`BoundExceeded` beyond; `fsops::names_where`). Reads through a fresh descriptor of `.`,
    so that the caller's descriptor's offset is never shared."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        names: List[bytes] = []
        with os.scandir(fd) as entries:
            for entry in entries:
                raw = os.fsencode(entry.name)
                if not keep(raw):
                    continue
                if len(names) == bound:
                    raise BoundExceeded()
                names.append(raw)
        return names
    finally:
        os.close(fd)


def list_names(dir_fd: int, bound: int) -> List[bytes]:
    """The names in a directory (without `.` and `..`), as raw bytes, at most `bound` of them;
    `BoundExceeded` beyond (`fsops::list_names`)."""
    return _names_where(dir_fd, bound, lambda name: name not in (b".", b".."))


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def names_starting_with(dir_fd: int, prefix: str, bound: int) -> List[str]:
    """The names in a directory that start with `prefix` and are UTF-8, at most `bound` of them
    (`BoundExceeded` beyond; `fsops::names_starting_with`)."""
    start = prefix.encode()
    names = _names_where(dir_fd, bound, lambda name: name.startswith(start) and _is_utf8(name))
    return [name.decode("utf-8") for name in names]


def some_names(dir_fd: int, at_most: int) -> List[bytes]:
    """The first `at_most` names in a directory (without `.` and `..`), as raw bytes — for
    consumers that remove what they read and then read again (`fsops::some_names`)."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        names: List[bytes] = []
        with os.scandir(fd) as entries:
            for entry in entries:
                if len(names) >= at_most:
                    break
                names.append(os.fsencode(entry.name))
        return names
    finally:
        os.close(fd)


def remove_tree_at(dir_fd: int, name: str) -> None:
    """Removes the directory `name` in `dir_fd` and everything below it, never following a
    symbolic link (a link is unlinked, not entered) and never descending more than 256 levels
    (`fsops::remove_tree_at`)."""

    def empty(fd: int, depth: int) -> None:
        if depth > 256:
            raise OSError("the tree is deeper than 256 levels")
        while True:
            names = some_names(fd, 1024)
            if not names:
                return
            for raw in names:
                try:
                    st = os.stat(raw, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if file_kind(st.st_mode) == S_IFDIR:
                    child = os.open(raw, DIR_FLAGS, dir_fd=fd)
                    try:
                        empty(child, depth + 1)
                    finally:
                        os.close(child)
                    os.rmdir(raw, dir_fd=fd)
                else:
                    os.unlink(raw, dir_fd=fd)

    top = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    try:
        empty(top, 0)
    finally:
        os.close(top)
    os.rmdir(name, dir_fd=dir_fd)
