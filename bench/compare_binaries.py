#!/usr/bin/env python3
"""Two builds of proclease side by side: is a change faster or slower for a user?

  cp target/release/proclease /tmp/proclease-before     # before the change
  cargo build --release -p proclease                    # after it
  python3 bench/compare_binaries.py /tmp/proclease-before target/release/proclease [PAIRS]

Measures warm `doctor`, and `run --workdir DIR -- true` with the state home on tmpfs
(/dev/shm) and on the work disk, as medians of PAIRS (default 31) paired runs that alternate
which binary goes first (`startup.py`'s method), and prints each median and the ratio
after/before. Both binaries share one state home per place, so each sees the other's records.
Ratios within a few percent are noise on these machines: run it twice, on a quiet machine.
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import startup  # noqa: E402  (the paired, alternating timer)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    before, after = (os.path.abspath(p) for p in sys.argv[1:3])
    pairs = int(sys.argv[3]) if len(sys.argv) > 3 else 31
    for binary in (before, after):
        if not os.access(binary, os.X_OK):
            sys.exit(f"{binary}: not an executable")
    for place in ("/dev/shm", os.getcwd()):
        work = tempfile.mkdtemp(prefix="proclease-compare-", dir=place)
        os.chmod(work, 0o700)
        env = dict(os.environ, PROCLEASE_STATE_HOME=os.path.join(work, "state"), HOME=work)
        subprocess.run([after, "doctor"], env=env, stdout=subprocess.DEVNULL, check=True)
        runs = [0]

        def run(binary):
            runs[0] += 1
            return startup.timed([binary, "run", "--workdir", os.path.join(work, f"w{runs[0]}"), "--", "true"], env)

        rows = []
        if place == "/dev/shm":
            rows.append(("doctor (warm)", *startup.paired(lambda: startup.timed([before, "doctor"], env), lambda: startup.timed([after, "doctor"], env), pairs)))
        rows.append((f"run -- true (state home in {place})", *startup.paired(lambda: run(before), lambda: run(after), pairs)))
        for label, b, a in rows:
            print(f"{label}: before {b:.2f} ms, after {a:.2f} ms, after/before {a / b:.3f}")
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
