#!/usr/bin/env bash
# The benchmark's tools disk: a raw disk image that holds a cpio archive (newc) of Debian's
# memcached and mbw with every shared library they need and the dynamic loader, plus mcload
# (guest/workloads/mcload.c, static: a memcached load generator over a unix socket). A guest
# given it as its disk (`VmSpec.disk`) unpacks it with
#   insmod /lib/modules/autoballoon/extra/virtio_blk.ko; cd / && cpio -id < /dev/vda
# so the guest image itself stays as it is. The packages are fetched with `apt-get download`
# (never installed on the host) and unpacked with `dpkg-deb -x`.
#
# Cached in ${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}/bench-tools/<hash>/tools.raw, keyed
# by the package versions, mcload.c and this script. stdout: only the disk's path; progress
# on stderr.
# Usage: scripts/bench-tools-disk.sh
set -euo pipefail

CACHE="${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MCLOAD_C="$HERE/../guest/workloads/mcload.c"
PKGS=(memcached mbw libevent-2.1-7)
say() { echo "bench-tools-disk: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

versions="$(for p in "${PKGS[@]}"; do echo "$p=$(apt-cache policy "$p" | sed -n 's/^ *Candidate: //p')"; done)"
grep -q '=$\|=(none)' <<< "$versions" && die "apt knows no candidate for some of ${PKGS[*]}: $versions (apt-get update?)"
key="$( { echo "$versions"; cat "$MCLOAD_C" "$0"; } | sha256sum | cut -c1-16)"
out="$CACHE/bench-tools/$key"
if [ -f "$out/tools.raw" ]; then
    echo "$out/tools.raw"
    exit 0
fi
say "building the tools disk ($(tr '\n' ' ' <<< "$versions"))"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# As root, apt's download sandbox user cannot write to the temporary directory: download as
# ourselves (as scripts/install-qemu10.sh does).
(cd "$work" && apt-get -o "APT::Sandbox::User=$(id -un)" download -qq $versions) || die "apt-get download failed"
mkdir -p "$work/pkg" "$work/root/usr/bin"
for d in "$work"/*.deb; do dpkg-deb -x "$d" "$work/pkg"; done
cp "$work/pkg/usr/bin/memcached" "$work/pkg/usr/bin/mbw" "$work/root/usr/bin/"
gcc -O2 -Wall -static -pthread -o "$work/root/usr/bin/mcload" "$MCLOAD_C" 2>/dev/null || die "cannot build mcload"
# Shared libraries: the packages' own first, then the host's; and the loader.
export LD_LIBRARY_PATH="$work/pkg/usr/lib/x86_64-linux-gnu"
for b in memcached mbw; do
    ldd "$work/root/usr/bin/$b" | grep -q 'not found' && die "$b: $(ldd "$work/root/usr/bin/$b" | grep 'not found' | tr '\n' ' ')"
    ldd "$work/root/usr/bin/$b" | grep -oE '/[^ ]+' | while read -r lib; do
        dest="$lib"
        case "$lib" in "$work/pkg"/*) dest="${lib#"$work/pkg"}" ;; esac
        mkdir -p "$work/root$(dirname "$dest")"
        cp -L "$lib" "$work/root$dest"
    done
done
# The guest's /lib is the initramfs's: the libraries go where the loader looks by default.
(cd "$work/root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --owner=0:0 --quiet) > "$work/tools.cpio"
size=$(stat -c %s "$work/tools.cpio")
truncate -s $(( (size + 1048575) / 1048576 * 1048576 )) "$work/tools.cpio"
mkdir -p "$out"
mv "$work/tools.cpio" "$out/tools.raw"
say "done: $out/tools.raw ($(( size / 1024 )) KiB of files)"
echo "$out/tools.raw"
