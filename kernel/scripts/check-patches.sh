#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Check every patch in kernel/patches/ and kernel/upstream/ (or $PATCHES):
#  * identity: each patch's From: and every Signed-off-by: are the
#    repository's git author (git config user.name/user.email of this
#    checkout, else the author of its last commit; AUTOBALLOON_KERNEL_IDENTITY
#    overrides), and so is every maintainer a patch adds to MAINTAINERS,
#    and no address is a placeholder (*.local, localhost, ...);
#  * ABI: every KernelVersion: a patch adds under Documentation/ABI/ is a
#    mainline release (X.Y) newer than the base's (kernel/BASE, upstream:),
#    since a new interface cannot appear in the release the series is
#    based on, and every Date: is "Month YYYY", no later than the patch;
#  * Fixes: tags name a commit by 12 or more hex digits and its subject in
#    ("..."); the base is a Debian tarball without upstream history, so
#    checkpatch cannot look the commit up (its UNKNOWN_COMMIT_ID is left out);
#  * scripts/checkpatch.pl --strict (skipped with --no-checkpatch).
# Exit status is non-zero if any patch fails any of these.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -n "${PATCHES:-}" ]; then
	files=("$PATCHES"/*.patch)
else
	# The series, then the fixes sent on their own (README.md).
	files=("$HERE"/patches/*.patch "$HERE"/upstream/*.patch)
fi
checkpatch=1
[ "${1:-}" != --no-checkpatch ] || checkpatch=0

identity=${AUTOBALLOON_KERNEL_IDENTITY:-}
if [ -z "$identity" ]; then
	name=$(git -C "$HERE" config user.name || true)
	email=$(git -C "$HERE" config user.email || true)
	if [ -n "$name" ] && [ -n "$email" ]; then
		identity="$name <$email>"
	else
		identity=$(git -C "$HERE" log -1 --format='%an <%ae>')
	fi
fi
base=$(sed -n 's/^upstream: *\([0-9]*\.[0-9]*\).*/\1/p' "$HERE/BASE")
[ -n "$base" ] || { echo "no upstream: X.Y in $HERE/BASE" >&2; exit 2; }
echo "identity: $identity; base: $base"

placeholder() { # an address no one reads
	grep -qiE '@([^>]*\.)?(local|localdomain|localhost|invalid|test)>$|@localhost>$|<>$' <<< "$1"
}

# Identity and ABI problems of patch $1, one a line.
meta_problems() {
	local p=$1 from date pdate sob v d ok=0
	from=$(header From "$p")
	[ "$from" = "$identity" ] || echo "From: $from is not the repository's git author ($identity)"
	! placeholder "$from" || echo "From: $from is a placeholder address"
	while IFS= read -r sob; do
		ok=1
		[ "$sob" = "$identity" ] || echo "Signed-off-by: $sob is not the repository's git author ($identity)"
		! placeholder "$sob" || echo "Signed-off-by: $sob is a placeholder address"
	done < <(sed -n '/^---$/q; s/^Signed-off-by: //p' "$p")
	[ $ok = 1 ] || echo "no Signed-off-by:"
	sed -n '/^---$/q; /^Fixes:/p' "$p" | grep -vE '^Fixes: [0-9a-f]{12,40} \(".+"\)$' |
		sed 's/^/not of the form Fixes: <12+ hex digits> ("subject"): /' || true
	# A maintainer a patch adds to MAINTAINERS is the same identity.
	while IFS= read -r m; do
		[ "$m" = "$identity" ] || echo "MAINTAINERS M: $m is not the repository's git author ($identity)"
		! placeholder "$m" || echo "MAINTAINERS M: $m is a placeholder address"
	done < <(maintainers_added "$p")
	date=$(header Date "$p")
	pdate=$(date -u -d "$date" +%Y%m)
	# Added lines of files under Documentation/ABI/ only.
	while IFS= read -r v; do
		if ! [[ $v =~ ^[0-9]+\.[0-9]+$ ]]; then
			echo "ABI KernelVersion: $v is not a mainline release (X.Y)"
		elif [ "$v" = "$base" ] ||
		     [ "$(printf '%s\n%s\n' "$v" "$base" | sort -V | tail -1)" = "$base" ]; then
			echo "ABI KernelVersion: $v is not newer than the base ($base): the interface is new"
		fi
	done < <(abi_field KernelVersion "$p")
	while IFS= read -r d; do
		if ! [[ $d =~ ^(January|February|March|April|May|June|July|August|September|October|November|December)\ [0-9]{4}$ ]]; then
			echo "ABI Date: $d is not \"Month YYYY\""
		elif [ "$(date -u -d "1 $d" +%Y%m)" -gt "$pdate" ]; then
			echo "ABI Date: $d is later than the patch ($date)"
		fi
	done < <(abi_field Date "$p")
}

# Mail header $1 of patch $2, unfolded (git format-patch folds a long From:).
header() {
	awk -v h="$1" '
		/^$/ { exit }
		/^[ \t]/ { if (cur == h) val = val " " substr($0, match($0, /[^ \t]/)); next }
		{ cur = substr($0, 1, index($0, ":") - 1); if (cur == h) val = substr($0, length(h) + 3) }
		END { print val }' "$2"
}

# Maintainers (M: lines) patch $1 adds to MAINTAINERS.
maintainers_added() {
	awk '
		/^diff --git / { m = ($3 == "a/MAINTAINERS") }
		m && /^\+M:/ { v = substr($0, 4); gsub(/^[ \t]+|[ \t]+$/, "", v); print v }' "$1"
}

# Values of field $1 on lines patch $2 adds to Documentation/ABI/.
abi_field() {
	awk -v f="$1" '
		/^diff --git / { abi = ($3 ~ /^a\/Documentation\/ABI\//) }
		abi && index($0, "+" f ":") == 1 {
			v = substr($0, length(f) + 3); gsub(/^[ \t]+|[ \t]+$/, "", v); print v
		}' "$2"
}

if [ $checkpatch = 1 ]; then
	SRC=$("$HERE/build.sh" --tree)
	# checkpatch's SPDX check needs these.
	"$HERE/../scripts/install-deps.sh" --only python3-ply python3-git >&2
	# spdxcheck.py runs "python3": use the system one, which has ply and git.
	export PATH=/usr/bin:$PATH
fi
rc=0
for p in "${files[@]}"; do
	out=$(meta_problems "$p")
	if [ $checkpatch = 1 ]; then
		cp_out=$(cd "$SRC" && ./scripts/checkpatch.pl --strict -q --ignore UNKNOWN_COMMIT_ID "$p" 2>&1) ||
			[ -n "$cp_out" ] || cp_out="checkpatch.pl failed"
		out=$(printf '%s\n%s' "$out" "$cp_out" | sed '/^$/d')
	fi
	if [ -z "$out" ]; then
		echo "ok   $(basename "$p")"
	else
		echo "FAIL $(basename "$p")"
		echo "$out" | sed 's/^/     /'
		rc=1
	fi
done
exit $rc
