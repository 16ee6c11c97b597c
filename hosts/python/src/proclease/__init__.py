"""proclease for Python: crash-safe, process-owned leases on shared local state.

The lease logic is the proclease WebAssembly component (the same `proclease.wasm` the native
`proclease` binary embeds and the Node host loads); this package hosts its imports with real
effects on the state home and the workspace, so that a lease taken here is judged and recovered
by any of them, and by ghostget.

    from proclease import Host

    host = Host()
    with host.directory_lease("/tmp/jobs/build", create=True) as lease:
        print(lease.claim.id)
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # What a type checker sees: the names below, loaded lazily at run time (`__getattr__`).
    from ._errors import Error
    from .host import Admission, DirectoryLease, HelperMayRun, Host, LockTimeout, Recovery, Refused, default_state_home, default_workspace_roots
    from .state_home import StateHomeError

__all__ = ["Admission", "DirectoryLease", "Error", "HelperMayRun", "Host", "LockTimeout", "Recovery", "RecoveryIncomplete", "Refused", "StateHomeError", "default_state_home", "default_workspace_roots"]


def __getattr__(name: str) -> Any:
    # Loaded on first use, so that `proclease._binding` alone (the component binding the
    # repository's test doubles use) does not load the effects.
    if name == "Error":
        from ._errors import Error

        return Error
    if name == "StateHomeError":
        from .state_home import StateHomeError

        return StateHomeError
    if name in __all__:
        from . import host

        return getattr(host, name)
    raise AttributeError(f"module 'proclease' has no attribute {name!r}")


