#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Build the minimal kernel-test initramfs (busybox-static + touchmem + init)
# into ~/.cache/autoballoon/kernel/initramfs-<hash>.cpio.gz; print its path.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KCACHE=${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}/kernel
BUSYBOX=/bin/busybox
if ! file -L "$BUSYBOX" 2>/dev/null | grep -q "statically linked"; then
	dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "ok installed" ||
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null
fi
key=$(cat "$HERE/init" "$HERE/touchmem.c" "$BUSYBOX" | sha256sum | cut -c1-12)
out=$KCACHE/initramfs-$key.cpio.gz
if [ -f "$out" ]; then
	echo "$out"
	exit 0
fi
mkdir -p "$KCACHE"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"/{bin,dev,proc,sys,tmp}
cp "$BUSYBOX" "$tmp/bin/busybox"
cp "$HERE/init" "$tmp/init"
chmod 755 "$tmp/init"
gcc -O2 -static -pthread -o "$tmp/bin/touchmem" "$HERE/touchmem.c"
(cd "$tmp" && find . | cpio -o -H newc --quiet | gzip -9) > "$out.tmp"
mv "$out.tmp" "$out"
echo "$out"
