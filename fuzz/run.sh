#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 600) and prints the executions per target.
#   fuzz/run.sh [SECONDS]
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). A crash stops the
# run and leaves its input in fuzz/artifacts/<target>/ (ignored by git); once it is fixed, copy
# the input into fuzz/regressions/<target>/ and commit it: tests/tests/fuzz_corpus.rs replays
# every file there under `cargo test`.
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-600}"
for target in $(cargo +nightly fuzz list); do
  log="$(mktemp)"
  cargo +nightly fuzz run "$target" -- -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1 || { tail -40 "$log"; exit 1; }
  runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)"
  cov="$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)"
  echo "$target: ${runs:-?} executions in ${seconds} s, ${cov:-cov: ?}, no crash"
  rm -f "$log"
done
