"""A child process of the interop tests, the Python host's side of `store_worker` /
`admission_worker` (tests/src/bin/), with the same arguments and output:

  worker.py increment <state-home> <path> <count> [<trap-every>]
      count times: read {"value":N} (absent: create {"value":0}), replace it if unchanged with
      N+1, retrying lost compare-and-swaps; prints {"event":"ready"} before the first, then
      {"outcome":"done","successes":S,"retries":R,"value":V,"traps":T}. The writes go through
      the portable artifact's own store (what `Host` runs). With <trap-every> K, every K-th
      advance of a mutation claim to `held` traps the instance instead (a host bug inside an
      import call), leaving its claim behind; the next call runs on a fresh instance. With
      $PROCLEASE_TEST_NO_KERNEL_LOCKS=1 the host answers `unsupported` to every `try-lock`, so
      that the reference's mutation claims alone serialise the writes (as with ghostget).
  worker.py churn <state-home>
      prints {"event": "ready"}, then rewrites, replaces and removes recovery/churn/{0..3}.json
      (12 KB records) through the artifact's store until killed
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

from typing import Any

from proclease import Error, Host
from proclease._binding import ComponentError


def fail(message: str) -> None:
    print(f"worker.py: {message}", file=sys.stderr)
    sys.exit(3)


def wait_for(path: str) -> None:
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            fail(f"{path} never appeared")
        time.sleep(0.0002)


def increment(home: str, path: str, count: int, trap_every: int = 0) -> None:
    if os.environ.get("PROCLEASE_TEST_NO_KERNEL_LOCKS") == "1":
        from proclease._binding import Variant
        from proclease._sys import Directory

        Directory.try_lock = lambda self, name: Variant("unsupported", None)  # type: ignore[method-assign]
    host = Host(home)
    store = host.component.state_store
    traps = 0
    if trap_every:
        from proclease._sys import Directory

        rename, advances = Directory.rename, [0]

        def trapping(self: Directory, source: bytes, target_dir: Directory, target: bytes, replace: bool) -> Any:
            if target.startswith(b".io-mutation-") and b"-held-" in target:
                advances[0] += 1
                if advances[0] % trap_every == 0:
                    raise RuntimeError("a bug of the host")
            return rename(self, source, target_dir, target, replace)

        Directory.rename = trapping  # type: ignore[method-assign]
    # Loading the component takes a while: say when the writes begin, so that a test can start
    # the other writers then.
    print(json.dumps({"event": "ready"}), flush=True)
    successes = retries = value = 0
    # Bounded: a writer that cannot make progress fails instead of hanging its test.
    deadline = time.monotonic() + 300
    while successes < count:
        if time.monotonic() > deadline:
            fail(f"no progress: {successes} of {count} increments in 300 s ({retries} retries, {traps} traps)")
        try:
            text = store.read_if_present(path, 1 << 16).text
            if text is None:
                store.create_if_absent(path, '{"value":0}\n')
                continue
            n = json.loads(text)["value"]
            replaced = store.replace_if_unchanged(path, hashlib.sha256(text.encode()).hexdigest(), f'{{"value":{n + 1}}}\n')
        except ComponentError as error:
            # Another writer was mid-mutation past the store's bound, a read overlapped a
            # replace, or (writers without kernel locks, as ghostget writes) the §3.5
            # arbitration saw claims come and go past its bound: nothing was changed; try
            # again, as store_worker does.
            failure = error.failure
            transient = ("changed while it was read", "did not reach a stable snapshot")
            if failure is not None and (failure.kind == "contended" or any(words in failure.message for words in transient)):
                retries += 1
                continue
            fail(error.message)
        except Exception as error:  # noqa: BLE001 (only the injected trap is expected)
            if "a bug of the host" not in str(error):
                raise
            # Trapped before the record changed (the claim never reached `held`).
            traps += 1
            continue
        if replaced:
            successes += 1
            value = n + 1
        else:
            retries += 1
    print(json.dumps({"outcome": "done", "successes": successes, "retries": retries, "value": value, "traps": traps}, separators=(",", ":")))


def churn(home: str) -> None:
    store = Host(home).component.state_store
    print(json.dumps({"event": "ready"}), flush=True)
    n = 0
    while True:
        for k in range(4):
            n += 1
            path = f"recovery/churn/{k}.json"
            record = '{"k":%d,"n":%d,"pad":"%s"}\n' % (k, n, chr(97 + n % 26) * 12000)
            current = store.read_if_present(path, 1 << 20).text
            if current is None:
                store.create_if_absent(path, record)
            elif n % 7 == 0:
                store.remove_if_unchanged(path, hashlib.sha256(current.encode()).hexdigest())
            else:
                store.replace_if_unchanged(path, hashlib.sha256(current.encode()).hexdigest(), record)


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
    if args[:1] == ["increment"] and len(args) in (4, 5):
        increment(args[1], args[2], int(args[3]), int(args[4]) if len(args) == 5 else 0)
    elif args[:1] == ["churn"] and len(args) == 2:
        churn(args[1])
    elif args[:1] == ["race"] and len(args) == 4:
        race(args[1], args[2], args[3])
    else:
        fail(f"usage: see the docstring; got {args}")


if __name__ == "__main__":
    main()
