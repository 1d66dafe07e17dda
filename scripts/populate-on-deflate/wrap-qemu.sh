#!/bin/bash
# Prints the path of a QEMU wrapper that runs QEMU with populate.c preloaded (see its header:
# a measuring device for docs/spikes.md, not part of the product).
#   scripts/populate-on-deflate/wrap-qemu.sh QEMU [async|sync|off]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
QEMU=$(readlink -f "$1"); MODE=${2:-async}
DIR=${TMPDIR:-/tmp}/autoballoon-populate
mkdir -p "$DIR"
cc -O2 -Wall -shared -fPIC -o "$DIR/populate.so" "$HERE/populate.c" -ldl -lpthread
W="$DIR/qemu-$MODE"
printf '#!/bin/bash\nexport AB_POPULATE=%s\nexport LD_PRELOAD=%s${LD_PRELOAD:+:$LD_PRELOAD}\nexec %s "$@"\n' "$MODE" "$DIR/populate.so" "$QEMU" > "$W"
chmod +x "$W"
echo "$W"
