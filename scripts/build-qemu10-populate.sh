#!/usr/bin/env bash
# Build QEMU 10 (the upstream source of Debian's bookworm-backports package, the same version
# scripts/install-qemu10.sh installs) with seven changes of ours, in this order:
#   scripts/qemu10/virtio-balloon-populate-on-deflate.patch: an experimental balloon property,
#     x-populate-on-deflate (off by default), with which QEMU acknowledges a deflation first
#     and then backs the deflated pages in a thread of its own (MADV_POPULATE_WRITE), so
#     the guest does not take a host page fault on each of them (docs/spikes.md, "Backing
#     deflated memory off the vCPU's thread");
#   scripts/qemu10/virtio-balloon-populate-reported.patch: with that property on, the device
#     remembers what free page reporting discarded, and writing a byte count to
#     x-populate-reported hands that much of it to the same thread (docs/spikes.md,
#     "Backing reported memory ahead of a spike");
#   scripts/qemu10/virtio-balloon-reported-hold-lazily.patch: the thread holds that memory
#     lazily (MADV_FREE) and, x-populate-reported-hold-ms later (5 s), pages out what the
#     guest did not write (MADV_PAGEOUT), so a request the guest does not use up costs the
#     host nothing after the hold; a chunk the guest wrote stays whole (paging it out
#     would split the host's huge page under it), one paged out goes back into the record
#     (the guest would fault it in 4 KiB at a time);
#   scripts/qemu10/virtio-balloon-migrate-skip-ballooned.patch: x-migrate-skip-ballooned (off
#     by default), with which a migration skips the pages in the balloon, as it skips the
#     free pages the guest hints, instead of sending each as a zero page (docs/migration.md);
#   scripts/qemu10/virtio-balloon-hint-id-while-reporting.patch: a fix, not behind a
#     property: while the guest reports free page hints the device shows it the id of the
#     round, not the stop id, so a `balloon` command meanwhile no longer ends the round
#     (docs/migration.md, "A balloon command ends a round of hints");
#   scripts/qemu10/virtio-balloon-populate-collapse.patch: the thread backs a chunk that is a
#     whole huge page with MADV_COLLAPSE, so that one whose page table the balloon or the
#     page-out left behind comes back as one huge page instead of 512 small ones (docs/spikes.md,
#     "Backing again in huge pages");
#   scripts/qemu10/virtio-balloon-zeroed.patch: x-zeroed (off by default) offers the guest a
#     feature bit the virtio specification does not have, VIRTIO_BALLOON_F_ZEROED: every page
#     the guest gives the device reads as zeroes when it uses it again (QEMU zeroes what it
#     could not discard, and a migration sends again what the guest gave while it ran), so the
#     patched kernel skips zeroing it (docs/spikes.md, "Memory the host zeroed, not zeroed
#     again").
# With the properties off, the device behaves as QEMU's own (but for that fix, which only
# a configuration change during a round of hints meets), so one build serves the baselines
# and the changes side by side. `make test` does not build it (it runs its tests where it is built);
# `make bench` builds it for its spike stage.
#
# Steps: the orig tarball of the source package, through a private apt configuration
# (deb-src lines of its own; /etc/apt is left alone) and checked against the archive's
# SHA256; meson from PyPI in a venv of its own (QEMU 10 needs meson >= 1.5, bookworm has
# 1.0); the patches; configure x86_64-softmmu only with what the test bed uses; ninja (nice 19);
# install into
#   ${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}/qemu/10-populate-<hash>/
# keyed by the source version, the patch and the configure flags. A wrapper there,
# bin/qemu-system-x86_64, runs it with the firmware of the QEMU 10 that
# scripts/install-qemu10.sh installed; the symlink .../qemu/qemu10-populate points at the
# newest build (crates/testbed/tests/populate_on_deflate.rs looks there). Cold: about 6 min
# on two cores; cached: instant.
# Needs root once for the build dependencies (scripts/install-deps.sh --only).
#
# stdout: only the wrapper's path. Progress goes to stderr, one line per step.
# Usage: scripts/build-qemu10-populate.sh [--populate]
#   --populate   print the path of a second wrapper beside it, bin/qemu-system-x86_64-populate,
#                which turns the project's properties on for every balloon
#                (x-populate-on-deflate, x-migrate-skip-ballooned, x-zeroed)
set -euo pipefail

CACHE="${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}"
BASE="$CACHE/qemu"
MIRROR="${AUTOBALLOON_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PATCHES=("$HERE/qemu10/virtio-balloon-populate-on-deflate.patch" "$HERE/qemu10/virtio-balloon-populate-reported.patch"
         "$HERE/qemu10/virtio-balloon-reported-hold-lazily.patch" "$HERE/qemu10/virtio-balloon-migrate-skip-ballooned.patch"
         "$HERE/qemu10/virtio-balloon-hint-id-while-reporting.patch" "$HERE/qemu10/virtio-balloon-populate-collapse.patch"
         "$HERE/qemu10/virtio-balloon-zeroed.patch")
MESON_VERSION=1.5.0
BUILD_DEPS=(ninja-build pkg-config libglib2.0-dev libpixman-1-dev zlib1g-dev python3-venv flex bison)

say() { echo "build-qemu10-populate: $*" >&2; }
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

# The QEMU 10 this build sits beside: its firmware and its Debian version.
Q10="$("$HERE/install-qemu10.sh")" || die "scripts/install-qemu10.sh failed"
Q10_DIR="$(dirname "$(dirname "$Q10")")"
DEBV="$(basename "$Q10_DIR")"            # 10.0.2+ds-2+deb13u1~bpo12+1
UPV="${DEBV%%+*}"                        # 10.0.2
CONFIGURE=(--target-list=x86_64-softmmu
    --disable-docs --disable-werror --disable-gtk --disable-sdl --disable-vnc --disable-spice
    --disable-opengl --disable-virglrenderer --disable-xen --disable-tools --disable-guest-agent
    --disable-curses --disable-pa --disable-alsa --disable-jack --disable-oss --disable-vde
    --disable-rbd --disable-glusterfs --disable-libiscsi --disable-libnfs --disable-capstone
    --disable-libusb --disable-usb-redir --disable-smartcard --disable-brlapi --disable-curl
    --disable-gnutls --disable-nettle --disable-gcrypt --disable-libssh --disable-seccomp
    --disable-cap-ng --disable-linux-aio --disable-linux-io-uring --disable-bpf
    --disable-libpmem --disable-fuse --disable-slirp --disable-fdt --disable-rust
    --disable-pipewire --disable-sndio --disable-dbus-display --disable-libdw --disable-install-blobs)
KEY="$( { echo "$DEBV" "$MESON_VERSION" "${CONFIGURE[*]}"; cat "${PATCHES[@]}"; } | sha256sum | cut -c1-12)"
DEST="$BASE/10-populate-$KEY"
WRAPPER="$DEST/bin/qemu-system-x86_64"

# The wrappers beside the binary in $1 (written on every run: they are cheap, and they name
# the installed QEMU 10's firmware, which may have moved).
write_wrappers() {
    local bin=$1 R="$Q10_DIR/root"
    cat > "$bin/qemu-system-x86_64" <<WRAP
#!/bin/sh
# QEMU $UPV with x-populate-on-deflate (scripts/build-qemu10-populate.sh), run with the
# firmware of the QEMU 10 in $Q10_DIR.
exec "\$(dirname "\$0")/qemu-system-x86_64.real" \\
    -L "$R/usr/share/qemu" -L "$R/usr/share/seabios" -L "$R/usr/lib/ipxe/qemu" "\$@"
WRAP
    chmod +x "$bin/qemu-system-x86_64"
    qb_populate_wrapper "$bin" "QEMU $UPV (scripts/build-qemu10-populate.sh)"
}

check() {
    [ -x "$DEST/bin/qemu-system-x86_64.real" ] || return 1
    write_wrappers "$DEST/bin"
    qb_offers_populate "$WRAPPER"
}
if check; then
    ln -sfn "$(basename "$DEST")" "$BASE/qemu10-populate"
    say "cached: $("$WRAPPER" --version | head -1)"
    echo "$WRAPPER$suffix"
    exit 0
fi

say "step 1/6: build dependencies (${BUILD_DEPS[*]})"
"$HERE/install-deps.sh" --only "${BUILD_DEPS[@]}" >&2 || die "installing ${BUILD_DEPS[*]} failed"

SRC="$BASE/src-$UPV"
TREE="$SRC/qemu-$UPV"
mkdir -p "$SRC"
if [ ! -f "$SRC/.unpacked-$DEBV" ]; then
    say "step 2/6: the upstream source of qemu=1:$DEBV (bookworm-backports, deb-src of its own under $BASE/apt-src-bpo)"
    APT="$BASE/apt-src-bpo"
    qb_apt_options "$APT"
    echo "deb-src [signed-by=$KEYRING] $MIRROR bookworm-backports main" > "$APT/sources.list"
    apt-get "${QB_APT[@]}" -qq update >&2 || die "apt-get update (deb-src bookworm-backports) failed"
    # Only the orig tarball: the upstream tree is what the patch is against (and the
    # mirror does not always carry the Debian part of a backport's source).
    line="$(apt-get "${QB_APT[@]}" -qq --print-uris source "qemu=1:$DEBV" | grep "\.orig\.tar\." | head -1)" \
        || die "no source package qemu=1:$DEBV in bookworm-backports"
    uri="$(awk '{print $1}' <<< "$line" | tr -d "'")"
    file="$(awk '{print $2}' <<< "$line")"
    sum="$(awk '{print $4}' <<< "$line")"
    [[ "$sum" == SHA256:* ]] || die "no SHA256 for $file in the archive's index: $line"
    /usr/lib/apt/apt-helper download-file "$uri" "$SRC/$file" "$sum" >&2 \
        || die "downloading $uri failed"
    touch "$SRC/.unpacked-$DEBV"
else
    say "step 2/6: source already downloaded into $SRC"
fi
# A fresh tree for every build, so that the patches apply to QEMU's own source whatever an
# earlier build applied.
file="$(cd "$SRC" && ls qemu_*.orig.tar.* 2>/dev/null | head -1)"
[ -n "$file" ] || die "no orig tarball in $SRC: remove $SRC/.unpacked-$DEBV and run again"
rm -rf "$TREE"
tar -C "$SRC" -xf "$SRC/$file" || die "unpacking $file failed"
[ -d "$TREE" ] || die "$file did not unpack into $TREE"
[ -f "$TREE/hw/virtio/virtio-balloon.c" ] || die "no QEMU tree at $TREE"

# What QEMU's configure wants in its venv (pythondeps.toml, group "meson"); Debian's
# source package leaves out the wheels QEMU ships for them.
PYDEPS=("meson==$MESON_VERSION" "pycotap==1.3.1")
say "step 3/6: ${PYDEPS[*]} from PyPI (venv $BASE/meson-$MESON_VERSION)"
VENV="$BASE/meson-$MESON_VERSION"
if ! "$VENV/bin/python3" -c 'import mesonbuild, pycotap' 2>/dev/null; then
    rm -rf "$VENV"
    python3 -m venv "$VENV" || die "python3 -m venv failed"
    "$VENV/bin/pip" install -q "${PYDEPS[@]}" >&2 || die "pip install ${PYDEPS[*]} failed"
fi

say "step 4/6: applying ${#PATCHES[@]} patches"
qb_apply_series "$TREE" "${PATCHES[@]}"
# Debian's +ds tarball leaves out the prebuilt firmware, edk2's included: do not unpack it
# (the wrapper points at the installed QEMU 10's firmware instead).
sed -i 's/^\( *\)unpack_edk2_blobs = bzip2.found()$/\1unpack_edk2_blobs = false/' "$TREE/meson.build"

say "step 5/6: configure + ninja (x86_64-softmmu, nice 19; a progress line a minute)"
B="$TREE/_build-populate"
rm -rf "$B" "$DEST.tmp"
mkdir -p "$B"
(cd "$B" && ../configure --prefix="$DEST.tmp" --python="$VENV/bin/python3" "${CONFIGURE[@]}" \
    --with-pkgversion="Debian $DEBV upstream source, autoballoon: x-populate-on-deflate, x-populate-reported, hint id kept while reporting") >"$B/configure.log" 2>&1 \
    || { tail -20 "$B/configure.log" >&2; die "configure failed (log: $B/configure.log)"; }
qb_ninja "$B"

say "step 6/6: installing into $DEST"
mkdir -p "$DEST.tmp/bin"
cp "$B/qemu-system-x86_64" "$DEST.tmp/bin/qemu-system-x86_64.real"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
check || die "the installed wrapper $WRAPPER does not offer x-populate-on-deflate"
ln -sfn "$(basename "$DEST")" "$BASE/qemu10-populate"
say "built: $("$WRAPPER" --version | head -1)"
echo "$WRAPPER$suffix"
