"""The root of every exception proclease raises to its users: `except proclease.Error` catches
them all — a lease rule's refusal, a storage or system failure, a refusal before anything was
leased, a lock held too long, a state home that cannot be used, an admission whose helper may
still run. Each keeps what caused it as `__cause__`."""

from __future__ import annotations

from typing import Any, Optional


class Error(Exception):
    """A failure proclease reports. `message`: what happened and what to do. `kind`: its class —
    `lease` (a lease rule refused; `code` is the rule's code, e.g. `another-export-is-active`),
    `storage`, `system`, `refused`, `lock-timeout`, `helper-may-run`, or a state home's
    (`unconfigured`, `shared-root`, `unsafe`, `io`). `code`: a lease rule's code, else None.
    `failure`: a storage or system failure's record, else None."""

    def __init__(self, message: str, *, kind: Optional[str] = None, code: Optional[str] = None, failure: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self._kind = kind
        self.code = code
        self.failure = failure

    @property
    def kind(self) -> Optional[str]:
        return self._kind


def system_error(error: OSError, doing: str) -> Error:
    """An `OSError` met while `doing` something, as a `system` `Error` naming the path; raise it
    `from error` so that the cause stays."""
    where = f"{error.filename}: " if error.filename is not None else ""
    return Error(f"{where}{doing} failed: {error.strerror or error}", kind="system")
