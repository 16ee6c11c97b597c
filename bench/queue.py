#!/usr/bin/env python3
"""The export admission's wait queue (issue #44, "a fair wait that wakes on death").

  python3 bench/queue.py [ROUNDS]      # after: cargo build --release -p proclease

Each round: a holder `run --exclusive` waits on a gate; 8 `run --exclusive --wait 60s` start
150 ms apart behind it (w0 ... w7); the gate opens. Reported:

- the order the waiters ran in, per round (arrival order is w0 ... w7);
- the hand-off: from a command's last instant to the next waiter's command's first, median and
  p99 over every hand-off of every round, against an uncontended `run --exclusive` (from
  starting it to its command's first instant), measured in the same run, alternating;
- with --kill: w3 is SIGKILLed where it waits, and the w2 -> w4 hand-off is compared with the
  others (what a waiter killed in the queue costs those behind it).

Instants are bash's $EPOCHREALTIME (no fork), so both sides pay one bash start. The state home
is on the work disk unless --tmpfs (/dev/shm).

With --etcd, cluster mode: a throwaway single-member etcd (the `etcd` on PATH; its data directory
beside the state home, so on tmpfs with --tmpfs) holds the admission and the queue, and every run
uses it (PROCLEASE_STORE). The first run waits out the new prefix's grace (one TTL, 2 s here).
"""
import os
import shutil
import socket
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROCLEASE = os.environ.get("PROCLEASE", os.path.join(ROOT, "target", "release", "proclease"))
WAITERS = 8
# Global options of every run (--etcd: the TTL).
EXTRA = []


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def uncontended(env, work, i):
    log = os.path.join(work, f"solo-{i}")
    start = time.time()
    subprocess.run(
        [PROCLEASE, *EXTRA, "run", "--exclusive", "--workdir", os.path.join(work, "jobs", f"solo-{i}"), "--", "bash", "-c", f"echo $EPOCHREALTIME > {log}"],
        env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    with open(log) as f:
        return (float(f.read()) - start) * 1000


def round_(env, work, r, kill):
    log = os.path.join(work, f"log-{r}")
    gate = os.path.join(work, f"gate-{r}")
    open(gate, "w").close()
    holder = subprocess.Popen(
        [PROCLEASE, *EXTRA, "run", "--exclusive", "--workdir", os.path.join(work, "jobs", f"h-{r}"), "--", "bash", "-c",
         f"echo S h $EPOCHREALTIME >> {log}; while [ -e {gate} ]; do sleep 0.02; done; echo E h $EPOCHREALTIME >> {log}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    while not os.path.exists(log):
        time.sleep(0.01)
    waiters = []
    for i in range(WAITERS):
        waiters.append(subprocess.Popen(
            [PROCLEASE, *EXTRA, "run", "--exclusive", "--wait", "60s", "--workdir", os.path.join(work, "jobs", f"w{i}-{r}"), "--", "bash", "-c",
             f"echo S w{i} $EPOCHREALTIME >> {log}; echo E w{i} $EPOCHREALTIME >> {log}"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))
        time.sleep(0.15)
    if kill:
        waiters[3].send_signal(signal.SIGKILL)
        waiters[3].wait()
        time.sleep(0.05)
    os.unlink(gate)
    holder.wait()
    for i, w in enumerate(waiters):
        if not (kill and i == 3) and w.wait() != 0:
            sys.exit(f"waiter w{i} failed")
    events = [line.split() for line in open(log)]
    order = [name for kind, name, _ in events if kind == "S"]
    hand_offs = {}
    for (k1, n1, t1), (k2, n2, t2) in zip(events, events[1:]):
        if k1 == "E" and k2 == "S":
            hand_offs[(n1, n2)] = (float(t2) - float(t1)) * 1000
    return order[1:], hand_offs


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_etcd(work):
    """A single-member etcd with its data in `work`: (process, client URL)."""
    if not shutil.which("etcd"):
        sys.exit("--etcd needs etcd on PATH (Debian: apt-get install etcd-server)")
    client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    etcd = subprocess.Popen(
        ["etcd", "--data-dir", os.path.join(work, "etcd"), "--listen-client-urls", client, "--advertise-client-urls", client,
         "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", f"default={peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", int(client.rsplit(":", 1)[1])), timeout=0.1).close()
            return etcd, client
        except OSError:
            time.sleep(0.05)
    etcd.kill()
    sys.exit("etcd did not start")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    rounds = int(args[0]) if args else 5
    if not os.path.exists(PROCLEASE):
        sys.exit(f"{PROCLEASE} missing: run cargo build --release -p proclease")
    base = "/dev/shm" if "--tmpfs" in sys.argv else None
    work = tempfile.mkdtemp(prefix="proclease-queue-", dir=base)
    os.chmod(work, 0o700)
    env = dict(os.environ, PROCLEASE_STATE_HOME=os.path.join(work, "state"), HOME=work)
    env.pop("PROCLEASE_STORE", None)
    etcd = None
    if "--etcd" in sys.argv:
        etcd, url = start_etcd(work)
        env["PROCLEASE_STORE"] = f"etcd://{url.split('//', 1)[1]}/bench-queue"
        EXTRA.extend(["--cluster-ttl", "2s"])
        # The new prefix's grace (one TTL) is waited out once, here.
        subprocess.run([PROCLEASE, *EXTRA, "run", "--exclusive", "--workdir", os.path.join(work, "jobs", "first"), "--", "true"], env=env, stdout=subprocess.DEVNULL, check=True)
    else:
        subprocess.run([PROCLEASE, "doctor"], env=env, stdout=subprocess.DEVNULL, check=True)
    try:
        measure(env, work, rounds)
    finally:
        if etcd:
            etcd.kill()
            etcd.wait()


def measure(env, work, rounds):
    kill = "--kill" in sys.argv
    solos, hand_offs, killed = [], [], []
    in_order = 0
    for r in range(rounds):
        solos += [uncontended(env, work, f"{r}-{i}") for i in range(4)]
        order, offs = round_(env, work, r, kill)
        expected = [f"w{i}" for i in range(WAITERS) if not (kill and i == 3)]
        in_order += order == expected
        print(f"round {r}: {' '.join(order)}")
        for pair, ms in offs.items():
            (killed if pair == ("w2", "w4") and kill else hand_offs).append(ms)
        solos += [uncontended(env, work, f"{r}-{i}b") for i in range(4)]
    solo_median, solo_p99 = statistics.median(solos), percentile(solos, 99)
    med, p99 = statistics.median(hand_offs), percentile(hand_offs, 99)
    print(f"rounds in arrival order: {in_order}/{rounds}")
    print(f"uncontended run --exclusive, start to command: median {solo_median:.1f} ms, p99 {solo_p99:.1f} ms ({len(solos)} runs)")
    print(f"hand-off, command end to next command: median {med:.1f} ms ({med / solo_median:.2f}x), p99 {p99:.1f} ms ({p99 / solo_median:.2f}x the uncontended median; {len(hand_offs)} hand-offs)")
    if killed:
        print(f"hand-off past a killed waiter (w2 -> w4): median {statistics.median(killed):.1f} ms, {statistics.median(killed) - med:+.1f} ms against the others")


if __name__ == "__main__":
    main()
