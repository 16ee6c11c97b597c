"""Every public conformance vector through this package's component binding and packaged
component (`proclease._binding`, `proclease/proclease.wasm` as installed), with the runner of
`tests/py/vectors.py`: pure exports answer from their arguments, and the suites that need
scripted process facts (a transition whose owner must be alive, then dead) get them from the
in-memory world of `tests/py/memory_host.py` — the one thing a real host cannot be made to do
on demand."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPOSITORY / "tests" / "py"))

from vectors import SUITES, Harness, run_file  # noqa: E402

from proclease.host import component_path  # noqa: E402

VECTORS = Path(os.environ.get("PROCLEASE_VECTORS", REPOSITORY.parent / "shared" / "vectors" / "public"))
FILES = sorted(VECTORS.glob("*.jsonl")) if VECTORS.is_dir() else []


@pytest.fixture(scope="module")
def harness() -> Harness:
    return Harness(component_path())


def test_the_vectors_are_there_and_every_suite_is_known() -> None:
    assert FILES, f"no *.jsonl vectors in {VECTORS} (set PROCLEASE_VECTORS)"
    assert sorted(f.stem for f in FILES) == sorted(SUITES)


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_suite(path: Path, harness: Harness) -> None:
    report = run_file(path, harness)
    shown = "\n".join(f"{f.name}\n  expected: {json.dumps(f.expected)}\n  actual:   {json.dumps(f.actual, default=repr)}" for f in report.failures[:5])
    assert not report.failures, f"{len(report.failures)} failure(s):\n{shown}"
    assert report.total > 0 and report.passed + report.skipped == report.total
