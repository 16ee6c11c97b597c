"""Shared fixtures: where the component and the vectors are, and one harness per session.

`PROCLEASE_WASM` names the component (default `build/proclease.wasm`, which
`cargo run -p proclease -- component -o tests/py/build/proclease.wasm` writes);
`PROCLEASE_VECTORS` the vector directory (default `../../../shared/vectors/public`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List

import pytest

HERE = Path(__file__).resolve().parent
# The component binding is the Python host package's (hosts/python), used from its source.
sys.path.insert(0, str(HERE.parent.parent / "hosts" / "python" / "src"))
WASM = Path(os.environ.get("PROCLEASE_WASM", HERE / "build" / "proclease.wasm"))
VECTORS = Path(os.environ.get("PROCLEASE_VECTORS", HERE.parent.parent.parent / "shared" / "vectors" / "public"))

#: One summary line per suite file run, printed at the end of the session.
SUMMARIES: List[str] = []


@pytest.fixture(scope="session")
def wasm() -> Path:
    if not WASM.is_file():
        pytest.fail(f"{WASM}: no component; run: cargo run -p proclease -- component -o tests/py/build/proclease.wasm")
    return WASM


@pytest.fixture(scope="session")
def harness(wasm: Path):
    from vectors import Harness

    return Harness(wasm)


def pytest_terminal_summary(terminalreporter) -> None:
    if SUMMARIES:
        terminalreporter.section("proclease conformance (python)")
        for line in SUMMARIES:
            terminalreporter.write_line(line)
