"""Values at the component boundary, as wasmtime-py's public dynamic API passes them.

* A WIT record is a `wasmtime.component.Record` whose attributes are the WIT field names,
  kebab-case (`boot-id`); `Rec` also answers snake_case (`owner.boot_id`) and `rec(...)` builds
  one from snake_case keyword arguments.
* An enum is its case name (`"exact-live-owner"`), an `option` is `None` or the value.
* A host function returns its ok value, or raises `HostError(payload)` for its `err` case: a
  `failure` record (`failure(...)`, `os_failure(...)`) for `state-store` and `workspace`, a
  string for the other imports.
"""

from __future__ import annotations

from ._errors import Error

import errno as _errno
import os
from typing import Any, Dict, Optional

from wasmtime.component import Record


def kebab(name: str) -> str:
    return name.replace("_", "-")


def snake(name: str) -> str:
    return name.replace("-", "_")


class Rec(Record):
    """A WIT record: attributes under their WIT (kebab-case) names, readable as snake_case."""

    def __init__(self, **fields: Any) -> None:
        for name, value in fields.items():
            setattr(self, kebab(name), value)

    def __getattr__(self, name: str) -> Any:
        # Only reached when the plain lookup failed: try the kebab-case field.
        fields = self.__dict__
        if kebab(name) in fields:
            return fields[kebab(name)]
        raise AttributeError(name)

    def fields(self) -> Dict[str, Any]:
        return dict(self.__dict__)

    def replace(self, **changes: Any) -> "Rec":
        out = Rec()
        out.__dict__.update(self.__dict__)
        for name, value in changes.items():
            out.__dict__[kebab(name)] = value
        return out

    def __repr__(self) -> str:
        inner = ", ".join(f"{snake(k)}={v!r}" for k, v in self.__dict__.items())
        return f"Rec({inner})"


rec = Rec


class HostError(Error):
    """Raised by a host function to return the `err` case of its `result` with `payload`; one
    that reaches a caller of the package is a `proclease.Error` of kind `storage`."""

    def __init__(self, payload: Any) -> None:
        super().__init__(payload.message if isinstance(payload, Record) else str(payload), kind="storage", failure=payload if isinstance(payload, Record) else None)
        self.payload = payload


#: errno values the contract reports as kind `permission` (`types.failure-kind`).
PERMISSION_ERRNOS = frozenset({_errno.EACCES, _errno.EPERM, _errno.EROFS})


def failure(kind: str, message: str, *, errno: Optional[str] = None, path: Optional[str] = None, operation: Optional[str] = None) -> Rec:
    """A `types.failure` record: `kind` is a `failure-kind` case (`io`, `permission`,
    `contended`, `refused`, `unsafe`, `identity-changed`, `unavailable`, …)."""
    return Rec(kind=kind, message=message, errno=errno, path=path, operation=operation)


def os_message(error: OSError) -> str:
    """An OSError as the native host words it: `Read-only file system (os error 30)`."""
    if error.errno is None:
        return str(error)
    return f"{os.strerror(error.errno)} (os error {error.errno})"


#: Where Python's `errno.errorcode` names an alias, the name the native host (nix) reports.
_NATIVE_NAMES = {"ENOTSUP": "EOPNOTSUPP", "EDEADLOCK": "EDEADLK"}


def errno_name(number: Optional[int]) -> Optional[str]:
    """The symbolic name of errno `number` as the native host reports it (`EROFS`)."""
    if number is None:
        return None
    name = _errno.errorcode.get(number)
    return _NATIVE_NAMES.get(name, name) if name is not None else None


def os_failure(error: OSError, path: str, operation: str) -> Rec:
    """The failure of a system call on `path` while `operation` (`link into the collection`):
    message `<path>: <operation> failed: <strerror> (os error N)`, kind `permission` for
    EACCES / EPERM / EROFS and `io` otherwise, `errno` its symbolic name (`EROFS`)."""
    name = errno_name(error.errno)
    kind = "permission" if error.errno in PERMISSION_ERRNOS else "io"
    return failure(kind, f"{path}: {operation} failed: {os_message(error)}", errno=name, path=path, operation=operation)
