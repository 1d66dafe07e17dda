#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Build (or find in the cache) the patched and the stock kernel and put each
# into the project's guest image (guest/build-image.sh) with the given agent.
#
#   kernel/scripts/images.sh AGENT
#
# PATCHED_VARIANT=debug puts the debug build of the series (lockdep,
# DEBUG_VM, DEBUG_LIST; kernel/config/debug.config) in place of "patched";
# PATCHED_VARIANT=kasan the debug build with KASAN (kernel/config/kasan.config).
# stdout: two lines, the patched image directory, then the stock one.
# A cold run builds both kernels (about 10-20 min on 2 cores; progress on stderr).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=$(cd "$HERE/.." && pwd)
AGENT=${1:?usage: images.sh AGENT}
t0=$SECONDS
# Stock first: the patched build then recompiles only what the series touches.
STOCK=$("$HERE/build.sh" stock | tail -1)
PATCHED=$("$HERE/build.sh" "${PATCHED_VARIANT:-patched}" | tail -1)
printf '[kernel] kernels ready after %d s\n' $((SECONDS - t0)) >&2
"$ROOT/guest/build-image.sh" --agent "$AGENT" --vmlinuz "$PATCHED" --print-dir
"$ROOT/guest/build-image.sh" --agent "$AGENT" --vmlinuz "$STOCK" --print-dir
