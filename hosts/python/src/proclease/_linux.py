"""`statx(2)` and `renameat2(2)`, which Python's `os` lacks (no birth time, no
`RENAME_NOREPLACE`), called through ctypes: the C library's wrapper (glibc >= 2.28), else the raw
system call (x86_64, aarch64), for the system-call contract (`_sys.py`).
"""

from __future__ import annotations

import ctypes
import errno as _errno
import os
import platform
from typing import Any, List, Optional

AT_SYMLINK_NOFOLLOW = 0x100
AT_NO_AUTOMOUNT = 0x800
AT_EMPTY_PATH = 0x1000
STATX_BASIC_STATS = 0x7FF
STATX_BTIME = 0x800
RENAME_NOREPLACE = 1
#: System call numbers, for a C library without the wrapper (glibc < 2.28).
_SYS_STATX = {"x86_64": 332, "aarch64": 291}
_SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276}


class StatxTimestamp(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_int64), ("tv_nsec", ctypes.c_uint32), ("_reserved", ctypes.c_int32)]


class StatxBuf(ctypes.Structure):
    """`struct statx` (linux/stat.h), 256 bytes."""

    _fields_ = [
        ("stx_mask", ctypes.c_uint32),
        ("stx_blksize", ctypes.c_uint32),
        ("stx_attributes", ctypes.c_uint64),
        ("stx_nlink", ctypes.c_uint32),
        ("stx_uid", ctypes.c_uint32),
        ("stx_gid", ctypes.c_uint32),
        ("stx_mode", ctypes.c_uint16),
        ("_spare0", ctypes.c_uint16),
        ("stx_ino", ctypes.c_uint64),
        ("stx_size", ctypes.c_uint64),
        ("stx_blocks", ctypes.c_uint64),
        ("stx_attributes_mask", ctypes.c_uint64),
        ("stx_atime", StatxTimestamp),
        ("stx_btime", StatxTimestamp),
        ("stx_ctime", StatxTimestamp),
        ("stx_mtime", StatxTimestamp),
        ("stx_rdev_major", ctypes.c_uint32),
        ("stx_rdev_minor", ctypes.c_uint32),
        ("stx_dev_major", ctypes.c_uint32),
        ("stx_dev_minor", ctypes.c_uint32),
        ("_spare2", ctypes.c_uint64 * 14),
    ]


assert ctypes.sizeof(StatxBuf) == 256

_libc = ctypes.CDLL(None, use_errno=True)


def _libc_function(name: str, argtypes: List[Any]) -> Optional[Any]:
    function = getattr(_libc, name, None)
    if function is not None:
        function.argtypes = argtypes
        function.restype = ctypes.c_int
    return function


_statx_fn = _libc_function("statx", [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(StatxBuf)])
_renameat2_fn = _libc_function("renameat2", [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint])
_syscall = getattr(_libc, "syscall", None)
if _syscall is not None:
    _syscall.restype = ctypes.c_long


def _failed() -> OSError:
    code = ctypes.get_errno()
    return OSError(code, os.strerror(code))


def statx(dir_fd: int, name: bytes, flags: int) -> Optional[StatxBuf]:
    """`statx(dir_fd, name, flags, BASIC_STATS | BTIME)`; None when absent (`ENOENT`).

    Raises OSError for any other error: `ENOSYS` where neither the C library nor the kernel has
    statx (the caller falls back to `os.stat`, without a birth time)."""
    buf = StatxBuf()
    machine = platform.machine()
    if _statx_fn is not None:
        rc = _statx_fn(dir_fd, name, flags, STATX_BASIC_STATS | STATX_BTIME, ctypes.byref(buf))
    elif _syscall is not None and machine in _SYS_STATX:
        rc = _syscall(_SYS_STATX[machine], ctypes.c_int(dir_fd), ctypes.c_char_p(name), ctypes.c_int(flags), ctypes.c_uint(STATX_BASIC_STATS | STATX_BTIME), ctypes.byref(buf))
    else:
        raise OSError(_errno.ENOSYS, "statx is unavailable")
    if rc != 0:
        error = _failed()
        if error.errno == _errno.ENOENT:
            return None
        raise error
    return buf


def rename_noreplace(dir_fd: int, old: bytes, new_dir_fd: int, new: bytes) -> None:
    """`renameat2(…, RENAME_NOREPLACE)`: fails with `EEXIST` instead of replacing `new`.

    Raises OSError (`ENOSYS` where neither the C library nor the kernel has renameat2)."""
    machine = platform.machine()
    if _renameat2_fn is not None:
        rc = _renameat2_fn(dir_fd, old, new_dir_fd, new, RENAME_NOREPLACE)
    elif _syscall is not None and machine in _SYS_RENAMEAT2:
        rc = _syscall(_SYS_RENAMEAT2[machine], ctypes.c_int(dir_fd), ctypes.c_char_p(old), ctypes.c_int(new_dir_fd), ctypes.c_char_p(new), ctypes.c_uint(RENAME_NOREPLACE))
    else:
        raise OSError(_errno.ENOSYS, "renameat2 is unavailable")
    if rc != 0:
        raise _failed()
