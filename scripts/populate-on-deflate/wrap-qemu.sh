#!/bin/bash
# Prints the path of a QEMU wrapper that runs QEMU with populate.c preloaded (see its header:
# a measuring device for docs/spikes.md, not part of the product).
#   scripts/populate-on-deflate/wrap-qemu.sh QEMU [async|sync|off|skip]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage() { sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit "$1"; }
case "${1:-}" in -h|--help) usage 0 ;; "") usage 2 ;; esac
QEMU=$(readlink -f "$1"); MODE=${2:-async}
case "$MODE" in async|sync|off|skip) ;; *) echo "wrap-qemu: unknown mode $MODE (async, sync, off or skip)" >&2; exit 2 ;; esac
[ -x "$QEMU" ] || { echo "wrap-qemu: $1 is not an executable" >&2; exit 2; }
# One directory per QEMU wrapped (the wrapper's file name, qemu-MODE, labels the rows).
DIR=${TMPDIR:-/tmp}/autoballoon-populate/$(echo "$QEMU" | sha256sum | cut -c1-8)
mkdir -p "$DIR"
cc -O2 -Wall -shared -fPIC -o "$DIR/populate.so" "$HERE/populate.c" -ldl -lpthread
W="$DIR/qemu-$MODE"
printf '#!/bin/bash\nexport AB_POPULATE=%s\nexport LD_PRELOAD=%s${LD_PRELOAD:+:$LD_PRELOAD}\nexec %s "$@"\n' "$MODE" "$DIR/populate.so" "$QEMU" > "$W"
chmod +x "$W"
echo "$W"
