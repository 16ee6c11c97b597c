"""#43 case 8: `pip install hosts/python` alone — no setup.sh — gives a working, typed package:
the component's bytes inside it, `py.typed`, and the README's example running against it in a
fresh virtual environment, outside the source tree."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
COMPONENT = PACKAGE.parent.parent / "host" / "component" / "proclease.wasm"
ARTIFACT = PACKAGE.parent.parent / "host" / "component" / "proclease-portable.wasm"

EXAMPLE = """
import os, sys
from proclease import Error, Host

root = sys.argv[1]
host = Host(state_home=os.path.join(root, "state"), workspace_roots=[root])
try:
    with host.directory_lease(os.path.join(root, "jobs", "build"), create=True) as lease:
        print("leased", lease.path, "as", lease.claim.id)
except Error as error:
    print(error.kind, error.code, error.message)
    raise
import proclease.host
print("artifact", proclease.host.PACKAGED_ARTIFACT)
print("component", proclease.host.PACKAGED_COMPONENT)
"""


def test_pip_install_of_the_package_directory_gives_a_working_typed_package(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input", str(PACKAGE)], capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, install.stdout + install.stderr
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    ran = subprocess.run([str(python), "-c", EXAMPLE, str(work)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"leased {work / 'jobs' / 'build'} as " in ran.stdout, ran.stdout
    installed = Path(ran.stdout.split("component ", 1)[1].strip())
    assert str(installed).startswith(str(venv)), f"imported from the venv, not the source tree: {installed}"
    assert not installed.is_symlink() and hashlib.sha256(installed.read_bytes()).hexdigest() == hashlib.sha256(COMPONENT.read_bytes()).hexdigest(), "the component's own bytes"
    assert (installed.parent / "py.typed").is_file(), "typed (PEP 561)"
    artifact = Path(ran.stdout.split("artifact ", 1)[1].splitlines()[0].strip())
    assert artifact.parent == installed.parent and not artifact.is_symlink(), artifact
    assert hashlib.sha256(artifact.read_bytes()).hexdigest() == hashlib.sha256(ARTIFACT.read_bytes()).hexdigest(), "the portable artifact's own bytes, which Host loads"
    # The command line as the README gives it, without the scripts directory on PATH.
    doctor = subprocess.run([str(python), "-m", "proclease", "--state-home", str(tmp_path / "state"), "doctor"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert doctor.returncode == 0 and doctor.stdout.startswith(f"state home: {tmp_path / 'state'}"), doctor.stdout + doctor.stderr
