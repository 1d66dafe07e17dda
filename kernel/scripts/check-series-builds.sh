#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Check that every prefix of the series builds: for k = 1..N, apply the
# first k patches to the base and build bzImage (tinyconfig + guest.config,
# which includes CONFIG_VIRTIO_BALLOON=y and CONFIG_XEN_BALLOON=y); no
# compiler warnings allowed.  Uses the shared tree and build dir.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KCACHE=${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}/kernel
export CCACHE_DIR=${CCACHE_DIR:-$KCACHE/../ccache} CCACHE_BASEDIR=$KCACHE
"$HERE/build.sh" stock >/dev/null   # makes sure tree and build dir exist
SRC=$("$HERE/build.sh" --tree)
exec 9>"$KCACHE/.build.lock"
flock 9
cd "$SRC"
rm -f .git/autoballoon-series
mapfile -t patches < <(ls "$HERE"/patches/*.patch)
rc=0
for k in $(seq 1 ${#patches[@]}); do
	git checkout -q -f -B autoballoon-check base
	git am -q "${patches[@]:0:$k}"
	t0=$SECONDS
	if nice -n 19 make -s O=_build olddefconfig >/dev/null &&
	   nice -n 19 make -s O=_build -j"${JOBS:-2}" CC="ccache gcc" bzImage > _build/check.log 2>&1 &&
	   ! grep -qE "warning:|error:" _build/check.log; then
		echo "ok   $k $(git log --format=%s -1) ($((SECONDS - t0)) s)"
	else
		echo "FAIL $k $(git log --format=%s -1)"
		grep -E "warning:|error:" _build/check.log | head -20
		rc=1
	fi
done
git checkout -q -f --detach base
exit $rc
