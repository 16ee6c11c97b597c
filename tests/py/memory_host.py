"""A host of every import of the proclease component, in Python and in memory.

`World` gathers one object per imported interface, each with a method per WIT function
(snake_case): an in-memory state store with compare-and-swap semantics, a workspace of
directory facts, a scripted process table with a fixed boot id, a plugin catalog with its
re-entrant lock, a settable clock and counting entropy. `component.Proclease` binds them.

A method returns the ok value of its `result`, or raises `HostError(payload)` for the err case.
Paths, messages and facts follow the contract (`wit/proclease.wit`); the failure messages say
which path and why, as the native host's do.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Dict, List, Optional

from component import HostError, HostResource, Rec, Variant, rec


def failure(kind: str, message: str) -> Rec:
    """An import's `failure` record (WIT `types.failure`): its kind and message, no OS facts."""
    return rec(kind=kind, message=message, errno=None, path=None, operation=None)

#: The initial PID namespace's inode number (the kernel's PROC_PID_INIT_INO).
INITIAL_PID_NAMESPACE = 0xEFFFFFFC
#: What every scripted probe reports about the host's own /proc.
INITIAL_VIEW = dict(pid_namespace=INITIAL_PID_NAMESPACE, boottime_offset_ns=0, clock_ticks_per_second=100)

STATUSES = ("exact-live-owner", "different-or-dead", "unknown")


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def utf16_order(name: str) -> bytes:
    """Sort key: UTF-16 code units, as the reference (JavaScript) orders names."""
    return name.encode("utf-16-be", "surrogatepass")


def owner(pid: int, boot_id: str, process_start_id: str) -> Rec:
    return rec(pid=pid, boot_id=boot_id, process_start_id=process_start_id)


def same_owner(a: Rec, b: Rec) -> bool:
    return (a.pid, a.boot_id, a.process_start_id) == (b.pid, b.boot_id, b.process_start_id)


def facts_proving(recorded: Rec, status: str) -> Rec:
    """The observations that make the component judge `recorded` as `status`, the way the
    reference's injected liveness answer does: no witness file and no spawn witnesses, except
    a held witness for a live owner; a dead owner's pid is gone (`missing`); an unknown one's
    /proc entry cannot be read. The view is the initial PID namespace, no time offset, 100 Hz."""
    if status not in STATUSES:
        raise ValueError(f"not an owner status: {status!r}")
    return rec(
        boot_id=recorded.boot_id,
        witness="held" if status == "exact-live-owner" else "absent",
        recorded_pid_namespace=None,
        spawned="absent",
        spawned_uncontained=False,
        stat=Variant("missing") if status == "different-or-dead" else Variant("unreadable"),
        tasks=0,
        view=rec(**INITIAL_VIEW),
        # No cluster (docs/cluster.md): another boot id is a previous boot.
        remote="not-clustered",
        # No cgroup recorded (docs/containment.md).
        tree="absent",
    )


class StateStore:
    """`state-store`: files and directories relative to the state home, by path."""

    def __init__(self) -> None:
        self.files: Dict[str, str] = {}
        self.directories: Dict[str, Rec] = {}
        self._inodes = 1000
        #: The next conditional replace or remove reports that the file changed.
        self.fail_next_cas = False
        #: Makes every call fail with this store failure, e.g. `failure('io', '…')`.
        self.broken: Optional[Rec] = None

    def _directory(self, path: str) -> Rec:
        """Creates `path` and its parents as needed; the identity of `path` (the home's for "")."""
        identity = rec(device="1", inode="1")
        prefix = ""
        for part in (p for p in path.split("/") if p):
            prefix = f"{prefix}/{part}" if prefix else part
            if prefix not in self.directories:
                self._inodes += 1
                self.directories[prefix] = rec(device="1", inode=str(self._inodes))
            identity = self.directories[prefix]
        return identity

    def put(self, path: str, text: str) -> None:
        self._directory(path.rpartition("/")[0])
        self.files[path] = text

    def _check(self) -> None:
        if self.broken is not None:
            raise HostError(self.broken)

    def _cas_refused(self) -> bool:
        refused, self.fail_next_cas = self.fail_next_cas, False
        return refused

    def read_if_present(self, path: str, max_bytes: int) -> Rec:
        self._check()
        text = self.files.get(path)
        if text is not None and len(text.encode("utf-8")) > max_bytes:
            raise HostError(failure("unsafe", f"{path}: larger than {max_bytes} bytes"))
        return rec(text=text)

    def create_if_absent(self, path: str, content: str) -> bool:
        self._check()
        self._directory(path.rpartition("/")[0])
        if path in self.files:
            return False
        self.files[path] = content
        return True

    def replace_if_unchanged(self, path: str, expected_sha256: str, content: str) -> bool:
        self._check()
        if self._cas_refused():
            return False
        current = self.files.get(path)
        if current is None or sha256_hex(current) != expected_sha256:
            return False
        self.files[path] = content
        return True

    def replace_if_unchanged_lazily(self, path: str, expected_sha256: str, content: str) -> bool:
        # Nothing here is ever synced: the lazy replace is the same replace.
        return self.replace_if_unchanged(path, expected_sha256, content)

    def remove_if_unchanged(self, path: str, expected_sha256: str) -> bool:
        self._check()
        if self._cas_refused():
            return False
        current = self.files.get(path)
        if current is None or sha256_hex(current) != expected_sha256:
            return False
        del self.files[path]
        return True

    def ensure_private_directory(self, path: str) -> Rec:
        self._check()
        return self._directory(path)

    def _children(self, path: str) -> List[Rec]:
        prefix = f"{path}/"
        entries = []
        for name in self.files:
            rest = name[len(prefix):] if name.startswith(prefix) else ""
            if rest and "/" not in rest:
                entries.append(rec(name=rest, kind="file", identity=None))
        for name, identity in self.directories.items():
            rest = name[len(prefix):] if name.startswith(prefix) else ""
            if rest and "/" not in rest:
                entries.append(rec(name=rest, kind="directory", identity=identity))
        return sorted(entries, key=lambda e: utf16_order(e.name))

    def snapshot(self, path: str, recover_orphans: bool) -> Rec:
        self._check()
        identity = self.directories.get(path)
        if identity is None:
            return rec(snapshot=None)
        return rec(snapshot=rec(identity=identity, entries=self._children(path)))

    def lock_leasing(self) -> Rec:
        # One process shares this store: there is no other leaser to exclude.
        self._check()
        return rec(held=False)

    def unlock_leasing(self) -> None:
        pass

    def read_batch(self, path: str, names: List[str], max_bytes_per_file: int, max_total_bytes: int, expected: Rec) -> List[Rec]:
        self._check()
        identity = self.directories.get(path)
        if identity is None:
            raise HostError(failure("unsafe", f"{path}: private state batch directory is absent"))
        if (identity.device, identity.inode) != (expected.device, expected.inode):
            raise HostError(failure("unsafe", f"{path}: private state batch directory changed identity"))
        remaining = max_total_bytes
        out = []
        for name in names:
            text = self.files.get(f"{path}/{name}")
            if text is None:
                status = Variant("absent")
            else:
                size = len(text.encode("utf-8"))
                if size > max_bytes_per_file:
                    status = Variant("invalid", "file-byte-bound")
                elif size > remaining:
                    status = Variant("invalid", "aggregate-byte-bound")
                else:
                    remaining -= size
                    status = Variant("present", text)
            out.append(rec(name=name, status=status))
        return out


class Workspace:
    """`workspace`: absolute directory paths under the granted roots and their facts."""

    def __init__(self) -> None:
        self.directories: Dict[str, Rec] = {}
        #: Absolute paths the user granted; None grants everything.
        self.roots: Optional[List[str]] = None

    def add(self, path: str, inode: int, *, mode: int = 0o700, owned: bool = True) -> Rec:
        """A physical directory owned by the host's user (private, 0700, by default)."""
        facts = rec(
            canonical=True,
            is_directory=True,
            owned=owned,
            mode=mode,
            identity=rec(device="2049", inode=str(inode), birthtime_ns=str(1_700_000_000_000_000_000 + inode)),
        )
        self.directories[path] = facts
        return facts

    def _granted(self, path: str) -> None:
        if self.roots is None:
            return
        if not any(path == root or path.startswith(root.rstrip("/") + "/") for root in self.roots):
            raise HostError(failure("refused", f"{path}: outside every granted workspace root"))

    def inspect(self, path: str) -> Rec:
        self._granted(path)
        return rec(facts=self.directories.get(path))

    def remove_tree(self, path: str, expected: Rec) -> bool:
        self._granted(path)
        facts = self.directories.get(path)
        if facts is None:
            return False
        if facts.identity != expected:
            raise HostError(failure("identity-changed", f"{path}: recursive removal target changed identity"))
        below = path.rstrip("/") + "/"
        for known in [p for p in self.directories if p == path or p.startswith(below)]:
            del self.directories[known]
        return True

    def create_private_directory(self, path: str) -> List[str]:
        """Creates `path` and its missing ancestors (0700); the created ones, outermost first."""
        self._granted(path)
        created: List[str] = []
        walked = ""
        for part in [p for p in path.split("/") if p]:
            walked = f"{walked}/{part}"
            if walked not in self.directories:
                self.add(walked, 500_000 + len(self.directories))
                created.append(walked)
        return created

    def remove_empty_directory(self, path: str, expected: Optional[Rec]) -> bool:
        """`rmdir` of an empty directory that is still `expected` (when given)."""
        self._granted(path)
        facts = self.directories.get(path)
        below = path.rstrip("/") + "/"
        if facts is None or (expected is not None and facts.identity != expected) or any(p.startswith(below) for p in self.directories):
            return False
        del self.directories[path]
        return True

    def kind(self, path: str) -> str:
        """What is at `path`: this workspace holds only directories."""
        self._granted(path)
        return "directory" if path in self.directories else "absent"

    def is_empty_directory(self, path: str) -> bool:
        """Whether no directory lies below `path` (true when it is absent)."""
        self._granted(path)
        below = path.rstrip("/") + "/"
        return not any(p.startswith(below) for p in self.directories)


#: `capture` has no scripted answer: reaching it is a failure of the test script.
UNSCRIPTED = object()


class ProcessTable:
    """`process-identity`: a scripted process table on one boot.

    `status(owner, n)` answers the n-th probe (from 1) with an owner status; the facts handed to
    the component are those that prove it (`facts_proving`)."""

    def __init__(self, boot_id: Optional[str] = "a" * 64, status: Callable[[Rec, int], str] = lambda _o, _n: "unknown") -> None:
        #: The current boot id; None when reading it fails.
        self.boot_id = boot_id
        self.status = status
        self.me = owner(4242, boot_id if boot_id is not None else "a" * 64, "f" * 64)
        #: What `capture` answers: UNSCRIPTED, None (no live process) or an owner.
        self.captured = UNSCRIPTED
        self.probed: List[Rec] = []
        self.boot_lookups = 0

    def current_boot_id(self) -> str:
        self.boot_lookups += 1
        if self.boot_id is None:
            raise HostError("system boot identity is unavailable")
        return self.boot_id

    def self_identity(self) -> Rec:
        return self.me

    def capture(self, pid: int) -> Rec:
        if self.captured is UNSCRIPTED:
            raise HostError(f"test script: capture({pid}) must not be reached")
        if self.captured is None:
            raise HostError("exact live process identity is unavailable")
        return self.captured

    def probe(self, recorded: Rec) -> Rec:
        self.probed.append(recorded)
        return facts_proving(recorded, self.status(recorded, len(self.probed)))

    def finished_run(self, lease_id: str) -> Rec:
        """This host keeps no run journal: no run is known to have finished."""
        return rec(outcome=None)

    def forget_run(self, lease_id: str) -> None:
        pass


class CatalogLock(HostResource):
    """One level of the catalog mutation lock; the component's drop releases it."""

    wit_name = "catalog-lock"

    def __init__(self, catalog: "PluginCatalog") -> None:
        self.catalog = catalog

    def release(self) -> None:
        self.catalog.depth -= 1


class PluginCatalog:
    """`plugin-catalog`: enabled plugins by id and the re-entrant mutation lock."""

    def __init__(self) -> None:
        self.plugins: Dict[str, Rec] = {}
        #: Another process holds the lock: `lock` fails fast.
        self.held_elsewhere = False
        #: Makes `installed` fail with this message (an unreadable catalog).
        self.unreadable: Optional[str] = None
        self.depth = 0
        self.acquisitions = 0

    def install(self, plugin_id: str, version: str, bundle_sha256: str, manifest_sha256: str) -> None:
        self.plugins[plugin_id] = rec(
            plugin_id=plugin_id, version=version, host_api_version=1, bundle_sha256=bundle_sha256, manifest_sha256=manifest_sha256
        )

    def installed(self, plugin_id: str) -> Rec:
        if self.unreadable is not None:
            raise HostError(self.unreadable)
        return rec(plugin=self.plugins.get(plugin_id))

    def lock(self) -> CatalogLock:
        if self.held_elsewhere:
            raise HostError("portable plugin catalog mutation is already locked")
        self.depth += 1
        self.acquisitions += 1
        return CatalogLock(self)


class Clock:
    """`clock`: the time the test sets."""

    def __init__(self, now_ms: int = 0) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now


class Entropy:
    """`entropy`: reproducible bytes that differ on every call."""

    def __init__(self) -> None:
        self.calls = 0

    def random_bytes(self, length: int) -> bytes:
        self.calls += 1
        seed = hashlib.sha256(self.calls.to_bytes(8, "big")).digest()
        return bytes(seed[i % len(seed)] ^ (i * 7 & 0xFF) for i in range(length))


class World:
    """Every import, in memory: the object `component.Proclease` binds."""

    def __init__(self, *, boot_id: Optional[str] = "a" * 64, status: Callable[[Rec, int], str] = lambda _o, _n: "unknown") -> None:
        self.state_store = StateStore()
        self.workspace = Workspace()
        self.process_identity = ProcessTable(boot_id, status)
        self.plugin_catalog = PluginCatalog()
        self.clock = Clock()
        self.entropy = Entropy()

    # Shorter names for scripts.
    @property
    def store(self) -> StateStore:
        return self.state_store

    @property
    def processes(self) -> ProcessTable:
        return self.process_identity
