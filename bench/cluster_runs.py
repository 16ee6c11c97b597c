#!/usr/bin/env python3
"""Runs per second of `proclease run --exclusive -- true`, file store and etcd side by side
(issue #28), as medians of paired runs.

  cargo build --release -p proclease && python3 bench/cluster_runs.py [--binary PATH] [--runs N]

Starts its own single-member etcd (Debian's etcd-server) on free loopback ports with its data
in a temporary directory on the work disk, and a state home beside it. Each pair runs the file
store and the etcd store back to back, alternating order, on a fresh working directory each;
the etcd runs use `--cluster-ttl 10s` (the default). Also measured: one etcd round trip (a
range read through etcd's JSON gateway on a kept-alive connection, median of 200; the gRPC
client's is a little shorter), so that the issue's bound — etcd under 1.5x the file store plus
two round trips — is checked against this run's own figures.
"""
import http.client
import json
import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(cmd, env):
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "proclease"))
    parser.add_argument("--runs", type=int, default=41)
    args = parser.parse_args()
    if not os.path.exists(args.binary):
        sys.exit(f"{args.binary} missing: run cargo build --release -p proclease")
    if not shutil.which("etcd"):
        sys.exit("no etcd binary: install Debian's etcd-server")
    work = tempfile.mkdtemp(prefix="proclease-cluster-bench-", dir=os.environ.get("BENCH_DIR", ROOT + "/target"))
    os.chmod(work, 0o700)
    client, peer = free_port(), free_port()
    etcd = subprocess.Popen(
        ["etcd", "--name", "bench", "--data-dir", os.path.join(work, "etcd"),
         "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"bench=http://127.0.0.1:{peer}", "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        env = dict(os.environ, HOME=work)
        env.pop("PROCLEASE_STORE", None)
        base = [args.binary, "--state-home", os.path.join(work, "state"), "--workspace-root", work]
        store = ["--store", f"etcd://127.0.0.1:{client}/bench"]
        deadline = time.time() + 30
        while subprocess.run(base + store + ["doctor"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
            if time.time() > deadline:
                sys.exit("etcd did not answer within 30 s")
            time.sleep(0.2)
        counter = [0]

        def run(extra):
            counter[0] += 1
            workdir = os.path.join(work, f"job{counter[0]}")
            return timed(base + extra + ["run", "--exclusive", "--workdir", workdir, "--", "true"], env)

        files, etcds = [], []
        # The first etcd run waits out a new prefix's grace (one TTL): not measured.
        run(store)
        for i in range(args.runs):
            pair = ((files, []), (etcds, store)) if i % 2 == 0 else ((etcds, store), (files, []))
            for out, extra in pair:
                out.append(run(extra))
        file_ms, etcd_ms = statistics.median(files), statistics.median(etcds)
        connection = http.client.HTTPConnection("127.0.0.1", client)
        trips = []
        for _ in range(200):
            start = time.perf_counter()
            connection.request("POST", "/v3/kv/range", body=json.dumps({"key": "Zm9v"}))
            connection.getresponse().read()
            trips.append((time.perf_counter() - start) * 1000)
        rtt = statistics.median(trips)
        bound = 1.5 * file_ms + 2 * rtt
        print(f"run --exclusive -- true, medians of {args.runs} paired runs (ms; runs/s):")
        print(f"  file store  {file_ms:8.1f} ms  {1000 / file_ms:6.1f} runs/s")
        print(f"  etcd        {etcd_ms:8.1f} ms  {1000 / etcd_ms:6.1f} runs/s")
        print(f"  etcd / file {etcd_ms / file_ms:8.2f}x   etcd - file {etcd_ms - file_ms:6.1f} ms")
        print(f"  one etcd round trip {rtt:.2f} ms; the bound 1.5 x file + 2 round trips = {bound:.1f} ms: {'met' if etcd_ms <= bound else 'NOT met'}")
    finally:
        etcd.kill()
        etcd.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
