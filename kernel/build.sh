#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Build the autoballoon guest kernel (bzImage) from Debian's linux-source-6.12.
#
#   kernel/build.sh [patched|stock|debug|kasan|vmem|patched-vmem]
#                                     build (or fetch from cache) one variant
#   kernel/build.sh --path VARIANT    print where that variant's bzImage is/will be
#   kernel/build.sh --tree            prepare the source tree only, print its path
#   kernel/build.sh --kunit [ARGS]    run the KUnit suites of kernel/.kunitconfig
#                                     on the patched tree (UML; ARGS go to kunit.py,
#                                     e.g. --arch=x86_64)
#
# Variants: "patched" = base + kernel/patches/*.patch, "stock" = base only.
# Both use tinyconfig + kernel/config/guest.config.  "debug" = patched plus
# kernel/config/debug.config (lockdep, DEBUG_ATOMIC_SLEEP, DEBUG_VM), built
# in its own directory (_build-debug) so it does not disturb the others;
# "kasan" = debug plus kernel/config/kasan.config (generic KASAN), in _build-kasan;
# "vmem" = stock plus kernel/config/virtio-mem.config (the virtio-mem driver, for
# measuring the series against it), in _build-vmem; "patched-vmem" = patched plus
# the same fragment (the series' balloon beside virtio-mem), in _build-patched-vmem.
#
# Layout (nothing of this goes into the repository):
#   ~/.cache/autoballoon/kernel/src-<version>/         git repo, tag "base" = pristine
#   ~/.cache/autoballoon/kernel/src-<version>/_build/  out-of-tree build dir (O=)
#   ~/.cache/autoballoon/kernel/<variant>-<hash>/      cached bzImage + .config
#   ~/.cache/autoballoon/ccache/                       ccache
# The cache key <hash> covers base version, recipe, config fragment and
# (for "patched") the patch series, so a cache hit is instant.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE_ROOT=${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}
KCACHE=$CACHE_ROOT/kernel
export CCACHE_DIR=${CCACHE_DIR:-$CACHE_ROOT/ccache}
# Paths below this are hashed relative to the build dir, so trees that
# live side by side (and build in a subdirectory) share cache entries.
export CCACHE_BASEDIR=$KCACHE
JOBS=${JOBS:-2}
# Bump when the way a kernel is built changes (invalidates cached images).
RECIPE=1
FRAGMENT=$HERE/config/guest.config
BASE_VERSION=$(sed -n 's/^version: *//p' "$HERE/BASE")
SRC=$KCACHE/src-$BASE_VERSION
BUILD=$SRC/_build

step() { printf '[kernel] %s\n' "$*" >&2; }
die() { printf '[kernel] error: %s\n' "$*" >&2; exit 1; }

# The config fragments a variant adds to guest.config, one path a line.
variant_fragments() {
	case $1 in
	debug) echo "$HERE/config/debug.config" ;;
	kasan) printf '%s\n' "$HERE/config/debug.config" "$HERE/config/kasan.config" ;;
	vmem|patched-vmem) echo "$HERE/config/virtio-mem.config" ;;
	esac
}

# The source a variant builds: "stock" (the pinned base) or "patched" (base + series).
variant_source() {
	case $1 in
	stock|vmem) echo stock ;;
	*) echo patched ;;
	esac
}

cache_key() {
	local variant=$1 f
	{
		echo "recipe=$RECIPE base=$BASE_VERSION variant=$variant"
		cat "$FRAGMENT"
		for f in $(variant_fragments "$variant"); do cat "$f"; done
		if [ "$(variant_source "$variant")" = patched ]; then
			for p in "$HERE"/patches/*.patch; do
				[ -e "$p" ] && cat "$p"
			done
		fi
	} | sha256sum | cut -c1-16
}

out_dir() { echo "$KCACHE/$1-$(cache_key "$1")"; }

ensure_deps() {
	"$HERE/../scripts/install-deps.sh" --only bc bison flex libelf-dev libssl-dev \
		dwarves ccache cpio python3 rsync kmod xz-utils gcc make git >&2
	# The base is pinned: install exactly that version (the archive keeps
	# older security releases), whatever is newest today.
	local have
	have=$(dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null || true)
	if [ "$have" != "$BASE_VERSION" ]; then
		step "installing linux-source-6.12=$BASE_VERSION (have: ${have:-none})"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --allow-downgrades \
			"linux-source-6.12=$BASE_VERSION" >/dev/null ||
			die "cannot install linux-source-6.12=$BASE_VERSION (kernel/BASE)"
		have=$(dpkg-query -W -f='${Version}' linux-source-6.12)
	fi
	[ "$have" = "$BASE_VERSION" ] ||
		die "linux-source-6.12 is $have but kernel/BASE pins $BASE_VERSION"
}

# One build at a time per cache, the source tree's unpacking included: two
# builds that both found no tree would otherwise unpack it over each other.
# Held until the script exits.
lock_builds() {
	exec 9>"$KCACHE/.build.lock"
	step "waiting for build lock" && flock 9
}

ensure_tree() {
	if [ -d "$SRC/.git" ] && git -C "$SRC" rev-parse -q --verify base >/dev/null; then
		return
	fi
	step "unpacking /usr/src/linux-source-6.12.tar.xz into $SRC"
	rm -rf "$SRC" "$SRC.tmp"
	mkdir -p "$SRC.tmp"
	tar -xf /usr/src/linux-source-6.12.tar.xz -C "$SRC.tmp"
	mv "$SRC.tmp/linux-source-6.12" "$SRC"
	rmdir "$SRC.tmp"
	step "creating base commit"
	(
		cd "$SRC"
		git init -q
		git config user.name "autoballoon build"
		git config user.email "autoballoon@localhost"
		git config core.autocrlf false
		printf '/_build/\n/_build-*/\n' >> .git/info/exclude
		git add -A -f .
		git commit -q -m "Linux $BASE_VERSION (Debian linux-source-6.12)"
		git tag base
	)
}

# Put the source tree into the state of $1 (stock: tag base; patched: base + series).
checkout_variant() {
	local variant=$1
	cd "$SRC"
	git am --abort >/dev/null 2>&1 || true
	if [ "$(variant_source "$variant")" = stock ]; then
		step "checking out base"
		git checkout -q -f --detach base
		rm -f .git/autoballoon-series
		return
	fi
	local n key stamp=.git/autoballoon-series
	n=$(ls "$HERE"/patches/*.patch 2>/dev/null | wc -l)
	key=$(cache_key patched)
	# Re-applying the same series would only touch files and cost a rebuild.
	if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key $(git rev-parse HEAD)" ] &&
	   git diff --quiet HEAD; then
		step "series already applied ($n patches)"
		return
	fi
	step "applying $n patch(es) with git am"
	git checkout -q -f -B autoballoon base
	if [ "$n" -gt 0 ]; then
		git am -q --whitespace=nowarn "$HERE"/patches/*.patch ||
			{ git am --abort; die "git am failed"; }
	fi
	echo "$key $(git rev-parse HEAD)" > "$stamp"
}

configure() {
	local frags=("$FRAGMENT")
	mapfile -t -O 1 frags < <(variant_fragments "$1")
	step "configuring (tinyconfig + ${frags[*]##*/})"
	mkdir -p "$BUILD"
	cd "$SRC"
	make -s O="$B" tinyconfig >/dev/null
	./scripts/kconfig/merge_config.sh -m -O "$B" "$B/.config" "${frags[@]}" >/dev/null
	make -s O="$B" olddefconfig >/dev/null
	# merge_config does not complain about options the fragment asks for
	# but Kconfig refused (unmet dependencies); do that here.
	local bad=0 line sym val
	while read -r line; do
		case "$line" in
		CONFIG_*=*)
			sym=${line%%=*}; val=${line#*=}
			grep -qx "$sym=$val" "$B/.config" && continue
			# A symbol this variant's source does not define (e.g. the
			# series' own options in stock) is not a mismatch.
			grep -rqs --include='Kconfig*' -E "^(menu)?config ${sym#CONFIG_}\$" . ||
				continue
			step "warning: $line not set"; bad=1
			;;
		esac
	done < <(cat "${frags[@]}")
	[ $bad = 0 ] || step "warning: config differs from fragment (see above)"
}

# A progress line a minute while make runs (a cold build takes 10-35 min):
# objects compiled so far, of about 1,300 for this configuration.
progress() {
	local variant=$1 log=$2 t0=$3 n
	while sleep 60; do
		n=$(grep -c '^  CC ' "$log" 2>/dev/null || true)
		step "building $variant: ${n:-0} of ~1300 objects compiled, $(($(date +%s) - t0)) s"
	done
}

# Prints the cached image in $1, if there is one.
cached_image() {
	[ -f "$1/bzImage" ] || return 1
	step "cache hit: $1/bzImage"
	echo "$1/bzImage"
}

build_variant() {
	local variant=$1 out t0 t1
	out=$(out_dir "$variant")
	cached_image "$out" && return
	ensure_deps
	lock_builds
	# Another build may have made it while this one waited.
	cached_image "$out" && return
	ensure_tree
	B=_build
	# A variant with fragments of its own builds in its own directory.
	[ -z "$(variant_fragments "$variant")" ] || B=_build-$variant
	BUILD=$SRC/$B
	checkout_variant "$variant"
	configure "$variant"
	mkdir -p "$CCACHE_DIR"
	ccache -M 8G >/dev/null
	step "building bzImage ($variant, -j$JOBS, ccache in $CCACHE_DIR); log: $BUILD/build.log"
	t0=$(date +%s)
	: > "$BUILD/build.log"
	progress "$variant" "$BUILD/build.log" "$t0" &
	local ticker=$! rc=0
	KBUILD_BUILD_USER=autoballoon KBUILD_BUILD_HOST=autoballoon \
		nice -n 19 make O="$B" -j"$JOBS" CC="ccache gcc" bzImage \
		> "$BUILD/build.log" 2>&1 || rc=$?
	kill "$ticker" 2>/dev/null || true
	wait "$ticker" 2>/dev/null || true
	if [ $rc -ne 0 ]; then
		tail -40 "$BUILD/build.log" >&2
		die "build failed (full log: $BUILD/build.log)"
	fi
	t1=$(date +%s)
	step "built in $((t1 - t0)) s"
	mkdir -p "$out.tmp"
	cp "$B/arch/x86/boot/bzImage" "$out.tmp/bzImage"
	cp "$B/.config" "$out.tmp/config"
	cp "$B/System.map" "$out.tmp/System.map"
	git log --oneline base..HEAD > "$out.tmp/series.txt" 2>/dev/null || true
	echo "$((t1 - t0))" > "$out.tmp/build-seconds"
	rm -rf "$out"
	mv "$out.tmp" "$out"
	step "cached: $out/bzImage"
	echo "$out/bzImage"
}

run_kunit() {
	ensure_deps
	lock_builds
	ensure_tree
	checkout_variant patched
	cd "$SRC"
	step "running KUnit ($HERE/.kunitconfig) in $SRC/_kunit; log: $KCACHE/kunit.log"
	local t0=$SECONDS rc=0
	nice -n 19 ./tools/testing/kunit/kunit.py run \
		--kunitconfig="$HERE/.kunitconfig" --build_dir=_kunit \
		--jobs "$JOBS" --make_options CC="ccache gcc" "$@" \
		> "$KCACHE/kunit.log" 2>&1 || rc=$?
	grep -E '^\[..:..:..\] (Testing complete|Elapsed time)|FAILED|PASSED.*balloon' \
		"$KCACHE/kunit.log" | tail -60 >&2 || true
	step "KUnit finished in $((SECONDS - t0)) s, exit status $rc"
	return $rc
}

mkdir -p "$KCACHE"
case "${1:-patched}" in
--kunit)
	shift
	run_kunit "$@"
	;;
--path)
	echo "$(out_dir "${2:-patched}")/bzImage"
	;;
--tree)
	ensure_deps
	lock_builds
	ensure_tree
	echo "$SRC"
	;;
patched|stock|debug|kasan|vmem|patched-vmem)
	build_variant "${1:-patched}"
	;;
*)
	die "usage: $0 [patched|stock|debug|kasan|vmem|patched-vmem] | --path VARIANT | --tree | --kunit [ARGS]"
	;;
esac
