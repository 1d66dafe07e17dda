#!/usr/bin/env bash
# Warns (never fails) when the file systems `make test` writes to have less free space than a
# cold run needs: the build (target/, about 7 GiB), the kernel and QEMU caches
# (~/.cache/autoballoon, about 7 GiB) and the test guests' disks and logs (target/tmp, about
# 2 GiB). A full disk shows up much later and far from its cause: QEMU stops a guest whose
# disk write fails, and a test waits out its timeout.
# Usage: scripts/check-free-space.sh [NEED_GIB] (default 20)
set -euo pipefail
need_gib=${1:-20}
cache="${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$cache"
seen=
for dir in "$here" "$cache"; do
	# One warning per file system: the repository and the cache are often on the same.
	dev=$(stat -c %d "$dir")
	case " $seen " in *" $dev "*) continue ;; esac
	seen="$seen $dev"
	free_kib=$(df -Pk "$dir" | awk 'NR == 2 { print $4 }')
	if [ "$free_kib" -lt $((need_gib * 1024 * 1024)) ]; then
		echo "warning: $((free_kib / 1024 / 1024)) GiB free on the file system of $dir; a cold make test needs about $need_gib GiB (a full disk stops the test guests, and their tests time out)" >&2
	fi
done
