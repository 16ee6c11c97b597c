"""Shared fixtures of the Python host's tests.

`processes` and `judge` are a view of processes: the host's real `ProcessIdentity` (here
without a state home, so without witnesses: `/proc` alone) and the component's `judge-owner` on
what it observes — what a `Host` wires, minus the witnesses. `ArtifactGrants` is what the
Python tests grant the portable artifact. The plain names are importable by worker scripts too
(`from conftest import ArtifactGrants, ProcProcesses, proc_judge`).
"""

from __future__ import annotations

from typing import Any, List

import pytest

from proclease._binding import Proclease
from proclease._sys import SysFs, SysKernel
from proclease._wit import Rec
from proclease.host import Clock, Entropy, component_path
from proclease.process_identity import ProcessIdentity, identity_digest, process_start_id  # noqa: F401 (re-exported)

#: A state home that does not exist: no witnesses are taken or tested.
_NO_HOME = "/nonexistent/proclease-test-state-home"


class _NoImports:
    """Imports for an instance that only judges (`judge-owner` calls none): each traps."""

    def __getattr__(self, interface: str) -> Any:
        return self

    def __call__(self, *args: Any) -> Any:
        raise RuntimeError("this instance only judges; no import is provided")


def ProcProcesses() -> ProcessIdentity:  # noqa: N802 (a factory named as the class it stood in for)
    """This process's identity and the current boot id, from /proc (no witnesses)."""
    return ProcessIdentity(_NO_HOME)


_judge_instance = None


def proc_judge(owner: Rec) -> str:
    """The owner status of `owner` (§2.4, with proclease's namespace rule): the component's
    `judge-owner` on what `/proc` shows of it (no witness)."""
    global _judge_instance
    if _judge_instance is None:
        _judge_instance = Proclease(component_path(), _NoImports())
    return _judge_instance.dispositions.judge_owner(owner, ProcProcesses().probe(owner)).status


class ArtifactGrants:
    """What the portable artifact imports, for the state home `home` (an existing 0700
    directory) and the workspace `roots`: this package's system calls and process facts, the
    clock and randomness."""

    def __init__(self, home: str, roots: List[str]) -> None:
        self.sys_fs = SysFs(home, roots)
        self.sys_kernel = SysKernel()
        self.process_identity = ProcessIdentity(home)
        self.clock = Clock()
        self.entropy = Entropy()


@pytest.fixture
def processes() -> ProcessIdentity:
    """`self_identity()` / `current_boot_id()` of the test process, from /proc."""
    return ProcProcesses()


@pytest.fixture
def judge():
    """Judges a recorded owner by /proc alone (§2.4)."""
    return proc_judge
