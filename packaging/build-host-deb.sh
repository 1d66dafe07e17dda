#!/usr/bin/env bash
# Build the Debian package of the host daemon, autoballoon_VERSION_amd64.deb:
#   /usr/bin/autoballoon                       the daemon and its commands (status, migrate, pause, resume)
#   /lib/systemd/system/autoballoon.service    its unit (Type=notify, watchdog, hardened)
#   /etc/autoballoon/host.toml                 the configuration: no [[vm]], discovery on (a conffile)
#   /usr/lib/tmpfiles.d/autoballoon.conf       creates /run/autoballoon-vms (1770 root:kvm), the VMs' socket directory
#   /usr/lib/sysusers.d/autoballoon.conf       the kvm group, if the host has none yet (no udev)
#   /usr/share/man/man8/autoballoon.8.gz       the man page, generated from --help (gen-man.sh)
#   /usr/share/doc/autoballoon/                configuration.md, security.md, metrics.md, example-host.toml, copyright,
#                                              and the Grafana dashboard autoballoon-dashboard.json
# Depends only on what the binary links (libc6, libgcc-s1 and libvirt0, libvirt's library for
# VMs given as libvirt domains; from dpkg-shlibdeps when there); libvirt-daemon-system is
# suggested (the daemon that runs libvirt domains). The unit is
# enabled and started on install (it manages the VMs it finds; with none it waits),
# restarted on upgrade; the socket directory is created on install (postinst, as
# dh_installtmpfiles would) and at every boot, its group kvm too where the host has none
# (sysusers.d, as dh_installsysusers would).
# Uses dpkg-deb on a staged tree; no debhelper needed.
#
# Usage: packaging/build-host-deb.sh [--host BINARY] [--out DIR]
#   --host   the daemon binary (default: target/release/autoballoon, from `make host`)
#   --out    where the .deb goes (default: ~/.cache/autoballoon/deb)
# Prints the path of the package on its last line.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
host="$root/target/release/autoballoon"
out="${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}/deb"
while [ $# -gt 0 ]; do
    case "$1" in
        --host) host="$2"; shift ;;
        --out) out="$2"; shift ;;
        -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-host-deb: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
[ -x "$host" ] || { echo "build-host-deb: no daemon binary at $host (run: make host)" >&2; exit 1; }
command -v dpkg-deb >/dev/null || { echo "build-host-deb: dpkg-deb not found (Debian package dpkg)" >&2; exit 1; }

version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
[ -n "$version" ] || { echo "build-host-deb: no version in Cargo.toml" >&2; exit 1; }
arch=amd64
name="autoballoon_${version}_${arch}"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
pkg="$stage/$name"
doc="$pkg/usr/share/doc/autoballoon"
install -d "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/lib/systemd/system" "$pkg/etc/autoballoon" "$pkg/usr/lib/tmpfiles.d" "$pkg/usr/lib/sysusers.d" "$pkg/usr/share/man/man8" "$doc"
install -m 0755 "$host" "$pkg/usr/bin/autoballoon"
install -m 0644 "$here/systemd/autoballoon.service" "$pkg/lib/systemd/system/autoballoon.service"
install -m 0644 "$here/host.toml" "$pkg/etc/autoballoon/host.toml"
install -m 0644 "$here/tmpfiles/autoballoon.conf" "$pkg/usr/lib/tmpfiles.d/autoballoon.conf"
install -m 0644 "$here/sysusers/autoballoon.conf" "$pkg/usr/lib/sysusers.d/autoballoon.conf"
install -m 0644 "$root/LICENSE" "$doc/copyright"
for f in configuration.md security.md metrics.md example-host.toml; do
    if [ -f "$root/docs/$f" ]; then install -m 0644 "$root/docs/$f" "$doc/"; fi
done
install -m 0644 "$here/grafana/autoballoon-dashboard.json" "$doc/autoballoon-dashboard.json"

files='.TP
.I /etc/autoballoon/host.toml
the configuration autoballoon.service reads (as installed: every libvirt domain on qemu:///system and every QEMU whose QMP socket is in /run/autoballoon-vms)
.TP
.I /run/autoballoon-vms/
the socket directory of discovered VMs: NAME.qmp is the QMP socket of VM NAME, NAME.agent that of its agent (mode 1770 root:kvm, from /usr/lib/tmpfiles.d/autoballoon.conf)
.TP
.I /run/autoballoon/status.sock
the status socket of `autoballoon status`, migrate, pause and resume (mode 0600)
.TP
.I /lib/systemd/system/autoballoon.service
the unit; `systemctl reload autoballoon` re-reads the configuration
.TP
.I /usr/share/doc/autoballoon/
configuration.md (every key), security.md (threat model and confinement), metrics.md (the Prometheus metrics), example-host.toml, autoballoon-dashboard.json (a Grafana dashboard of the metrics)'
"$here/gen-man.sh" "$host" 8 "continuous, swap-free memory ballooning for QEMU VMs" "$files" \
    '.BR systemctl (1), " " systemd.exec (5), " " qemu-system-x86_64 (1), " " libvirtd (8)' \
    | gzip -9n > "$pkg/usr/share/man/man8/autoballoon.8.gz"
chmod 0644 "$pkg/usr/share/man/man8/autoballoon.8.gz"

# Depends: the shared libraries the binary links, and nothing else it does not run.
depends=""
if command -v dpkg-shlibdeps >/dev/null; then
    mkdir -p "$stage/shlibs/debian"
    : > "$stage/shlibs/debian/control"
    depends="$(cd "$stage/shlibs" && dpkg-shlibdeps -O -e "$pkg/usr/bin/autoballoon" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')"
fi
if [ -z "$depends" ]; then
    glibc="$(objdump -T "$host" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)"
    depends="libc6 (>= ${glibc:-2.34})"
    readelf -d "$host" | grep -q 'NEEDED.*libgcc_s' && depends="$depends, libgcc-s1"
    readelf -d "$host" | grep -q 'NEEDED.*libvirt\.so' && depends="$depends, libvirt0"
fi
size_kib="$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)"

cat > "$pkg/DEBIAN/control" <<CONTROL
Package: autoballoon
Version: $version
Architecture: $arch
Maintainer: autoballoon developers <autoballoon@localhost>
Installed-Size: $size_kib
Depends: $depends
Suggests: libvirt-daemon-system
Section: admin
Priority: optional
Description: continuous, swap-free memory ballooning for QEMU VMs (host daemon)
 The autoballoon host controller keeps each QEMU VM at the memory it needs: it
 reads every guest's memory (from the autoballoon-guest agent over virtio-serial,
 or the balloon driver's statistics) and sets the virtio-balloon over QMP, or
 through libvirt's API (libvirt0) for libvirt domains. Live
 migrations send less and hosts pack more VMs; a spike never meets the OOM killer.
 .
 Installs a systemd unit (Type=notify, watchdog, sandboxed) and a configuration
 that manages every libvirt domain on qemu:///system and every QEMU whose QMP
 socket is in /run/autoballoon-vms (created by the package): see
 /etc/autoballoon/host.toml and man autoballoon.
CONTROL
echo /etc/autoballoon/host.toml > "$pkg/DEBIAN/conffiles"

# Enable and start the unit on install, restart it on upgrade, stop it on removal (as
# dh_installsystemd would).
cat > "$pkg/DEBIAN/postinst" <<'SCRIPT'
#!/bin/sh
set -e
# The socket directory's group (kvm), if the host has none yet (dh_installsysusers' way), then
# the directory itself, now rather than at the next boot (dh_installtmpfiles' way).
if [ "$1" = configure ] && command -v systemd-sysusers >/dev/null; then
    systemd-sysusers autoballoon.conf || true
fi
if [ "$1" = configure ] && command -v systemd-tmpfiles >/dev/null; then
    systemd-tmpfiles --create autoballoon.conf || true
fi
# Enabled even when systemd is not running (an image built with debootstrap or in a chroot:
# systemctl enables offline there), so the daemon starts at the image's first boot; started
# only under a running systemd.
if [ "$1" = configure ] && command -v systemctl >/dev/null; then
    systemctl enable autoballoon.service || true
fi
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
    if [ -n "$2" ]; then
        systemctl try-restart autoballoon.service || true
    else
        systemctl start autoballoon.service || true
    fi
fi
exit 0
SCRIPT
cat > "$pkg/DEBIAN/prerm" <<'SCRIPT'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
    systemctl stop autoballoon.service || true
fi
# Disabled whenever postinst could have enabled it, systemd running or not (systemctl works
# offline): otherwise a removed package leaves its multi-user.target.wants link behind.
if [ "$1" = remove ] && command -v systemctl >/dev/null; then
    systemctl disable autoballoon.service || true
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
