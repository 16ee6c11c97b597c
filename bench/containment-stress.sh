#!/usr/bin/env bash
# The long containment stress runs (issue #26, docs/containment.md), by hand; the test suite runs
# a short form of each. Needs root (PID namespaces, setpriv), python3, and for the cluster runs
# Debian's etcd-server.
#   bench/containment-stress.sh [LOCAL_KILLS [CLUSTER_KILLS [CLUSTER_STOPS]]]
#                                               default: 1000 1000 200
# - local mode: SIGKILL of the supervisor at a random instant of a run whose command starts a
#   tree of five processes (a double-forking, setsid, descriptor-closing daemon, a setsid sleep,
#   a setpriv'd sleep, a grandchild, the command's own sleep), then `recover`: the directory is
#   never removed while a process of the tree runs (0 deleted live directories);
# - cluster mode, SIGKILL: the whole tree is gone before etcd expires the supervisor's presence
#   (0 survivors), with the time from the kill to an empty tree (p50, p99);
# - cluster mode, SIGSTOP at instants spread over the renewal cycle: the kernel dead-man timer
#   kills the supervisor, and its tree dies, before etcd expires its presence.
# Each prints one summary line; any violation fails the run (exit non-zero).
set -euo pipefail
cd "$(dirname "$0")/.."
local_kills="${1:-1000}"
cluster_kills="${2:-1000}"
cluster_stops="${3:-200}"
export PROCLEASE_REQUIRE_NAMESPACES=1 PROCLEASE_REQUIRE_ETCD=1

PROCLEASE_CONTAINMENT_KILLS="$local_kills" \
  cargo test --locked -p proclease --test containment kill_stress_short_form -- --nocapture 2>&1 \
  | grep -E "kills:|panicked|test result"

PROCLEASE_CLUSTER_KILLS="$cluster_kills" PROCLEASE_CLUSTER_STOPS="$cluster_stops" \
  cargo test --locked -p proclease --test cluster_cli -- --nocapture --test-threads 1 \
  a_killed_supervisor_takes_its_whole_tree_along a_stopped_supervisor_is_killed_with_its_tree_before_its_presence_expires 2>&1 \
  | grep -E "trials|panicked|test result"
