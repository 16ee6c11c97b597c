#!/usr/bin/env bash
# Makes hosts/python/.venv: a virtual environment of $PYTHON (default python3; 3.11 or newer)
# with the hash-pinned packages of requirements.txt (wasmtime, and pytest for the tests) and this
# package installed, its component and portable artifact (src/proclease/proclease.wasm and
# proclease-portable.wasm, links to host/component/) inside it. Afterwards
# `hosts/python/.venv/bin/proclease` is the command and `import proclease` works in that venv.
# Does nothing when .venv is current (same requirements, Python, component and sources).
#   bash hosts/python/setup.sh && hosts/python/.venv/bin/python -m pytest -q hosts/python/tests
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv"
python="${PYTHON:-python3}"
component="$here/../../host/component/proclease.wasm"
artifact="$here/../../host/component/proclease-portable.wasm"
for file in "$component" "$artifact"; do
  if [ ! -f "$file" ]; then
    echo "python host: $file is missing (it is checked in; run from a clone of the repository)" >&2
    exit 1
  fi
done
"$python" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"the Python host needs Python 3.11 or newer, not {sys.version.split()[0]}")
PY
# What the venv is made from: the requirements, the interpreter, the component and the sources.
want="$( { sha256sum "$here/requirements.txt" "$here/pyproject.toml" "$component" "$artifact"; find "$here/src/proclease" -name '*.py' -print0 | sort -z | xargs -0 sha256sum; "$python" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)"
if [ -x "$venv/bin/proclease" ] && [ "$(cat "$venv/.made-from" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
rm -rf "$venv" "$here/build" "$here"/src/*.egg-info
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  --require-hashes --only-binary=:all: -r "$here/requirements.txt"
# src/proclease/proclease.wasm and proclease-portable.wasm are symbolic links to the checked-in
# files, so that `pip install hosts/python` alone packs their bytes too.
# No build isolation: the venv's own setuptools builds it (nothing else is downloaded).
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --no-deps --no-build-isolation "$here"
rm -rf "$here/build" "$here"/src/*.egg-info
echo "$want" > "$venv/.made-from"
echo "python host: installed $("$venv/bin/python" -c 'import proclease, sys; print(proclease.__file__)') in $venv ($("$venv/bin/python" --version))" >&2
