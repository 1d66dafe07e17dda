#!/usr/bin/env bash
# Build Debian bookworm's QEMU 7.2 with one upstream fix backported, for the test bed only:
# QEMU before 9.0 loses guest writes during a migration under TCG (its dirty-bitmap fast path
# clears bits without resetting TCG's TLB; upstream 03bfc2188f, QEMU 9.0). KVM hosts are not
# affected, and this machine has no KVM, so without the fix a QEMU 7.2 destination breaks
# whether or not anything balloons (docs/migration.md, "Why destinations crashed").
# The build also carries the project's eight balloon patches, the QEMU 10 build's ported to 7.2:
# x-populate-on-deflate (off by default, so the device behaves as Debian's),
# scripts/qemu72/virtio-balloon-populate-on-deflate.patch, and x-populate-reported on top of
# it, scripts/qemu72/virtio-balloon-populate-reported.patch and
# scripts/qemu72/virtio-balloon-reported-hold-lazily.patch (docs/spikes.md), and
# x-migrate-skip-ballooned, scripts/qemu72/virtio-balloon-migrate-skip-ballooned.patch
# (docs/migration.md), and two fixes that are not behind a property: QEMU shows the guest the
# stop id while it reports free page hints, so a `balloon` command meanwhile ends the round;
# with the fix the device shows the round's id (scripts/qemu72/virtio-balloon-hint-id-while-
# reporting.patch; docs/migration.md, *A balloon command ends a round of hints*). And after a
# migration that ended during a round, nothing reads the hints the guest had queued, so its
# next rounds fail; with the fix the device reads them when the VM starts running
# (scripts/qemu72/virtio-balloon-hint-queue-after-load.patch; docs/migration.md, *A free page
# queue nobody reads after a migration*). Last, the thread backs a chunk that is a whole huge
# page with MADV_COLLAPSE (scripts/qemu72/virtio-balloon-populate-collapse.patch; docs/spikes.md,
# "Backing again in huge pages"). And x-zeroed (off by default) offers the guest a feature bit
# the virtio specification does not have, VIRTIO_BALLOON_F_ZEROED: what the guest gives the
# device reads as zeroes when it uses it again, so the patched kernel skips zeroing it
# (scripts/qemu72/virtio-balloon-zeroed.patch; docs/spikes.md, "Memory the host zeroed, not
# zeroed again").
#
# Steps: fetch the source package of the installed qemu-system-x86 version through a private
# apt configuration (deb-src lines of its own; /etc/apt is left alone), unpack it afresh for
# every build, apply the nine patches in scripts/qemu72/ (the TCG fix first), configure
# x86_64-softmmu only with what the test bed uses (no GUI, no docs), build with ninja
# (nice 19) and install into
#   ${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}/qemu/7.2-fixed-<hash>/
# keyed by the source version, the patches and the configure flags. A wrapper there,
# bin/qemu-system-x86_64, runs it with the system QEMU's firmware (-L /usr/share/qemu,
# /usr/share/seabios). The symlink .../qemu/qemu72fixed points at the newest build.
# Cold: about 4 min on two idle cores (up to 25 under load); cached: instant. Needs root
# once for the build dependencies (scripts/install-deps.sh --only).
#
# stdout: only the wrapper's path. Progress goes to stderr, one line per step.
# Usage: scripts/build-qemu72-fixed.sh [--populate]
#   --populate   print the path of a second wrapper beside it, bin/qemu-system-x86_64-populate,
#                which turns the project's properties on for every balloon
#                (x-populate-on-deflate, x-migrate-skip-ballooned, x-zeroed)
set -euo pipefail

CACHE="${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}"
BASE="$CACHE/qemu"
MIRROR="${AUTOBALLOON_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PATCHES=("$HERE/qemu72/tcg-dirty-bitmap-sync.patch" "$HERE/qemu72/virtio-balloon-populate-on-deflate.patch"
         "$HERE/qemu72/virtio-balloon-populate-reported.patch" "$HERE/qemu72/virtio-balloon-reported-hold-lazily.patch"
         "$HERE/qemu72/virtio-balloon-migrate-skip-ballooned.patch" "$HERE/qemu72/virtio-balloon-hint-id-while-reporting.patch"
         "$HERE/qemu72/virtio-balloon-hint-queue-after-load.patch" "$HERE/qemu72/virtio-balloon-populate-collapse.patch"
         "$HERE/qemu72/virtio-balloon-zeroed.patch")
BUILD_DEPS=(meson ninja-build pkg-config libglib2.0-dev libpixman-1-dev libfdt-dev zlib1g-dev python3-venv flex bison dpkg-dev)

say() { echo "build-qemu72-fixed: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }
# shellcheck source=lib/qemu-build.sh
. "$HERE/lib/qemu-build.sh"
suffix=""
case "${1:-}" in
    -h|--help) qb_usage "$0"; exit 0 ;;
    --populate) suffix=-populate ;;
    "") ;;
    *) die "unknown argument: $1 (--help)" ;;
esac

# The Debian version of the system QEMU (what the fixed build replaces in the test bed).
QV="$(dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null)" || die "qemu-system-x86 is not installed (scripts/install-deps.sh)"
[[ "$QV" == 1:7.2* ]] || die "the system QEMU is $QV, not Debian's 7.2: nothing to fix (QEMU 9.0 and later have the fix)"
SRCV="${QV%+b*}"   # binNMU suffix off: 1:7.2+dfsg-7+deb12u18+b3 -> 1:7.2+dfsg-7+deb12u18
# What the build depends on: the source version, the patches, the configure flags.
CONFIGURE=(--target-list=x86_64-softmmu
    --disable-docs --disable-werror --disable-gtk --disable-sdl --disable-vnc --disable-spice
    --disable-opengl --disable-virglrenderer --disable-xen --disable-tools --disable-guest-agent
    --disable-curses --disable-pa --disable-alsa --disable-jack --disable-oss --disable-vde
    --disable-rbd --disable-glusterfs --disable-libiscsi --disable-libnfs --disable-capstone
    --disable-libusb --disable-usb-redir --disable-smartcard --disable-brlapi --disable-curl
    --disable-gnutls --disable-nettle --disable-gcrypt --disable-libssh --disable-seccomp
    --disable-cap-ng --disable-linux-aio --disable-linux-io-uring --disable-bpf
    --disable-libpmem --disable-rdma --disable-fuse --disable-slirp)
KEY="$( { echo "$SRCV" "${CONFIGURE[*]}"; cat "${PATCHES[@]}"; } | sha256sum | cut -c1-12)"
DEST="$BASE/7.2-fixed-$KEY"
WRAPPER="$DEST/bin/qemu-system-x86_64"

# The wrappers beside the binary in $1 (written on every run: they are cheap).
write_wrappers() {
    local bin=$1
    cat > "$bin/qemu-system-x86_64" <<WRAP
#!/bin/sh
# QEMU $SRCV with 03bfc2188f backported and x-populate-on-deflate
# (scripts/build-qemu72-fixed.sh); the system QEMU's firmware and ROMs.
exec "\$(dirname "\$0")/qemu-system-x86_64.real" -L /usr/share/qemu -L /usr/share/seabios "\$@"
WRAP
    chmod +x "$bin/qemu-system-x86_64"
    qb_populate_wrapper "$bin" "QEMU $SRCV (scripts/build-qemu72-fixed.sh)"
}

check() {
    [ -x "$DEST/bin/qemu-system-x86_64.real" ] || return 1
    write_wrappers "$DEST/bin"
    "$WRAPPER" --version 2>/dev/null | head -1 | grep -q '03bfc2188f' && qb_offers_populate "$WRAPPER"
}
if check; then
    ln -sfn "$(basename "$DEST")" "$BASE/qemu72fixed"
    say "cached: $("$WRAPPER" --version | head -1)"
    echo "$WRAPPER$suffix"
    exit 0
fi

say "step 1/5: build dependencies (${BUILD_DEPS[*]})"
"$HERE/install-deps.sh" --only "${BUILD_DEPS[@]}" >&2 || die "installing ${BUILD_DEPS[*]} failed"

SRC="$BASE/src-7.2"
mkdir -p "$SRC"
TREE="$SRC/qemu-${SRCV#*:}"
TREE="${TREE%-*}"   # dpkg-source unpacks into qemu-<upstream version>
if [ ! -f "$SRC/.unpacked-$SRCV" ]; then
    say "step 2/5: apt-get source qemu=$SRCV (private deb-src configuration under $BASE/apt-src)"
    APT="$BASE/apt-src"
    qb_apt_options "$APT"
    cat > "$APT/sources.list" <<EOF
deb-src [signed-by=$KEYRING] $MIRROR bookworm main
deb-src [signed-by=$KEYRING] ${MIRROR%/debian}/debian-security bookworm-security main
EOF
    apt-get "${QB_APT[@]}" -qq update >&2 || die "apt-get update (deb-src) failed"
    rm -rf "$SRC"/qemu-* "$SRC"/qemu_*
    (cd "$SRC" && apt-get "${QB_APT[@]}" -qq source "qemu=$SRCV") >"$SRC/source.log" 2>&1 \
        || { tail -5 "$SRC/source.log" >&2; die "apt-get source qemu=$SRCV failed"; }
    touch "$SRC/.unpacked-$SRCV"
else
    # A fresh tree for every build, so that the patches apply to Debian's source whatever
    # an earlier build applied.
    say "step 2/5: source qemu=$SRCV already downloaded: unpacking it afresh into $TREE"
    rm -rf "$TREE"
    (cd "$SRC" && dpkg-source -x "$(basename "$(ls "$SRC"/qemu_*.dsc | head -1)")") >"$SRC/unpack.log" 2>&1 \
        || { tail -5 "$SRC/unpack.log" >&2; die "dpkg-source -x failed"; }
fi
[ -f "$TREE/include/exec/ram_addr.h" ] || die "no QEMU tree at $TREE"

say "step 3/5: applying ${#PATCHES[@]} patches"
qb_apply_series "$TREE" "${PATCHES[@]}"

say "step 4/5: configure + ninja (x86_64-softmmu, nice 19; a progress line a minute)"
B="$TREE/_build-fixed"
rm -rf "$B" "$DEST.tmp"
mkdir -p "$B"
(cd "$B" && ../configure --prefix="$DEST.tmp" "${CONFIGURE[@]}" \
    --with-pkgversion="Debian $SRCV, autoballoon test bed: 03bfc2188f backported, x-populate-on-deflate, x-populate-reported, hint id kept while reporting, hint queue read after load") >"$B/configure.log" 2>&1 \
    || { tail -20 "$B/configure.log" >&2; die "configure failed (log: $B/configure.log)"; }
qb_ninja "$B"

say "step 5/5: installing into $DEST"
mkdir -p "$DEST.tmp/bin"
cp "$B/qemu-system-x86_64" "$DEST.tmp/bin/qemu-system-x86_64.real"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
check || die "the wrapper $WRAPPER does not run, or offers no x-populate-on-deflate"
ln -sfn "$(basename "$DEST")" "$BASE/qemu72fixed"
say "done: $("$WRAPPER" --version | head -1)"
echo "$WRAPPER$suffix"
