"""Kernel-lock witnesses (`docs/witness.md`): the proof, beside the reference's `/proc` identity,
that a recorded process — and every process it handed its witness to — is alive or gone, in any
PID or time namespace and whatever `/proc` hides.

A port of `host/src/imports/process_identity/witness.rs`, and of the reading half of
`cgroup_tree.rs` (what a recorded cgroup shows). The files are the native host's, so either
host probes the other's witnesses:

```
<state home>/.proclease/witnesses/<boot id>/
    <pid>-<process start id>.witness          the witness of that identity
    <pid>-<process start id>.spawn-<uuid>     a witness that identity took for a process it started
    <pid>-<process start id>.cgroup[-<uuid>]  the cgroup v2 its tree runs in, when one was made
    .tmp-<uuid>                               a witness being created (never tested)
```

A witness is a small file on which its holder keeps an exclusive `flock`; the kernel releases it
when the last descriptor of that open file closes. Probing is a non-blocking shared lock test:
refused → `held`, granted → `free`. Every witness is locked before it gets its name (created
under a temporary name, locked, then hard-linked), so a named witness that is free really is
abandoned. Witnesses are not fsynced: after a power loss every process they speak of is of
another boot. This module only observes and keeps files; what the observations prove is the
component's (`dispositions.judge-owner`, proclease-core's `liveness::judge`).
"""

from __future__ import annotations

import errno as _errno
import fcntl
import json
import logging
import os
import re
import threading
import uuid
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from ._fsops import errno_error, open_dir
from ._wit import os_message

__all__ = [
    "Namespaces",
    "Witnesses",
    "SpawnWitness",
    "WitnessError",
    "WitnessCollision",
    "observe_cgroup",
    "private_dir",
]

log = logging.getLogger("proclease.witness")

#: The witness directory, inside the state home's `.proclease/`.
DIRECTORY = "witnesses"
#: The witness directory's path in the state home (for messages).
ROOT = ".proclease/witnesses"
#: The largest witness (or cgroup record) read.
MAX_WITNESS_BYTES = 4096

_DIGEST = re.compile(r"[0-9a-f]{64}")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK

# `witness-state` and `tree-state` (WIT enums), as plain strings.
ABSENT, HELD, FREE, UNTESTABLE = "absent", "held", "free", "untestable"
POPULATED, EMPTY, UNREADABLE = "populated", "empty", "unreadable"


class WitnessError(Exception):
    """A witness failure (`WitnessError::Io`): `<path>: <operation> failed: <cause>`."""

    def __init__(self, path: str, operation: str, cause: str) -> None:
        super().__init__(f"{path}: {operation} failed: {cause}")
        self.path = path
        self.operation = operation


class WitnessCollision(WitnessError):
    """Another live process holds the witness of this very identity (`WitnessError::Collision`:
    same pid, boot and start tick — two processes in different PID namespaces started in the
    same clock tick)."""

    def __init__(self, path: str, pid: int) -> None:
        Exception.__init__(
            self,
            f"{path}: another live process holds the witness of this identity (pid {pid} in another PID namespace, "
            "started in the same clock tick); it cannot be told apart from this one: start this one again",
        )
        self.path = path
        self.operation = "link"
        self.pid = pid


def _os_error(path: str, operation: str, error: OSError) -> WitnessError:
    return WitnessError(path, operation, os_message(error))


class Namespaces(NamedTuple):
    """What a witness records about its holder (its content), for a `/proc` fallback when its
    lock cannot be tested."""

    #: The PID namespace the holder's pid is relative to (nsfs inode number).
    pid: int
    #: The holder's time namespace (nsfs inode number), for diagnostics.
    time: int
    #: Its boottime offset, ns.
    boottime_offset_ns: int


def _field(record: Any, name: str) -> Any:
    """A WIT record's field by its snake_case or kebab-case name."""
    for attribute in (name, name.replace("_", "-")):
        try:
            return getattr(record, attribute)
        except AttributeError:
            continue
    raise TypeError(f"the record has no field {name}")


def owner_fields(owner: Any) -> Tuple[int, str, str]:
    """(pid, boot id, process start id) of a `types.owner` record."""
    return (_field(owner, "pid"), _field(owner, "boot_id"), _field(owner, "process_start_id"))


def is_digest(text: Any) -> bool:
    return isinstance(text, str) and _DIGEST.fullmatch(text) is not None


def nameable(owner: Any) -> bool:
    """Whether `owner`'s digests can name witness files (64 lowercase hex each: nothing a guest
    passes can reach outside the witness directory)."""
    pid, boot_id, start = owner_fields(owner)
    return is_digest(boot_id) and is_digest(start)


def identity_name(owner: Any) -> str:
    """The name of the witness of `owner`: `<pid>-<process start id>.witness`."""
    pid, _, start = owner_fields(owner)
    return f"{pid}-{start}.witness"


def spawn_prefix(owner: Any) -> str:
    """The prefix of the spawn witnesses `owner` took: `<pid>-<process start id>.spawn-`."""
    pid, _, start = owner_fields(owner)
    return f"{pid}-{start}.spawn-"


def content(holder: Any, role: str, ns: Namespaces, file: Tuple[int, int]) -> str:
    """What a witness file says, canonical JSON + `\\n` (keys sorted), byte for byte the native
    host's; `file` is the witness's own `(st_dev, st_ino)` as its creator sees it (its lock
    domain: `witness.rs::test`)."""
    pid, boot_id, start = owner_fields(holder)
    return (
        f'{{"bootId":"{boot_id}","boottimeOffsetNs":{ns.boottime_offset_ns},"device":"{file[0]}","inode":"{file[1]}",'
        f'"kind":"proclease-witness","pid":{pid},'
        f'"pidNamespace":"{ns.pid}","processStartId":"{start}","role":"{role}","schemaVersion":1,"timeNamespace":"{ns.time}"}}\n'
    )


#: The content of an uncontained record (`witness.rs::UNCONTAINED_RECORD`).
UNCONTAINED_RECORD = '{"kind":"proclease-uncontained","schemaVersion":1}\n'


def uncontained_name(spawn: str) -> str:
    """The name of the uncontained record of spawn witness `<spawner>.spawn-<uuid>`:
    `<spawner>.uncontained-<uuid>` (`witness.rs::uncontained_name`)."""
    spawner, separator, rest = spawn.partition(".spawn-")
    if separator:
        return f"{spawner}.uncontained-{rest}"
    return f"{spawn}.uncontained"


def cgroup_name(witness: str) -> str:
    """The name of the cgroup record of witness `witness`: `<identity>.cgroup` for
    `<identity>.witness`, `<spawner>.cgroup-<uuid>` for spawn witness `<spawner>.spawn-<uuid>`."""
    if witness.endswith(".witness"):
        return witness[: -len(".witness")] + ".cgroup"
    spawner, separator, rest = witness.partition(".spawn-")
    if separator:
        return f"{spawner}.cgroup-{rest}"
    return f"{witness}.cgroup"


# --- File helpers (host/src/imports/fsops.rs) -------------------------------------------------


def private_dir(parent: int, name: str, label: str) -> int:
    """Creates (0700, fsynced with its parent) or opens `name` in `parent` as a private directory
    of this user: a directory (not a link) owned by the effective uid with mode exactly 0700.
    Port of `fsops::private_dir` (`create_private_dir` + `open_private_dir_if_present`).

    Raises WitnessError `<label>: <mkdir|open|fstat|check> failed: …`."""
    try:
        os.mkdir(name, 0o700, dir_fd=parent)
    except FileExistsError:
        pass
    except OSError as error:
        raise _os_error(label, "mkdir", error) from None
    else:
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
            try:
                os.fchmod(fd, 0o700)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.fsync(parent)
        except OSError as error:
            # Not made durable: removed again, so that a retry creates (and fsyncs) it anew.
            try:
                os.rmdir(name, dir_fd=parent)
            except OSError:
                pass
            raise _os_error(label, "mkdir", error) from None
    fd = open_private_dir_if_present(parent, name, label)
    if fd is None:
        raise _os_error(label, "open", errno_error(_errno.ENOENT, name))
    return fd


def open_private_dir_if_present(parent: int, name: str, label: str) -> Optional[int]:
    """The private directory `name` in `parent` — a directory (not a link) owned by the
    effective uid with mode exactly 0700 — if it exists; None when absent. Creates nothing
    (`files::open_private_dir_if_present`).

    Raises WitnessError `<label>: <open|fstat|check> failed: …`: it is there but cannot be
    opened, or is not private."""
    try:
        fd = open_dir(parent, name)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise _os_error(label, "open", error) from None
    try:
        st = os.fstat(fd)
    except OSError as error:
        os.close(fd)
        raise _os_error(label, "fstat", error) from None
    if st.st_uid != os.geteuid() or st.st_mode & 0o777 != 0o700:
        os.close(fd)
        raise WitnessError(label, "check", "must be a directory owned by you with mode 0700 (chmod 700 it)")
    return fd


def _names(dir_fd: int, bound: int) -> Optional[List[str]]:
    """At most `bound` names of a directory (`fsops::list_names`); None on an error or beyond
    the bound."""
    names: List[str] = []
    try:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                if len(names) == bound:
                    return None
                names.append(entry.name)
    except OSError:
        return None
    finally:
        os.close(fd)
    return names


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unlink(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def _lstat(dir_fd: int, name: str) -> Optional[os.stat_result]:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None


def _same_file(dir_fd: int, a: str, b: str) -> bool:
    """Whether `a` and `b` in `dir_fd` are the same file (both exist)."""
    x, y = _lstat(dir_fd, a), _lstat(dir_fd, b)
    return x is not None and y is not None and x.st_ino == y.st_ino and x.st_dev == y.st_dev


def _link(dir_fd: int, source: str, target: str) -> None:
    """`linkat(dir, source, dir, target, 0)` (no symbolic link followed)."""
    os.link(source, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_bounded(fd: int, bound: int) -> bytes:
    chunks = []
    left = bound
    while left > 0:
        chunk = os.read(fd, left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _write_new(dir_fd: int, name: str, data: bytes) -> None:
    """Creates file `name` in `dir_fd` (0600) with `data`: written under a temporary name, then
    linked, so a reader never sees it partly written. An existing `name` is an error."""
    temp = f".tmp-{uuid.uuid4()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        _link(dir_fd, temp, name)
    finally:
        _unlink(dir_fd, temp)


#: flock errors that mean the filesystem does not support it.
_LOCK_UNSUPPORTED = frozenset({_errno.EOPNOTSUPP, _errno.ENOLCK, _errno.EINVAL})


def _test(dir_fd: int, name: str) -> str:
    """Tests the lock of witness `name` in `dir_fd` without blocking: a shared lock is refused
    while its holder keeps the exclusive one (`witness.rs::test`). A file that is there but
    cannot be opened is `untestable`."""
    try:
        return _test_checked(dir_fd, name, name)
    except WitnessError:
        return UNTESTABLE


def _test_checked(dir_fd: int, name: str, label: str) -> str:
    """`_test` for a probe: a file that is there but cannot be opened raises WitnessError
    `<label>: open failed: …` instead of answering `untestable` (`witness.rs::test`)."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return ABSENT
    except OSError as error:
        raise _os_error(label, "open", error) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return HELD
        except OSError:
            return UNTESTABLE
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass
        return UNTESTABLE if _in_another_lock_domain(fd) else FREE
    finally:
        os.close(fd)


def _in_another_lock_domain(fd: int) -> bool:
    """Whether the witness open as `fd` records a `(device, inode)` other than the one this
    process sees for it: its lock says nothing here (`witness.rs::in_another_lock_domain`);
    False when it records none (or is no witness's content at all), True when a recorded domain
    does not parse."""
    try:
        st = os.fstat(fd)
    except OSError:
        return True
    try:
        data = _read_bounded(fd, MAX_WITNESS_BYTES)
        value = json.loads(data.decode("utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(value, dict):
        return False
    device, inode = value.get("device"), value.get("inode")
    if device is None and inode is None:
        return False
    if not isinstance(device, str) or not isinstance(inode, str):
        return True
    recorded = (_parse_u64(device), _parse_u64(inode))
    return recorded != (st.st_dev, st.st_ino)


def _read_small(dir_fd: int, name: str) -> Optional[str]:
    """The text of file `name` (at most `MAX_WITNESS_BYTES`); None when it cannot be opened,
    read or decoded."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        data = _read_bounded(fd, MAX_WITNESS_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _parse_u64(text: str) -> Optional[int]:
    """Rust's `str::parse::<u64>`: optional `+`, ASCII digits, in range."""
    digits = text[1:] if text.startswith("+") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    value = int(digits)
    return value if value < 2**64 else None


def _recorded_pid_namespace(dir_fd: int, name: str) -> Optional[int]:
    """The `pidNamespace` a witness file records (its content, bounded)."""
    text = _read_small(dir_fd, name)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    namespace = value.get("pidNamespace") if isinstance(value, dict) else None
    return _parse_u64(namespace) if isinstance(namespace, str) else None


# --- The cgroup a command's tree runs in: reading a record (cgroup_tree.rs) -------------------


def _json_u64(value: Any) -> Optional[int]:
    """serde_json's `as_u64`: a non-negative JSON integer (not a float, not a boolean)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value >= 2**64:
        return None
    return value


def _unescape_mountinfo(field: str) -> str:
    """The kernel escapes space, tab, newline and backslash in mountinfo as `\\ooo`."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _within(path: str, root: str) -> Optional[str]:
    """`path` relative to `root` (both cgroup paths, `/`-rooted), if it is `root` or below it."""
    if root == "/":
        return path.lstrip("/")
    if not path.startswith(root):
        return None
    rest = path[len(root) :]
    if rest == "" or rest.startswith("/"):
        return rest.lstrip("/")
    return None


class _Hierarchy(NamedTuple):
    #: Where cgroup2 is mounted (e.g. `/sys/fs/cgroup`).
    mount: str
    #: The cgroup path of that mount's root.
    root: str
    #: This process's cgroup path (`0::PATH` of `/proc/self/cgroup`).
    own: str
    #: This process's cgroup namespace (nsfs inode).
    namespace: int

    def dir_of(self, path: str) -> Optional[str]:
        rest = _within(path, self.root)
        if rest is None:
            return None
        return self.mount if rest == "" else os.path.join(self.mount, rest)


_HIERARCHY: Dict[int, Any] = {}


def _hierarchy() -> Optional[_Hierarchy]:
    """This process's cgroup v2 hierarchy, read once per process (`Hierarchy::find`); None when
    there is none to use (cgroup v1 only, no mount showing this process's cgroup)."""
    pid = os.getpid()
    if pid not in _HIERARCHY:
        _HIERARCHY.clear()
        _HIERARCHY[pid] = _find_hierarchy()
    return _HIERARCHY[pid]


def _find_hierarchy() -> Optional[_Hierarchy]:
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as file:
            lines = file.read().splitlines()
        with open("/proc/self/mountinfo", encoding="utf-8") as file:
            mounts = file.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    own = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[0] == "0" and not [c for c in parts[1].split(",") if c]:
            own = parts[2]
            break
    if own is None:
        return None
    for line in mounts:
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        separator = fields.index("-", 6)
        if len(fields) <= separator + 1 or fields[separator + 1] != "cgroup2" or len(fields) < 5:
            continue
        root, mount_point = _unescape_mountinfo(fields[3]), _unescape_mountinfo(fields[4])
        if _within(own, root) is None:
            continue
        try:
            namespace = os.stat("/proc/self/ns/cgroup").st_ino
        except OSError:
            namespace = 0
        return _Hierarchy(mount_point, root, own, namespace)
    return None


def _populated(dir_fd: int) -> Optional[bool]:
    """`populated` of the `cgroup.events` of the cgroup directory `dir_fd`."""
    try:
        fd = os.open("cgroup.events", os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        data = _read_bounded(fd, MAX_WITNESS_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    for line in text.splitlines():
        if line.startswith("populated "):
            value = line[len("populated ") :].strip()
            return True if value == "1" else False if value == "0" else None
    return None


def observe_cgroup(record: str) -> str:
    """What a cgroup record shows now (`cgroup_tree::observe`): `populated`, `empty` (also when
    its cgroup was removed or replaced), or `unreadable` (a malformed record, no cgroup v2 mount
    that shows it, another cgroup namespace, an unreadable `cgroup.events`)."""
    try:
        fields = json.loads(record)
    except ValueError:
        return UNREADABLE
    if not isinstance(fields, dict):
        return UNREADABLE
    cgroup_id, namespace = _json_u64(fields.get("cgroupId")), _json_u64(fields.get("cgroupNamespace"))
    kind, path = fields.get("kind"), fields.get("path")
    if cgroup_id is None or namespace is None or not isinstance(kind, str) or not isinstance(path, str):
        return UNREADABLE
    if kind != "proclease-cgroup" or not path.startswith("/") or ".." in path.split("/"):
        return UNREADABLE
    hierarchy = _hierarchy()
    if hierarchy is None or hierarchy.namespace != namespace:
        return UNREADABLE
    dir_path = hierarchy.dir_of(path)
    if dir_path is None:
        return UNREADABLE
    try:
        fd = os.open(dir_path, _DIR_FLAGS)
    except FileNotFoundError:
        # Removed: it was empty then, and nothing can join it any more.
        return EMPTY
    except OSError:
        return UNREADABLE
    try:
        try:
            st = os.fstat(fd)
        except OSError:
            return UNREADABLE
        if st.st_ino != cgroup_id:
            # Another cgroup of the same name: the recorded one was removed.
            return EMPTY
        populated = _populated(fd)
        return UNREADABLE if populated is None else POPULATED if populated else EMPTY
    finally:
        os.close(fd)


def _read_cgroup_record(dir_fd: int, name: str) -> str:
    """What cgroup record `name` in `dir_fd` shows: `absent` when there is no such file."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return ABSENT
    except OSError:
        return UNREADABLE
    try:
        data = _read_bounded(fd, MAX_WITNESS_BYTES)
    except OSError:
        return UNREADABLE
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return UNREADABLE
    return observe_cgroup(text)


# --- The witnesses this process holds ---------------------------------------------------------

#: The witnesses this process holds for itself: kept open for the life of the process (a witness
#: that closed while records name its holder would prove it dead). Entries: (directory key
#: (device, inode), witness name, descriptor).
_HELD: List[Tuple[Tuple[int, int], str, int]] = []
_HELD_LOCK = threading.Lock()


class Witnesses:
    """The witness directory of one state home (`witness.rs::Witnesses`)."""

    def __init__(self, root_fd: int, key: Tuple[int, int]) -> None:
        self._root = root_fd
        self._key = key
        self._boot: Optional[Tuple[str, int]] = None
        self._swept = False
        self._lock = threading.RLock()
        #: Spawn witnesses of children not yet captured: pid → spawn witness name.
        self._pending: Dict[int, str] = {}

    @classmethod
    def open(cls, home_fd: int) -> "Witnesses":
        """Opens (creating, mode 0700) `.proclease/witnesses` in the state home `home_fd`.

        Raises WitnessError: the directory cannot be created, or it is not a private directory
        of the user."""
        internal = private_dir(home_fd, ".proclease", ".proclease")
        try:
            root = private_dir(internal, DIRECTORY, ROOT)
        finally:
            os.close(internal)
        try:
            st = os.fstat(root)
        except OSError as error:
            os.close(root)
            raise _os_error(ROOT, "fstat", error) from None
        return cls(root, (st.st_dev, st.st_ino))

    # Directories -------------------------------------------------------------------------------

    def _boot_dir(self, boot_id: str) -> int:
        """This boot's directory (created on first use; the directories of other boots are
        removed then: every process they speak of is gone)."""
        with self._lock:
            fd = self._existing_boot_dir(boot_id)
            if fd is None:
                label = f"{ROOT}/{boot_id}"
                created = private_dir(self._root, boot_id, label)
                if self._boot is None:
                    self._boot = (boot_id, created)
                else:
                    os.close(created)
                fd = self._existing_boot_dir(boot_id)
                if fd is None:
                    raise WitnessError(label, "open", "the boot id changed while this process ran")
            if not self._swept:
                self._swept = True
                self._remove_other_boots(boot_id)
            return fd

    def _existing_boot_dir(self, boot_id: str) -> Optional[int]:
        """The directory of this boot if it exists (probes never create it): None only when it is
        absent (`Witnesses::existing_boot_dir`).

        Raises WitnessError: it is there but cannot be opened, or is not a private directory of
        the user. A witness in it may be the only proof that a process runs."""
        with self._lock:
            if self._boot is not None:
                return self._boot[1] if self._boot[0] == boot_id else None
            fd = open_private_dir_if_present(self._root, boot_id, f"{ROOT}/{boot_id}")
            if fd is None:
                return None
            self._boot = (boot_id, fd)
            return fd

    def _existing_boot_dir_quietly(self, boot_id: str) -> Optional[int]:
        """`_existing_boot_dir` for best-effort cleanup: None on an error too."""
        try:
            return self._existing_boot_dir(boot_id)
        except WitnessError:
            return None

    def _remove_other_boots(self, boot_id: str) -> None:
        names = _names(self._root, 10_000)
        if names is None:
            return
        for name in names:
            if name == boot_id or not is_digest(name):
                continue
            try:
                fd = open_dir(self._root, name)
            except OSError:
                continue
            try:
                files = _names(fd, 100_000)
                for file in files or []:
                    _unlink(fd, file)
            finally:
                os.close(fd)
            try:
                os.rmdir(name, dir_fd=self._root)
            except OSError:
                pass

    # Creation ----------------------------------------------------------------------------------

    def _create(self, holder: Any, role: str, ns: Namespaces, name: str) -> int:
        """Creates a witness for `holder` in role `role`, locked, under `name`; returns its open,
        locked descriptor (close-on-exec). A free file already at `name` (left by an earlier
        holder of this name that is gone) is replaced; a held one is a `WitnessCollision`."""
        if not nameable(holder):
            raise WitnessError(ROOT, "name", "not a process identity")
        pid, boot_id, _ = owner_fields(holder)
        directory = self._boot_dir(boot_id)
        path = f"{ROOT}/{boot_id}/{name}"
        temp = f".tmp-{uuid.uuid4()}"
        try:
            fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=directory)
        except OSError as error:
            raise _os_error(path, "create", error) from None

        def fail(error: WitnessError) -> WitnessError:
            _unlink(directory, temp)
            os.close(fd)
            return error

        try:
            st = os.fstat(fd)
            _write_all(fd, content(holder, role, ns, (st.st_dev, st.st_ino)).encode("utf-8"))
        except OSError as error:
            raise fail(_os_error(path, "write", error)) from None
        # A filesystem without flock still gets the file (an `untestable` witness that records
        # the namespaces for the /proc proof); any other error is a failure.
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise fail(WitnessError(path, "flock", "a fresh file was locked")) from None
        except OSError as error:
            if error.errno not in _LOCK_UNSUPPORTED:
                raise fail(_os_error(path, "flock", error)) from None
        try:
            try:
                _link(directory, temp, name)
                _unlink(directory, temp)
            except FileExistsError:
                if _test(directory, name) in (FREE, ABSENT):
                    # Abandoned by an earlier holder of the same name: take its place.
                    os.rename(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
                else:
                    raise fail(WitnessCollision(path, pid)) from None
        except OSError as error:
            raise fail(_os_error(path, "link", error)) from None
        return fd

    def hold(self, own: Any, ns: Namespaces) -> None:
        """Takes this process's own witness for its identity `own`, once per state home, and
        keeps it for the life of the process.

        Raises WitnessError: it cannot be created; WitnessCollision: another live process holds
        a witness of the same identity."""
        name = identity_name(own)
        with _HELD_LOCK:
            if any(key == self._key and held == name for key, held, _ in _HELD):
                return
            fd = self._create(own, "owner", ns, name)
            _HELD.append((self._key, name, fd))

    def holds(self, own: Any) -> bool:
        """Whether this process holds the witness of `own` in this directory."""
        name = identity_name(own)
        with _HELD_LOCK:
            return any(key == self._key and held == name for key, held, _ in _HELD)

    def retire(self, own: Any) -> None:
        """Gives up this process's own witness: its name is removed, so later probes of `own` use
        the `/proc` proof alone. Call only once no record names `own` any more (everything it
        held was released). Also removes the free spawn witnesses it took (`Witnesses::retire`)."""
        name = identity_name(own)
        _, boot_id, _ = owner_fields(own)
        with _HELD_LOCK:
            for at, (key, held, fd) in enumerate(_HELD):
                if key == self._key and held == name:
                    directory = self._existing_boot_dir_quietly(boot_id)
                    if directory is not None:
                        _unlink(directory, name)
                    # Its name is gone, so closing it proves nothing to anyone; a later use of
                    # this identity takes a new witness.
                    del _HELD[at]
                    os.close(fd)
                    break
        self._remove_free_spawns(own)

    def _remove_free_spawns(self, spawner: Any) -> None:
        """Removes the spawn witnesses `spawner` took whose locks are free, with the identity
        names (and cgroup records) of the children they were linked to."""
        if not nameable(spawner):
            return
        _, boot_id, _ = owner_fields(spawner)
        directory = self._existing_boot_dir_quietly(boot_id)
        if directory is None:
            return
        prefix = spawn_prefix(spawner)
        names = _names(directory, 100_000)
        if names is None:
            return
        names = [n for n in names if _utf8(n)]
        removed = []
        for spawn in (n for n in names if n.startswith(prefix)):
            if _test(directory, spawn) != FREE:
                continue
            spawn_stat = _lstat(directory, spawn)
            if spawn_stat is None:
                continue
            for other in (n for n in names if n.endswith(".witness")):
                st = _lstat(directory, other)
                if st is not None and st.st_ino == spawn_stat.st_ino and st.st_dev == spawn_stat.st_dev:
                    _unlink(directory, other)
                    if _same_file(directory, cgroup_name(spawn), cgroup_name(other)):
                        _unlink(directory, cgroup_name(other))
            _unlink(directory, spawn)
            _unlink(directory, cgroup_name(spawn))
            _unlink(directory, uncontained_name(spawn))
            removed.append(spawn)
        with self._lock:
            self._pending = {pid: name for pid, name in self._pending.items() if name not in removed}

    def spawn(self, spawner: Any, ns: Namespaces) -> "SpawnWitness":
        """Takes a witness for a process `spawner` is about to start (`Witnesses::spawn`).

        Raises WitnessError: the witness cannot be created."""
        name = f"{spawn_prefix(spawner)}{uuid.uuid4()}"
        fd = self._create(spawner, "spawn", ns, name)
        return SpawnWitness(self, owner_fields(spawner)[1], name, fd)

    # Binding -----------------------------------------------------------------------------------

    def bind(self, pid: int, child: Any) -> None:
        """Links the spawn witness of child `pid` (if it was started with one: `SpawnWitness.started`)
        under the child's identity `child`, so that probing `child` tests it. Idempotent.

        Raises WitnessError / WitnessCollision."""
        with self._lock:
            spawn = self._pending.get(pid)
        if spawn is not None:
            self.link(spawn, child)

    def link(self, spawn: str, child: Any) -> None:
        """Links spawn witness `spawn` under `child`'s identity name, with its cgroup record
        (`Witnesses::bind` after its pending lookup)."""
        if not nameable(child):
            return
        _, boot_id, _ = owner_fields(child)
        directory = self._boot_dir(boot_id)
        name = identity_name(child)
        path = f"{ROOT}/{boot_id}/{name}"
        self._link_identity(directory, spawn, name, path, child)
        # The cgroup record follows the witness: a stale one of an earlier holder of this
        # identity name (free witness, replaced above) goes.
        record, under = cgroup_name(spawn), cgroup_name(name)
        if _same_file(directory, record, under):
            return
        _unlink(directory, under)
        try:
            _link(directory, record, under)
        except FileNotFoundError:
            pass
        except OSError as error:
            # The record is a second proof: the witness, linked, still decides alone.
            log.warning("%s/%s/%s: the command's cgroup record cannot be linked: %s", ROOT, boot_id, under, os_message(error))

    def _link_identity(self, directory: int, spawn: str, name: str, path: str, child: Any) -> None:
        try:
            _link(directory, spawn, name)
            return
        except FileExistsError:
            pass
        except OSError as error:
            raise _os_error(path, "link", error) from None
        if _same_file(directory, spawn, name):
            return
        if _test(directory, name) != FREE:
            raise WitnessCollision(path, owner_fields(child)[0])
        try:
            os.unlink(name, dir_fd=directory)
        except OSError as error:
            raise _os_error(path, "unlink", error) from None
        try:
            _link(directory, spawn, name)
        except OSError as error:
            raise _os_error(path, "link", error) from None

    def _started(self, pid: int, spawn: str) -> None:
        with self._lock:
            self._pending[pid] = spawn

    # Tests -------------------------------------------------------------------------------------

    def test(self, owner: Any) -> Tuple[str, Optional[int]]:
        """The state of `owner`'s witness (`absent`, `held`, `free`, `untestable`), and the PID
        namespace its content records.

        Raises WitnessError: its boot's directory or its file is there but cannot be opened
        (never `absent`: a witness that cannot be seen may be the only proof of life)."""
        if not nameable(owner):
            return (ABSENT, None)
        _, boot_id, _ = owner_fields(owner)
        directory = self._existing_boot_dir(boot_id)
        if directory is None:
            return (ABSENT, None)
        name = identity_name(owner)
        state = _test_checked(directory, name, f"{ROOT}/{boot_id}/{name}")
        return (state, None if state == ABSENT else _recorded_pid_namespace(directory, name))

    def test_tree(self, owner: Any) -> str:
        """What the cgroup recorded for `owner` shows: `absent` when none was recorded."""
        if not nameable(owner):
            return ABSENT
        try:
            directory = self._existing_boot_dir(owner_fields(owner)[1])
        except WitnessError:
            return UNREADABLE
        if directory is None:
            return ABSENT
        return _read_cgroup_record(directory, cgroup_name(identity_name(owner)))

    def test_spawned(self, owner: Any) -> Tuple[str, bool]:
        """The aggregate state of the spawn witnesses `owner` took: held if any is held (or the
        cgroup recorded with one is populated), free if there are some and all are free,
        untestable if some cannot be tested (or the cgroup recorded with one cannot be read
        here) and none is held, absent if there are none; and
        whether one of them was started uncontained (it has an uncontained record).

        Raises WitnessError: its boot's directory is there but cannot be opened or listed, or a
        spawn witness's file cannot be opened (`Witnesses::test_spawned`)."""
        if not nameable(owner):
            return ABSENT, False
        _, boot_id, _ = owner_fields(owner)
        directory = self._existing_boot_dir(boot_id)
        if directory is None:
            return ABSENT, False
        prefix = spawn_prefix(owner)
        records = cgroup_name(prefix)
        listed = _names(directory, 100_000)
        if listed is None:
            raise WitnessError(f"{ROOT}/{boot_id}", "list", "it cannot be listed")
        names = {name for name in listed if _utf8(name)}
        aggregate = ABSENT
        uncontained = False
        for name in names:
            if name.startswith(records):
                tree = _read_cgroup_record(directory, name)
                if tree == POPULATED:
                    # A process it started, whatever it closed, still runs in its cgroup.
                    return HELD, False
                if tree == UNREADABLE and aggregate != HELD:
                    # Unseen is not gone: one that closed its spawn witness may run there.
                    aggregate = UNTESTABLE
                continue
            if not name.startswith(prefix):
                continue
            uncontained = uncontained or uncontained_name(name) in names
            state = _test_checked(directory, name, f"{ROOT}/{boot_id}/{name}")
            if state == HELD:
                aggregate = HELD
            elif state == UNTESTABLE and aggregate != HELD:
                aggregate = UNTESTABLE
            elif state == FREE and aggregate == ABSENT:
                aggregate = FREE
        return aggregate, uncontained

    def close(self) -> None:
        """Closes this object's directory descriptors (held witnesses stay held)."""
        with self._lock:
            if self._boot is not None:
                os.close(self._boot[1])
                self._boot = None
            if self._root >= 0:
                os.close(self._root)
                self._root = -1


class SpawnWitness:
    """A spawn witness between its creation and the child's start (`witness.rs::SpawnWitness`).

    Use (a supervisor)::

        spawn = identity.prepare_spawn()
        try:
            child = subprocess.Popen(cmd, pass_fds=[spawn.fd])   # the child inherits the lock
        except BaseException:
            spawn.discard()                                       # nothing inherited it
            raise
        spawn.started(child.pid)        # closes this process's copy; capture(pid) will bind it
        owner = identity.capture(child.pid)

    or, binding by hand: `spawn.bind(owner)` then `spawn.close_parent_copy()`. Close, never
    unlock: an unlock would release the child's lock too. A spawn witness neither started nor
    discarded keeps its name; used as a context manager it is discarded when the block raises
    before `started` / `close_parent_copy`.
    """

    def __init__(self, witnesses: Witnesses, boot_id: str, name: str, fd: int) -> None:
        self._witnesses = witnesses
        self.boot_id = boot_id
        #: Its file name in this boot's witness directory.
        self.name = name
        self._fd: Optional[int] = fd

    @property
    def fd(self) -> Optional[int]:
        """The witness's descriptor in this process (close-on-exec here: give it to the child
        alone, e.g. `subprocess.Popen(…, pass_fds=[spawn.fd])`); None once closed."""
        return self._fd

    def record_cgroup(self, record: str) -> None:
        """Records the cgroup the child's tree runs in, as `<spawner>.cgroup-<uuid>`: linked
        under the child's identity with the witness (`SpawnWitness::record_cgroup`). Call before
        the child starts.

        Raises WitnessError: the record cannot be written."""
        self._write_record(cgroup_name(self.name), record)

    def record_uncontained(self) -> None:
        """Records that the child's tree runs uncontained (no box, no cgroup), as
        `<spawner>.uncontained-<uuid>`: probes then say that a free witness proves gone only what
        kept it (`SpawnWitness::record_uncontained`; docs/witness.md, "Uncontained runs"). Call
        before `started` / `close_parent_copy`, while this process still holds the witness.

        Raises WitnessError: the record cannot be written."""
        self._write_record(uncontained_name(self.name), UNCONTAINED_RECORD)

    def _write_record(self, name: str, text: str) -> None:
        """Writes record `name` beside the witness, whole or not at all (`_write_new`).

        Raises WitnessError: it cannot be written."""
        directory = self._witnesses._boot_dir(self.boot_id)
        try:
            _write_new(directory, name, text.encode("utf-8"))
        except OSError as error:
            raise _os_error(f"{ROOT}/{self.boot_id}/{name}", "write", error) from None

    def started(self, pid: int) -> None:
        """The child is running as `pid`: this process closes its copy (the child's keeps the
        lock), and a later `ProcessIdentity.capture(pid)` links the witness under the child's
        identity (`SpawnWitness::started`)."""
        self._witnesses._started(pid, self.name)
        self.close_parent_copy()

    def bind(self, child: Any) -> None:
        """Links the witness under the child's identity `child` (a `types.owner`) now: the same
        inode, the same lock (docs/witness.md, "Bind").

        Raises WitnessError / WitnessCollision."""
        self._witnesses.link(self.name, child)

    def close_parent_copy(self) -> None:
        """Closes this process's descriptor (never unlocks it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def discard(self) -> None:
        """The spawn failed: nothing inherited the witness; it is removed, with its cgroup
        record (`SpawnWitness::abandon`)."""
        self.close_parent_copy()
        directory = self._witnesses._existing_boot_dir_quietly(self.boot_id)
        if directory is not None:
            _unlink(directory, self.name)
            _unlink(directory, cgroup_name(self.name))
            _unlink(directory, uncontained_name(self.name))

    abandon = discard

    def __enter__(self) -> "SpawnWitness":
        return self

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        # Neither started nor closed when the block failed: the witness protects nothing.
        if kind is not None and self._fd is not None:
            self.discard()
