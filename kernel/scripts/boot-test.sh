#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Boot the patched and the stock kernel under QEMU (TCG, 2 GiB, no swap)
# and run the balloon scenarios.  One JSON line per run goes to
# ~/.cache/autoballoon/kernel/results/boot-<time>.jsonl, console logs next
# to it; a table is printed at the end.
#
#   boot-test.sh [SCENARIO...]     default: all of them
#
# Scenarios (MIB and THREADS from env: MIB=1536 THREADS=4):
#   patched-doo    patched, deflate-on-oom=on, QMP balloon to 256 MiB, spike
#   patched-guest  patched, deflate-on-oom=off, guest sets target_pages to
#                  256 MiB itself, spike, then target_pages=max_pages
#                  (the balloon must deflate completely)
#   patched-transp patched-guest with virtio_balloon.transparent=1
#   patched-nob    patched, no balloon (QMP balloon to 2048 MiB): reference
#   stock-doo      stock, deflate-on-oom=on, QMP balloon to 256 MiB, spike
#   stock-nodoo    stock, deflate-on-oom=off, QMP balloon to 256 MiB, spike
#                  (the baseline: expect the OOM killer)
#   debug-doo, debug-guest   patched-doo/-guest on the debug kernel (lockdep,
#                  DEBUG_ATOMIC_SLEEP, DEBUG_VM); not in the default set
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KCACHE=${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}/kernel
MIB=${MIB:-1536}
THREADS=${THREADS:-4}
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] ||
	scenarios=(patched-doo patched-guest patched-transp patched-nob stock-nodoo stock-doo)

need_patched=0 need_stock=0 need_debug=0
for s in "${scenarios[@]}"; do
	case $s in
	patched-*) need_patched=1 ;;
	stock-*) need_stock=1 ;;
	debug-*) need_debug=1 ;;
	*) echo "unknown scenario $s" >&2; exit 2 ;;
	esac
done
[ $need_patched = 0 ] || PATCHED=$("$HERE/build.sh" patched | tail -1)
[ $need_stock = 0 ] || STOCK=$("$HERE/build.sh" stock | tail -1)
[ $need_debug = 0 ] || DEBUG=$("$HERE/build.sh" debug | tail -1)
INITRD=$("$HERE/scripts/mkinitramfs.sh")

stamp=$(date +%Y%m%d-%H%M%S)
out=$KCACHE/results
mkdir -p "$out"
results=$out/boot-$stamp.jsonl
: > "$results"
for s in "${scenarios[@]}"; do
	case $s in
	patched-doo)   k=$PATCHED args=(--scenario spike --doo on --balloon-mib 256) ;;
	patched-guest) k=$PATCHED args=(--scenario guest --doo off --gtarget 65536) ;;
	patched-transp) k=$PATCHED args=(--scenario guest --doo off --gtarget 65536
			--append virtio_balloon.transparent=1) ;;
	patched-nob)   k=$PATCHED args=(--scenario spike --doo on --balloon-mib 2048) ;;
	debug-doo)     k=$DEBUG args=(--scenario spike --doo on --balloon-mib 256) ;;
	debug-guest)   k=$DEBUG args=(--scenario guest --doo off --gtarget 65536) ;;
	stock-doo)     k=$STOCK args=(--scenario spike --doo on --balloon-mib 256) ;;
	stock-nodoo)   k=$STOCK args=(--scenario spike --doo off --balloon-mib 256) ;;
	esac
	echo "[boot-test] $s ..." >&2
	nice -n 19 python3 "$HERE/scripts/qemu-test.py" --kernel "$k" --initrd "$INITRD" \
		--mem-mib 2048 --threads "$THREADS" --mib "$MIB" \
		--log "$out/boot-$stamp-$s.log" "${args[@]}" |
		python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); r["name"]=sys.argv[1]; print(json.dumps(r))' "$s" \
		>> "$results" || echo "{\"name\": \"$s\", \"error\": true}" >> "$results"
done
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("%-14s %6s %8s %8s %9s %8s %7s %s" % ("scenario", "done", "inflate", "touch_s", "oom_kills", "rc", "wall_s", "hook pages served (order 0, 9), balloon pages deflated by hook"))
for r in rows:
    hook = ""
    for h in r.get("hook", []):
        f = h.split()
        if len(f) == 5 and f[1] in ("0", "9"):
            hook += "o%s=%s " % (f[1], f[3])
        elif len(f) == 3 and f[1] == "deflated":
            hook += "deflated=%s" % f[2]
    print("%-14s %6s %8s %8s %9s %8s %7s %s" % (r.get("name"), r.get("done"), r.get("inflate_s"),
          r.get("touch_s"), r.get("oom_kills"), r.get("rc"), r.get("wall_s"), hook))
print("results: " + sys.argv[1])
# Expectations: the patched kernels survive without OOM kills (and deflate
# completely when asked to); stock without deflate-on-oom is the baseline
# that gets the OOM killer.
bad = []
for r in rows:
    n = r.get("name", "")
    if not r.get("done"):
        bad.append(n + ": did not finish")
    elif n.startswith(("patched", "debug")):
        if r.get("oom_kills") != 0 or r.get("rc") != 0 or r.get("deflated_fully") is False:
            bad.append(n + ": OOM kill, failed workload or incomplete deflation")
    elif n == "stock-doo" and r.get("oom_kills") != 0:
        bad.append(n + ": OOM kill")
for b in bad:
    print("FAIL " + b)
sys.exit(1 if bad else 0)
PY
