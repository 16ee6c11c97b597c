#!/usr/bin/env bash
# The long kill -9 stress run (issue #9): N workers doing random lease operations on one real
# state home, SIGKILLed at random instants, then the invariants checked on disk.
#   bench/stress.sh [KILLS [WORKERS [SEED]]]      default: 10000 kills, 4 workers
# Prints one summary line ("… 0 violations") and exits non-zero on any violation.
# CI runs the 500-kill version (tests/tests/kill_stress.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
kills="${1:-10000}"
workers="${2:-4}"
seed="${3:-$RANDOM}"
cargo build --release --locked -p proclease-tests --bin lease_stress
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
target/release/lease_stress run --workers "$workers" --kills "$kills" --seed "$seed" --dir "$dir"
