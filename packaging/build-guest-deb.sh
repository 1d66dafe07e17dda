#!/usr/bin/env bash
# Build the Debian package of the guest agent, autoballoon-guest_VERSION_amd64.deb: the
# static agent binary (/usr/bin/autoballoon-guest, from `make agent`), its systemd unit
# (/lib/systemd/system/autoballoon-guest.service) and the udev rule that starts it when the
# virtio-serial port org.autoballoon.agent.0 appears, at boot or hot-plugged
# (/lib/udev/rules.d/60-autoballoon-guest.rules), and docs/guest-agent.md. The agent sets
# vm.overcommit_memory=1 when it starts (--no-overcommit keeps the guest's setting; see
# docs/guest-agent.md). Uses dpkg-deb on a staged tree; no debhelper needed.
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
        -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
install -d "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/lib/systemd/system" "$pkg/lib/udev/rules.d" "$pkg/usr/share/doc/autoballoon-guest"
install -m 0755 "$agent" "$pkg/usr/bin/autoballoon-guest"
install -m 0644 "$here/systemd/autoballoon-guest.service" "$pkg/lib/systemd/system/autoballoon-guest.service"
install -m 0644 "$here/udev/60-autoballoon-guest.rules" "$pkg/lib/udev/rules.d/60-autoballoon-guest.rules"
install -m 0644 "$root/LICENSE" "$pkg/usr/share/doc/autoballoon-guest/copyright"
install -m 0644 "$root/docs/guest-agent.md" "$pkg/usr/share/doc/autoballoon-guest/README.md"
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
 a udev rule starts its systemd unit when the port appears (at boot or hot-plugged).
 .
 At start the agent sets vm.overcommit_memory=1 (logging the old value) so programs
 may allocate beyond the guest's present size; --no-overcommit keeps the guest's
 setting (/usr/share/doc/autoballoon-guest/README.md).
CONTROL

# Enable the unit (on the port's device) on install and start it if the port is there
# (udev replays the port's "add", which wants the unit); stop it on removal.
cat > "$pkg/DEBIAN/postinst" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
    systemctl enable autoballoon-guest.service || true
    udevadm control --reload-rules 2>/dev/null || true
    if [ -e /dev/virtio-ports/org.autoballoon.agent.0 ]; then
        udevadm trigger --subsystem-match=virtio-ports --action=add 2>/dev/null || true
        systemctl restart autoballoon-guest.service || true
    fi
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
