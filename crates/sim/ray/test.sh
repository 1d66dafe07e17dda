#!/usr/bin/env bash
# make sim-ray-test: the Ray driver (fleet.py) on a local Ray cluster: 8 hosts of S1
# (`paper-spike`, 2 VMs each, 24 h, 1040 migrations in all) in 4 shards. Its merged summary
# must equal, byte for byte, what the unsharded `autoballoon-sim --hosts 8 ... --json` prints.
# The first run creates the venv (setup.sh); AUTOBALLOON_SIM names another binary.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
started=$(date +%s.%N)
py=$(bash "$here/setup.sh")
bin=${AUTOBALLOON_SIM:-${CARGO_TARGET_DIR:-$repo/target}/release/autoballoon-sim}
if [ ! -x "$bin" ]; then
    (cd "$repo" && cargo build --release --locked -p autoballoon-sim)
fi
args=(--scenario paper-spike --policy swapfree --hosts 8 --vms-per-host 2 --seed 5)
expected=$("$bin" "${args[@]}" --json -q)
got=$("$py" "$here/fleet.py" --binary "$bin" "${args[@]}" --shards 4)
if [ "$got" != "$expected" ]; then
    echo "sim-ray-test: FAILED: the Ray fleet's summary differs from the unsharded run's" >&2
    diff <(echo "$expected") <(echo "$got") >&2 || true
    exit 1
fi
echo "$got"
printf 'sim-ray-test: ok: 8 hosts in 4 Ray shards merge into the unsharded summary (%.1f s)\n' \
    "$(echo "$(date +%s.%N) - $started" | bc)"
