"""The types of the records the public API returns, for type checkers and readers.

At run time a record is the component binding's `Rec` (attributes in snake_case, one per WIT
field; an `option<…>` is `None` or the value; an `enum` is its WIT name as a `str`). These
`Protocol`s say which attributes each has and of what type, so that `mypy --strict` checks code
that reads them (`lease.claim.phase == "running"`, `claim.owner.pid`) and refuses a misspelt
field. They mirror the records of `wit/proclease.wit`.
"""

from __future__ import annotations

from typing import Literal, Optional, Protocol

#: `lease-role`: what a directory lease is for (§6A.6).
LeaseRole = Literal["raw-working", "bundle-stage"]
#: `raw-phase`: a raw-working lease's lifecycle step (§6A.6).
RawPhase = Literal["preparing", "launching", "running", "settled"]
#: `admission-schema`: which of the reference's admission formats a claim is written in (§6A.5).
AdmissionSchema = Literal["v1", "v2-pre-revision", "v2"]
#: `admission-phase`: where an export's admission stands (§6A.5).
AdmissionPhase = Literal["parent-owned", "helper-launching", "helper-active", "cleanup-unsafe"]
#: `owner-status`: what probing a recorded process proves (§2.4).
OwnerStatus = Literal["exact-live-owner", "different-or-dead", "unknown"]
#: `disposition`: what recovery would do with a claim (§6A.5, §6A.7).
Disposition = Literal["active", "indeterminate", "recoverable"]


class Owner(Protocol):
    """`owner`: a process identity (§2): its pid, the digest of the boot it ran in, and of its
    start time (64 lowercase hex each)."""

    @property
    def pid(self) -> int: ...
    @property
    def boot_id(self) -> str: ...
    @property
    def process_start_id(self) -> str: ...


class DirectoryIdentity(Protocol):
    """`directory-identity`: a directory's device and inode (decimal), and its birth time in ns
    since the epoch (decimal; empty where the filesystem keeps none)."""

    @property
    def device(self) -> str: ...
    @property
    def inode(self) -> str: ...
    @property
    def birthtime_ns(self) -> str: ...


class DirectoryLeaseClaim(Protocol):
    """`directory-lease-claim`: a directory lease as its file records it (§6A.6). Times in ms
    since the epoch."""

    @property
    def id(self) -> str: ...
    @property
    def role(self) -> LeaseRole: ...
    @property
    def path(self) -> str: ...
    @property
    def parent_path(self) -> str: ...
    @property
    def parent_identity(self) -> DirectoryIdentity: ...
    @property
    def directory_identity(self) -> DirectoryIdentity: ...
    @property
    def output_root(self) -> Optional[str]: ...
    @property
    def owner(self) -> Owner: ...
    @property
    def child_owner(self) -> Optional[Owner]: ...
    @property
    def phase(self) -> RawPhase: ...
    @property
    def created_at_ms(self) -> int: ...
    @property
    def recover_after_ms(self) -> int: ...


class AdmissionClaim(Protocol):
    """`admission-claim`: the export admission as its file records it (§6A.5); `phase` and
    `revision` are `None` in the reference's v1 format."""

    @property
    def schema(self) -> AdmissionSchema: ...
    @property
    def id(self) -> str: ...
    @property
    def owner(self) -> Owner: ...
    @property
    def helper_owner(self) -> Optional[Owner]: ...
    @property
    def phase(self) -> Optional[AdmissionPhase]: ...
    @property
    def revision(self) -> Optional[str]: ...


class AdmissionSurvey(Protocol):
    """`admission-survey`: the admission claim on disk as an acquirer would judge it."""

    @property
    def claim(self) -> AdmissionClaim: ...
    @property
    def disposition(self) -> Disposition: ...
    @property
    def reason(self) -> str: ...


class Liveness(Protocol):
    """`liveness`: what probing an owner proves — its status, whether it and everything that
    inherited its witness are proven gone (`lineage_gone`), and what decided (`proof`, in words)."""

    @property
    def status(self) -> OwnerStatus: ...
    @property
    def lineage_gone(self) -> bool: ...
    @property
    def proof(self) -> str: ...


__all__ = [
    "AdmissionClaim",
    "AdmissionPhase",
    "AdmissionSchema",
    "AdmissionSurvey",
    "DirectoryIdentity",
    "DirectoryLeaseClaim",
    "Disposition",
    "LeaseRole",
    "Liveness",
    "Owner",
    "OwnerStatus",
    "RawPhase",
]
