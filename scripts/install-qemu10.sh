#!/usr/bin/env bash
# Install QEMU 10 (Debian's bookworm-backports build) side by side with the system's QEMU 7.2,
# without touching the system: the .debs are fetched with `apt-get download` through a private
# apt configuration (its own sources list, package lists and cache under the cache directory;
# /etc/apt and dpkg's database are left alone) and unpacked with `dpkg -x` into
#   ${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}/qemu/<debian version without epoch>/root/
# A wrapper next to it, .../qemu/<version>/bin/qemu-system-x86_64, runs that binary with its
# own firmware and ROMs (-L for qemu-system-data, seabios, ipxe-qemu), its own modules
# (QEMU_MODULE_DIR) and, if the host lacks any shared library it needs, the bookworm
# packages that provide them (unpacked too, found through LD_LIBRARY_PATH). The symlink
# .../qemu/qemu10 points at the newest install.
#
# Idempotent: with an install in the cache it checks the wrapper runs and prints its path,
# without the network. --refresh asks the mirror whether a newer backports build exists.
# Works as any user (no root needed). Progress goes to stderr, one line per step; stdout is
# only the wrapper's path.
#
# Usage: scripts/install-qemu10.sh [--refresh]
#   --refresh   query bookworm-backports even if a QEMU 10 is already cached
set -euo pipefail

CACHE="${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}"
BASE="$CACHE/qemu"
MIRROR="${AUTOBALLOON_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
# The binary, its common modules, its data (ROMs) and the firmware it asks for. The shared
# libraries come from the host unless missing (then from bookworm, below).
PKGS=(qemu-system-x86 qemu-system-common qemu-system-data seabios ipxe-qemu)

refresh=0
while [ $# -gt 0 ]; do
    case "$1" in
        --refresh) refresh=1 ;;
        -h|--help) . "$(dirname "$0")/lib/qemu-build.sh"; qb_usage "$0"; exit 0 ;;
        *) echo "install-qemu10: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done

say() { echo "install-qemu10: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

# A usable install: the wrapper runs and reports a QEMU 10.
check_wrapper() {
    local w="$1/bin/qemu-system-x86_64" v
    [ -x "$w" ] || return 1
    v="$("$w" --version 2>/dev/null | head -1)" || return 1
    [[ "$v" == "QEMU emulator version 10."* ]] || return 1
    say "ok: $v ($w)"
}

# --- 1. a cached install ----------------------------------------------------------------
if [ "$refresh" -eq 0 ] && [ -L "$BASE/qemu10" ] && check_wrapper "$BASE/qemu10"; then
    say "step 1/6: cached, nothing to do (--refresh looks for a newer build)"
    readlink -f "$BASE/qemu10/bin/qemu-system-x86_64"
    exit 0
fi
if [ "$refresh" -eq 1 ]; then
    say "step 1/6: --refresh: asking the mirror for the newest build"
else
    say "step 1/6: no usable cached QEMU 10 under $BASE"
fi

for tool in apt-get apt-cache dpkg dpkg-deb ldd; do
    command -v "$tool" >/dev/null || die "$tool not found (this script needs a Debian system)"
done
[ -r "$KEYRING" ] || die "$KEYRING is missing (Debian's debian-archive-keyring package)"

# --- 2. the private apt configuration -------------------------------------------------------
APT="$BASE/apt"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/etc"
cat > "$APT/etc/sources.list" <<EOF
deb [signed-by=$KEYRING] $MIRROR bookworm main
deb [signed-by=$KEYRING] $MIRROR bookworm-backports main
EOF
APTOPTS=(-o "Dir::Etc::SourceList=$APT/etc/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
         -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache"
         -o "Debug::NoLocking=1" -o "APT::Sandbox::User=$(id -un)")
say "step 2/6: apt-get update with a private configuration ($APT; suites bookworm, bookworm-backports from $MIRROR)"
if ! apt-get "${APTOPTS[@]}" -qq update >"$APT/update.log" 2>&1 \
        || grep -qE '^(E:|W: Failed to fetch)' "$APT/update.log" \
        || ! ls "$APT/lists/" | grep -q 'bookworm-backports_main_binary-amd64_Packages'; then
    sed 's/^/    /' "$APT/update.log" >&2
    die "cannot reach the bookworm-backports suite at $MIRROR (see above; set AUTOBALLOON_DEBIAN_MIRROR for another mirror)"
fi

# The newest QEMU 10 build in backports.
version_of() { # pkg, suite-regexp -> newest version from that suite
    apt-cache "${APTOPTS[@]}" madison "$1" | awk -F' *\\| *' -v s="$2" '$3 ~ s {print $2; exit}'
}
QV="$(version_of qemu-system-x86 'bookworm-backports')"
[[ "$QV" == *:10.* || "$QV" == 10.* ]] || die "bookworm-backports carries no QEMU 10 qemu-system-x86 (found '${QV:-nothing}')"
DIRV="${QV#*:}"   # without the epoch: 10.0.2+ds-2+deb13u1~bpo12+1
DEST="$BASE/$DIRV"
say "step 3/6: bookworm-backports has qemu-system-x86 $QV"
if check_wrapper "$DEST"; then
    ln -sfn "$DIRV" "$BASE/qemu10"
    say "step 4/6..6/6: $QV already installed in $DEST"
    readlink -f "$DEST/bin/qemu-system-x86_64"
    exit 0
fi

# --- 4. download and unpack ---------------------------------------------------------------
# Versions: qemu-* exactly QV; seabios and ipxe-qemu the newest in either suite (QEMU 10
# wants seabios >> 1.16.3, which only backports has).
newest() { apt-cache "${APTOPTS[@]}" madison "$1" | awk -F' *\\| *' '{print $2}' | sort -V -r | head -1; }
want=()
for p in "${PKGS[@]}"; do
    case "$p" in qemu-*) want+=("$p=$QV") ;; *) want+=("$p=$(newest "$p")") ;; esac
done
TMP="$(mktemp -d "$BASE/.tmp.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
say "step 4/6: apt-get download ${want[*]}"
(cd "$TMP" && apt-get "${APTOPTS[@]}" -qq download "${want[@]}") >&2 || die "apt-get download failed"
mkdir -p "$TMP/root"
for deb in "$TMP"/*.deb; do dpkg-deb -x "$deb" "$TMP/root"; done
BIN="$TMP/root/usr/bin/qemu-system-x86_64"
[ -x "$BIN" ] || die "the download did not contain usr/bin/qemu-system-x86_64"

# Shared libraries the host lacks: fetch the bookworm packages of qemu-system-x86's Depends
# that are not installed, unpack them next to it and check again.
missing_libs() { LD_LIBRARY_PATH="$TMP/root/usr/lib/x86_64-linux-gnu:$TMP/root/lib/x86_64-linux-gnu" ldd "$BIN" | awk '/not found/ {print $1}'; }
if [ -n "$(missing_libs)" ]; then
    say "step 5/6: the host lacks $(missing_libs | tr '\n' ' ')- fetching the library packages qemu-system-x86 depends on"
    deps="$(apt-cache "${APTOPTS[@]}" show "qemu-system-x86=$QV" | sed -n 's/^Depends: //p' | tr ',' '\n' \
            | sed 's/(.*)//; s/|.*//; s/ //g' | grep -v -e '^qemu-' -e '^seabios$' -e '^ipxe-qemu$' -e '^$')"
    libpkgs=()
    for d in $deps; do
        dpkg-query -W -f='${Status}' "$d" 2>/dev/null | grep -q '^install ok installed$' || libpkgs+=("$d")
    done
    [ ${#libpkgs[@]} -gt 0 ] || die "libraries missing but every dependency package is installed: $(missing_libs | tr '\n' ' ')"
    (cd "$TMP" && apt-get "${APTOPTS[@]}" -qq download "${libpkgs[@]}") >&2 || die "apt-get download ${libpkgs[*]} failed"
    for p in "${libpkgs[@]}"; do dpkg-deb -x "$TMP/${p}"_*.deb "$TMP/root"; done
    [ -z "$(missing_libs)" ] || die "still missing after unpacking ${libpkgs[*]}: $(missing_libs | tr '\n' ' ')"
    say "step 5/6: unpacked ${libpkgs[*]}"
else
    say "step 5/6: ldd: every shared library is on the host"
fi

# --- 6. the wrapper -----------------------------------------------------------------------
mkdir -p "$TMP/bin"
cat > "$TMP/bin/qemu-system-x86_64" <<'EOF'
#!/bin/sh
# Runs the QEMU 10 unpacked next to this wrapper (scripts/install-qemu10.sh) with its own
# firmware, ROMs, modules and (if any) shared libraries, not the system QEMU's.
root="$(cd "$(dirname "$0")/../root" && pwd)"
lib="$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export QEMU_MODULE_DIR="$root/usr/lib/x86_64-linux-gnu/qemu"
exec "$root/usr/bin/qemu-system-x86_64" \
    -L "$root/usr/share/qemu" -L "$root/usr/share/seabios" -L "$root/usr/lib/ipxe/qemu" "$@"
EOF
chmod +x "$TMP/bin/qemu-system-x86_64"
printf '%s\n' "${want[@]}" > "$TMP/packages"
rm -f "$TMP"/*.deb
rm -rf "$DEST"
mv "$TMP" "$DEST"
trap - EXIT
chmod 755 "$DEST"
ln -sfn "$DIRV" "$BASE/qemu10"
check_wrapper "$DEST" || die "the installed wrapper $DEST/bin/qemu-system-x86_64 does not run"
say "step 6/6: installed $QV in $DEST ($(du -sh "$DEST" | cut -f1)); the system QEMU is untouched"
echo "$DEST/bin/qemu-system-x86_64"
