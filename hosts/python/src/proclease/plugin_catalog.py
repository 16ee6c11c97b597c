"""The plugin catalog (`plugin-catalog` import; spec §5): the installed identity of a plugin, and
the catalog mutation lock.

Port of `host/src/imports/plugin_catalog/mod.rs` (the catalog), `lock_file.rs` (the reference's
lock file and its arbitration claims) and `wit.rs` (each level of the lock is one `catalog-lock`
resource the component drops to release it).

**Catalog file.** proclease does not install plugins; it reads what the plugin host says is
installed from a JSON file — `<state home>/provider-plugins/catalog.json` (read through the state
store: a private file of yours), or a file given explicitly (`catalog_file`, the CLI's
`--plugin-catalog`)::

    {"schemaVersion": 1, "plugins": [
      {"pluginId": "portable-test", "version": "1.0.0", "hostApiVersion": 1,
       "bundleSha256": "<64 hex>", "manifestSha256": "<64 hex>", "enabled": true}
    ]}

A plugin that is absent or `"enabled": false` is not installed.

**Lock** (§5). On disk, in the plugin store's `locks/` (`<state home>/provider-plugins/locks/`,
created with `artifacts/`, `trust/` and `active/`, all 0700):

* the lock `.catalog-mutation.lock`, holding the canonical
  `{"acquiredAt":…,"bootId":…,"pid":…,"processStartId":…,"schemaVersion":1,"scope":"catalog-mutation"}`
  and a newline (Appendix A item 5);
* while a process acquires it, its arbitration claim
  `.lock-claim-<target>-<waiting|candidate|held>-<claim id>.json`, where
  `target = sha256("portable-provider-plugin-lock" ‖ 0x00 ‖ <physical path of the lock>)`, holding
  the canonical `{"bootId","claimId","kind":"portable-provider-plugin-lock-claim","pid","processStartId","schemaVersion":1,"targetSha256"}`
  and a newline, arbitrated as §3.5 claims are;
* publication stages `.lock-publication-<pid>-<boot id>-<process start id>-<uuid>.tmp`, from which
  claims and the lock are hard-linked into place, and `.lock-reclaim-<pid>-<uuid>`, the name a lock
  is renamed to before it is unlinked.

Acquiring fails fast: while a live process (native proclease, Python proclease or ghostget) holds
the lock the answer is `portable plugin catalog mutation is already locked`, at once. A lock whose
holder is provably gone is taken over; a holder that cannot be judged is an error, never a guess.
The lock is re-entrant within one process (a depth count); the last release removes exactly the
inode this process published.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from typing import Any, Callable, Dict, Optional, Tuple

from . import _fsops
from . import _mutation_claim as claims
from ._mutation_claim import ArbitrationError, ClaimKind, Liveness, Owner, is_uuid_v4, owner_members, sha256_hex
from ._wit import HostError, Rec, os_message, rec
from .state_store import MAX_ENTRIES, StateStore, StoreError, parse_u64

try:
    from ._binding import HostResource
except ImportError:  # pragma: no cover - the binding is optional for the catalog itself

    class HostResource:  # type: ignore[no-redef]
        """Base of imported resources handed to the component; `release` runs on its drop."""

        wit_name = ""

        def release(self) -> None:
            pass


#: The reference's message when a live process holds the lock (§5).
ALREADY_LOCKED = "portable plugin catalog mutation is already locked"
#: The lock's file name in `locks/`.
LOCK_NAME = ".catalog-mutation.lock"
#: The plugin store's root below the state home (§6B.1).
STORE_ROOT = "provider-plugins"
#: The plugin store's directories (§5 `ensureStore`).
STORE_DIRECTORIES = ("artifacts", "trust", "active", "locks")
#: The catalog file inside the state home.
DEFAULT_PATH = "provider-plugins/catalog.json"
#: The largest catalog file read (bytes).
MAX_CATALOG_BYTES = 1 << 20
#: The most levels of the catalog lock one catalog (one host instance) may hold at once
#: (`wit.rs`): the lease algorithms nest the lock at most twice.
MAX_CATALOG_LOCK_LEVELS = 64

ROUNDS = 64
PUBLISH_ATTEMPTS = 4
MAX_LOCK_BYTES = 64 * 1024
PUBLICATION_PREFIX = ".lock-publication-"
RECLAIM_PREFIX = ".lock-reclaim-"


def _io_words(error: OSError) -> str:
    """A `std::io::Error`'s Display: `No such file or directory (os error 2)`."""
    return os_message(error)


# --- Timestamps (proclease-core's invocation_lease::{iso_timestamp, is_iso_timestamp}) ---------


def iso_timestamp(ms: int) -> Optional[str]:
    """Formats ms since the Unix epoch as `Date.prototype.toISOString` does for years 0–9999
    (`YYYY-MM-DDTHH:mm:ss.sssZ`); None outside that range."""
    day_ms = 86_400_000
    days, in_day = ms // day_ms, ms % day_ms
    # Civil-from-days (H. Hinnant), valid for the whole proleptic Gregorian calendar.
    z = days + 719_468
    era, doe = z // 146_097, z % 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    if not 0 <= year <= 9999:
        return None
    return f"{year:04}-{month:02}-{day:02}T{in_day // 3_600_000:02}:{in_day // 60_000 % 60:02}:{in_day // 1000 % 60:02}.{in_day % 1000:03}Z"


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if (year % 4 == 0 and year % 100 != 0) or year % 400 == 0 else 28
    return 30 if month in (4, 6, 9, 11) else 31


def is_iso_timestamp(text: str) -> bool:
    """Whether `text` is `YYYY-MM-DDTHH:mm:ss.sssZ` naming a real instant (the round-trip rule)."""
    if len(text) != 24:
        return False
    for i, c in enumerate(text):
        want = {4: "-", 7: "-", 10: "T", 13: ":", 16: ":", 19: ".", 23: "Z"}.get(i)
        if (c != want) if want is not None else not ("0" <= c <= "9"):
            return False
    year, month, day = int(text[0:4]), int(text[5:7]), int(text[8:10])
    hour, minute, second = int(text[11:13]), int(text[14:16]), int(text[17:19])
    return 1 <= month <= 12 and 1 <= day <= _days_in_month(year, month) and hour <= 23 and minute <= 59 and second <= 59


# --- The lock file (lock_file.rs) --------------------------------------------------------------


def lock_target(lock_path: str) -> str:
    """`sha256("portable-provider-plugin-lock" ‖ 0x00 ‖ lock path)` in hex (§5)."""
    return sha256_hex(b"portable-provider-plugin-lock\0" + os.fsencode(lock_path))


def lock_text(acquired_at: str, owner: Owner) -> str:
    """The canonical lock record of `owner` acquired at `acquired_at` (§5; Appendix A item 5)."""
    return (
        f'{{"acquiredAt":"{acquired_at}","bootId":"{owner.boot_id}","pid":{owner.pid},'
        f'"processStartId":"{owner.process_start_id}","schemaVersion":1,"scope":"catalog-mutation"}}\n'
    )


def holder_in(text: str) -> Optional[Owner]:
    """The holder a lock text records, when `text` is exactly a lock record."""
    value = claims.parse_json(text)
    if not isinstance(value, dict):
        return None
    # acquiredAt must round-trip (§5): the same timestamp rule as an invocation lease's (§6B.2).
    acquired_at = value.get("acquiredAt")
    if not isinstance(acquired_at, str) or not is_iso_timestamp(acquired_at):
        return None
    owner = owner_members(value)
    if owner is None or lock_text(acquired_at, owner) != text:
        return None
    return owner


def publish_linked(dir_fd: int, owner: Owner, data: bytes, name: str) -> bool:
    """Writes `data` to a fresh publication stage `.lock-publication-<pid>-<boot>-<start>-<uuid>.tmp`
    (0600, fsynced), hard-links it to `name` and removes the stage; fsyncs the directory. False
    when `name` already exists; raises the OSError otherwise (`publish_linked`)."""
    stage = f"{PUBLICATION_PREFIX}{owner.pid}-{owner.boot_id}-{owner.process_start_id}-{uuid.uuid4()}.tmp"

    def unlink_stage() -> None:
        try:
            os.unlink(stage, dir_fd=dir_fd)
        except OSError:
            pass

    try:
        _fsops.write_new_file(dir_fd, stage, data)
    except OSError:
        unlink_stage()
        raise
    try:
        os.link(stage, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        return False
    finally:
        unlink_stage()
    try:
        _fsops.fsync_claim_dir(dir_fd)
    except OSError:
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    return True


class LockClaim(ClaimKind):
    """The arbitration claims of one lock path (`lock_file::LockClaim`)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def prefix(self) -> str:
        return f".lock-claim-{self.target}-"

    def name(self, phase: str, claim_id: str) -> str:
        return f".lock-claim-{self.target}-{phase}-{claim_id}.json"

    def parse_name(self, name: str) -> Optional[Tuple[str, str]]:
        if not (name.startswith(".lock-claim-") and name.endswith(".json")):
            return None
        rest = name[len(".lock-claim-") : -len(".json")]
        if len(rest) < 64 or rest[:64] != self.target:
            return None
        rest = rest[64:]
        if not rest.startswith("-"):
            return None
        phase, sep, claim_id = rest[1:].partition("-")
        if not sep or phase not in claims.PHASES or not is_uuid_v4(claim_id):
            return None
        return phase, claim_id

    def content(self, claim_id: str, owner: Owner) -> str:
        return (
            f'{{"bootId":"{owner.boot_id}","claimId":"{claim_id}","kind":"portable-provider-plugin-lock-claim",'
            f'"pid":{owner.pid},"processStartId":"{owner.process_start_id}","schemaVersion":1,"targetSha256":"{self.target}"}}\n'
        )

    def publish(self, dir_fd: int, claim_id: str, owner: Owner) -> None:
        try:
            published = publish_linked(dir_fd, owner, self.content(claim_id, owner).encode(), self.name(claims.WAITING, claim_id))
        except OSError as e:
            raise self.error(claims.IO, e) from None
        if not published:
            raise self.error(claims.NAME_PRESENT)

    def message(self, failure: str) -> str:
        return {
            claims.UNSTABLE: "portable plugin lock arbitration did not reach a stable snapshot",
            claims.TOO_MANY: "portable plugin lock arbitration claim count exceeds its bound",
            claims.OWNER_UNKNOWN: "portable plugin lock arbitration owner cannot be inspected safely",
            claims.TWO_OWNERS: "portable plugin lock arbitration admitted two owners",
            claims.MALFORMED: "portable plugin lock arbitration claim is malformed",
            claims.NAME_PRESENT: "portable plugin lock arbitration claim name is already present",
            claims.IO: "portable plugin lock arbitration claim could not be written",
        }[failure]


class HeldLock:
    """A lock this process published: its directory and the identity of its inode."""

    def __init__(self, dir_fd: int, dev: int, ino: int, own: Owner) -> None:
        self.dir_fd, self.dev, self.ino, self.own = dir_fd, dev, ino, own

    def release(self) -> None:
        """Releases the lock (§5 step 5): removes exactly the inode this process published.
        Raises `HostError("portable plugin catalog mutation lock changed before release")` when
        the lock is gone or is another inode (which is then left in place)."""
        try:
            _remove_exact(self.dir_fd, self.own, self.dev, self.ino, "portable plugin catalog mutation lock changed before release")
        finally:
            os.close(self.dir_fd)
            self.dir_fd = -1


def acquire(store: StateStore, liveness: Liveness, now_ms: int) -> HeldLock:
    """Acquires the catalog mutation lock of `store`'s state home (§5 step 3), failing fast
    (`lock_file::acquire`).

    Raises `HostError` with the reference's messages: `ALREADY_LOCKED`; `portable plugin catalog
    mutation lock owner cannot be inspected safely`; `portable plugin lock publication owner
    cannot be inspected safely`; `portable plugin catalog mutation lock could not be acquired`;
    the arbitration's; a plugin store directory that cannot be created or is unsafe."""
    try:
        for name in STORE_DIRECTORIES:
            store.ensure_private_directory(f"{STORE_ROOT}/{name}")
        dir_fd = store.open_directory(f"{STORE_ROOT}/locks")
    except StoreError as e:
        raise HostError(str(e)) from None
    if dir_fd is None:
        raise HostError("the plugin store's locks directory vanished")
    try:
        try:
            physical = os.path.realpath(os.path.join(store.home_path, STORE_ROOT), strict=True)
        except OSError as e:
            raise HostError(f"{STORE_ROOT}: {_io_words(e)}") from None
        kind = LockClaim(lock_target(os.path.join(physical, "locks", LOCK_NAME)))
        own = claims.own_identity(liveness)
        if own is None:
            raise HostError(claims.IDENTITY_UNAVAILABLE)
        acquired_at = iso_timestamp(now_ms)
        if acquired_at is None:
            raise HostError("the clock is outside the dates a lock can record")
        record = lock_text(acquired_at, own)
        for _ in range(ROUNDS):
            _remove_stale_stages(dir_fd, liveness)
            try:
                claim = claims.arbitrate(dir_fd, kind, liveness, own)
            except ArbitrationError as e:
                raise HostError(str(e)) from None
            if claim is None:
                time.sleep(0.005)
                continue
            try:
                published = _publish_lock(dir_fd, own, record, liveness)
            finally:
                claims.release(dir_fd, claim)
            if published is not None:
                return HeldLock(dir_fd, published[0], published[1], own)
        raise HostError("portable plugin catalog mutation lock could not be acquired")
    except BaseException:
        os.close(dir_fd)
        raise


def _publish_lock(dir_fd: int, own: Owner, record: str, liveness: Liveness) -> Optional[Tuple[int, int]]:
    """Holding the arbitration claim: up to four attempts to publish the lock, taking over one
    whose holder is provably gone. (dev, ino) of the published lock; None when the attempts ran
    out (`publish_lock`)."""
    for _ in range(PUBLISH_ATTEMPTS):
        try:
            published = publish_linked(dir_fd, own, record.encode(), LOCK_NAME)
        except OSError as e:
            raise HostError(f"{LOCK_NAME}: {_io_words(e)}") from None
        if published:
            try:
                st = _fsops.lstat(dir_fd, LOCK_NAME)
            except OSError as e:
                raise HostError(f"{LOCK_NAME}: {_io_words(e)}") from None
            if st is None:
                raise HostError("the catalog mutation lock vanished")
            return st.st_dev, st.st_ino
        found = _read_lock(dir_fd)
        if found is None:
            continue
        holder, dev, ino = found
        judged = claims.status(liveness, holder)
        if judged == claims.EXACT_LIVE_OWNER:
            raise HostError(ALREADY_LOCKED)
        if judged == claims.UNKNOWN:
            raise HostError("portable plugin catalog mutation lock owner cannot be inspected safely")
        _remove_exact(dir_fd, own, dev, ino, "portable plugin catalog mutation lock changed before reclaim")
    return None


def _read_lock(dir_fd: int) -> Optional[Tuple[Owner, int, int]]:
    """The lock's holder and inode, or None when it vanished or changed while read."""
    malformed = "portable plugin catalog mutation lock is malformed"
    try:
        fd = _fsops.open_read(dir_fd, LOCK_NAME)
    except FileNotFoundError:
        return None
    except OSError:
        raise HostError(malformed) from None
    try:
        try:
            before = os.fstat(fd)
        except OSError as e:
            raise HostError(f"{LOCK_NAME}: {_io_words(e)}") from None
        if _fsops.unsafe_file_reason(before) is not None or before.st_size < 2:
            raise HostError(malformed)
        try:
            data = _fsops.read_stable(fd, before, MAX_LOCK_BYTES)
        except OSError as e:
            raise HostError(f"{LOCK_NAME}: {_io_words(e)}") from None
    finally:
        os.close(fd)
    if data == _fsops.TOO_LARGE:
        raise HostError(malformed)
    if data == _fsops.CHANGED:
        return None
    try:
        now = _fsops.lstat(dir_fd, LOCK_NAME)
    except OSError:
        now = None
    if now is None or now.st_ino != before.st_ino or now.st_dev != before.st_dev:
        return None
    assert isinstance(data, bytes)
    try:
        holder = holder_in(data.decode("utf-8"))
    except UnicodeDecodeError:
        holder = None
    if holder is None:
        raise HostError(malformed)
    return holder, before.st_dev, before.st_ino


def _remove_exact(dir_fd: int, own: Owner, dev: int, ino: int, changed: str) -> None:
    """Removes the lock if it is still inode (dev, ino): renames it to
    `.lock-reclaim-<own pid>-<uuid>`, checks the inode, unlinks it and fsyncs. Another inode is
    linked back (never over a file) and reported with `changed` (`remove_exact`)."""
    reclaim = f"{RECLAIM_PREFIX}{own.pid}-{uuid.uuid4()}"
    try:
        _fsops.rename_noreplace(dir_fd, LOCK_NAME, dir_fd, reclaim)
    except FileNotFoundError:
        raise HostError(changed) from None
    except OSError as e:
        raise HostError(f"{LOCK_NAME}: {_io_words(e)}") from None
    try:
        st = _fsops.lstat(dir_fd, reclaim)
    except OSError:
        st = None
    if st is None or st.st_dev != dev or st.st_ino != ino:
        try:
            os.link(reclaim, LOCK_NAME, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            pass
        try:
            os.unlink(reclaim, dir_fd=dir_fd)
        except OSError:
            pass
        raise HostError(changed)
    try:
        os.unlink(reclaim, dir_fd=dir_fd)
    except OSError as e:
        raise HostError(f"{reclaim}: {_io_words(e)}") from None
    try:
        _fsops.fsync_claim_dir(dir_fd)
    except OSError:
        pass


def _remove_stale_stages(dir_fd: int, liveness: Liveness) -> None:
    """Removes publication stages whose owner (named in the stage) is provably gone, and reclaim
    names whose pid is gone (§5; the latter a deviation, `docs/deviations.md`). An owner that
    cannot be judged is an error (`remove_stale_stages`)."""
    try:
        names = _fsops.list_names(dir_fd, MAX_ENTRIES)
    except _fsops.BoundExceeded:
        raise HostError(f"{STORE_ROOT}/locks has more than {MAX_ENTRIES} entries") from None
    except OSError as e:
        raise HostError(f"{STORE_ROOT}/locks: {_io_words(e)}") from None
    for raw in names:
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        owner = publication_owner(name)
        if owner is not None:
            judged = claims.status(liveness, owner)
            if judged == claims.UNKNOWN:
                raise HostError("portable plugin lock publication owner cannot be inspected safely")
            if judged == claims.DIFFERENT_OR_DEAD:
                claims.release(dir_fd, name)
            continue
        pid = reclaim_pid(name)
        if pid is not None:
            try:
                st = _fsops.lstat(dir_fd, name)
            except OSError:
                st = None
            private = st is not None and _fsops.unsafe_file_reason(st) is None
            if private and claims.pid_gone(pid):
                claims.release(dir_fd, name)


def _name_pid(text: str) -> Optional[int]:
    """`pid.parse::<u64>()` filtered to > 0 and not starting with `0`."""
    pid = parse_u64(text)
    if pid is None or pid == 0 or text.startswith("0"):
        return None
    return pid


def publication_owner(name: str) -> Optional[Owner]:
    """The owner a publication stage `.lock-publication-<pid>-<boot>-<start>-<uuid>.tmp` names."""
    if not (name.startswith(PUBLICATION_PREFIX) and name.endswith(".tmp")):
        return None
    rest = name[len(PUBLICATION_PREFIX) : -len(".tmp")]
    pid_text, sep, rest = rest.partition("-")
    if not sep or len(rest) < 64:
        return None
    boot, rest = rest[:64], rest[64:]
    if not rest.startswith("-") or len(rest) < 65:
        return None
    start, rest = rest[1:65], rest[65:]
    if not rest.startswith("-"):
        return None
    claim_id = rest[1:]
    pid = _name_pid(pid_text)
    if pid is None or not (claims.is_hex(boot) and claims.is_hex(start) and is_uuid_v4(claim_id)):
        return None
    return Owner(pid, boot, start)


def reclaim_pid(name: str) -> Optional[int]:
    """The pid of a reclaim name `.lock-reclaim-<pid>-<uuid v4>`."""
    if not name.startswith(RECLAIM_PREFIX):
        return None
    pid_text, sep, claim_id = name[len(RECLAIM_PREFIX) :].partition("-")
    if not sep:
        return None
    pid = _name_pid(pid_text)
    return pid if pid is not None and is_uuid_v4(claim_id) else None


# --- The catalog (mod.rs) ----------------------------------------------------------------------

#: Process-wide lock levels per lock file, so that the lock is re-entrant within a process.
_HELD: Dict[str, Tuple[HeldLock, int]] = {}
_HELD_GUARD = threading.Lock()


class CatalogLock(HostResource):
    """One held level of the catalog mutation lock, as the component holds it
    (`catalog-lock`); `release()` — called when the component drops it — releases that level
    once (`wit.rs`)."""

    wit_name = "catalog-lock"

    def __init__(self, catalog: "PluginCatalog") -> None:
        self._catalog: Optional[PluginCatalog] = catalog

    def release(self) -> None:
        catalog, self._catalog = self._catalog, None
        if catalog is not None:
            catalog._drop_level()


def _find(text: str, plugin_id: str) -> Optional[Rec]:
    """The enabled installation of `plugin_id` in catalog `text`, or None; raises `ValueError`
    with the problem (`find`). Values are typed as serde_json's accessors read them: a number
    is an integer only when written as one, `true` is no number."""
    try:
        doc = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
        _reject_lone_surrogates(doc)
    except RecursionError:
        raise ValueError("the plugin catalog is not valid JSON (recursion limit exceeded)") from None
    except ValueError as e:
        raise ValueError(f"the plugin catalog is not valid JSON ({e})") from None
    version = doc.get("schemaVersion") if isinstance(doc, dict) else None
    if not (type(version) is int and version == 1):
        raise ValueError('the plugin catalog must have "schemaVersion": 1')
    plugins = doc.get("plugins")
    if not isinstance(plugins, list):
        raise ValueError('the plugin catalog needs a "plugins" array')
    for plugin in plugins:
        if not isinstance(plugin, dict) or plugin.get("pluginId") != plugin_id:
            continue

        def field(name: str) -> str:
            value = plugin.get(name)
            if not isinstance(value, str):
                raise ValueError(f'plugin {plugin_id}: "{name}" must be a string')
            return value

        host_api_version = plugin.get("hostApiVersion")
        if type(host_api_version) is not int or not 0 <= host_api_version <= 0xFFFF_FFFF:
            raise ValueError(f'plugin {plugin_id}: "hostApiVersion" must be a number')
        enabled = plugin.get("enabled")
        if type(enabled) is not bool:
            raise ValueError(f'plugin {plugin_id}: "enabled" must be true or false')
        installed = rec(
            plugin_id=plugin_id,
            version=field("version"),
            host_api_version=host_api_version,
            bundle_sha256=field("bundleSha256"),
            manifest_sha256=field("manifestSha256"),
        )
        return installed if enabled else None
    return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    """serde_json refuses a number out of f64's range (`1e400`); Python's json makes it inf."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError("number out of range")
    return value


def _reject_lone_surrogates(value: Any) -> None:
    """serde_json refuses a `\\uD800` escape without its pair; Python's json accepts it."""

    def bad(text: str) -> bool:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False

    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and bad(item):
            raise ValueError("lone surrogate in a string escape")
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            for key, inner in item.items():
                if bad(key):
                    raise ValueError("lone surrogate in a string escape")
                stack.append(inner)


class PluginCatalog:
    """The plugin catalog of one state home (`plugin_catalog::PluginCatalog`).

    `home` is the state home as the host was given it (kept for reference: every path is taken
    from `store`, whose state home is the same one, physically resolved); `processes` and
    `judge` as for `StateStore` (they name and judge the lock's holders); `catalog_file`, when
    given, is read instead of `provider-plugins/catalog.json` (the CLI's `--plugin-catalog`)."""

    def __init__(self, home: str, store: StateStore, processes: Any, judge: Callable[[Rec], str], *, catalog_file: Optional[str] = None) -> None:
        self.home = home
        self.store = store
        self.liveness = Liveness(processes, judge)
        self.catalog_file = catalog_file
        #: This catalog's outstanding `CatalogLock` levels (`HostState::catalog_levels`).
        self._levels = 0
        self._levels_guard = threading.Lock()

    # --- The WIT functions ------------------------------------------------------------------------

    def installed(self, plugin_id: str) -> Rec:
        """`installed`: `Rec(plugin=None | Rec(plugin_id, version, host_api_version,
        bundle_sha256, manifest_sha256))`; raises `HostError(message)` when the catalog file
        cannot be read or is malformed."""
        return rec(plugin=self.installed_plugin(plugin_id))

    def lock(self) -> CatalogLock:
        """`lock`: takes one level of the catalog mutation lock (§5), failing fast; the
        component drops the returned `CatalogLock` to release it. Raises `HostError` with
        `ALREADY_LOCKED` while another live process holds it, or another §5 refusal."""
        with self._levels_guard:
            if self._levels >= MAX_CATALOG_LOCK_LEVELS:
                raise HostError(f"portable plugin catalog lock is already held {MAX_CATALOG_LOCK_LEVELS} times over by this component")
            self.take()
            self._levels += 1
        return CatalogLock(self)

    # --- The same, with Python values ---------------------------------------------------------

    def location(self) -> Tuple[str, bool]:
        """Where the catalog is read from, and whether a file is there now (for messages: a
        missing catalog makes every plugin "changed or disabled", as in the reference)."""
        path = self.catalog_file if self.catalog_file is not None else os.path.join(self.store.home_path, DEFAULT_PATH)
        try:
            os.lstat(path)
            return path, True
        except OSError:
            return path, False

    def installed_plugin(self, plugin_id: str) -> Optional[Rec]:
        """The enabled installation of `plugin_id`, or None (`PluginCatalog::installed`).
        Raises `HostError(message)`: the catalog file cannot be read or is malformed (the
        message names it)."""
        if self.catalog_file is None:
            try:
                text = self.store.read_text_if_present(DEFAULT_PATH, MAX_CATALOG_BYTES)
            except StoreError as e:
                raise HostError(str(e)) from None
            label = DEFAULT_PATH
        else:
            path = self.catalog_file
            label = path
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                data = None
            except OSError as e:
                raise HostError(f"{path}: cannot read the plugin catalog: {_io_words(e)}") from None
            if data is not None and len(data) > MAX_CATALOG_BYTES:
                raise HostError(f"{path}: the plugin catalog is larger than {MAX_CATALOG_BYTES} bytes")
            try:
                text = data.decode("utf-8") if data is not None else None
            except UnicodeDecodeError:
                raise HostError(f"{path}: the plugin catalog is not UTF-8") from None
        if text is None:
            return None
        try:
            return _find(text, plugin_id)
        except ValueError as e:
            raise HostError(f"{label}: {e}; see `proclease --help` for the catalog format") from None

    def lock_key(self) -> str:
        return os.path.join(self.store.home_path, STORE_ROOT, "locks", LOCK_NAME)

    def take(self) -> None:
        """Takes one level of the catalog mutation lock (§5), failing fast
        (`PluginCatalog::lock`): the first level in this process acquires the lock file, the
        others count."""
        key = self.lock_key()
        with _HELD_GUARD:
            if key in _HELD:
                held, depth = _HELD[key]
                _HELD[key] = (held, depth + 1)
                return
            now_ms = time.time_ns() // 1_000_000
            _HELD[key] = (acquire(self.store, self.liveness, now_ms), 1)

    def unlock(self) -> None:
        """Releases one level; the last one removes the lock file. A lock that changed meanwhile
        (another process removed or replaced it) is left as found (`PluginCatalog::unlock`)."""
        key = self.lock_key()
        with _HELD_GUARD:
            if key not in _HELD:
                return
            held, depth = _HELD[key]
            if depth > 1:
                _HELD[key] = (held, depth - 1)
                return
            del _HELD[key]
            try:
                held.release()
            except HostError:
                pass

    def _drop_level(self) -> None:
        with self._levels_guard:
            if self._levels == 0:
                return
            self._levels -= 1
        self.unlock()
