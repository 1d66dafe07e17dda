#!/usr/bin/env bash
# The host .deb under a real systemd as PID 1 (issue 20, "a daemon an operator installs and
# forgets"): boots a minimal Debian 12 root in systemd-nspawn (`-b`), installs the package
# there with `dpkg -i` as an operator would, and checks what the unit promises:
#
#   1. postinst enables and starts autoballoon.service on the packaged, unedited
#      /etc/autoballoon/host.toml: ExecStartPre's --check-config passes, the unit reaches
#      active (running) (Type=notify: READY=1), `systemctl reload` succeeds and the daemon
#      logs the reload, `systemctl stop` ends with exit 0 (Result=success);
#   2. /run/autoballoon-vms is 1770 root:kvm (tmpfiles.d, by postinst), on a root without
#      udev or libvirt, i.e. without a kvm group until the package makes one;
#   3. a fake QEMU (packaging/systemd-test/fake-qmp.py), run as another user with group kvm
#      and a 0700 socket, whose QMP socket appears in /run/autoballoon-vms is discovered
#      and managed (journal: added, managing; the fake sees balloon commands;
#      `autoballoon status` lists it running; metrics name it; systemctl's status line
#      says "managing 1 VM(s)");
#   4. the sandbox holds, seen from the service's own mount namespace (nsenter -m into its
#      MainPID): /root and /home empty, /, /usr, /etc, /var, /tmp, /run,
#      /run/autoballoon-vms and /run/systemd read-only, /run/autoballoon writable, the VM's
#      socket reachable; the process has only CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH,
#      NoNewPrivs and a seccomp filter; `systemd-analyze security` (live) at most 3.0;
#   5. after a reboot of the container: boot ends "running" (no failed unit), the socket
#      directory is made again at boot (1770 root:kvm), the unit is started at boot;
#   6. the watchdog (WatchdogSec=30s): the daemon runs past it with no restart and no
#      timeout; stopped (SIGSTOP), systemd kills it on the watchdog and restarts it.
#
# The Debian root (debootstrap --variant=minbase: systemd, dbus, libvirt0, python3) is
# cached under ~/.cache/autoballoon/nspawn/KEY (KEY: suite, mirror, packages, ROOTFS_VERSION;
# about 1-2 minutes to build, 330 MB); each run boots an overlay of it (changes in a temporary
# directory), so the cached root is never changed. Root only; needs systemd-nspawn
# (systemd-container) and debootstrap. nspawn runs with --register=no --keep-unit, so no
# systemd (machined) is needed on the machine running the test.
#
# Usage: packaging/test-systemd.sh (--host BINARY | --deb FILE) [--keep]
#   --host   the daemon binary to package (packaging/build-host-deb.sh)
#   --deb    an already built host .deb
#   --keep   leave the work directory (journals, boot logs) in place
# Environment: AUTOBALLOON_DEBIAN_MIRROR (http://deb.debian.org/debian), AUTOBALLOON_CACHE.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
ROOTFS_VERSION=1
SUITE=bookworm
MIRROR="${AUTOBALLOON_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# Not udev (whose postinst makes the kvm group on real hosts) nor libvirt: the package must
# make what it needs itself.
PACKAGES=systemd,systemd-sysv,dbus,libvirt0,python3
CACHE="${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}"

host="" deb="" keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        --host) host="$2"; shift ;;
        --deb) deb="$2"; shift ;;
        --keep) keep=1 ;;
        -h|--help) sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "test-systemd: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
fail() { echo "test-systemd: FAIL: $*" >&2; exit 1; }
say() { echo "test-systemd: $*"; }
t0=$SECONDS
elapsed() { echo "$((SECONDS - t0)) s"; }

[ "$(id -u)" = 0 ] || fail "must run as root (systemd-nspawn, overlay mounts)"
command -v systemd-nspawn >/dev/null || fail "systemd-nspawn not found (Debian package systemd-container)"
command -v debootstrap >/dev/null || fail "debootstrap not found (Debian package debootstrap)"
[ -n "$host$deb" ] || { echo "test-systemd: need --host BINARY or --deb FILE" >&2; exit 2; }

work="$(mktemp -d /var/tmp/autoballoon-systemd-test.XXXXXX)"
machine="abtest-$$"
nspawn_pid=""
cleanup() {
    local rc=$?
    if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
        poweroff_container || true
    fi
    mountpoint -q "$work/root" 2>/dev/null && umount "$work/root"
    rm -rf "/run/systemd/nspawn/propagate/$machine"
    if [ "$keep" = 1 ] || [ "$rc" != 0 ]; then
        say "work directory kept: $work (boot logs, journal.txt)"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT

# --- the package ---------------------------------------------------------------------
if [ -z "$deb" ]; then
    [ -x "$host" ] || fail "no daemon binary at $host"
    deb="$("$here/build-host-deb.sh" --host "$host" --out "$work/deb" | tail -1)"
fi
[ -f "$deb" ] || fail "no .deb at $deb"
dpkg-deb --extract "$deb" "$work/pkg"

# --- the cached Debian root ----------------------------------------------------------
key="$(printf '%s\n' "$ROOTFS_VERSION" "$SUITE" "$MIRROR" "$PACKAGES" | sha256sum | cut -c1-16)"
base="$CACHE/nspawn/$key"
if [ ! -d "$base/root" ]; then
    say "building a Debian $SUITE root with debootstrap into $base (once; about 1-2 min) ..."
    rm -rf "$base.tmp"
    mkdir -p "$base.tmp"
    if ! nice -n 19 debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$base.tmp/root" "$MIRROR" > "$base.tmp/debootstrap.log" 2>&1; then
        tail -20 "$base.tmp/debootstrap.log" >&2
        fail "debootstrap $SUITE from $MIRROR (log: $base.tmp/debootstrap.log)"
    fi
    r="$base.tmp/root"
    echo autoballoon-test > "$r/etc/hostname"
    # An empty machine-id: systemd makes a transient one at each boot.
    : > "$r/etc/machine-id"
    # The fake QEMU's user: not in group kvm (the unit runs it with Group=kvm).
    chroot "$r" useradd --system --no-create-home --shell /usr/sbin/nologin fakeqemu
    chroot "$r" apt-get clean
    mv "$base.tmp" "$base"
    # Roots of older keys go.
    find "$CACHE/nspawn" -mindepth 1 -maxdepth 1 ! -name "$key" -exec rm -rf {} +
    say "Debian root ready ($(elapsed))"
fi

# --- an overlay of it for this run -----------------------------------------------------
mkdir -p "$work/upper" "$work/ovl" "$work/root"
mount -t overlay overlay -o "lowerdir=$base/root,upperdir=$work/upper,workdir=$work/ovl" "$work/root" \
    || fail "overlay mount of $base/root"
install -m 0644 "$deb" "$work/root/var/tmp/autoballoon.deb"
install -m 0755 "$here/systemd-test/fake-qmp.py" "$work/root/usr/local/bin/fake-qmp"
# Files the unit must hide (ProtectHome=yes).
mkdir -p "$work/root/home/alice"
echo secret > "$work/root/home/alice/marker"
echo secret > "$work/root/root/marker"

leader=""
# Runs a command in the container (all its namespaces).
ct() { nsenter -t "$leader" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C "$@"; }
boot() {
    local n="$1" state=""
    say "booting the container ($n) ..."
    systemd-nspawn -q -D "$work/root" -b --register=no --keep-unit --private-network -M "$machine" \
        --console=pipe < /dev/null > "$work/boot-$n.log" 2>&1 &
    nspawn_pid=$!
    for _ in $(seq 100); do
        leader="$(pgrep -P "$nspawn_pid" | head -1 || true)"
        [ -n "$leader" ] && ct test -S /run/systemd/private 2>/dev/null && break
        kill -0 "$nspawn_pid" 2>/dev/null || { cat "$work/boot-$n.log" >&2; fail "systemd-nspawn exited during boot ($n)"; }
        sleep 0.2
    done
    [ -n "$leader" ] || fail "no init in the container ($n)"
    state="$(timeout 90 nsenter -t "$leader" -a systemctl is-system-running --wait 2>/dev/null || true)"
    if [ "$state" != running ]; then
        ct systemctl --failed --no-pager >&2 || true
        ct journalctl -b -p warning --no-pager >&2 || true
        fail "boot $n: system state '$state', not 'running' (failed units above)"
    fi
    say "booted ($n): system running, $(ct systemctl --version | head -1) as PID 1 ($(elapsed))"
}
poweroff_container() {
    [ -n "$leader" ] && ct systemctl poweroff --no-block > /dev/null 2>&1 || kill -TERM "$nspawn_pid" 2>/dev/null || true
    for _ in $(seq 150); do
        kill -0 "$nspawn_pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$nspawn_pid" 2>/dev/null; then
        kill -KILL "$nspawn_pid" 2>/dev/null || true
        echo "test-systemd: the container did not power off within 30 s: killed" >&2
    fi
    wait "$nspawn_pid" 2>/dev/null || true
    nspawn_pid="" leader=""
}
journal() { ct journalctl -b --no-pager -o cat -u "$1"; }
# Waits up to $1 seconds for a command to succeed.
until_ok() {
    local secs="$1"; shift
    for _ in $(seq $((secs * 5))); do "$@" > /dev/null 2>&1 && return 0; sleep 0.2; done
    return 1
}
prop() { ct systemctl show -p "$2" --value "$1"; }

# === boot 1: the operator installs the package ==========================================
boot 1
ct test ! -e /lib/systemd/system/autoballoon.service || fail "the cached root has autoballoon installed"
ct getent group kvm > /dev/null && fail "the root has a kvm group already: the test would not see whether the package makes it"
install_log="$(ct dpkg -i /var/tmp/autoballoon.deb 2>&1)" || { echo "$install_log" >&2; fail "dpkg -i"; }
# postinst swallows its helpers' failures (|| true): their messages are the only trace.
if grep -Ei 'fail|error|warn' <<< "$install_log"; then
    fail "dpkg -i printed errors (above)"
fi
say "installed $(basename "$deb") with dpkg -i"

# 1. started by postinst, on the packaged configuration.
ct cmp -s /etc/autoballoon/host.toml /dev/stdin < "$work/pkg/etc/autoballoon/host.toml" || fail "/etc/autoballoon/host.toml is not the packaged one"
[ "$(ct systemctl is-enabled autoballoon.service)" = enabled ] || fail "autoballoon.service not enabled by postinst"
until_ok 15 ct systemctl is-active --quiet autoballoon.service || { ct systemctl status --no-pager autoballoon >&2 || true; fail "autoballoon.service not active 15 s after install"; }
[ "$(prop autoballoon SubState)" = running ] || fail "autoballoon.service: SubState $(prop autoballoon SubState)"
grep -q 'status=0' <<< "$(prop autoballoon ExecStartPre)" || fail "ExecStartPre (--check-config) did not exit 0: $(prop autoballoon ExecStartPre)"
journal autoballoon | grep -q '^configuration OK: 0 VM(s)$' || fail "ExecStartPre did not say 'configuration OK': $(journal autoballoon)"
! journal autoballoon | grep -q '^warning:' || fail "--check-config warned: $(journal autoballoon | grep '^warning:')"
main="$(prop autoballoon MainPID)"
[ "$main" -gt 0 ] || fail "no MainPID"
say "1. autoballoon.service active (running), MainPID $main, ExecStartPre passed, packaged host.toml"

# 2. the socket directory.
got="$(ct stat -c '%a %U %G' /run/autoballoon-vms 2>&1)" || fail "no /run/autoballoon-vms after install: $got"
[ "$got" = "1770 root kvm" ] || fail "/run/autoballoon-vms is '$got', not '1770 root kvm'"
say "2. /run/autoballoon-vms: 1770 root:kvm"

# 3. a fake QEMU of another user in the socket directory.
ct systemd-run -q --unit=fake-vm1 -p User=fakeqemu -p Group=kvm -p UMask=0077 \
    /usr/local/bin/fake-qmp /run/autoballoon-vms/vm1.qmp 1024 || fail "systemd-run fake-vm1"
until_ok 10 ct test -S /run/autoballoon-vms/vm1.qmp || fail "the fake QEMU made no socket: $(journal fake-vm1)"
[ "$(ct stat -c '%a %U' /run/autoballoon-vms/vm1.qmp)" = "700 fakeqemu" ] || fail "fake socket: $(ct stat -c '%a %U' /run/autoballoon-vms/vm1.qmp)"
until_ok 15 sh -c "nsenter -t $leader -a autoballoon status | grep -Eq '^vm1 +running '" \
    || fail "vm1 not running ct autoballoon status: $(ct autoballoon status 2>&1); journal: $(journal autoballoon | tail -5)"
journal autoballoon | grep -q '\[vm1\] added (discovered socket): qmp=/run/autoballoon-vms/vm1.qmp' || fail "no 'added (discovered socket)' for vm1: $(journal autoballoon | tail -5)"
journal autoballoon | grep -q '\[vm1\] managing qmp=/run/autoballoon-vms/vm1.qmp' || fail "no 'managing' for vm1: $(journal autoballoon | tail -5)"
until_ok 10 sh -c "nsenter -t $leader -a journalctl -b --no-pager -o cat -u fake-vm1 | grep -q '^balloon [0-9]'" || fail "the fake QEMU got no balloon command: $(journal fake-vm1)"
# systemd's status line follows discovery (STATUS= from the daemon).
until_ok 5 sh -c "[ \"\$(nsenter -t $leader -a systemctl show -p StatusText --value autoballoon)\" = 'managing 1 VM(s)' ]" \
    || fail "systemctl status says '$(prop autoballoon StatusText)', not 'managing 1 VM(s)'"
metrics="$(ct python3 -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.1:9848/metrics", timeout=5).read().decode())')" || fail "metrics endpoint"
grep -q 'autoballoon_vm_size_bytes{vm="vm1"}' <<< "$metrics" || fail "metrics do not name vm1"
say "3. fake QEMU vm1 (user fakeqemu, socket 0700) discovered and managed: $(ct autoballoon status | grep -E '^vm1 ' | tr -s ' ')"

# 4. the sandbox, from the service's mount namespace.
sandbox="$(ct nsenter -t "$main" -m sh -c '
    for d in /root /home; do [ -z "$(ls -A "$d" 2>/dev/null)" ] && echo "hidden $d" || echo "VISIBLE $d: $(ls -A "$d")"; done
    for d in / /usr /etc /var /tmp /run /run/autoballoon-vms /run/systemd /run/lock; do
        if out="$(touch "$d/.abprobe" 2>&1)"; then rm -f "$d/.abprobe"; echo "WRITABLE $d"; else echo "ro $d: ${out##*: }"; fi
    done
    if touch /run/autoballoon/.abprobe; then rm -f /run/autoballoon/.abprobe; echo "rw /run/autoballoon"; else echo "NOT-WRITABLE /run/autoballoon"; fi
    python3 -c "import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"/run/autoballoon-vms/vm1.qmp\")" && echo "connect /run/autoballoon-vms/vm1.qmp" || echo "NO-CONNECT /run/autoballoon-vms/vm1.qmp"
' 2>&1)" || fail "nsenter into the service's mount namespace: $sandbox"
echo "$sandbox" | sed 's/^/test-systemd:    /'
bad="$(grep -E '^(VISIBLE|WRITABLE|NOT-WRITABLE|NO-CONNECT)' <<< "$sandbox" || true)"
grep -Eq '^ro / ?:' <<< "$sandbox" || bad="$bad${bad:+$'\n'}/ not read-only"
[ -z "$bad" ] || fail "the sandbox does not hold: $bad"
status="$(ct cat "/proc/$main/status")"
for want in 'CapEff:	0000000000000006' 'CapBnd:	0000000000000006' 'CapAmb:	0000000000000000' 'NoNewPrivs:	1' 'Seccomp:	2'; do
    grep -qF "$want" <<< "$status" || fail "the daemon's /proc/PID/status lacks '$want': $(grep -E 'Cap|NoNew|Seccomp' <<< "$status")"
done
sec="$(ct systemd-analyze security --no-pager --threshold=30 autoballoon.service 2>&1)" || { tail -3 <<< "$sec" >&2; fail "systemd-analyze security (live): exposure above 3.0"; }
say "4. sandbox holds (only /run/autoballoon writable; /root, /home hidden; caps DAC_OVERRIDE+DAC_READ_SEARCH, NoNewPrivs, seccomp); live $(grep -o 'Overall exposure level.*' <<< "$sec")"

# 1 (cont.). reload and stop.
ct systemctl reload autoballoon.service 2>&1 || { ct systemctl status --no-pager autoballoon >&2 || true; fail "systemctl reload autoballoon"; }
until_ok 5 sh -c "nsenter -t $leader -a journalctl -b --no-pager -o cat -u autoballoon | grep -q 'reloaded /etc/autoballoon/host.toml'" || fail "no 'reloaded' in the journal after systemctl reload: $(journal autoballoon | tail -3)"
[ "$(prop autoballoon MainPID)" = "$main" ] || fail "reload restarted the daemon (MainPID $main -> $(prop autoballoon MainPID))"
ct systemctl is-active --quiet autoballoon.service || fail "not active after reload"
ct systemctl stop autoballoon.service || fail "systemctl stop autoballoon"
res="$(prop autoballoon Result) $(prop autoballoon ExecMainCode) $(prop autoballoon ExecMainStatus)"
# ExecMainCode 1: CLD_EXITED (exited, not killed).
[ "$res" = "success 1 0" ] || fail "systemctl stop: Result, ExecMainCode, ExecMainStatus = $res (want success 1 0)"
say "1. systemctl reload: re-read in place (same MainPID); systemctl stop: exit 0"
ct journalctl -b --no-pager > "$work/journal-1.txt" 2>&1 || true
poweroff_container

# === boot 2: as after a reboot of the host ==============================================
boot 2
got="$(ct stat -c '%a %U %G' /run/autoballoon-vms 2>&1)" || fail "no /run/autoballoon-vms after reboot (tmpfiles.d at boot): $got"
[ "$got" = "1770 root kvm" ] || fail "after reboot /run/autoballoon-vms is '$got'"
until_ok 15 ct systemctl is-active --quiet autoballoon.service || fail "autoballoon.service not started at boot: $(ct systemctl status --no-pager autoballoon 2>&1)"
[ "$(ct stat -c '%a' /run/autoballoon/status.sock)" = 600 ] || fail "status socket mode $(ct stat -c '%a' /run/autoballoon/status.sock)"
ct autoballoon status > /dev/null || fail "autoballoon status after reboot"
say "5. after reboot: boot clean, /run/autoballoon-vms 1770 root:kvm made at boot, autoballoon.service started at boot"

# 6. the watchdog: a daemon that runs pings it past WatchdogSec; one that stops is killed and
#    restarted by systemd.
wd_us="$(prop autoballoon WatchdogUSec)"
case "$wd_us" in 30s) wd=30 ;; *) fail "WatchdogUSec is '$wd_us', not 30s" ;; esac
main="$(prop autoballoon MainPID)"
# Seconds the unit has been active, and whether systemd restarted it once and it runs again
# (until_ok runs its command in this shell: functions do).
up_s() { echo $(( ($(ct cut -d. -f1 /proc/uptime) * 1000000 - $(prop autoballoon ActiveEnterTimestampMonotonic)) / 1000000 )); }
up_at_least() { [ "$(up_s)" -ge "$1" ]; }
restarted_once() { [ "$(prop autoballoon NRestarts)" = 1 ] && ct systemctl is-active --quiet autoballoon.service; }
say "6. watchdog: waiting until the daemon has run $((wd + 5)) s (WatchdogSec $wd s)"
until_ok $((wd + 20)) up_at_least $((wd + 5)) \
    || fail "the daemon did not stay up $((wd + 5)) s: up $(up_s) s, $(ct systemctl status --no-pager autoballoon 2>&1 | head -5)"
[ "$(prop autoballoon MainPID)" = "$main" ] && [ "$(prop autoballoon NRestarts)" = 0 ] || fail "restarted within $((wd + 5)) s: MainPID $main -> $(prop autoballoon MainPID), NRestarts $(prop autoballoon NRestarts)"
! journal autoballoon | grep -qi 'watchdog timeout' || fail "watchdog timeout while running: $(journal autoballoon | grep -i watchdog)"
ct sh -c "kill -STOP $main"  # the shell's kill: the root has no procps
until_ok $((wd + 20)) restarted_once \
    || fail "a stopped daemon was not restarted by the watchdog within $((wd + 20)) s: NRestarts $(prop autoballoon NRestarts), $(journal autoballoon | tail -3)"
journal autoballoon | grep -qi 'watchdog timeout' || fail "restarted, but not by the watchdog: $(journal autoballoon | tail -5)"
[ "$(prop autoballoon MainPID)" != "$main" ] || fail "same MainPID after the restart"
say "6. watchdog: up $((wd + 5)) s with no restart; SIGSTOPped, killed by the watchdog and restarted (MainPID $main -> $(prop autoballoon MainPID))"
ct journalctl -b --no-pager > "$work/journal-2.txt" 2>&1 || true
poweroff_container
say "6 passed, 0 failed ($(elapsed))"
