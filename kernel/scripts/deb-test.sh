#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# make kernel-deb-test: build (or find in the cache) the Debian packages of the
# patched kernel (build-deb.sh), put the linux-image package's kernel and its
# virtio modules into the project's guest image with the agent, and run the
# spike scenario on it (deb_spike_at_256_mib in crates/testbed/tests/kernel.rs):
# balloon to 256 MiB, 1.5 GiB spike, 0 OOM kills.
#
#   kernel/scripts/deb-test.sh AGENT
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=$(cd "$HERE/.." && pwd)
AGENT=${1:?usage: deb-test.sh AGENT}
step() { printf '[kernel-deb-test] %s\n' "$*" >&2; }

debs=$("$HERE/scripts/build-deb.sh")
pkg=$(grep -E '/linux-image-[^/]*\.deb$' <<< "$debs" | grep -v -- '-dbg_' | head -n1)
[ -n "$pkg" ] || { step "error: build-deb.sh made no linux-image package"; exit 1; }
x=$(dirname "$pkg")/extracted
if [ ! -d "$x/boot" ]; then
	step "unpacking $(basename "$pkg")"
	rm -rf "$x.tmp"
	mkdir -p "$x.tmp"
	dpkg-deb -x "$pkg" "$x.tmp"
	mv "$x.tmp" "$x"
fi
vmlinuz=$(ls "$x"/boot/vmlinuz-* | head -n1)
kver=${vmlinuz##*/vmlinuz-}
step "kernel $kver from $(basename "$pkg")"
image=$("$ROOT/guest/build-image.sh" --agent "$AGENT" --vmlinuz "$vmlinuz" \
	--modules-dir "$x/lib/modules/$kver" --print-dir)
step "guest image: $image"
cd "$ROOT"
AUTOBALLOON_DEB_IMAGE=$image cargo test --locked -p autoballoon-testbed --test kernel -- \
	--ignored --exact deb_spike_at_256_mib --nocapture
