"""A child process of the interop tests, the Python host's side of `store_worker` /
`admission_worker` (tests/src/bin/), with the same arguments and output:

  worker.py increment <state-home> <path> <count>
      count times: read {"value":N} (absent: create {"value":0}), replace it if unchanged with
      N+1, retrying lost compare-and-swaps; prints {"event":"ready"} before the first, then
      {"outcome":"done","successes":S,"retries":R,"value":V}
  worker.py race <state-home> <go-file> <release-file>
      wait for <go-file>, acquire the export admission: print `acquired`, wait for
      <release-file> and release it; or print `blocked: <message>`
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

from proclease import Error, Host
from proclease._wit import HostError


def fail(message: str) -> None:
    print(f"worker.py: {message}", file=sys.stderr)
    sys.exit(3)


def wait_for(path: str) -> None:
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            fail(f"{path} never appeared")
        time.sleep(0.0002)


def increment(home: str, path: str, count: int) -> None:
    store = Host(home).effects.state_store
    # Loading the component takes a while: say when the writes begin, so that a test can start
    # the other writers then.
    print(json.dumps({"event": "ready"}), flush=True)
    successes = retries = value = 0
    # Bounded: a writer that cannot make progress fails instead of hanging its test.
    deadline = time.monotonic() + 300
    while successes < count:
        if time.monotonic() > deadline:
            fail(f"no progress: {successes} of {count} increments in 300 s ({retries} retries)")
        try:
            text = store.read_if_present(path, 1 << 16).text
            if text is None:
                store.create_if_absent(path, '{"value":0}\n')
                continue
            n = json.loads(text)["value"]
            replaced = store.replace_if_unchanged(path, hashlib.sha256(text.encode()).hexdigest(), f'{{"value":{n + 1}}}\n')
        except HostError as error:
            # Another writer was mid-mutation past the store's bound, or a read overlapped a
            # replace: try again, as store_worker does.
            if error.payload.kind == "contended" or "changed while it was read" in error.payload.message:
                retries += 1
                continue
            fail(error.payload.message)
        if replaced:
            successes += 1
            value = n + 1
        else:
            retries += 1
    print(json.dumps({"outcome": "done", "successes": successes, "retries": retries, "value": value}, separators=(",", ":")))


def race(home: str, go: str, release: str) -> None:
    host = Host(home)
    wait_for(go)
    try:
        with host.admission():
            print("acquired", flush=True)
            wait_for(release)
    except Error as error:
        print(f"blocked: {error.message}")


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["increment"] and len(args) == 4:
        increment(args[1], args[2], int(args[3]))
    elif args[:1] == ["race"] and len(args) == 4:
        race(args[1], args[2], args[3])
    else:
        fail(f"usage: see the docstring; got {args}")


if __name__ == "__main__":
    main()
