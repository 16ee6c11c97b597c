#!/usr/bin/env bash
# The long form of the cluster history checker (issue #28, docs/reliability.md, "No overlap in
# cluster mode"), by hand; `cargo test` runs a short form (12 runs and 3 faults per phase).
# Needs root (PID and mount namespaces) and Debian's etcd-server.
#   bench/cluster-history.sh [RUNS_PER_PHASE [FAULTS]]      default: 200, every fault
# FAULTS: a comma-separated subset of none, kill-supervisor, stop-supervisor, stop-member,
# kill-member, wipe.
# Three simulated machines race `proclease run --exclusive` against a three-member etcd while
# one kind of fault is injected again and again per phase; every command takes a kernel lock the
# others share, so any two runs alive at once are caught. Prints, per phase, the runs, the faults,
# the overlaps (goal: 0) and every attempt that did not run counted by its reason; any overlap,
# unexplained refusal or stall fails the run (exit non-zero).
set -euo pipefail
cd "$(dirname "$0")/.."
export PROCLEASE_REQUIRE_NAMESPACES=1 PROCLEASE_REQUIRE_ETCD=1
export PROCLEASE_HISTORY_RUNS="${1:-200}" PROCLEASE_HISTORY_FAULTS="${2:-}" PROCLEASE_HISTORY_FAULTS_PER_PHASE=3
cargo test --locked -p proclease --test cluster_history -- --nocapture --test-threads 1 \
  2>&1 | grep -E "^fault|^control|^ +[0-9]+ |PROBLEM|panicked|test result"
