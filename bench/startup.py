#!/usr/bin/env python3
"""Whole-process comparisons (issue 8 items 4 and 5), as medians of paired runs.

  python3 bench/startup.py            # after: cargo build --release -p proclease --examples

Start-up: `proclease doctor` on an empty state home against `/bin/true` (issue #30's goal: at
most 2x) and `open_state_home` (a minimal native binary opening the same state home); the
component's native code is embedded and loaded in place, so there is no cold/warm cache
difference any more. Alternatives:
`proclease run --workdir DIR -- true` against util-linux `flock LOCKFILE true`, with the state
home and the lock file on the work disk and on tmpfs (/dev/shm). Each pair runs back to back,
alternating order; ratios are of medians. The box (a PID namespace whose init holds the
witness, docs/containment.md) is also measured against the same `run --containment none`, and
the kernel's own price for such a box is anchored by `unshare --pid --fork --mount-proc true`
(and `systemd-run --scope true` where systemd runs) against `/bin/true`.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROCLEASE = os.path.join(ROOT, "target", "release", "proclease")
BASELINE = os.path.join(ROOT, "target", "release", "examples", "open_state_home")


def timed(cmd, env):
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000


def paired(a, b, runs, prepare=lambda: None):
    xs, ys = [], []
    for i in range(runs):
        for first in ((a, xs), (b, ys)) if i % 2 == 0 else ((b, ys), (a, xs)):
            prepare()
            fn, out = first
            out.append(fn())
    return statistics.median(xs), statistics.median(ys)


def main():
    for binary in (PROCLEASE, BASELINE):
        if not os.path.exists(binary):
            sys.exit(f"{binary} missing: run cargo build --release -p proclease --examples")
    work = tempfile.mkdtemp(prefix="proclease-bench-")
    os.chmod(work, 0o700)
    env = dict(os.environ, PROCLEASE_STATE_HOME=os.path.join(work, "state"), HOME=work)
    warm_env = env
    subprocess.run([PROCLEASE, "doctor"], env=warm_env, stdout=subprocess.DEVNULL, check=True)

    rows = []
    true = shutil.which("true") or "/bin/true"
    doctor, base = paired(lambda: timed([PROCLEASE, "doctor"], warm_env), lambda: timed([true], env), 21)
    rows.append(("doctor", doctor, "/bin/true", base))
    doctor, base = paired(lambda: timed([PROCLEASE, "doctor"], warm_env), lambda: timed([BASELINE], env), 21)
    rows.append(("doctor", doctor, "open_state_home", base))
    places = [("disk", work)]
    if os.path.isdir("/dev/shm"):
        shm = tempfile.mkdtemp(prefix="proclease-bench-", dir="/dev/shm")
        os.chmod(shm, 0o700)
        places.append(("tmpfs", shm))
    for label, place in places:
        place_env = dict(warm_env, PROCLEASE_STATE_HOME=os.path.join(place, "state"))
        job = os.path.join(place, "jobs", "j")
        lock = os.path.join(place, "lockfile")
        run_ms, flock_ms = paired(
            lambda: timed([PROCLEASE, "--workspace-root", place, "run", "--workdir", job, "--", "true"], place_env),
            lambda: timed(["flock", lock, "true"], env),
            21,
        )
        rows.append((f"run --workdir DIR -- true ({label})", run_ms, "flock LOCKFILE true", flock_ms))
        # The box (docs/containment.md) against the same run without it: its cost alone.
        boxed_ms, bare_ms = paired(
            lambda: timed([PROCLEASE, "--workspace-root", place, "run", "--workdir", job, "--", "true"], place_env),
            lambda: timed([PROCLEASE, "--workspace-root", place, "run", "--containment", "none", "--workdir", job, "--", "true"], place_env),
            21,
        )
        rows.append((f"run, boxed ({label})", boxed_ms, "run --containment none", bare_ms))
        if place != work:
            shutil.rmtree(place, ignore_errors=True)
    # Anchors for the box (issue #44): what the kernel charges for a PID namespace with its own
    # /proc (util-linux unshare, root), and for a transient systemd scope where systemd runs.
    if shutil.which("unshare") and os.geteuid() == 0:
        unshare_ms, base = paired(lambda: timed(["unshare", "--pid", "--fork", "--mount-proc", true], env), lambda: timed([true], env), 21)
        rows.append(("unshare --pid --fork --mount-proc true", unshare_ms, "/bin/true", base))
    else:
        print("unshare anchor skipped (needs util-linux unshare and root)")
    if shutil.which("systemd-run") and os.path.isdir("/run/systemd/system"):
        scope_ms, base = paired(lambda: timed(["systemd-run", "--scope", "--quiet", true], env), lambda: timed([true], env), 21)
        rows.append(("systemd-run --scope true", scope_ms, "/bin/true", base))
    else:
        print("systemd-run --scope anchor skipped (systemd is not running here)")
    size = os.path.getsize(PROCLEASE)
    print(f"binary: {PROCLEASE} {size / 1e6:.1f} MB (issue #30's goal: at most 10 MB)")
    print(f"{'measured':38} {'ms':>8}   {'baseline':24} {'ms':>8}   ratio")
    for name, ms, base_name, base_ms in rows:
        print(f"{name:38} {ms:8.2f}   {base_name:24} {base_ms:8.2f}   {ms / base_ms:5.2f}x")
    soft_file_lock()
    shutil.rmtree(work, ignore_errors=True)


def soft_file_lock():
    """Python's filelock SoftFileLock, acquire + release in-process on tmpfs, for comparison
    with `cargo bench --bench component_overhead` (admission acquire+release)."""
    try:
        import filelock
    except ImportError:
        print("filelock not installed (pip install filelock): SoftFileLock comparison skipped")
        return
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    d = tempfile.mkdtemp(dir=base)
    lock = filelock.SoftFileLock(os.path.join(d, "lock"))
    rounds = 2000
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(rounds):
            lock.acquire()
            lock.release()
        samples.append((time.perf_counter() - start) / rounds * 1e6)
    print(f"filelock {filelock.__version__} SoftFileLock acquire+release (tmpfs, in-process): {statistics.median(samples):.1f} us")
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
