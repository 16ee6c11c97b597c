#!/usr/bin/env bash
# Creates (or refreshes) tests/py/.venv for the Python host suite: a virtual environment of
# $PYTHON (default python3; 3.11 or newer, the version hosts/python/requirements.txt is resolved for) with
# exactly the pinned, hash-checked packages of hosts/python/requirements.txt (the Python host package's: wasmtime and pytest). Does nothing when .venv
# already holds them (it records the sha256 of the requirements and the Python version it was made from).
# Run by tests/tests/python_wasmtime.rs; by hand:
#   bash tests/py/setup.sh && tests/py/.venv/bin/python -m pytest -q tests/py
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv"
python="${PYTHON:-python3}"
# The venv is current while it was made by this interpreter from these exact requirements.
want="$(sha256sum "$here/../../hosts/python/requirements.txt" | cut -d' ' -f1) $("$python" -c 'import sys; print(sys.version.split()[0])')"

if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.made-from" 2>/dev/null)" = "$want" ]; then
  exit 0
fi

"$python" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"the Python host needs Python 3.11 or newer, not {sys.version.split()[0]}")
PY
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  --require-hashes --only-binary=:all: -r "$here/../../hosts/python/requirements.txt"
echo "$want" > "$venv/.made-from"
echo "python host: created $venv ($("$venv/bin/python" --version))" >&2
