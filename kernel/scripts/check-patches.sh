#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Run scripts/checkpatch.pl --strict on every patch in kernel/patches/.
# Exit status is non-zero if any patch has errors, warnings or checks.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC=$("$HERE/build.sh" --tree)
# checkpatch's SPDX check needs these.
"$HERE/../scripts/install-deps.sh" --only python3-ply python3-git >&2
# spdxcheck.py runs "python3": use the system one, which has ply and git.
export PATH=/usr/bin:$PATH
rc=0
for p in "$HERE"/patches/*.patch; do
	if out=$(cd "$SRC" && ./scripts/checkpatch.pl --strict -q "$p" 2>&1) && [ -z "$out" ]; then
		echo "ok   $(basename "$p")"
	else
		echo "FAIL $(basename "$p")"
		echo "$out" | sed 's/^/     /'
		rc=1
	fi
done
exit $rc
