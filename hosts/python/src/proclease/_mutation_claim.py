"""The reference's claim arbitration (§3.5), its per-leaf state mutation claims, and the crash
recovery its helper operations perform in the directory they work in (§3.9) — how proclease
(native or Python) and a running ghostget 0.17.2 keep out of each other's way on one record.

Port of `guest/protocols/src/state_store/arbitration.rs` (the first half: `ClaimKind`, `step`,
`arbitrate`, `live_claims`, shared with the catalog lock's claims of §5) and
`guest/protocols/src/state_store/mutation_claim.rs` (the second half: `MutationClaim`,
`recover_directory`).

**Claim.** Before it creates, replaces or removes the file `<leaf>` of a collection, a writer
publishes `.io-mutation-<target>-waiting-<claim id>.lock` in that collection, where
`target = sha256("io-state-mutation" ‖ 0x00 ‖ leaf)`, holding exactly
`{"kind":"io-state-mutation-claim","schemaVersion":1,"targetSha256":…,"claimId":…,"pid":…,"bootId":…,"processStartId":…}`
and a newline (keys in this insertion order, not canonical). It is written as
`.io-mutation-stage-<claim id>-<pid>.tmp` (mode 0600, fsynced) and renamed into place, then moves
through `candidate` to `held`. The writer mutates the record only while its claim is `held`, and
unlinks the claim afterwards. The claim's renames and unlink are not followed by a directory
fsync (as in the Rust: a claim only excludes live processes, and after a power loss every claim
is a dead owner's).

**Arbitration.** Each contender publishes a claim in the `waiting` phase, then looks at the live
claims of the same target: it gives up ("lost") if any other claim is past `waiting` or has a
smaller claim id; else it renames its claim to `candidate` and looks again (lost if another is
`held` or smaller); else it renames it to `held` and looks once more — a second `held` claim is an
error (`… admitted two owners`). A claim whose owner is provably gone is removed by whoever lists
it; an owner that cannot be judged makes the listing fail rather than guess.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, List, NamedTuple, Optional, Tuple

from . import _fsops
from ._wit import Rec, os_message, rec

log = logging.getLogger("proclease.state_store")
# Like the Rust's `tracing` events: silent until the application configures logging (the
# CLI shows warnings, as the native binary does).
log.addHandler(logging.NullHandler())

# --- Owners and their liveness -----------------------------------------------------------------

EXACT_LIVE_OWNER = "exact-live-owner"
DIFFERENT_OR_DEAD = "different-or-dead"
UNKNOWN = "unknown"
_STATUSES = (EXACT_LIVE_OWNER, DIFFERENT_OR_DEAD, UNKNOWN)

#: `Number.MAX_SAFE_INTEGER` (proclease-core's `js::MAX_SAFE_INTEGER`).
MAX_SAFE_INTEGER = 2**53 - 1


class Owner(NamedTuple):
    """A process identity (§2; proclease-core's `records::Owner`)."""

    pid: int
    boot_id: str
    process_start_id: str

    @classmethod
    def of(cls, value: Any) -> "Owner":
        """The owner a WIT `owner` record (`Rec(pid, boot_id, process_start_id)`) names."""
        return cls(int(value.pid), str(value.boot_id), str(value.process_start_id))

    def to_rec(self) -> Rec:
        return rec(pid=self.pid, boot_id=self.boot_id, process_start_id=self.process_start_id)


class Liveness:
    """The host's process facts as the store uses them (the Rust's `ProcessIdentity`): this
    process's identity, the current boot id, and the judge of a recorded owner.

    `processes` has `self_identity() -> Rec(pid, boot_id, process_start_id)` and
    `current_boot_id() -> str`; `judge(owner: Rec)` answers `exact-live-owner`,
    `different-or-dead` or `unknown`."""

    def __init__(self, processes: Any, judge: Callable[[Rec], str]) -> None:
        self.processes = processes
        self.judge = judge

    def self_identity(self) -> Owner:
        """This process's identity; raises whatever `processes.self_identity()` raises."""
        return Owner.of(self.processes.self_identity())

    def current_boot_id(self) -> str:
        return str(self.processes.current_boot_id())

    def owner_status(self, owner: Owner) -> str:
        """One probe of `owner`. A judge that fails (or answers something else) proves nothing:
        `unknown`, as the Rust's `owner_status(..).unwrap_or(Unknown)`."""
        try:
            answer = self.judge(owner.to_rec())
        except Exception:  # noqa: BLE001 - any failure of a probe proves nothing
            return UNKNOWN
        return answer if answer in _STATUSES else UNKNOWN


# --- proclease-core helpers --------------------------------------------------------------------


def sha256_hex(data: bytes) -> str:
    """Lowercase hex sha256 (`digest::sha256_hex`)."""
    return hashlib.sha256(data).hexdigest()


def identity_digest(kind: str, value: str) -> str:
    """`identityDigest(kind, value)` = hex sha256(UTF8(kind) ‖ 0x00 ‖ UTF8(value)) (§2.1)."""
    return sha256_hex(kind.encode() + b"\0" + value.encode())


def is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def is_digest(text: str) -> bool:
    """`^[a-f0-9]{64}$` (`js::is_digest`)."""
    return len(text) == 64 and is_hex(text)


def is_uuid_v4(text: str) -> bool:
    """`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$` (`js::is_uuid_v4`)."""
    if len(text) != 36:
        return False
    for i, c in enumerate(text):
        if i in (8, 13, 18, 23):
            ok = c == "-"
        elif i == 14:
            ok = c == "4"
        elif i == 19:
            ok = c in "89ab"
        else:
            ok = c in "0123456789abcdef"
        if not ok:
            return False
    return True


def is_ascii_digits(text: str) -> bool:
    return text != "" and all("0" <= c <= "9" for c in text)


def parse_json(text: str) -> Any:
    """`serde_json::from_str::<Value>(text).ok()`: None when `text` is not JSON. (Only ever
    followed by an exact-text comparison here, so the two parsers' corner cases cannot matter.)"""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


# --- Arbitration (arbitration.rs) --------------------------------------------------------------

#: How many listings may see claims vanish, move or die before arbitration gives up (§3.5).
SNAPSHOT_ATTEMPTS = 8
#: The most claim files of one target a listing accepts (§3.5).
MAX_CLAIMS = 1024
#: How many more times an owner whose status is `unknown` is probed, 10 ms apart (§3.5).
UNKNOWN_RETRIES = 3
#: The largest claim file read (bytes).
MAX_CLAIM_BYTES = 4096

WAITING, CANDIDATE, HELD = "waiting", "candidate", "held"
PHASES = (WAITING, CANDIDATE, HELD)

# The failures arbitration reports, each with the message of its claim kind (`Failure`).
UNSTABLE = "unstable"  # no stable listing after SNAPSHOT_ATTEMPTS
TOO_MANY = "too-many"  # more than MAX_CLAIMS claims of the target
OWNER_UNKNOWN = "owner-unknown"  # a claim's owner cannot be judged
TWO_OWNERS = "two-owners"  # another claim is held too
MALFORMED = "malformed"  # a claim file is not exactly a claim
NAME_PRESENT = "name-present"  # the own claim's next name already exists
IO = "io"  # writing, renaming or fsyncing a claim failed (the cause is attached)


class ArbitrationError(Exception):
    """An arbitration failure: the kind's message for the failure, and an I/O cause if there is
    one (`ArbitrationError`; Display `message (cause)`)."""

    def __init__(self, message: str, io: Optional[OSError] = None) -> None:
        super().__init__(message)
        self.message = message
        self.io = io

    def __str__(self) -> str:
        if self.io is None:
            return self.message
        return f"{self.message} ({os_message(self.io)})"


class ClaimKind:
    """What differs between §3.5 mutation claims and §5 lock claims (`trait ClaimKind`)."""

    def prefix(self) -> str:
        """The common start of this target's claim file names."""
        raise NotImplementedError

    def name(self, phase: str, claim_id: str) -> str:
        """The file name of this target's claim `claim_id` in `phase`."""
        raise NotImplementedError

    def parse_name(self, name: str) -> Optional[Tuple[str, str]]:
        """The (phase, claim id) a file name of this target's claims carries; None for any
        other name (another target's claims included)."""
        raise NotImplementedError

    def content(self, claim_id: str, owner: Owner) -> str:
        """The exact text of claim `claim_id` of `owner`."""
        raise NotImplementedError

    def publish(self, dir_fd: int, claim_id: str, owner: Owner) -> None:
        """Publishes claim `claim_id` of `owner` in the `waiting` phase, durably, never over an
        existing name; raises `ArbitrationError`."""
        raise NotImplementedError

    def message(self, failure: str) -> str:
        raise NotImplementedError

    def error(self, failure: str, io: Optional[OSError] = None) -> ArbitrationError:
        return ArbitrationError(self.message(failure), io)


def owner_members(value: Any) -> Optional[Owner]:
    """The `pid`, `bootId` and `processStartId` members of a claim or lock record (§3.5, §5): a
    safe integer >= 1 and two lowercase 64-hex digests; None when any is missing or malformed
    (`arbitration::owner_members`)."""
    if not isinstance(value, dict):
        return None
    pid = value.get("pid")
    # `as_u64`: an integer (a JSON `true` is no number, a `1.0` no integer).
    if type(pid) is not int or pid < 1 or pid > MAX_SAFE_INTEGER:
        return None
    boot_id, start_id = value.get("bootId"), value.get("processStartId")
    if not (isinstance(boot_id, str) and is_digest(boot_id) and isinstance(start_id, str) and is_digest(start_id)):
        return None
    return Owner(pid, boot_id, start_id)


def owner_in(kind: ClaimKind, claim_id: str, text: str) -> Optional[Owner]:
    """The owner a claim text records, when `text` is exactly `kind`'s text for `claim_id`
    (`arbitration::owner_in`)."""
    owner = owner_members(parse_json(text))
    if owner is None or kind.content(claim_id, owner) != text:
        return None
    return owner


LOSE = ("lose", None)
WIN = ("win", None)
TWO_OWNERS_STEP = ("two-owners", None)


def advance_to(phase: str) -> Tuple[str, str]:
    return ("advance", phase)


def step(phase: str, own: str, others: List[Tuple[str, str]]) -> Tuple[str, Optional[str]]:
    """The arbitration's decision, a function of what one listing showed (`arbitration::step`):
    the own claim, in `phase` with id `own`, against the other live claims `others` (phase and
    id; dead owners' claims already removed). Claim ids order contenders (the smaller first):

    - `waiting`: lose to any claim past `waiting` or with a smaller id; else become `candidate`;
    - `candidate`: lose to a `held` claim or a smaller id; else become `held`;
    - `held`: another `held` claim is two owners; else won.

    Returns `("advance", next phase)`, `LOSE`, `WIN` or `TWO_OWNERS_STEP`."""

    def smaller(claim_id: str) -> bool:
        return claim_id < own

    if phase == WAITING:
        if any(p != WAITING or smaller(i) for p, i in others):
            return LOSE
        return advance_to(CANDIDATE)
    if phase == CANDIDATE:
        if any(p == HELD or smaller(i) for p, i in others):
            return LOSE
        return advance_to(HELD)
    if any(p == HELD for p, _ in others):
        return TWO_OWNERS_STEP
    return WIN


def arbitrate(dir_fd: int, kind: ClaimKind, liveness: Liveness, own: Owner) -> Optional[str]:
    """Runs the arbitration for one fresh claim of `own` (`arbitration::arbitrate`): the name of
    the claim this process now holds, or None when it lost (its claim is already gone again).
    Raises `ArbitrationError`."""
    claim_id = str(uuid.uuid4())
    kind.publish(dir_fd, claim_id, own)
    name = kind.name(WAITING, claim_id)
    phase = WAITING
    try:
        # At most three listings: waiting, candidate, held.
        while True:
            others = live_claims(dir_fd, kind, liveness, claim_id, own)
            action, next_phase = step(phase, claim_id, others)
            if action == "advance":
                assert next_phase is not None
                name = _advance(dir_fd, kind, name, next_phase, claim_id)
                phase = next_phase
            elif action == "lose":
                release(dir_fd, name)
                return None
            elif action == "win":
                return name
            else:
                raise kind.error(TWO_OWNERS)
    except BaseException:
        release(dir_fd, name)
        raise


def _advance(dir_fd: int, kind: ClaimKind, old: str, phase: str, claim_id: str) -> str:
    """Renames the own claim `old` to `phase` (never over an existing name); the new name
    (`arbitration::advance`). Not fsynced: a claim excludes live processes of this boot, which
    all see the directory as the kernel holds it; after a power loss its owner is gone."""
    new = kind.name(phase, claim_id)
    try:
        _fsops.rename_noreplace(dir_fd, old, dir_fd, new)
    except FileExistsError:
        raise kind.error(NAME_PRESENT) from None
    except OSError as e:
        raise kind.error(IO, e) from None
    return new


def release(dir_fd: int, name: str) -> None:
    """Releases a claim: unlinks it; a failure is ignored (a claim left behind is a dead
    owner's claim once this process is gone). Not fsynced (`arbitration::release`)."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def live_claims(dir_fd: int, kind: ClaimKind, liveness: Liveness, skip: Optional[str], own: Optional[Owner]) -> List[Tuple[str, str]]:
    """"List live claims" (§3.5; `arbitration::live_claims`): the phase and id of every live
    claim of the target except `skip`, after removing the claims of provably gone owners.
    Retries until one pass sees no claim vanish, move or die.

    With `own`, a claim of this very process other than `skip` is removed as stale: a process
    arbitrates for one target of a directory at a time (the store holds the collection's kernel
    lock, the catalog lock a process-wide mutex), so such a claim is one whose release failed."""
    for _ in range(SNAPSHOT_ATTEMPTS):
        try:
            names = _fsops.names_starting_with(dir_fd, kind.prefix(), MAX_CLAIMS)
        except _fsops.BoundExceeded:
            raise kind.error(TOO_MANY) from None
        except OSError as e:
            raise kind.error(TOO_MANY, e) from None
        claims = []
        for name in names:
            parsed = kind.parse_name(name)
            if parsed is not None:
                claims.append((name, parsed[0], parsed[1]))
        claims.sort(key=lambda c: c[0].encode())
        stable = True
        live: List[Tuple[str, str]] = []
        for name, phase, claim_id in claims:
            if claim_id == skip:
                continue
            try:
                text = read_claim(dir_fd, name)
            except MalformedClaim:
                raise kind.error(MALFORMED) from None
            if text is None:
                stable = False  # vanished or moved while read
                continue
            if all(ch == "\0" for ch in text):
                # Empty or zeros: a claim whose content an OS crash lost (every writer writes the
                # text before it names the claim), so its owner died with that boot
                # (docs/deviations.md 26; the native host's `arbitration::lost_in_a_crash`).
                release(dir_fd, name)
                stable = False
                continue
            owner = owner_in(kind, claim_id, text)
            if owner is None:
                raise kind.error(MALFORMED)
            if own is not None and owner == own:
                release(dir_fd, name)
                stable = False
                continue
            judged = status(liveness, owner)
            if judged == EXACT_LIVE_OWNER:
                live.append((phase, claim_id))
            elif judged == UNKNOWN:
                raise kind.error(OWNER_UNKNOWN)
            else:
                log.debug("removing the claim %s of a provably dead owner (pid %s)", name, owner.pid)
                release(dir_fd, name)
                stable = False
        if stable:
            return live
    raise kind.error(UNSTABLE)


def live_holder(dir_fd: int, kind: ClaimKind, liveness: Liveness) -> Optional[int]:
    """The pid of a live holder of `kind`'s claims in `dir_fd`, if one is seen (for a message:
    a claim that outlasted the writer's wait; `arbitration::live_holder`)."""
    try:
        names = _fsops.names_starting_with(dir_fd, kind.prefix(), MAX_CLAIMS)
    except (OSError, _fsops.BoundExceeded):
        return None
    for name in names:
        parsed = kind.parse_name(name)
        if parsed is None:
            continue
        try:
            text = read_claim(dir_fd, name)
        except MalformedClaim:
            continue
        owner = owner_in(kind, parsed[1], text) if text is not None else None
        if owner is not None and status(liveness, owner) == EXACT_LIVE_OWNER and owner.pid <= 2**31 - 1:
            return owner.pid
    return None


def status(liveness: Liveness, owner: Owner) -> str:
    """An owner's status, probed up to `UNKNOWN_RETRIES` more times 10 ms apart while
    `unknown` (`arbitration::status`)."""
    judged = liveness.owner_status(owner)
    for _ in range(UNKNOWN_RETRIES):
        if judged != UNKNOWN:
            break
        time.sleep(0.010)
        judged = liveness.owner_status(owner)
    return judged


class MalformedClaim(Exception):
    """A claim file that is not a private regular file of this user, too large, or not UTF-8
    (the Rust's `Err(Failure::Malformed)` of `read_claim`)."""


def read_claim(dir_fd: int, name: str) -> Optional[str]:
    """A claim file's text: None when it vanished or was replaced while read; `MalformedClaim`
    for a file that is not a private regular file of this user, too large, or not UTF-8
    (`arbitration::read_claim`)."""
    try:
        fd = _fsops.open_read(dir_fd, name)
    except FileNotFoundError:
        return None
    except OSError:
        raise MalformedClaim() from None
    try:
        try:
            before = os.fstat(fd)
        except OSError:
            raise MalformedClaim() from None
        if _fsops.unsafe_file_reason(before) is not None:
            raise MalformedClaim()
        try:
            data = _fsops.read_stable(fd, before, MAX_CLAIM_BYTES)
        except OSError:
            raise MalformedClaim() from None
    finally:
        os.close(fd)
    if data == _fsops.TOO_LARGE:
        raise MalformedClaim()
    if data == _fsops.CHANGED:
        return None
    try:
        now = _fsops.lstat(dir_fd, name)
    except OSError:
        raise MalformedClaim() from None
    if now is None or now.st_ino != before.st_ino or now.st_dev != before.st_dev:
        return None
    assert isinstance(data, bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedClaim() from None


# --- Mutation claims (mutation_claim.rs) -------------------------------------------------------

#: The reference's message when this process cannot read its own identity (§3.5 step 1).
IDENTITY_UNAVAILABLE = "state mutation process identity is unavailable"
#: The reference's message when more claim targets are found than a recovery reviews (§3.5).
TOO_MANY_TARGETS = "state mutation recovery exceeds its target bound"
#: The most claim targets one recovery reviews (§3.5).
MAX_TARGETS = 10_000
#: The most entries a collection listing returns (`state_store::MAX_ENTRIES`, §3.3 snapshot).
MAX_ENTRIES = 10_000

CLAIM_PREFIX = ".io-mutation-"
STAGE_PREFIX = ".io-mutation-stage-"


def target_sha256(leaf: str) -> str:
    """`sha256("io-state-mutation" ‖ 0x00 ‖ leaf)` in hex (§3.5)."""
    return sha256_hex(b"io-state-mutation\0" + leaf.encode())


def claim_text(target: str, claim_id: str, owner: Owner) -> str:
    """The exact text of a mutation claim (§3.5; Appendix A item 6)."""
    return (
        f'{{"kind":"io-state-mutation-claim","schemaVersion":1,"targetSha256":"{target}","claimId":"{claim_id}",'
        f'"pid":{owner.pid},"bootId":"{owner.boot_id}","processStartId":"{owner.process_start_id}"}}\n'
    )


def parse_claim_name(name: str) -> Optional[Tuple[str, str, str]]:
    """(target, phase, claim id) of an exact claim name
    `.io-mutation-<64 hex>-<waiting|candidate|held>-<uuid v4>.lock`."""
    if not (name.startswith(CLAIM_PREFIX) and name.endswith(".lock")):
        return None
    rest = name[len(CLAIM_PREFIX) : -len(".lock")]
    if len(rest) < 64:
        return None
    target, rest = rest[:64], rest[64:]
    if not is_hex(target) or not rest.startswith("-"):
        return None
    phase, sep, claim_id = rest[1:].partition("-")
    if not sep or phase not in PHASES or not is_uuid_v4(claim_id):
        return None
    return target, phase, claim_id


class MutationClaim(ClaimKind):
    """The mutation claims of one leaf of a collection (`mutation_claim::MutationClaim`)."""

    def __init__(self, target: str) -> None:
        self.target = target

    @classmethod
    def for_leaf(cls, leaf: str) -> "MutationClaim":
        return cls(target_sha256(leaf))

    def prefix(self) -> str:
        return f"{CLAIM_PREFIX}{self.target}-"

    def name(self, phase: str, claim_id: str) -> str:
        return f"{CLAIM_PREFIX}{self.target}-{phase}-{claim_id}.lock"

    def parse_name(self, name: str) -> Optional[Tuple[str, str]]:
        parsed = parse_claim_name(name)
        if parsed is None or parsed[0] != self.target:
            return None
        return parsed[1], parsed[2]

    def content(self, claim_id: str, owner: Owner) -> str:
        return claim_text(self.target, claim_id, owner)

    def publish(self, dir_fd: int, claim_id: str, owner: Owner) -> None:
        stage = f"{STAGE_PREFIX}{claim_id}-{owner.pid}.tmp"

        def unlink_stage() -> None:
            try:
                os.unlink(stage, dir_fd=dir_fd)
            except OSError:
                pass

        try:
            _fsops.write_new_file(dir_fd, stage, self.content(claim_id, owner).encode())
        except OSError as e:
            unlink_stage()
            raise self.error(IO, e) from None
        try:
            _fsops.rename_noreplace(dir_fd, stage, dir_fd, self.name(WAITING, claim_id))
        except FileExistsError:
            unlink_stage()
            raise self.error(NAME_PRESENT) from None
        except OSError as e:
            unlink_stage()
            raise self.error(IO, e) from None
        # No directory fsync: see `_advance`.

    def message(self, failure: str) -> str:
        return {
            UNSTABLE: "state mutation claims did not reach a stable snapshot",
            TOO_MANY: "state mutation claim count exceeds its bound",
            OWNER_UNKNOWN: "state mutation claim owner cannot be inspected safely",
            TWO_OWNERS: "state mutation arbitration admitted two owners",
            MALFORMED: "state mutation claim is malformed",
            NAME_PRESENT: "state mutation claim name is already present",
            IO: "state mutation claim could not be written",
        }[failure]


def own_identity(liveness: Liveness) -> Optional[Owner]:
    """This process's identity for its claims: four attempts 10 ms apart (§3.5 step 1); None
    when unavailable (the caller reports `IDENTITY_UNAVAILABLE`)."""
    for attempt in range(4):
        try:
            return liveness.self_identity()
        except Exception:  # noqa: BLE001 - any failure: try again, then report unavailable
            if attempt < 3:
                time.sleep(0.010)
    return None


@dataclass
class Recovered:
    """What a `recover_directory` removed (`mutation_claim::Recovered`)."""

    write_temporaries: int = 0
    stages: int = 0
    tree_quarantines: int = 0
    file_quarantines: int = 0
    claims: int = 0


def pid_gone(pid: int) -> bool:
    """Whether `pid` is definitely gone (`kill(pid, 0)` -> ESRCH); never for a pid `kill` cannot
    address (`mutation_claim::pid_gone`)."""
    if not 0 < pid <= 2**31 - 1:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def name_pid(text: str) -> Optional[int]:
    """A pid as the reference's name patterns write it: `[1-9][0-9]{0,9}`."""
    if 0 < len(text) <= 10 and not text.startswith("0") and is_ascii_digits(text):
        return int(text)
    return None


def _private_file(dir_fd: int, name: str) -> bool:
    """Whether `name` in `dir_fd` is a private regular file of this user."""
    try:
        st = _fsops.lstat(dir_fd, name)
    except OSError:
        return False
    return st is not None and _fsops.unsafe_file_reason(st) is None


def _names(dir_fd: int) -> List[str]:
    # Every name this recovery concerns starts with `.io-`.
    try:
        return _fsops.names_starting_with(dir_fd, ".io-", MAX_ENTRIES)
    except (OSError, _fsops.BoundExceeded):
        return []


def recover_directory(dir_fd: int, liveness: Liveness, claims: bool) -> Recovered:
    """The crash recovery of §3.9 in the collection `dir_fd`; with `claims`, also the claims of
    gone owners of every target (§3.5 `recoverOrphanedMutationClaims`)
    (`mutation_claim::recover_directory`):

    write temporaries `.io-write-<pid>-<uuid>.tmp` whose pid is gone; mutation stages whose owner
    is provably gone (their full identity when the stage is an exact claim text, else their
    file-name pid); tree quarantines `.io-remove-tree-<pid>-<ms>-<32 hex>.quarantine` of a gone
    pid; and (proclease's deviation) `.io-remove-file-<claim id>.quarantine` once no claim with
    that id is left.

    Raises `ArbitrationError` (only with `claims`): those of listing a target's live claims, or
    more than `MAX_TARGETS` targets."""
    recovered = Recovered()
    # Dead claims first: a file quarantine is orphaned once its remover's claim is gone.
    if claims:
        before = _names(dir_fd)
        targets = sorted({parsed[0] for parsed in map(parse_claim_name, before) if parsed is not None})
        if len(targets) > MAX_TARGETS:
            raise ArbitrationError(TOO_MANY_TARGETS)
        for target in targets:
            live_claims(dir_fd, MutationClaim(target), liveness, None, None)

        def count(names: List[str]) -> int:
            return sum(1 for n in names if parse_claim_name(n) is not None)

        recovered.claims = max(0, count(before) - count(_names(dir_fd)))
    names = _names(dir_fd)
    claim_ids = {parsed[2] for parsed in map(parse_claim_name, names) if parsed is not None}
    removed = False

    def unlink(name: str) -> bool:
        try:
            os.unlink(name, dir_fd=dir_fd)
            return True
        except OSError:
            return False

    for name in names:
        pid = write_temporary_pid(name)
        if pid is not None:
            if pid_gone(pid) and _private_file(dir_fd, name) and unlink(name):
                recovered.write_temporaries += 1
                removed = True
            continue
        stage = stage_name(name)
        if stage is not None:
            if _stage_owner_gone(dir_fd, name, stage[0], stage[1], liveness) and unlink(name):
                recovered.stages += 1
                removed = True
            continue
        pid = tree_quarantine_pid(name)
        if pid is not None:
            try:
                st = _fsops.lstat(dir_fd, name)
            except OSError:
                st = None
            private_dir = st is not None and _fsops.file_kind(st.st_mode) == _fsops.S_IFDIR and st.st_uid == _fsops.euid() and st.st_mode & 0o077 == 0
            if pid_gone(pid) and private_dir:
                try:
                    _fsops.remove_tree_at(dir_fd, name)
                except OSError:
                    continue
                recovered.tree_quarantines += 1
                removed = True
            continue
        claim_id = file_quarantine_id(name)
        if claim_id is not None and claim_id not in claim_ids and _private_file(dir_fd, name) and unlink(name):
            recovered.file_quarantines += 1
            removed = True
    # Rare (only crashed writers leave anything): made durable, so that a quarantine removed
    # here does not come back after a power loss under a pid that a new boot may reuse.
    if removed:
        try:
            _fsops.fsync_claim_dir(dir_fd)
        except OSError:
            pass
    return recovered


def write_temporary_pid(name: str) -> Optional[int]:
    """The pid of a write temporary `.io-write-<pid>-<uuid v4>.tmp`."""
    if not (name.startswith(".io-write-") and name.endswith(".tmp")):
        return None
    pid, sep, claim_id = name[len(".io-write-") : -len(".tmp")].partition("-")
    if not sep or not is_uuid_v4(claim_id):
        return None
    return name_pid(pid)


def stage_name(name: str) -> Optional[Tuple[str, int]]:
    """The claim id and pid of a mutation stage `.io-mutation-stage-<uuid v4>-<pid>.tmp`."""
    if not (name.startswith(STAGE_PREFIX) and name.endswith(".tmp")):
        return None
    rest = name[len(STAGE_PREFIX) : -len(".tmp")]
    if len(rest) < 36:
        return None
    claim_id, tail = rest[:36], rest[36:]
    if not tail.startswith("-"):
        return None
    pid = name_pid(tail[1:])
    if pid is None or not is_uuid_v4(claim_id):
        return None
    return claim_id, pid


def tree_quarantine_pid(name: str) -> Optional[int]:
    """The pid of a tree quarantine `.io-remove-tree-<pid>-<ms>-<32 hex, a v4 uuid>.quarantine`."""
    if not (name.startswith(".io-remove-tree-") and name.endswith(".quarantine")):
        return None
    parts = name[len(".io-remove-tree-") : -len(".quarantine")].split("-", 2)
    if len(parts) != 3:
        return None
    pid = name_pid(parts[0])
    ms, qid = parts[1], parts[2]
    if pid is None:
        return None
    v4 = len(qid) == 32 and is_hex(qid) and qid[12] == "4" and qid[16] in "89ab"
    return pid if is_ascii_digits(ms) and v4 else None


def file_quarantine_id(name: str) -> Optional[str]:
    """The claim id of a file quarantine `.io-remove-file-<uuid v4>.quarantine`."""
    if not (name.startswith(".io-remove-file-") and name.endswith(".quarantine")):
        return None
    claim_id = name[len(".io-remove-file-") : -len(".quarantine")]
    return claim_id if is_uuid_v4(claim_id) else None


def _stage_owner_gone(dir_fd: int, name: str, claim_id: str, pid: int, liveness: Liveness) -> bool:
    """Whether a mutation stage's owner is provably gone (§3.9): two reads must agree; an exact
    claim text for the stage's claim id and pid is judged by its full identity, anything else
    (empty, cut short, malformed) by the pid in its name (`stage_owner_gone`)."""
    try:
        first = read_claim(dir_fd, name)
        second = read_claim(dir_fd, name)
    except MalformedClaim:
        return False
    if first is None or second is None or first != second:
        return False
    value = parse_json(first)
    target = value.get("targetSha256") if isinstance(value, dict) else None
    exact = None
    if isinstance(target, str) and is_digest(target):
        exact = owner_in(MutationClaim(target), claim_id, first)
        if exact is not None and exact.pid != pid:
            exact = None
    if exact is not None:
        return status(liveness, exact) == DIFFERENT_OR_DEAD
    return pid_gone(pid)
