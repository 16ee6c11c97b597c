"""The Python example of docs/embedding.md runs as a user would run it, and the doc shows it
as it is."""

from __future__ import annotations

import subprocess
import sys

from conftest import HERE

EXAMPLE = HERE / "example_embedding.py"
DOC = HERE.parent.parent / "docs" / "embedding.md"


def test_the_embedding_example_runs(wasm):
    run = subprocess.run([sys.executable, str(EXAMPLE), str(wasm)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        'ok {"a":[true,null],"b":1}',
        "v1 4242 4a1fab41d79d1f49836cd1cdfbc26db778b62f1e95a189d91e5512b131a8c9ee",
        "lease export-admission-identity-is-invalid Beeper Message Like Me recovery: export admission identity is invalid",
        "None",
        "lease directory-lease-request-is-invalid Beeper Message Like Me recovery: directory lease request is invalid",
    ]


def test_the_doc_quotes_the_example_verbatim():
    doc = DOC.read_text(encoding="utf-8")
    source = EXAMPLE.read_text(encoding="utf-8")
    assert f"```python\n{source}```" in doc, "docs/embedding.md must quote tests/py/example_embedding.py exactly"
