#!/usr/bin/env bash
# make sim-ray-test: the Ray driver (fleet.py) on a multi-node Ray cluster on this machine: a
# head and two worker nodes (local_cluster.py: three raylets, 1 CPU each, all on 127.0.0.1).
# 8 hosts of S1 (`paper-spike`'s file, 2 VMs each, 24 h, 1040 migrations in all) in 4 shards,
# with --ship (every task runs the driver's binary and scenario file as fetched from Ray's
# object store, as on a machine without this checkout) and --round-robin (shards pinned to the
# nodes in turn). No process of the cluster may listen beyond loopback, the shards must have
# run on at least two distinct nodes, and the merged summary must equal, byte for byte, what
# the unsharded `autoballoon-sim --hosts 8 ... --json` prints. Every Ray process is stopped at
# the end, failure or not; Ray's files go to a directory of the test's own (TMPDIR), removed.
# The first run creates the venv (setup.sh); AUTOBALLOON_SIM names another binary.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
started=$(date +%s.%N)
elapsed() { printf '%.1f' "$(echo "$(date +%s.%N) - $started" | bc)"; }
py=$(bash "$here/setup.sh")
bin=${AUTOBALLOON_SIM:-${CARGO_TARGET_DIR:-$repo/target}/release/autoballoon-sim}
if [ ! -x "$bin" ]; then
    (cd "$repo" && cargo build --release --locked -p autoballoon-sim)
fi
workers=2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sim-ray-test.XXXXXX")
cluster=
# local_cluster.py's processes and theirs, all the way down (Ray's workers rename themselves
# ray::…, so their command lines need not name $tmp), each as PID:START (its start time, so
# that a PID reused later is not taken for one of them).
descendants() {
    local p
    for p in $(pgrep -P "$1" || true); do
        started_at "$p" || true
        descendants "$p"
    done
}
started_at() {
    local stat
    stat=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
    echo "$1:$(echo "$stat" | cut -d' ' -f20)"
}
# Stops the cluster: SIGTERM to local_cluster.py, which stops its nodes (10 s at most, then
# SIGKILL: each node's reaper stops it); whatever of its processes is still there 3 s later,
# or still names $tmp, is killed by its pid and the function returns 1.
stop_cluster() {
    local ray_procs="" left="" p
    if [ -n "$cluster" ]; then
        ray_procs=$(descendants "$cluster")
        kill -TERM "$cluster" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$cluster" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$cluster" 2>/dev/null || true
        wait "$cluster" 2>/dev/null || true
        cluster=
    fi
    for _ in $(seq 30); do
        left=""
        for p in $ray_procs; do
            if [ "$(started_at "${p%%:*}")" = "$p" ]; then left="$left ${p%%:*}"; fi
        done
        left="$left $(pgrep -f -- "$tmp/" | tr '\n' ' ' || true)"
        if [ -z "${left// /}" ]; then return 0; fi
        sleep 0.1
    done
    echo "sim-ray-test: Ray processes left behind, killed:" >&2
    for p in $left; do
        ps -o pid=,args= -p "$p" | cut -c1-160 >&2 || true
        kill -KILL "$p" 2>/dev/null || true
    done
    return 1
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_cluster || rc=1
    rm -rf "$tmp"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
fail() {
    echo "sim-ray-test: FAILED: $*" >&2
    exit 1
}

# The cluster starts (several seconds) while the unsharded run computes the expected summary.
TMPDIR=$tmp "$py" "$here/local_cluster.py" --workers $workers --cpus 1 \
    --address-file "$tmp/address" 2>"$tmp/cluster.log" &
cluster=$!
args=(--scenario "$repo/crates/sim/scenarios/paper-spike.toml" --policy swapfree --hosts 8
      --vms-per-host 2 --seed 5)
expected=$("$bin" "${args[@]}" --json -q)
for _ in $(seq 1200); do
    [ -s "$tmp/address" ] && break
    kill -0 "$cluster" 2>/dev/null || { cat "$tmp/cluster.log" >&2; fail "local_cluster.py exited"; }
    sleep 0.1
done
[ -s "$tmp/address" ] || { cat "$tmp/cluster.log" >&2; fail "no cluster after 120 s"; }
cat "$tmp/cluster.log" >&2

if ! TMPDIR=$tmp "$py" "$here/fleet.py" --address "$(cat "$tmp/address")" --ship --round-robin \
    --binary "$bin" "${args[@]}" --shards 4 >"$tmp/got.json" 2>"$tmp/fleet.log"; then
    cat "$tmp/fleet.log" >&2
    fail "fleet.py failed"
fi
cat "$tmp/fleet.log" >&2
# Loopback only: no socket of the cluster's processes listens beyond 127.0.0.1.
if command -v ss >/dev/null; then
    pids=$(descendants "$cluster" | cut -d: -f1 | paste -sd'|')
    beyond=$(ss -Hltnp | grep -E "pid=($pids)," | awk '{print $4}' \
        | grep -vE '^(127\.0\.0\.1|\[::ffff:127\.0\.0\.1\]):' || true)
    [ -z "$beyond" ] || fail "the cluster listens beyond loopback:" $beyond
fi
got=$(cat "$tmp/got.json")
nodes=$(sed -n 's/^fleet\.py: shards ran on \([0-9]*\) distinct Ray node.*/\1/p' "$tmp/fleet.log")
if [ "${nodes:-0}" -lt 2 ]; then
    fail "the shards ran on ${nodes:-no} distinct Ray node(s), not 2 or more of $((1 + workers))"
fi
if [ "$got" != "$expected" ]; then
    diff <(echo "$expected") <(echo "$got") >&2 || true
    fail "the Ray fleet's summary differs from the unsharded run's"
fi
stop_cluster || fail "the cluster left Ray processes behind"
sed -n '/stopped in/p' "$tmp/cluster.log" >&2
echo "$got"
echo "sim-ray-test: ok: 8 hosts in 4 Ray shards (--ship --round-robin) on $nodes distinct nodes of a" \
    "$((1 + workers))-node cluster merge into the unsharded summary ($(elapsed) s)"
