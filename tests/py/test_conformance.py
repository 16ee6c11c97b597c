"""Every public conformance vector through the component in Python (wasmtime-py)."""

from __future__ import annotations

import json

import pytest

from conftest import SUMMARIES, VECTORS
from vectors import SUITES, run_file

FILES = sorted(VECTORS.glob("*.jsonl")) if VECTORS.is_dir() else []


def test_every_suite_has_a_vector_file():
    assert FILES, f"no *.jsonl vectors in {VECTORS} (set PROCLEASE_VECTORS)"
    assert sorted(f.stem for f in FILES) == sorted(SUITES), "vector files and known suites differ"


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_suite(path, harness):
    report = run_file(path, harness)
    SUMMARIES.append(report.summary())
    shown = "\n".join(
        f"{f.name}\n  expected: {json.dumps(f.expected)}\n  actual:   {json.dumps(f.actual, default=repr)}" for f in report.failures[:5]
    )
    assert report.known, f"{report.suite}: unknown suite"
    assert not report.failures, f"{len(report.failures)} failure(s):\n{shown}"
    assert report.total > 0
    assert report.passed + report.skipped == report.total
