#!/usr/bin/env bash
# Checks packaging/kubevirt without a cluster (none runs here): both manifests parse as
# YAML with the structure the DaemonSet needs (every mount has its volume, the ConfigMap
# holds the script and the configuration the container reads, the metrics port is the one
# host.toml listens on), the ConfigMap's script is packaging/kubevirt/autoballoon-kubevirt.sh,
# the script renders one [[vm]] per domain of a fake kubelet pods tree (unix sockets where
# virt-launcher's would be, a fake virsh) and the daemon accepts what it wrote
# (`autoballoon host --check-config`), and the VM example's hook adds the agent's channel
# to a domain's XML. Run by packaging/test-packaging.sh (`make packaging-test`, in
# `make test`). Needs python3 with PyYAML (Debian: python3-yaml).
#
# Usage: packaging/kubevirt/test-manifest.sh --host HOST_BINARY
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
host=""
while [ $# -gt 0 ]; do
    case "$1" in
        --host) host="$2"; shift ;;
        *) echo "test-manifest: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
[ -x "$host" ] || { echo "test-manifest: need --host HOST_BINARY" >&2; exit 2; }
fail() { echo "test-manifest: FAIL: $*" >&2; exit 1; }
python3 -c 'import yaml' 2>/dev/null || fail "python3 has no yaml module (apt-get install python3-yaml)"
work="$(mktemp -d)"
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

# --- the manifests' structure --------------------------------------------------------------
python3 - "$here" "$work" <<'PY' || fail "manifest structure"
import sys, yaml, pathlib
here, work = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
def fail(msg):
    sys.exit(f"test-manifest: {msg}")
docs = [d for d in yaml.safe_load_all((here / "daemonset.yaml").read_text()) if d]
kinds = {d["kind"]: d for d in docs}
if sorted(kinds) != ["ConfigMap", "DaemonSet", "Namespace"]:
    fail(f"daemonset.yaml has {sorted(kinds)}")
ns = kinds["Namespace"]["metadata"]["name"]
for d in docs[1:]:
    if d["metadata"].get("namespace") != ns:
        fail(f"{d['kind']} is not in the namespace {ns}")
cm, ds = kinds["ConfigMap"], kinds["DaemonSet"]
if ds["apiVersion"] != "apps/v1" or cm["apiVersion"] != "v1":
    fail("apiVersions")
script = (here / "autoballoon-kubevirt.sh").read_text()
if cm["data"].get("autoballoon-kubevirt.sh") != script:
    fail("the ConfigMap's autoballoon-kubevirt.sh differs from packaging/kubevirt/autoballoon-kubevirt.sh")
(work / "host.toml").write_text(cm["data"]["host.toml"])
spec = ds["spec"]
labels = spec["template"]["metadata"]["labels"]
if any(labels.get(k) != v for k, v in spec["selector"]["matchLabels"].items()):
    fail("the selector does not match the pod template's labels")
pod = spec["template"]["spec"]
volumes = {v["name"]: v for v in pod["volumes"]}
(c,) = pod["containers"]
mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
for m in c["volumeMounts"]:
    if m["name"] not in volumes:
        fail(f"mount {m['mountPath']} names no volume {m['name']}")
if len({m["name"] for m in c["volumeMounts"]}) != len(volumes):
    fail("a volume is not mounted")
# The command and BASE read files of the ConfigMap's volume.
cm_mounts = [p for p, m in mounts.items() if "configMap" in volumes[m["name"]] and volumes[m["name"]]["configMap"]["name"] == cm["metadata"]["name"]]
if len(cm_mounts) != 1:
    fail("the ConfigMap is not mounted once")
env = {e["name"]: e["value"] for e in c.get("env", [])}
for path in [c["command"][-1], env["BASE"]]:
    d, _, key = path.rpartition("/")
    if d != cm_mounts[0] or key not in cm["data"]:
        fail(f"{path} is not a key of the ConfigMap's mount {cm_mounts[0]}")
kubelet = volumes["kubelet-pods"]["hostPath"]["path"]
if env["PODS"] != kubelet or kubelet not in mounts or not mounts[kubelet].get("readOnly"):
    fail("the kubelet's pods directory is not mounted read-only where PODS points")
conf_dir = env["CONF"].rpartition("/")[0]
if conf_dir not in mounts or "emptyDir" not in volumes[mounts[conf_dir]["name"]]:
    fail("CONF is not on a writable emptyDir")
if not c["securityContext"].get("readOnlyRootFilesystem"):
    fail("the root filesystem is writable")
port = {p["name"]: p["containerPort"] for p in c["ports"]}["metrics"]
if f':{port}"' not in cm["data"]["host.toml"]:
    fail(f"host.toml's metrics_listen is not on the container's port {port}")
if c["livenessProbe"]["httpGet"]["port"] != "metrics":
    fail("the liveness probe is not the metrics port")
if pod["nodeSelector"] != {"kubevirt.io/schedulable": "true"}:
    fail("not on virt-handler's nodes")
# The VM example: its hook's ConfigMap is the one the annotation names, in the VM's namespace.
ex = [d for d in yaml.safe_load_all((here / "vm-example.yaml").read_text()) if d]
hook_cm = next(d for d in ex if d["kind"] == "ConfigMap")
vm = next(d for d in ex if d["kind"] == "VirtualMachine")
import json
(sidecar,) = json.loads(vm["spec"]["template"]["metadata"]["annotations"]["hooks.kubevirt.io/hookSidecars"])
ref = sidecar["configMap"]
if ref["name"] != hook_cm["metadata"]["name"] or ref["key"] not in hook_cm["data"] or hook_cm["metadata"]["namespace"] != vm["metadata"]["namespace"]:
    fail("the VM's hook names no key of its ConfigMap in its namespace")
(work / "hook.sh").write_text(hook_cm["data"][ref["key"]])
PY

# --- the script ---------------------------------------------------------------------------
bash -n "$here/autoballoon-kubevirt.sh" || fail "bash -n autoballoon-kubevirt.sh"
if command -v shellcheck >/dev/null; then
    shellcheck "$here/autoballoon-kubevirt.sh" || fail "shellcheck autoballoon-kubevirt.sh"
fi

# A kubelet pods tree (one VMI per launcher pod): two non-root launchers (virtqemud, session
# URI), one with the agent's socket, a root one (libvirtd, system URI), a pod without
# libvirt, and a launcher whose libvirt does not answer.
pods="$work/pods"
rt() { echo "$pods/$1/volumes/kubernetes.io~empty-dir/libvirt-runtime"; }
mkdir -p "$(rt uid-a)" "$(rt uid-b)" "$(rt uid-c)" "$(rt uid-dead)" "$pods/uid-other/volumes/kubernetes.io~empty-dir/data"
python3 - "$(rt uid-a)/virtqemud-sock" "$(rt uid-a)/autoballoon.agent" "$(rt uid-b)/libvirt-sock" "$(rt uid-c)/virtqemud-sock" "$(rt uid-dead)/virtqemud-sock" <<'PY'
import socket, sys
for p in sys.argv[1:]:
    socket.socket(socket.AF_UNIX).bind(p)
PY
cat > "$work/virsh" <<EOF
#!/bin/sh
# virsh -c URI list --name
case "\$2" in
    "qemu+unix:///session?socket=$(rt uid-a)/virtqemud-sock") printf 'default_web1\n\n' ;;
    "qemu+unix:///session?socket=$(rt uid-c)/virtqemud-sock") printf 'prod_db-2\n\n' ;;
    "qemu+unix:///system?socket=$(rt uid-b)/libvirt-sock") printf 'ns2_cache\n' ;;
    *) echo "error: failed to connect to the hypervisor" >&2; exit 1 ;;
esac
EOF
chmod +x "$work/virsh"
PODS="$pods" BASE="$work/host.toml" VIRSH="$work/virsh" bash "$here/autoballoon-kubevirt.sh" render > "$work/out.toml" || fail "render"
grep -c '^\[\[vm\]\]$' "$work/out.toml" | grep -qx 3 || fail "expected 3 VMs: $(cat "$work/out.toml")"
grep -qx "libvirt_uri = \"qemu+unix:///session?socket=$(rt uid-a)/virtqemud-sock\"" "$work/out.toml" || fail "session URI: $(cat "$work/out.toml")"
grep -qx "libvirt_uri = \"qemu+unix:///system?socket=$(rt uid-b)/libvirt-sock\"" "$work/out.toml" || fail "system URI: $(cat "$work/out.toml")"
[ "$(grep -c '^agent = ' "$work/out.toml")" = 1 ] || fail "the agent's socket of uid-a's domain only: $(cat "$work/out.toml")"
grep -qx "agent = \"$(rt uid-a)/autoballoon.agent\"" "$work/out.toml" || fail "uid-a's agent: $(cat "$work/out.toml")"
checked="$("$host" host --check-config --config "$work/out.toml" 2>&1)" || fail "autoballoon host --check-config refused the rendered file: $checked"
for vm in default_web1 prod_db-2 ns2_cache; do
    grep -q "$vm" <<< "$checked" || fail "--check-config does not list $vm: $checked"
done
# No launcher at all: the base alone, which the daemon accepts (it waits for VMs).
PODS="$work/none" BASE="$work/host.toml" VIRSH="$work/virsh" bash "$here/autoballoon-kubevirt.sh" render > "$work/empty.toml"
"$host" host --check-config --config "$work/empty.toml" > /dev/null 2>&1 || fail "--check-config refused the base configuration"

# --- the VM example's hook ------------------------------------------------------------------
domain='<domain type="kvm"><name>default_web1</name><devices><memballoon model="virtio" freePageReporting="on"><stats period="10"></stats></memballoon></devices></domain>'
sh "$work/hook.sh" --vmi '{}' --domain "$domain" > "$work/domain.xml" || fail "the hook failed"
python3 - "$work/domain.xml" <<'PY' || fail "the hook's domain: $(cat "$work/domain.xml")"
import sys, xml.etree.ElementTree as ET
d = ET.parse(sys.argv[1]).getroot()
(ch,) = d.findall("./devices/channel")
assert ch.get("type") == "unix" and ch.find("source").get("mode") == "bind"
assert ch.find("source").get("path") == "/var/run/libvirt/autoballoon.agent"
assert ch.find("target").get("name") == "org.autoballoon.agent.0"
mb = d.find("./devices/memballoon")
assert mb.get("autodeflate") == "on" and mb.get("freePageReporting") == "on"
PY
echo "test-manifest: ok (daemonset.yaml, vm-example.yaml, autoballoon-kubevirt.sh)"
