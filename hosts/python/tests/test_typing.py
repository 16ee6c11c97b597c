"""#43 case 8: the package as typed code its users check — `mypy --strict` on the README's
examples against the installed package (its `py.typed`, the records' types in
`proclease.records`), and `ruff check` on the package and its tests (the rules in
pyproject.toml). mypy and ruff are pinned with hashes in requirements.txt."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent


def readme_examples() -> list[str]:
    """The ```python blocks of the README."""
    return re.findall(r"```python\n(.*?)```", (PACKAGE / "README.md").read_text(), re.S)


def mypy_strict(sources: list[str], where: Path) -> subprocess.CompletedProcess[str]:
    files = []
    for i, text in enumerate(sources):
        file = where / f"example_{i}.py"
        file.write_text(text)
        files.append(str(file))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(where / ".mypy_cache"), *files],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=where,
    )


def test_the_readme_examples_pass_mypy_strict(tmp_path: Path) -> None:
    examples = readme_examples()
    assert examples, "the README has its example"
    checked = mypy_strict(examples, tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_misuse_of_the_api_is_a_mypy_error(tmp_path: Path) -> None:
    wrong = (
        "from proclease import Host\n"
        "host = Host()\n"
        'with host.directory_lease("/tmp/x", create="yes") as lease:\n'
        '    lease.update("runnin")\n'
        "    print(lease.claim.owner.pids)\n"
    )
    checked = mypy_strict([wrong], tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert 'Argument "create" to "directory_lease" of "Host" has incompatible type "str"; expected "bool"' in checked.stdout, checked.stdout
    assert 'Argument 1 to "update" of "DirectoryLease" has incompatible type "Literal[\'runnin\']"' in checked.stdout, checked.stdout
    assert '"Owner" has no attribute "pids"' in checked.stdout, checked.stdout


def test_ruff_finds_nothing_in_the_package_and_its_tests() -> None:
    checked = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "src", "tests"], capture_output=True, text=True, timeout=300, cwd=PACKAGE)
    assert checked.returncode == 0, checked.stdout + checked.stderr
