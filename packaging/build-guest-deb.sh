#!/usr/bin/env bash
# Build the Debian package of the guest agent, autoballoon-guest_VERSION_amd64.deb: the
# static agent binary (/usr/bin/autoballoon-guest, from `make agent`) and its systemd unit
# (/lib/systemd/system/autoballoon-guest.service, enabled and started on install when
# systemd runs). Uses dpkg-deb on a staged tree; no debhelper needed.
#
# Usage: packaging/build-guest-deb.sh [--agent BINARY] [--out DIR]
#   --agent  the agent binary (default: target/x86_64-unknown-linux-gnu/release/autoballoon-guest)
#   --out    where the .deb goes (default: ~/.cache/autoballoon/deb)
# Prints the path of the package on its last line.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
agent="$root/target/x86_64-unknown-linux-gnu/release/autoballoon-guest"
out="${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}/deb"
while [ $# -gt 0 ]; do
    case "$1" in
        --agent) agent="$2"; shift ;;
        --out) out="$2"; shift ;;
        -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-guest-deb: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
[ -x "$agent" ] || { echo "build-guest-deb: no agent binary at $agent (run: make agent)" >&2; exit 1; }
command -v dpkg-deb >/dev/null || { echo "build-guest-deb: dpkg-deb not found (Debian package dpkg)" >&2; exit 1; }

version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
[ -n "$version" ] || { echo "build-guest-deb: no version in Cargo.toml" >&2; exit 1; }
arch=amd64
name="autoballoon-guest_${version}_${arch}"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
pkg="$stage/$name"
install -d "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/lib/systemd/system" "$pkg/usr/share/doc/autoballoon-guest"
install -m 0755 "$agent" "$pkg/usr/bin/autoballoon-guest"
install -m 0644 "$here/systemd/autoballoon-guest.service" "$pkg/lib/systemd/system/autoballoon-guest.service"
install -m 0644 "$root/LICENSE" "$pkg/usr/share/doc/autoballoon-guest/copyright"
size_kib="$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)"

cat > "$pkg/DEBIAN/control" <<CONTROL
Package: autoballoon-guest
Version: $version
Architecture: $arch
Maintainer: autoballoon developers <autoballoon@localhost>
Installed-Size: $size_kib
Section: admin
Priority: optional
Description: autoballoon guest agent (continuous memory ballooning)
 Samples the guest's memory every second (/proc/meminfo, vmstat, PSI) and reports it
 to the autoballoon host controller over the virtio-serial port
 org.autoballoon.agent.0, which sizes the VM's balloon to what the guest needs. With
 the patched guest kernel or on Xen it sets the balloon itself. One static binary;
 the systemd unit starts it when the port exists.
CONTROL

# Enable and start the unit on install, stop it on removal (as dh_installsystemd would).
cat > "$pkg/DEBIAN/postinst" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
    systemctl enable autoballoon-guest.service || true
    systemctl restart autoballoon-guest.service || true
fi
exit 0
SCRIPT
cat > "$pkg/DEBIAN/prerm" <<'SCRIPT'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl stop autoballoon-guest.service || true
    if [ "$1" = remove ]; then
        systemctl disable autoballoon-guest.service || true
    fi
fi
exit 0
SCRIPT
cat > "$pkg/DEBIAN/postrm" <<'SCRIPT'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
fi
exit 0
SCRIPT
chmod 0755 "$pkg/DEBIAN/postinst" "$pkg/DEBIAN/prerm" "$pkg/DEBIAN/postrm"

mkdir -p "$out"
dpkg-deb --root-owner-group --build "$pkg" "$out/$name.deb" >/dev/null
echo "$out/$name.deb"
