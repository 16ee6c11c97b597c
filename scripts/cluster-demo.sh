#!/usr/bin/env bash
# Cluster mode in one command (docs/cluster.md): a local etcd, and two "machines" sharing one
# export admission through it.
#
#   scripts/cluster-demo.sh
#
# 1. machine A runs an exclusive export; machine B's is refused (exit 3) until A's is done;
# 2. machine A crashes (every process of it is killed) in the middle of an export; B is refused
#    while etcd still holds A's presence, and takes over once its TTL (3 s here) has passed.
#
# As root, each machine is a PID and mount namespace with its own boot id (bind-mounted over
# /proc/sys/kernel/random/boot_id), so neither can see the other's processes — as two hosts.
# Otherwise both run on this machine (the same rules; only A's local proof differs).
#
# Needs etcd (installed with apt-get when missing and run as root), builds `proclease` in
# release mode unless PROCLEASE names a binary.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n== %s\n' "$*"; }

if ! command -v etcd >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing etcd-server (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
  else
    echo "cluster-demo: needs etcd: apt-get install etcd-server" >&2
    exit 1
  fi
fi
if [ -z "${PROCLEASE:-}" ]; then
  say "building proclease"
  cargo build --release --locked -p proclease
  PROCLEASE="$PWD/target/release/proclease"
fi

work="$(mktemp -d)"
etcd_pid=""
cleanup() {
  exec 2>/dev/null
  jobs -p | xargs -r kill -9 2>/dev/null || true
  [ -n "$etcd_pid" ] && kill -9 "$etcd_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
client_port="$(free_port)"
peer_port="$(free_port)"
say "starting etcd on 127.0.0.1:$client_port (data in $work/etcd)"
etcd --name demo --data-dir "$work/etcd" --log-level error \
  --listen-client-urls "http://127.0.0.1:$client_port" --advertise-client-urls "http://127.0.0.1:$client_port" \
  --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-cluster "demo=http://127.0.0.1:$peer_port" >"$work/etcd.log" 2>&1 &
etcd_pid=$!
store="etcd://127.0.0.1:$client_port/demo"

namespaces=no
if [ "$(id -u)" = 0 ] && unshare --pid --mount --fork --mount-proc true 2>/dev/null; then
  namespaces=yes
fi

# on MACHINE CMD…: runs CMD on machine MACHINE (a or b), with its own state home and workspace.
# A subshell that records its pid in <machine>/machine.pid and execs the machine, so that
# killing that pid kills every process of the machine.
on() (
  local machine="$1"; shift
  local root="$work/$machine"
  mkdir -p -m 700 "$root"
  [ -f "$root/boot_id" ] || python3 -c 'import uuid; print(uuid.uuid4())' >"$root/boot_id"
  local proclease=("$PROCLEASE" --state-home "$root/state" --workspace-root "$root" --store "$store" --cluster-ttl 3s)
  echo "$BASHPID" >"$root/machine.pid"
  if [ "$namespaces" = yes ]; then
    exec unshare --pid --mount --fork --mount-proc --kill-child \
      sh -c 'mount --bind "$0" /proc/sys/kernel/random/boot_id && "$@"' "$root/boot_id" "${proclease[@]}" "$@"
  else
    exec "${proclease[@]}" "$@"
  fi
)

for _ in $(seq 100); do
  if on a doctor >/dev/null 2>&1; then break; fi
  sleep 0.1
done
echo "two machines (own PID namespace and boot id each: $namespaces) share $store"

# until_started FILE: waits (at most 20 s) until a command has created FILE.
until_started() {
  for _ in $(seq 200); do [ -e "$1" ] && return 0; sleep 0.1; done
  echo "cluster-demo: the command never started" >&2; exit 1
}

say "1. machine A exports; machine B's export waits its turn"
echo "(the first process on a new prefix waits one TTL: etcd holds no state of it yet, as after a wipe)"
on a run --exclusive --workdir "$work/a/export-1" -- sh -c 'echo "machine A: exporting"; touch "$0"; sleep 3; echo "machine A: done"' "$work/a-started-1" &
a=$!
until_started "$work/a-started-1"
echo "machine B's view (doctor):"
on b doctor
set +e
on b run --exclusive --workdir "$work/b/export-1" -- true
status=$?
set -e
echo "machine B: refused while A exports (exit $status)"
wait "$a"
on b run --exclusive --workdir "$work/b/export-2" -- sh -c 'echo "machine B: exporting"'

say "2. machine A crashes during an export; B takes over once etcd expired A's presence"
# Started outside this shell's job table (no "Killed" report); machine.pid says which it is.
(on a run --exclusive --workdir "$work/a/export-2" -- sh -c 'touch "$0"; exec sleep 1000' "$work/a-started-2" 2>/dev/null &)
until_started "$work/a-started-2"
kill -9 "$(cat "$work/a/machine.pid")"
echo "machine A crashed (SIGKILL, every process of it)"
crashed=$(date +%s.%N)
attempt=0
while :; do
  if [ "$attempt" -ge 120 ]; then echo "cluster-demo: machine B never took over" >&2; exit 1; fi
  attempt=$((attempt + 1))
  set +e
  on b run --exclusive --workdir "$work/b/takeover-$attempt" -- sh -c 'echo "machine B: took over the admission"' 2>/dev/null
  status=$?
  set -e
  [ "$status" = 0 ] && break
  if [ "$status" != 3 ]; then echo "cluster-demo: unexpected exit $status" >&2; exit 1; fi
  sleep 0.5
done
python3 -c "import sys; print(f'after {float(sys.argv[1]) - float(sys.argv[2]):.1f} s and {int(sys.argv[3]) - 1} refusals (TTL 3 s)')" "$(date +%s.%N)" "$crashed" "$attempt"
say "done"
