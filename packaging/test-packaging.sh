#!/usr/bin/env bash
# Checks the packaging: both systemd units pass `systemd-analyze verify` (against a staged
# root holding the binaries, so ExecStart paths resolve), the guest agent's .deb builds
# and holds the binary, the unit and the udev rule, and the host daemon's .deb (`make deb`)
# builds and holds the binary, the unit, the default configuration (discovery on, no
# warning), the socket directory's tmpfiles.d snippet and the man page, with
# dependencies on nothing but the libraries the binary links, and the KubeVirt manifests
# check (packaging/kubevirt/test-manifest.sh). Run by `make packaging-test`
# (part of `make test`).
#
# Usage: packaging/test-packaging.sh --agent AGENT_BINARY --host HOST_BINARY
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
agent="" host=""
while [ $# -gt 0 ]; do
    case "$1" in
        --agent) agent="$2"; shift ;;
        --host) host="$2"; shift ;;
        *) echo "test-packaging: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
[ -x "$agent" ] && [ -x "$host" ] || { echo "test-packaging: need --agent and --host binaries" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "test-packaging: FAIL: $*" >&2; exit 1; }

# --- systemd units -----------------------------------------------------------------------
if command -v systemd-analyze >/dev/null; then
    r="$work/root"
    install -d "$r/usr/bin" "$r/bin" "$r/lib/systemd/system" "$r/etc/autoballoon"
    install -m 0755 "$host" "$r/usr/bin/autoballoon"
    install -m 0755 "$agent" "$r/usr/bin/autoballoon-guest"
    cp /bin/sh "$r/bin/sh"
    # The machine's own units (targets, sockets) that the default dependencies name.
    cp -a /lib/systemd/system/. "$r/lib/systemd/system/"
    install -m 0644 "$here"/systemd/*.service "$r/lib/systemd/system/"
    if ! systemd-analyze verify --root="$r" "$r/lib/systemd/system/autoballoon.service" "$r/lib/systemd/system/autoballoon-guest.service" 2> "$work/verify.log"; then
        cat "$work/verify.log" >&2
        fail "systemd-analyze verify"
    fi
    [ ! -s "$work/verify.log" ] || { cat "$work/verify.log" >&2; fail "systemd-analyze verify printed warnings"; }
    echo "test-packaging: systemd-analyze verify: both units OK ($(systemd-analyze --version | head -1))"
    # The host daemon's confinement (docs/security.md): systemd's own exposure score, 0-10
    # (2.4 when written), must stay at most 3.0; and the directives the docs promise.
    u="$here/systemd/autoballoon.service"
    if systemd-analyze security --help 2>/dev/null | grep -q -- '--offline'; then
        systemd-analyze security --offline=yes --threshold=30 "$u" > "$work/security.log" 2>&1 || { tail -3 "$work/security.log" >&2; fail "autoballoon.service exposure above 3.0"; }
        echo "test-packaging: autoballoon.service $(grep -o 'Overall exposure level.*' "$work/security.log")"
    fi
    for d in Type=notify WatchdogSec= NotifyAccess=main ProtectSystem=strict NoNewPrivileges=yes ProtectHome=yes \
             'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6' 'ReadWritePaths=/run/autoballoon$' 'ReadOnlyPaths=/run$' RuntimeDirectoryMode=0700 UMask=0077 RestartPreventExitStatus=2; do
        grep -q "^$d" "$u" || fail "autoballoon.service lacks $d"
    done
    # No private /tmp (it would hide QMP and agent sockets there from the daemon; /tmp is
    # read-only under ProtectSystem=strict), and writable only where the daemon writes: not
    # the VMs' socket directory, which it only reads.
    ! grep -q '^PrivateTmp=' "$u" || fail "autoballoon.service has PrivateTmp= (sockets under /tmp would be hidden)"
    [ "$(grep -c '^ReadWritePaths=' "$u")" = 1 ] || fail "autoballoon.service has more than one ReadWritePaths="
    ! grep -q '^ReadWritePaths=.*autoballoon-vms' "$u" || fail "the VMs' socket directory is writable by the daemon"
else
    echo "test-packaging: SKIP systemd-analyze verify: systemd-analyze not installed (Debian package systemd)"
fi

# --- the guest agent's .deb --------------------------------------------------------------
deb="$("$here/build-guest-deb.sh" --agent "$agent" --out "$work/deb" | tail -1)"
[ -f "$deb" ] || fail "no .deb built"
case "$(basename "$deb")" in autoballoon-guest_*_amd64.deb) ;; *) fail "unexpected name $deb" ;; esac
info="$(dpkg-deb --info "$deb")"
contents="$(dpkg-deb --contents "$deb")"
grep -q '^ Package: autoballoon-guest$' <<< "$info" || fail "no Package field: $info"
grep -q '^ Architecture: amd64$' <<< "$info" || fail "no Architecture field"
grep -Eq '^-rwxr-xr-x root/root +[0-9]+ .* \./usr/bin/autoballoon-guest$' <<< "$contents" || fail "no executable /usr/bin/autoballoon-guest: $contents"
grep -Eq ' \./lib/systemd/system/autoballoon-guest\.service$' <<< "$contents" || fail "no unit: $contents"
dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/bin/autoballoon-guest | cmp -s - "$agent" || fail "the packaged binary differs from $agent"
unit="$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./lib/systemd/system/autoballoon-guest.service)"
grep -q '^OOMScoreAdjust=-1000$' <<< "$unit" || fail "unit lacks OOMScoreAdjust"
# Started by the port's device (hot-plug too), not after udev-settle.
grep -qF 'BindsTo=dev-virtio\x2dports-org.autoballoon.agent.0.device' <<< "$unit" || fail "unit not bound to the port's device"
grep -qF 'WantedBy=dev-virtio\x2dports-org.autoballoon.agent.0.device' <<< "$unit" || fail "unit not wanted by the port's device"
! grep -q 'udev-settle' <<< "$unit" || fail "unit still waits on systemd-udev-settle"
grep -Eq ' \./lib/udev/rules\.d/60-autoballoon-guest\.rules$' <<< "$contents" || fail "no udev rule: $contents"
dpkg-deb --fsys-tarfile "$deb" | tar -xO ./lib/udev/rules.d/60-autoballoon-guest.rules | grep -q 'ATTR{name}=="org.autoballoon.agent.0".*TAG+="systemd".*SYSTEMD_WANTS}+="autoballoon-guest.service"' || fail "udev rule does not want the unit"
grep -Eq ' \./usr/share/doc/autoballoon-guest/README\.md$' <<< "$contents" || fail "no README (overcommit documented there)"
grep -q 'vm.overcommit_memory=1' <<< "$info" || fail "the package description does not say it sets vm.overcommit_memory"
echo "test-packaging: $(basename "$deb"): binary, unit (bound to the port's device), udev rule and README present"

# --- the host daemon's .deb --------------------------------------------------------------
deb="$("$here/build-host-deb.sh" --host "$host" --out "$work/deb" | tail -1)"
[ -f "$deb" ] || fail "no host .deb built"
case "$(basename "$deb")" in autoballoon_*_amd64.deb) ;; *) fail "unexpected name $deb" ;; esac
info="$(dpkg-deb --info "$deb")"
contents="$(dpkg-deb --contents "$deb")"
grep -q '^ Package: autoballoon$' <<< "$info" || fail "no Package field: $info"
grep -q '^ Architecture: amd64$' <<< "$info" || fail "no Architecture field"
deps="$(sed -n 's/^ Depends: //p' <<< "$info")"
grep -q 'libc6 (>= [0-9.]*)' <<< "$deps" || fail "Depends lacks libc6: $deps"
# libvirt's library: libvirt domains are managed through its API (no virsh).
grep -Eq '(^|, )libvirt0( |,|$)' <<< "$deps" || fail "Depends lacks libvirt0: $deps"
# Only what the daemon links: the C library, libgcc's unwinder and libvirt's library; no
# QEMU, no libvirt daemon or clients.
extra="$(tr ',' '\n' <<< "$deps" | sed 's/^ *//; s/ .*//' | grep -v -x -e libc6 -e libgcc-s1 -e libvirt0 || true)"
[ -z "$extra" ] || fail "Depends on more than the linked libraries: $deps"
grep -q '^ Suggests: libvirt-daemon-system$' <<< "$info" || fail "no Suggests: libvirt-daemon-system"
grep -q 'conffiles' <<< "$info" || fail "no conffiles: $info"
[ "$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles)" = /etc/autoballoon/host.toml ] || fail "host.toml is not a conffile"
for f in './usr/bin/autoballoon' './lib/systemd/system/autoballoon.service' './etc/autoballoon/host.toml' './usr/lib/tmpfiles.d/autoballoon.conf' './usr/lib/sysusers.d/autoballoon.conf' \
         './usr/share/man/man8/autoballoon.8.gz' './usr/share/doc/autoballoon/copyright' './usr/share/doc/autoballoon/configuration.md' \
         './usr/share/doc/autoballoon/security.md' './usr/share/doc/autoballoon/metrics.md' './usr/share/doc/autoballoon/autoballoon-dashboard.json'; do
    grep -Eq " ${f//./\\.}\$" <<< "$contents" || fail "no $f in the host .deb: $contents"
done
grep -Eq '^-rwxr-xr-x root/root +[0-9]+ .* \./usr/bin/autoballoon$' <<< "$contents" || fail "/usr/bin/autoballoon not executable by all"
x="$work/host-deb"
mkdir -p "$x"
dpkg-deb --extract "$deb" "$x"
cmp -s "$x/usr/bin/autoballoon" "$host" || fail "the packaged binary differs from $host"
cmp -s "$x/lib/systemd/system/autoballoon.service" "$here/systemd/autoballoon.service" || fail "the packaged unit differs"
# The default configuration has no [[vm]], discovers libvirt's domains and the sockets of
# the directory the package creates, and the packaged daemon accepts it without a warning.
check="$("$x/usr/bin/autoballoon" host --check-config --config "$x/etc/autoballoon/host.toml")" || fail "the default host.toml does not pass --check-config: $check"
grep -q '^configuration OK: 0 VM(s)$' <<< "$check" || fail "the default host.toml: $check"
grep -q '^discovery: socket_dir=/run/autoballoon-vms .* libvirt=qemu:///system;' <<< "$check" || fail "the default host.toml does not discover: $check"
! grep -q '^warning:' <<< "$check" || fail "the default host.toml has warnings: $check"
# The socket directory: made by tmpfiles.d (at boot, and by postinst), 1770 root:kvm, the
# same directory host.toml watches.
tmpf="$x/usr/lib/tmpfiles.d/autoballoon.conf"
[ "$(grep -v '^#' "$tmpf" | grep -v '^$')" = 'd /run/autoballoon-vms 1770 root kvm -' ] || fail "tmpfiles.d: $(cat "$tmpf")"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./postinst | grep -q 'systemd-tmpfiles --create autoballoon.conf' || fail "postinst does not create the socket directory"
# Its group: kvm exists on hosts with udev or libvirt, not on every host (a container, a
# minimal image); without it tmpfiles makes no directory. The package declares it
# (sysusers.d), and postinst applies that before tmpfiles (packaging/test-systemd.sh checks it
# on a root without the group).
[ "$(grep -v '^#' "$x/usr/lib/sysusers.d/autoballoon.conf" | grep -v '^$')" = 'g kvm - -' ] || fail "sysusers.d: $(cat "$x/usr/lib/sysusers.d/autoballoon.conf")"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./postinst | grep -A3 'systemd-sysusers autoballoon.conf' | grep -q 'systemd-tmpfiles' || fail "postinst does not apply sysusers.d before tmpfiles.d"
if command -v systemd-tmpfiles >/dev/null; then
    # As postinst runs it, into a scratch root (with this machine's users and groups).
    install -d "$work/tmproot/etc"
    cp /etc/passwd /etc/group "$work/tmproot/etc/"
    systemd-tmpfiles --root="$work/tmproot" --create "$tmpf" 2> "$work/tmpfiles.log" || { cat "$work/tmpfiles.log" >&2; fail "systemd-tmpfiles --create"; }
    [ "$(stat -c '%a %U %G' "$work/tmproot/run/autoballoon-vms")" = "1770 root kvm" ] || fail "socket directory: $(stat -c '%a %U %G' "$work/tmproot/run/autoballoon-vms")"
fi
# The man page is --help's: every subcommand has its section, and it renders.
page="$(gzip -dc "$x/usr/share/man/man8/autoballoon.8.gz")"
for s in HOST STATUS MIGRATE PAUSE RESUME; do
    grep -q "^\.SH \"AUTOBALLOON $s\"" <<< "$page" || fail "man page lacks AUTOBALLOON $s"
done
grep -q 'log\\-level' <<< "$page" || fail "man page lacks --log-level (not generated from this --help?)"
grep -q '^\.SH FILES' <<< "$page" || fail "man page lacks FILES"
if command -v man >/dev/null; then
    warn="$(MANWIDTH=80 man --warnings -l "$x/usr/share/man/man8/autoballoon.8.gz" 2>&1 >/dev/null || true)"
    [ -z "$warn" ] || fail "man page warnings: $warn"
    MANWIDTH=80 man -l "$x/usr/share/man/man8/autoballoon.8.gz" 2>/dev/null | grep -q 'Exit status: 0 success' || fail "man page does not render the exit status"
fi
echo "test-packaging: $(basename "$deb"): binary, unit, conffile (discovery on), socket directory (tmpfiles.d), man page; Depends: $deps"

# --- KubeVirt manifests (no cluster: structure, the script, the configuration it writes) ----
"$here/kubevirt/test-manifest.sh" --host "$host" || fail "packaging/kubevirt/test-manifest.sh"
echo "test-packaging: 4 passed, 0 failed"
