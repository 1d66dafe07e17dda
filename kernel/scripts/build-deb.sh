#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Debian packages (linux-image, linux-headers) of the patched kernel, built
# with Debian's own config (linux-config-6.12, amd64 "none" flavour) plus
# the options the series needs, via `make bindeb-pkg`.  Slow (a full
# distribution kernel: an hour or more on two busy cores).  Output:
# ~/.cache/autoballoon/kernel/deb-<hash>/*.deb
#
#   build-deb.sh [--config-only]   --config-only: stop after making the .config
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KCACHE=${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}/kernel
export CCACHE_DIR=${CCACHE_DIR:-$KCACHE/../ccache} CCACHE_BASEDIR=$KCACHE
JOBS=${JOBS:-2}
dpkg-query -W -f='${Status}' linux-config-6.12 2>/dev/null | grep -q "ok installed" ||
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-config-6.12 debhelper >/dev/null
SRC=$("$HERE/build.sh" --tree)
key=$({ cat "$HERE"/patches/*.patch; cat "$HERE/BASE"; echo deb1; } | sha256sum | cut -c1-16)
out=$KCACHE/deb-$key
if ls "$out"/linux-image-*.deb >/dev/null 2>&1; then
	echo "[kernel-deb] cache hit: $out"
	ls "$out"/*.deb
	exit 0
fi
exec 9>"$KCACHE/.build.lock"
flock 9
cd "$SRC"
echo "[kernel-deb] applying the series" >&2
git checkout -q -f -B autoballoon-deb base
git am -q "$HERE"/patches/*.patch
rm -f .git/autoballoon-series
B=_build-deb
mkdir -p $B
xzcat /usr/src/linux-config-6.12/config.amd64_none_amd64.xz > $B/.config
# Options the series relies on; Debian builds the balloon as a module,
# the hook and the store are built in (BALLOON_STORE is selected).
./scripts/config --file $B/.config -m VIRTIO_BALLOON -e DEBUG_FS \
	-d MODULE_SIG_ALL -d MODULE_SIG --set-str SYSTEM_TRUSTED_KEYS "" \
	--set-str SYSTEM_REVOCATION_KEYS "" --set-str LOCALVERSION "-autoballoon" \
	-d DEBUG_INFO_BTF
make -s O=$B olddefconfig
for opt in BALLOON_STORE VIRTIO_BALLOON; do
	grep -E "^CONFIG_$opt=[ym]" $B/.config >&2 || { echo "[kernel-deb] CONFIG_$opt missing" >&2; exit 1; }
done
if [ "${1:-}" = --config-only ]; then
	echo "[kernel-deb] config ok: $SRC/$B/.config" >&2
	exit 0
fi
echo "[kernel-deb] make bindeb-pkg (log: $SRC/$B/deb.log)" >&2
t0=$SECONDS
touch $B/.deb-start
nice -n 19 make O=$B -j"$JOBS" CC="ccache gcc" KDEB_PKGVERSION="$(sed -n 's/^version: *//p' "$HERE/BASE")+autoballoon1" \
	bindeb-pkg > $B/deb.log 2>&1 || { tail -30 $B/deb.log; exit 1; }
mkdir -p "$out"
# bindeb-pkg leaves the packages next to the source or the build tree.
find "$SRC" "$SRC/.." -maxdepth 1 -name '*.deb' -newer $B/.deb-start -exec mv {} "$out"/ \;
echo "[kernel-deb] built in $((SECONDS - t0)) s: $out" >&2
ls "$out"/*.deb
