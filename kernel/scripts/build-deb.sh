#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Debian packages (linux-image, linux-headers) of the patched kernel for real
# guests, built with one of Debian's own configs (package linux-config-6.12)
# plus the options the series needs, via `make bindeb-pkg`.
#
#   build-deb.sh [--config-only]   --config-only: stop after making the .config
#
# FLAVOUR=cloud-amd64 (default; Debian's kernel for KVM/Xen/cloud guests,
# about 1,100 modules, 1-2 h on two cores) or FLAVOUR=amd64 (the generic
# kernel, about 4,000 modules, several hours).  The build runs in its own
# git worktree (~/.cache/autoballoon/kernel/deb-tree), so the guest kernel
# builds of `make kernel`/`make test` are not blocked while it runs.
# Output: ~/.cache/autoballoon/kernel/deb-<flavour>-<hash>/*.deb (a cache hit
# prints them at once).  Progress: a line a minute on stderr.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KCACHE=${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}/kernel
export CCACHE_DIR=${CCACHE_DIR:-$KCACHE/../ccache} CCACHE_BASEDIR=$KCACHE
JOBS=${JOBS:-2}
FLAVOUR=${FLAVOUR:-cloud-amd64}
BASE_VERSION=$(sed -n 's/^version: *//p' "$HERE/BASE")
step() { printf '[kernel-deb] %s\n' "$*" >&2; }
die() { printf '[kernel-deb] error: %s\n' "$*" >&2; exit 1; }

CONFIG_XZ=/usr/src/linux-config-6.12/config.amd64_none_$FLAVOUR.xz
# bindeb-pkg checks the build dependencies of its debian/control.
"$HERE/../scripts/install-deps.sh" --only linux-config-6.12 debhelper dpkg-dev >&2
[ -f "$CONFIG_XZ" ] || die "no Debian config for FLAVOUR=$FLAVOUR ($CONFIG_XZ); try cloud-amd64 or amd64"
SRC=$("$HERE/build.sh" --tree)
key=$({ cat "$HERE"/patches/*.patch; cat "$HERE/BASE"; echo "deb2 $FLAVOUR"; } | sha256sum | cut -c1-16)
out=$KCACHE/deb-$FLAVOUR-$key
if ls "$out"/linux-image-*.deb >/dev/null 2>&1; then
	step "cache hit: $out"
	ls "$out"/*.deb
	exit 0
fi

# Only one deb build at a time; the shared source repository is locked just
# while the worktree is set up (build.sh takes the same lock).
exec 8>"$KCACHE/.deb.lock"
flock -n 8 || die "another kernel-deb build is running (lock $KCACHE/.deb.lock)"
TREE=$KCACHE/deb-tree
(
	exec 9>"$KCACHE/.build.lock"
	flock 9
	cd "$SRC"
	if [ ! -e "$TREE/.git" ]; then
		git worktree prune
		git worktree add -q --detach "$TREE" base
	fi
	cd "$TREE"
	git am --abort >/dev/null 2>&1 || true
	step "applying the series ($(ls "$HERE"/patches/*.patch | wc -l) patches) in $TREE"
	git checkout -q -f -B autoballoon-deb base
	git am -q --whitespace=nowarn "$HERE"/patches/*.patch
)
cd "$TREE"
B=_build-deb-$FLAVOUR
mkdir -p "$B"
xzcat "$CONFIG_XZ" > "$B/.config"
# Debian builds the balloon as a module; the hook and the store are built in
# (VIRTIO_BALLOON selects BALLOON_STORE).  No signing keys here, so modules
# are not signed.  Debian's debug info stays on (bindeb-pkg also makes a
# linux-image-*-dbg package, about 300 MB); BTF is off (needs pahole).
./scripts/config --file "$B/.config" -m VIRTIO_BALLOON -e DEBUG_FS \
	-d MODULE_SIG_ALL -d MODULE_SIG --set-str SYSTEM_TRUSTED_KEYS "" \
	--set-str SYSTEM_REVOCATION_KEYS "" --set-str LOCALVERSION "-autoballoon" \
	-d DEBUG_INFO_BTF
make -s O="$B" olddefconfig
for opt in BALLOON_STORE VIRTIO_BALLOON; do
	grep -qE "^CONFIG_$opt=[ym]" "$B/.config" || die "CONFIG_$opt missing from $TREE/$B/.config"
done
if [ "${1:-}" = --config-only ]; then
	step "config ok: $TREE/$B/.config"
	exit 0
fi
total=$(grep -cE '=(y|m)$' "$B/.config")
step "make bindeb-pkg ($FLAVOUR, -j$JOBS, nice 19); log: $TREE/$B/deb.log"
t0=$SECONDS
: > "$B/deb.log"
touch "$B/.deb-start"
(
	while sleep 60; do
		step "building $FLAVOUR: $(grep -c '^  CC ' "$B/deb.log" || true) objects compiled" \
			"($total options on), $((SECONDS - t0)) s; now: $(tail -n1 "$B/deb.log" | cut -c1-70)"
	done
) &
ticker=$!
trap 'kill $ticker 2>/dev/null || true' EXIT
rc=0
KBUILD_BUILD_USER=autoballoon KBUILD_BUILD_HOST=autoballoon \
	nice -n 19 make O="$B" -j"$JOBS" CC="ccache gcc" \
	KDEB_PKGVERSION="$BASE_VERSION+autoballoon1" bindeb-pkg > "$B/deb.log" 2>&1 || rc=$?
kill $ticker 2>/dev/null || true
if [ $rc -ne 0 ]; then
	tail -30 "$B/deb.log" >&2
	die "bindeb-pkg failed after $((SECONDS - t0)) s (full log: $TREE/$B/deb.log)"
fi
mkdir -p "$out.tmp"
# bindeb-pkg leaves the packages in the parent of the build directory.
find "$TREE" -maxdepth 1 -name '*.deb' -newer "$B/.deb-start" -exec mv {} "$out.tmp"/ \;
ls "$out.tmp"/linux-image-*.deb >/dev/null 2>&1 || die "bindeb-pkg made no linux-image package"
echo "$((SECONDS - t0))" > "$out.tmp/build-seconds"
rm -rf "$out"
mv "$out.tmp" "$out"
step "built in $((SECONDS - t0)) s: $out"
ls "$out"/*.deb
