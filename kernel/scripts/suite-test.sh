#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The kernel part of the top-level `make test`: quick, and only with what is
# already built.  Runs the KUnit suite if its build directory exists and the
# patched boot scenarios if the patched kernel is cached; otherwise says how
# to get them (make kernel kernel-kunit) and succeeds.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KCACHE=${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}/kernel
rc=0
src=$KCACHE/src-$(sed -n 's/^version: *//p' "$HERE/BASE")
if [ -d "$src/_kunit" ]; then
	"$HERE/build.sh" --kunit || rc=1
else
	echo "[kernel] KUnit not built yet: run 'make kernel-kunit' (about 15 min cold)"
fi
if [ -f "$("$HERE/build.sh" --path patched)" ]; then
	"$HERE/scripts/boot-test.sh" patched-doo patched-guest || rc=1
else
	echo "[kernel] patched kernel not built yet: run 'make kernel' (about 35 min cold)"
fi
exit $rc
