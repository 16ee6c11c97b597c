"""The few descriptor-relative file operations the Python host makes of its own: opening and
claiming the state home (`state_home.py`) and its witnesses (`witness.py`). Everything the
portable artifact does goes through the system-call contract instead (`_sys.py`).

Every name passed here is one already-validated entry name (no `/`), resolved relative to a
directory descriptor (`dir_fd`), and never followed if it is a symbolic link. Failures are
`OSError`s carrying the errno the kernel gave; callers branch on `error.errno`.
"""

from __future__ import annotations

import errno as _errno
import os
from typing import Optional, Union

S_IFMT = 0o170000
S_IFDIR = 0o040000
S_IFLNK = 0o120000

#: `O_RDONLY|O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC`: a directory, never through a symbolic link.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def euid() -> int:
    """The effective uid of this process: "owned" means owned by it."""
    return os.geteuid()


def file_kind(mode: int) -> int:
    """The `S_IFMT` bits of a mode."""
    return mode & S_IFMT


def errno_error(code: int, name: Optional[Union[str, bytes]] = None) -> OSError:
    """An `OSError` for `code`, as the kernel would have raised it."""
    if name is None:
        return OSError(code, os.strerror(code))
    return OSError(code, os.strerror(code), name)


def write_new_file(dir_fd: int, name: str, data: bytes) -> None:
    """Creates `name` in `dir_fd` exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600), writes
    `data` and fsyncs it."""
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


def create_private_dir(dir_fd: int, name: str) -> bool:
    """Creates directory `name` in `dir_fd` with mode 0700 (`mkdirat` then `fchmod`, as the umask
    may have narrowed it), fsyncs it and `dir_fd`; False when it already existed. If anything
    after the `mkdirat` fails, the directory is removed again."""
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
        os.fsync(dir_fd)
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
    """Opens directory `name` in `dir_fd` without following a symbolic link.
    A symbolic link gives `ELOOP` (Linux itself reports `ENOTDIR` for `O_DIRECTORY|O_NOFOLLOW` on
    a link; an `lstat` tells the two apart), anything else that is not a directory `ENOTDIR`."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except NotADirectoryError:
        try:
            st: Optional[os.stat_result] = os.lstat(name, dir_fd=dir_fd)
        except OSError:
            st = None
        if st is not None and file_kind(st.st_mode) == S_IFLNK:
            raise errno_error(_errno.ELOOP, name) from None
        raise
