"""Process identity on Linux: the `process-identity` import (`wit/proclease.wit`, interface
`process-identity`; spec §2), with the kernel-lock witnesses of `docs/witness.md` and the run
journal of `docs/deviations.md` §19.

A port of `host/src/imports/process_identity/mod.rs`, `run_journal.rs` and (through
`witness.py`) `witness.rs` and the reading half of `cgroup_tree.rs`.

This module only observes: it reads `/proc/sys/kernel/random/boot_id`, `/proc/<pid>/stat` and
`/proc/<pid>/task` (relative to the pid's directory), `/proc/self`'s namespaces and time
offsets, asks the kernel whether a pid exists (`kill(pid, 0)`), and tests witnesses. What the
observations prove (`owner-facts` → `liveness`) is the component's:
`dispositions.judge-owner(owner, facts)` (proclease-core's `liveness::judge`); no lease rule is
repeated here.

Two rules of proclease-core *are* repeated, because an identity cannot be captured without them
and the native host links them too: the §2.2 boot id digest (`digest::linux_boot_id`) and the
§2.3 start id of a live process (`liveness::start_id`: the `/proc/<pid>/stat` parser, a
`Z`/`X` leader with running threads is alive — deviation 4 — and the start time brought back
to the initial time namespace — deviation 3). `tests/test_process_identity.py` checks them
against the conformance vectors.

Deviations kept from the native host (`docs/deviations.md`): the own identity comes from
`/proc/self`, and an identity is refused when `/proc` does not show this process's own PID
namespace (deviation 2); only `kill(pid, 0)` → `ESRCH` proves a pid absent (deviation 5).
This host has no cluster: `remote` is always `not-clustered`.
"""

from __future__ import annotations

import errno as _errno
import hashlib
import json
import os
import re
import stat as _stat
import threading
from typing import Any, NamedTuple, Optional, Tuple

from wasmtime.component import Variant

from ._wit import HostError, Rec, os_message
from .witness import (
    ABSENT,
    HELD,
    Namespaces,
    SpawnWitness,
    WitnessCollision,
    WitnessError,
    Witnesses,
    owner_fields,
    private_dir,
)

__all__ = [
    "ProcessIdentity",
    "ProcView",
    "RunJournal",
    "JournalEntry",
    "SpawnWitness",
    "linux_boot_id",
    "process_start_id",
    "identity_digest",
    "start_id",
    "BOOT_ID_MALFORMED",
    "PID_MALFORMED",
    "NOT_LIVE",
    "INITIAL_PID_NAMESPACE",
]

#: The reference's message for a boot id that does not have the expected shape (§2.2).
BOOT_ID_MALFORMED = "system boot identity is malformed"
#: The reference's message for a pid that is not a safe integer >= 1 (§2.4).
PID_MALFORMED = "process identity PID is malformed"
#: The reference's message when the pid is not a live process (§2.4).
NOT_LIVE = "exact live process identity is unavailable"
#: The inode number of the initial PID namespace (`PROC_PID_INIT_INO`).
INITIAL_PID_NAMESPACE = 0xEFFFFFFC
#: `Number.MAX_SAFE_INTEGER`.
MAX_SAFE_INTEGER = 2**53 - 1

_JS_SPACE = " \t\n\x0b\x0c\r"


# --- §2.1–2.3: digests and the start id (proclease-core's digest.rs, proc_stat.rs, liveness.rs)


def identity_digest(kind: str, value: str) -> str:
    """`identityDigest(kind, value)` = hex sha256(UTF8(kind) ‖ 0x00 ‖ UTF8(value)) (§2.1)."""
    return hashlib.sha256(kind.encode("utf-8") + b"\0" + value.encode("utf-8")).hexdigest()


def process_start_id(boot_id: str, raw_start: str) -> str:
    """`identityDigest("io-process-start", bootId ‖ 0x00 ‖ rawStart)` (§2.3)."""
    return identity_digest("io-process-start", f"{boot_id}\0{raw_start}")


_BOOT_ID = re.compile(r"[0-9A-Fa-f-]{36}")


def linux_boot_id(raw: str) -> str:
    """The boot id from the raw content of `/proc/sys/kernel/random/boot_id` (§2.2): trimmed, it
    must match `^[a-f0-9-]{36}$` case-insensitively (not lowercased); the result is
    `identityDigest("io-boot", trimmed)`. Raises ValueError(`system boot identity is
    malformed`)."""
    trimmed = raw.strip(_JS_SPACE)
    if _BOOT_ID.fullmatch(trimmed) is None:
        raise ValueError(BOOT_ID_MALFORMED)
    return identity_digest("io-boot", trimmed)


def _stat_fields(stat: str) -> Optional[list]:
    """The fields after the command name (the last `)`), split on runs of whitespace; None when
    there is no `)` at index >= 1 (`proc_stat::fields`)."""
    text = stat.strip(_JS_SPACE)
    close = text.rfind(")")
    if close < 1:
        return None
    rest = text[close + 1 :].strip(_JS_SPACE)
    return [f for f in re.split(r"[ \t\n\x0b\x0c\r]", rest) if f]


def _ascii_digits(text: str) -> bool:
    return bool(text) and text.isascii() and text.isdigit()


def parse_proc_stat(stat: str, boot_id: str) -> Tuple[str, Optional[str], Optional[str]]:
    """§2.3 (`proc_stat::parse`): (`alive`, raw start, process start id), (`dead`, None, None) for
    state `Z`/`X`/`x`, or (`unknown`, None, None)."""
    fields = _stat_fields(stat)
    if fields is None or not fields:
        return ("unknown", None, None)
    if fields[0] in ("Z", "X", "x"):
        return ("dead", None, None)
    if fields[0] not in ("R", "S", "D", "T", "t", "W", "K", "P", "I"):
        return ("unknown", None, None)
    if len(fields) > 19 and _ascii_digits(fields[19]):
        return ("alive", fields[19], process_start_id(boot_id, fields[19]))
    return ("unknown", None, None)


class ProcView(NamedTuple):
    """Which namespaces the numbers of this host's /proc are relative to (WIT `proc-view`)."""

    #: The PID namespace /proc shows (its nsfs inode), None when /proc does not show this
    #: process's own PID namespace.
    pid_namespace: Optional[int]
    #: The boottime offset of this process's time namespace, ns.
    boottime_offset_ns: int
    #: USER_HZ, the unit of /proc/<pid>/stat's starttime.
    clock_ticks_per_second: int

    def offset_ticks(self) -> Optional[int]:
        """The boottime offset in clock ticks, when it is a whole number of ticks."""
        hz = self.clock_ticks_per_second
        if hz <= 0 or 1_000_000_000 % hz != 0:
            return None
        tick_ns = 1_000_000_000 // hz
        if self.boottime_offset_ns % tick_ns != 0:
            return None
        return self.boottime_offset_ns // tick_ns

    def record(self) -> Rec:
        return Rec(pid_namespace=self.pid_namespace, boottime_offset_ns=self.boottime_offset_ns, clock_ticks_per_second=self.clock_ticks_per_second)


def _normalized_start(raw_start: str, view: ProcView) -> Optional[str]:
    """`starttime` as the initial time namespace shows it (`liveness::normalized_start`)."""
    offset = view.offset_ticks()
    if offset is None:
        return None
    if offset == 0:
        return raw_start
    start = int(raw_start)
    if start >= 2**127:
        return None
    corrected = start - offset
    return str(corrected) if corrected >= 0 else None


def start_id(stat: str, tasks: int, view: ProcView, boot_id: str) -> Optional[str]:
    """The process start id of a live process from its `/proc/<pid>/stat` (§2.3), corrected as
    proclease-core's `liveness::inspect` does: a `Z`/`X` leader with more than one task is alive
    with its start time, and the start time is brought back to the initial time namespace. None
    when the stat does not show a live process (`liveness::start_id`)."""
    status, raw_start, _ = parse_proc_stat(stat, boot_id)
    if status == "dead" and tasks > 1:
        fields = _stat_fields(stat) or []
        if len(fields) > 19 and _ascii_digits(fields[19]):
            raw_start = fields[19]
        else:
            return None
    elif status != "alive":
        return None
    start = _normalized_start(raw_start, view)
    return None if start is None else process_start_id(boot_id, start)


# --- /proc (mod.rs: Host::read, read_proc, observe) -----------------------------------------


class _Host(NamedTuple):
    view: ProcView
    #: This process's PID namespace (nsfs inode), whatever /proc shows.
    pid_namespace: Optional[int]
    #: This process's time namespace (nsfs inode).
    time_namespace: Optional[int]

    def namespaces(self) -> Optional[Namespaces]:
        """What a witness records of this process."""
        if self.view.pid_namespace is None:
            return None
        return Namespaces(self.view.pid_namespace, self.time_namespace or 0, self.view.boottime_offset_ns)


def _inode(path: str) -> Optional[int]:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except (OSError, UnicodeDecodeError):
        return None


def read_host() -> _Host:
    """This process's namespaces and /proc view (`Host::read`). /proc shows this PID namespace
    when `NSpid` of /proc/self/status lists one pid, this process's."""
    pid_namespace = _inode("/proc/self/ns/pid")
    time_namespace = _inode("/proc/self/ns/time")
    own = str(os.getpid())
    status = _read_text("/proc/self/status")
    own_proc = False
    if status is not None:
        line = next((entry for entry in status.splitlines() if entry.startswith("NSpid:")), None)
        if line is not None:
            pids = line[len("NSpid:") :].split()
            own_proc = len(pids) == 1 and pids[0] == own
        else:
            # A kernel without NSpid: /proc/self must at least name this pid.
            try:
                own_proc = os.readlink("/proc/self") == own
            except OSError:
                own_proc = False
    offset = 0
    offsets = _read_text("/proc/self/timens_offsets")
    for line in (offsets or "").splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0] == "boottime":
            try:
                offset = int(fields[1]) * 1_000_000_000 + int(fields[2])
            except ValueError:
                offset = 0
            break
    hz = os.sysconf("SC_CLK_TCK")
    return _Host(ProcView(pid_namespace if own_proc else None, offset, hz), pid_namespace, time_namespace)


def read_proc(entry: str) -> Optional[Tuple[str, int]]:
    """`/proc/<entry>/stat` as text and the number of entries of `/proc/<entry>/task`, through
    the entry's directory; None when the stat cannot be read (`mod.rs::read_proc`)."""
    try:
        directory = os.open(f"/proc/{entry}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fd = os.open("stat", os.O_RDONLY | os.O_CLOEXEC, dir_fd=directory)
        except OSError:
            return None
        try:
            chunks = []
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except OSError:
            return None
        finally:
            os.close(fd)
        try:
            text = b"".join(chunks).decode("utf-8")
        except UnicodeDecodeError:
            return None
        try:
            task = os.open("task", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=directory)
            try:
                tasks = min(len(os.listdir(task)), 2**32 - 1)
            finally:
                os.close(task)
        except OSError:
            tasks = 0
        return (text, tasks)
    finally:
        os.close(directory)


def observe(pid: int) -> Tuple[Variant, int]:
    """`/proc/<pid>/stat` (WIT `proc-read`) and the task count. Only the kernel's answer to
    `kill(pid, 0)` proves a pid absent (`ESRCH`); `EPERM`, or success with an unreadable stat,
    proves nothing (`mod.rs::observe`)."""
    if pid <= 0 or pid > 0x7FFFFFFF:
        # No Linux process has a pid beyond i32: it certainly does not exist.
        return (Variant("missing"), 0)
    read = read_proc(str(pid))
    if read is not None:
        return (Variant("stat", read[0]), read[1])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return (Variant("missing"), 0)
    except OSError:
        pass
    return (Variant("unreadable"), 0)


# --- The run journal (run_journal.rs) --------------------------------------------------------

#: The journal's directory in the state home (for messages).
JOURNAL_ROOT = ".proclease/runs"
#: The size of every journal file, bytes: one sector, so that an in-place overwrite is one write.
RECORD_BYTES = 512
#: The journal's format version.
JOURNAL_VERSION = 1


def _journal_name(lease_id: str) -> Optional[str]:
    """A lease id as a file name: a UUID's characters only (anything else is never a journal
    name)."""
    plain = isinstance(lease_id, str) and 0 < len(lease_id) <= 64 and all(c in "0123456789abcdefABCDEF-" for c in lease_id)
    return f"{lease_id}.run" if plain else None


def _journal_record(value: dict) -> Optional[bytes]:
    """The record's text (serde_json: compact, keys sorted), padded with spaces to
    `RECORD_BYTES` and ended by `\\n`. None when it does not fit."""
    data = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode("utf-8")
    if len(data) >= RECORD_BYTES:
        return None
    return data + b" " * (RECORD_BYTES - 1 - len(data)) + b"\n"


def _directory_value(identity: Any) -> dict:
    device, inode, birth = (_record_field(identity, n) for n in ("device", "inode", "birthtime_ns"))
    return {"device": device, "inode": inode, "birthtimeNs": birth}


def _record_field(record: Any, name: str) -> Any:
    for attribute in (name, name.replace("_", "-")):
        try:
            return getattr(record, attribute)
        except AttributeError:
            continue
    raise TypeError(f"the record has no field {name}")


def _json_i32(value: Any) -> Tuple[bool, Optional[int]]:
    """serde's `as_i64` then `i32::try_from`, null or missing as None: (valid, value)."""
    if value is None:
        return (True, None)
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
        return (False, None)
    return (True, value)


def _parse_journal(data: bytes, lease_id: str) -> Optional[Rec]:
    """A `finished` record for `lease_id` as a `run-outcome`, or None for anything else (a
    `running` entry, a torn write, another lease's) (`run_journal.rs::parse`)."""
    if len(data) != RECORD_BYTES or not data.endswith(b"\n"):
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    version = value.get("version")
    if isinstance(version, bool) or version != JOURNAL_VERSION or not isinstance(version, int):
        return None
    if not isinstance(value.get("leaseId"), str) or value["leaseId"] != lease_id:
        return None
    if not isinstance(value.get("state"), str) or value["state"] != "finished":
        return None
    directory = value.get("directory")
    if not isinstance(directory, dict):
        return None
    fields = [directory.get(k) for k in ("device", "inode", "birthtimeNs")]
    if not all(isinstance(f, str) for f in fields):
        return None
    (exit_ok, exit_code), (signal_ok, signal) = _json_i32(value.get("exitCode")), _json_i32(value.get("signal"))
    if not exit_ok or not signal_ok or (exit_code is None and signal is None):
        return None
    identity = Rec(device=fields[0], inode=fields[1], birthtime_ns=fields[2])
    return Rec(directory_identity=identity, exit_code=exit_code, signal=signal)


class JournalEntry:
    """The journal file of one run, open for its in-place update (`run_journal.rs::JournalEntry`)."""

    def __init__(self, fd: int, root: int, lease_id: str, directory: dict) -> None:
        self._fd: Optional[int] = fd
        self._root: Optional[int] = root
        self.lease_id = lease_id
        self._directory = directory

    def finished(self, exit_code: Optional[int], signal: Optional[int]) -> None:
        """Records, in place (`pwrite` at offset 0, same length), that the run's command
        finished with `exit_code` or `signal` and its whole tree has ended, and makes the entry
        durable (`fdatasync` of the file, `fsync` of `.proclease/runs`: `begin` synced neither).
        Needs no free space and no writable directory.

        Raises OSError: the write or either sync failed (a read-only filesystem, an I/O error)."""
        value = {
            "version": JOURNAL_VERSION,
            "leaseId": self.lease_id,
            "directory": self._directory,
            "state": "finished",
            "exitCode": exit_code,
            "signal": signal,
        }
        data = _journal_record(value)
        if data is None:
            raise OSError(_errno.EINVAL, "journal record too long")
        if self._fd is None or self._root is None:
            raise OSError(_errno.EBADF, "the journal entry is closed")
        written = 0
        while written < len(data):
            written += os.pwrite(self._fd, data[written:], written)
        os.fdatasync(self._fd)
        os.fsync(self._root)

    def close(self) -> None:
        for fd in (self._fd, self._root):
            if fd is not None:
                os.close(fd)
        self._fd = self._root = None


def _present(dir_fd: int, path: str) -> bool:
    """Whether `path` (relative to `dir_fd`) is there, of whatever kind (not followed)."""
    try:
        os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return True


class RunJournal:
    """The run journal of one state home, `<state home>/.proclease/runs/<lease id>.run`
    (`run_journal.rs::RunJournal`; `docs/deviations.md` §19). One file per supervised run, of
    exactly 512 bytes: a JSON object padded with spaces and ended by `\\n`, created `running`
    before the command starts and overwritten in place `finished` once its whole tree ended."""

    def __init__(self, root_fd: int) -> None:
        self._root = root_fd

    @classmethod
    def open(cls, home_fd: int) -> "RunJournal":
        """Opens (creating, mode 0700) `.proclease/runs` in the state home `home_fd`.

        Raises WitnessError (`<label>: <operation> failed: …`): it cannot be created or is not a
        private directory of the user."""
        internal = private_dir(home_fd, ".proclease", ".proclease")
        try:
            return cls(private_dir(internal, "runs", JOURNAL_ROOT))
        finally:
            os.close(internal)

    def begin(self, lease_id: str, directory: Any) -> JournalEntry:
        """Starts the journal entry of the run under lease `lease_id` in the directory
        `directory` (a `directory-identity`): created (0600, exclusively) and written in full,
        before the command starts, without an fsync: `finished` makes the entry durable
        (`RunJournal::begin`; `docs/durability.md`, step 5).

        Raises OSError: the lease id is not a UUID (`EINVAL`); the file exists; any I/O error (a
        full or read-only state home: the run must not start then)."""
        name = _journal_name(lease_id)
        directory_value = _directory_value(directory)
        data = _journal_record({"version": JOURNAL_VERSION, "leaseId": lease_id, "directory": directory_value, "state": "running"}) if name else None
        if name is None or data is None:
            raise OSError(_errno.EINVAL, "not a lease id")
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self._root)
        try:
            written = 0
            while written < len(data):
                written += os.pwrite(fd, data[written:], written)
            root = os.dup(self._root)
        except OSError:
            os.close(fd)
            try:
                os.unlink(name, dir_fd=self._root)
            except OSError:
                pass
            raise
        return JournalEntry(fd, root, lease_id, directory_value)

    def finished_run(self, lease_id: str) -> Optional[Rec]:
        """What the journal says of the run under `lease_id`: a `run-outcome` only for a complete,
        valid `finished` entry (`RunJournal::finished_run`).

        Raises HostError(str): the entry exists but is not a private regular file of the user,
        or cannot be read."""
        name = _journal_name(lease_id)
        if name is None:
            return None
        label = f"{JOURNAL_ROOT}/{name}"
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=self._root)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise HostError(f"{label}: open failed: {os_message(error)}") from None
        try:
            try:
                st = os.fstat(fd)
            except OSError as error:
                raise HostError(f"{label}: fstat failed: {os_message(error)}") from None
            if not _stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077 != 0:
                raise HostError(f"{label}: not a private regular file of yours")
            chunks, left = [], RECORD_BYTES + 1
            try:
                while left > 0:
                    chunk = os.read(fd, left)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    left -= len(chunk)
            except OSError as error:
                raise HostError(f"{label}: read failed: {os_message(error)}") from None
        finally:
            os.close(fd)
        return _parse_journal(b"".join(chunks), lease_id)

    def forget(self, lease_id: str) -> None:
        """Removes the entry of `lease_id` (best effort)."""
        name = _journal_name(lease_id)
        if name is not None:
            try:
                os.unlink(name, dir_fd=self._root)
            except OSError:
                pass

    def close(self) -> None:
        if self._root >= 0:
            os.close(self._root)
            self._root = -1


# --- The process-identity import ---------------------------------------------------------------


class ProcessIdentity:
    """Process identity for this host (`process_identity/mod.rs::ProcessIdentity`): the boot id
    and own identity cached after first success (§2.2, §2.3), the witnesses and run journal of
    one state home, no cluster.

    `home` is the state home's path, opened (claimed) by the state store; while it does not exist
    it is looked for again at each use. Like the native host (`api/host.rs`), a home where the
    witness directory or the journal cannot be kept (read-only, not private) still serves every
    probe, with every witness `absent` and no journal (`witness_error` / `journal_error` say
    why). `home=None`: no witnesses, no journal."""

    def __init__(self, home: Optional[str]) -> None:
        self._lock = threading.RLock()
        self._boot_id: Optional[str] = None
        self._own: Optional[Tuple[int, Rec]] = None
        self._host: Optional[Tuple[int, _Host]] = None
        self._home = home
        self._opened = home is None
        self._witnesses: Optional[Witnesses] = None
        self._journal: Optional[RunJournal] = None
        self.witness_error: Optional[str] = None
        self.journal_error: Optional[str] = None
        #: Whether the journal's directory is there although it could not be opened.
        self._journal_present = False
        #: Whether the witness directory is there although it could not be opened.
        self._witnesses_present = False
        self._open()

    def _open(self) -> None:
        """Opens the witness directory and the run journal of the state home, once it exists
        (`api/host.rs`: `Witnesses::open`, `RunJournal::open`, each dropped on failure). The
        native host opens them right after creating the home; a home that does not exist yet
        (the state store creates it on first use) is looked for again at each use instead, and
        never created here."""
        with self._lock:
            if self._opened:
                return
            try:
                home_fd = os.open(self._home, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError as error:
                self.witness_error = self.journal_error = f"{self._home}: open failed: {os_message(error)}"
                self._opened = error.errno != _errno.ENOENT
                return
            self._opened = True
            self.witness_error = self.journal_error = None
            try:
                try:
                    self._witnesses = Witnesses.open(home_fd)
                except WitnessError as error:
                    self.witness_error = str(error)
                    self._witnesses_present = _present(home_fd, ".proclease/witnesses")
                try:
                    self._journal = RunJournal.open(home_fd)
                except WitnessError as error:
                    self.journal_error = str(error)
                    self._journal_present = _present(home_fd, ".proclease/runs")
            finally:
                os.close(home_fd)

    @property
    def witnesses(self) -> Optional[Witnesses]:
        """The state home's witness directory; None without one (every witness `absent`)."""
        self._open()
        return self._witnesses

    @property
    def journal(self) -> Optional[RunJournal]:
        """The state home's run journal; None without one."""
        self._open()
        return self._journal

    def close(self) -> None:
        """Closes the directory descriptors (the witness this process holds stays held)."""
        if self._witnesses is not None:
            self._witnesses.close()
        if self._journal is not None:
            self._journal.close()

    # Observations of this process ---------------------------------------------------------------

    def host(self) -> _Host:
        """This process's namespaces and /proc view (read once per process)."""
        with self._lock:
            pid = os.getpid()
            if self._host is None or self._host[0] != pid:
                self._host = (pid, read_host())
            return self._host[1]

    def current_boot_id(self) -> str:
        """`process-identity.current-boot-id` (§2.2): 64 lowercase hex, cached after the first
        success.

        Raises HostError(`system boot identity is malformed` | `system boot identity is
        unavailable: …`)."""
        with self._lock:
            if self._boot_id is not None:
                return self._boot_id
            try:
                with open("/proc/sys/kernel/random/boot_id", "rb") as file:
                    raw = file.read().decode("utf-8")
            except OSError as error:
                raise HostError(f"system boot identity is unavailable: {os_message(error)}") from None
            except UnicodeDecodeError:
                raise HostError("system boot identity is unavailable: stream did not contain valid UTF-8") from None
            try:
                self._boot_id = linux_boot_id(raw)
            except ValueError as error:
                raise HostError(str(error)) from None
            return self._boot_id

    def _own_view(self) -> _Host:
        """The view of this process's /proc, required to show its own PID namespace before an
        identity is recorded: a pid looked up in another namespace's /proc names another
        process (deviation 2)."""
        host = self.host()
        if host.view.pid_namespace is None:
            raise HostError(
                "/proc does not show this process's own PID namespace (started with `unshare --pid --fork` but without "
                "`--mount-proc`?): a pid recorded here would name another process; mount a /proc for this namespace "
                "(unshare --pid --fork --mount-proc …) or run outside it"
            )
        return host

    def self_identity(self) -> Rec:
        """`process-identity.self-identity`: this process's own identity, from `/proc/self`
        (computed once per process), with its witness taken in the state home's witness directory
        (once; again after a retirement) and held from then on.

        Raises HostError(str): as `capture`; the witness cannot be taken while this process is
        outside the initial PID namespace, or another live process holds one of this identity."""
        with self._lock:
            pid = os.getpid()
            if self._own is None or self._own[0] != pid:
                host = self._own_view()
                boot_id = self.current_boot_id()
                read = read_proc("self")
                start = None if read is None else start_id(read[0], read[1], host.view, boot_id)
                if start is None:
                    raise HostError(NOT_LIVE)
                self._own = (pid, Rec(pid=pid, boot_id=boot_id, process_start_id=start))
            own = self._own[1]
        namespaces = self.host().namespaces()
        witnesses = self.witnesses
        if witnesses is not None and namespaces is not None:
            try:
                witnesses.hold(own, namespaces)
            except WitnessError as error:
                if isinstance(error, WitnessCollision) or namespaces.pid != INITIAL_PID_NAMESPACE:
                    raise HostError(f"this process's witness cannot be taken: {error}") from None
        return own

    def capture(self, pid: int) -> Rec:
        """`process-identity.capture`: the identity of the live process `pid` of this process's
        PID namespace (`captureProcessOwnerIdentity`, §2.4); a spawn witness started for it
        (`SpawnWitness.started(pid)`) is linked under it.

        Raises HostError(`process identity PID is malformed` | `exact live process identity is
        unavailable` | the boot id's | /proc shows another PID namespace | the command's witness
        cannot be linked)."""
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0 or pid > MAX_SAFE_INTEGER:
            raise HostError(PID_MALFORMED)
        host = self._own_view()
        boot_id = self.current_boot_id()
        if pid > 0x7FFFFFFF:
            raise HostError(NOT_LIVE)
        read = read_proc(str(pid))
        start = None if read is None else start_id(read[0], read[1], host.view, boot_id)
        if start is None:
            raise HostError(NOT_LIVE)
        owner = Rec(pid=pid, boot_id=boot_id, process_start_id=start)
        witnesses = self.witnesses
        if witnesses is not None:
            try:
                witnesses.bind(pid, owner)
            except WitnessError as error:
                raise HostError(f"the command's witness cannot be linked: {error}") from None
        return owner

    # Observations of a recorded process ----------------------------------------------------------

    def probe(self, owner: Any) -> Rec:
        """`process-identity.probe`: everything observable about a recorded process
        (`owner-facts`): the current boot id, its witness and its spawn witnesses, the cgroup
        recorded for it, `/proc/<pid>/stat` and its task count, and this host's /proc view.
        Nothing of this machine is read for an owner of another boot. The component judges
        (`dispositions.judge-owner`).

        Raises HostError(str): the current boot id cannot be read; for a process of this boot,
        the witness directory is there but cannot be used."""
        boot_id = self.current_boot_id()
        view = self.host().view
        pid, owner_boot_id, _ = owner_fields(owner)
        if owner_boot_id != boot_id:
            return Rec(
                boot_id=boot_id,
                witness=ABSENT,
                recorded_pid_namespace=None,
                spawned=ABSENT,
                spawned_uncontained=False,
                stat=Variant("unreadable"),
                tasks=0,
                view=view.record(),
                remote="not-clustered",
                tree=ABSENT,
            )
        witnesses = self.witnesses
        if witnesses is None and self.witness_error is not None and self._witnesses_present:
            # A witness held there would prove the process, or what it started, alive: nothing
            # can be told (`ProcessIdentity::probe`), so every caller keeps what it would take.
            raise HostError(
                f"whether pid {pid} (or a process it started) is alive cannot be told: the state home's witnesses cannot be read ({self.witness_error})"
            )
        try:
            witness, recorded = (ABSENT, None) if witnesses is None else witnesses.test(owner)
            spawned, spawned_uncontained = (ABSENT, False) if witnesses is None else witnesses.test_spawned(owner)
        except WitnessError as error:
            # Never taken for an absent witness (`ProcessIdentity::probe`).
            raise HostError(f"whether pid {pid} (or a process it started) is alive cannot be told: {error}") from None
        # A held witness decides alone; otherwise a populated cgroup of the tree keeps it alive.
        tree = ABSENT if witnesses is None or witness == HELD else witnesses.test_tree(owner)
        stat, tasks = observe(pid)
        return Rec(
            boot_id=boot_id,
            witness=witness,
            recorded_pid_namespace=recorded,
            spawned=spawned,
            spawned_uncontained=spawned_uncontained,
            stat=stat,
            tasks=tasks,
            view=view.record(),
            remote="not-clustered",
            tree=tree,
        )

    # The run journal --------------------------------------------------------------------------

    def finished_run(self, lease_id: str) -> Rec:
        """`process-identity.finished-run`: `finished-run-entry{outcome}` — what the run journal
        says of the command run under directory lease `lease_id` (none without a journal, or
        when nothing finished is recorded).

        Raises HostError(str): an entry exists but cannot be read."""
        journal = self.journal
        if journal is None and self.journal_error is not None and self._journal_present:
            # There but not usable: nothing is proven, so recovery keeps the run's directory
            # (`ProcessIdentity::without_run_journal`).
            raise HostError(f"the run journal cannot be opened: {self.journal_error}")
        outcome = None if journal is None else journal.finished_run(lease_id)
        return Rec(outcome=outcome)

    def forget_run(self, lease_id: str) -> None:
        """`process-identity.forget-run`: forgets the journal's entry for `lease_id` (best
        effort)."""
        journal = self.journal
        if journal is not None:
            journal.forget(lease_id)

    def begin_run(self, lease_id: str, directory: Any) -> Optional[JournalEntry]:
        """For a supervisor: starts the journal entry of the run under lease `lease_id` in the
        directory `directory` (a `directory-identity`), before the command starts; call
        `.finished(exit_code, signal)` on it once the command's whole tree has ended. None
        without a journal. Raises OSError (`RunJournal.begin`)."""
        journal = self.journal
        if journal is None and self.journal_error is not None:
            # A run whose end could not be recorded would look like a crashed start after a
            # crash, and lose its results: it must not start (`supervisor::start_journal`).
            raise OSError(_errno.EPERM, self.journal_error)
        return None if journal is None else journal.begin(lease_id, directory)

    # Witnesses for a supervisor ---------------------------------------------------------------

    def prepare_spawn(self) -> Optional[SpawnWitness]:
        """Takes a witness for a process this one is about to start, `<own pid>-<own
        start>.spawn-<uuid>` (`ProcessIdentity::spawn_witness`); None when there is no witness
        directory. See `SpawnWitness` for its use.

        Raises HostError(str): the own identity's errors, or the witness cannot be created."""
        witnesses = self.witnesses
        if witnesses is None:
            if self.witness_error is not None and self._home is not None:
                raise HostError(
                    f"a witness for the command cannot be taken: {self.witness_error}; without it nothing would prove the command's "
                    "processes alive once this supervisor is gone, so nothing was started (fix the directory and run again)"
                )
            return None
        own = self.self_identity()
        namespaces = self._own_view().namespaces()
        if namespaces is None:
            raise HostError("no PID namespace")
        try:
            return witnesses.spawn(own, namespaces)
        except WitnessError as error:
            raise HostError(f"a witness for the command cannot be taken: {error}") from None

    def retire(self) -> None:
        """Removes this process's own witness and its free spawn witnesses (with their identity
        links), as a supervisor does once it has released every record that names it
        (`Witnesses::retire`, docs/witness.md "Retire"). A spawn witness still held stays."""
        with self._lock:
            own = self._own[1] if self._own is not None and self._own[0] == os.getpid() else None
        witnesses = self.witnesses
        if own is not None and witnesses is not None:
            witnesses.retire(own)
