#!/bin/bash
# Build and run host-refault.c (see its header): how fast this host faults memory
# back after a whole discard against 4 KiB discards.
#   scripts/host-refault/run.sh [SIZE_MIB [ROUNDS [GAP_S]]]   (1200 2 5)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BIN=${TMPDIR:-/tmp}/autoballoon-host-refault
cc -O2 -Wall -o "$BIN" "$HERE/host-refault.c"
echo "[host-refault] transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
exec "$BIN" "${1:-1200}" "${2:-2}" "${3:-5}"
