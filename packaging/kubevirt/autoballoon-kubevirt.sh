#!/usr/bin/env bash
# The entry point of the autoballoon DaemonSet on a KubeVirt node (docs/kubevirt.md).
#
# Every virt-launcher pod runs its own libvirt daemon, whose socket lies in the pod's
# emptyDir `libvirt-runtime`, seen from the node as
#   $PODS/<pod uid>/volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock
# (libvirt-sock with a monolithic libvirtd). The daemon's `[discovery] libvirt` watches one
# libvirt URI; here there is one per pod, so this script writes the configuration itself:
# the base file's [controller] and [defaults], then one [[vm]] per domain each launcher's
# libvirt lists (a VMI's domain is named NAMESPACE_NAME), with that launcher's URI and, if
# the VMI has the agent's channel (docs/kubevirt.md), its socket `autoballoon.agent` in the
# same emptyDir. It starts the daemon, rewrites the file every $SCAN seconds and sends the
# daemon SIGHUP when it changed (a reload adds and removes VMs at once), and passes
# SIGTERM on.
#
# Environment: PODS (/var/lib/kubelet/pods), BASE (/etc/autoballoon-base/host.toml),
# CONF (/run/autoballoon/host.toml), SCAN (10), AUTOBALLOON (autoballoon), VIRSH (virsh).
# `autoballoon-kubevirt.sh render` prints the configuration once and exits (for tests).
set -u
PODS="${PODS:-/var/lib/kubelet/pods}"
BASE="${BASE:-/etc/autoballoon-base/host.toml}"
CONF="${CONF:-/run/autoballoon/host.toml}"
SCAN="${SCAN:-10}"
AUTOBALLOON="${AUTOBALLOON:-autoballoon}"
VIRSH="${VIRSH:-virsh}"

# One [[vm]] table per domain of every launcher on the node, in a stable order.
render() {
    cat "$BASE"
    local sock dir uri doms d
    for sock in "$PODS"/*/volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock \
                "$PODS"/*/volumes/kubernetes.io~empty-dir/libvirt-runtime/libvirt-sock; do
        [ -S "$sock" ] || continue
        dir="${sock%/*}"
        doms=""
        # Non-root launchers (KubeVirt's default) run a session daemon, root ones a system one.
        for uri in "qemu+unix:///session?socket=$sock" "qemu+unix:///system?socket=$sock"; do
            if doms="$(timeout 5 "$VIRSH" -c "$uri" list --name 2>/dev/null)"; then
                break
            fi
            doms=""
        done
        for d in $doms; do
            # Domain names are NAMESPACE_NAME, both DNS labels: nothing to escape in TOML.
            case "$d" in *[!a-z0-9._-]*) continue ;; esac
            printf '\n[[vm]]\nname = "%s"\nlibvirt_domain = "%s"\nlibvirt_uri = "%s"\n' "$d" "$d" "$uri"
            if [ -S "$dir/autoballoon.agent" ]; then
                printf 'agent = "%s"\n' "$dir/autoballoon.agent"
            fi
        done
    done
}

write_conf() {
    render > "$CONF.new" || return 1
    if cmp -s "$CONF.new" "$CONF"; then
        rm -f "$CONF.new"
        return 1
    fi
    mv "$CONF.new" "$CONF"
}

if [ "${1:-}" = render ]; then
    render
    exit 0
fi

mkdir -p "$(dirname "$CONF")"
write_conf || true
"$AUTOBALLOON" host --config "$CONF" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null; wait "$pid"; exit $?' TERM INT
while kill -0 "$pid" 2>/dev/null; do
    sleep "$SCAN" &
    wait $!
    if write_conf; then
        kill -HUP "$pid" 2>/dev/null || true
    fi
done
wait "$pid"
