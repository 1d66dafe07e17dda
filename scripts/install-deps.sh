#!/usr/bin/env bash
# Install what autoballoon's build, guest image and VM tests need on a Debian 12 machine.
#
# Idempotent: a machine that already has everything prints one line per check and changes
# nothing. Missing Debian packages are installed with apt-get (root only; `apt-get update`
# runs at most once). A Rust toolchain cannot be downloaded here (no rustup), so a missing
# cargo is reported and the script exits 1.
#
# Usage: scripts/install-deps.sh [--no-rust]
#        scripts/install-deps.sh --only PKG...
#   --no-rust   only the Debian packages (e.g. for a machine that only boots guests)
#   --only      just these Debian packages, no Rust check (the kernel scripts' needs)
set -euo pipefail

# python3-prometheus-client: the metrics endpoint's test parses the scraped text with it
# (and with promtool too where Debian's `prometheus` server package happens to be
# installed). systemd (systemd-analyze) and dpkg: the packaging test; python3-yaml: its
# check of the KubeVirt manifests (packaging/kubevirt/test-manifest.sh). libvirt-dev and
# pkg-config: the host daemon links libvirt's library (libvirt0, through the `virt` crate,
# whose build finds it with pkg-config), so nothing compiles the host crate without them.
# libvirt (daemon, QEMU driver, virsh): VMs managed by libvirt domain and their test
# (crates/testbed/tests/libvirt.rs, which starts libvirtd itself where no systemd runs it,
# and creates its domain with virsh).
PKGS=(qemu-system-x86 busybox-static cpio gcc libc6-dev xz-utils zstd file ca-certificates
      python3-prometheus-client python3-yaml systemd dpkg pkg-config libvirt-dev
      libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients)
want_rust=1
while [ $# -gt 0 ]; do
    case "$1" in
        --no-rust) want_rust=0 ;;
        --only) shift; PKGS=("$@"); want_rust=0; break ;;
        -h|--help) . "$(dirname "$0")/lib/qemu-build.sh"; qb_usage "$0"; exit 0 ;;
        *) echo "install-deps: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
[ ${#PKGS[@]} -gt 0 ] || { echo "install-deps: --only needs package names" >&2; exit 2; }

say() { echo "install-deps: $*"; }

# --- Debian packages ---------------------------------------------------------------------
missing=()
for p in "${PKGS[@]}"; do
    # "install ok installed" only; a removed-but-configured package does not count.
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    say "debian packages: all ${#PKGS[@]} present (${PKGS[*]})"
else
    if [ "$(id -u)" -ne 0 ]; then
        say "missing debian packages: ${missing[*]}" >&2
        say "not root: run as root, or: sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    say "missing debian packages: ${missing[*]}"
    say "running: apt-get update"
    apt-get update -qq
    say "running: apt-get install -y --no-install-recommends ${PKGS[*]}"
    apt-get install -y -qq --no-install-recommends "${PKGS[@]}"
    # Verify, so a half-failed install is loud here rather than later.
    for p in "${missing[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' \
            || { say "ERROR: $p still not installed" >&2; exit 1; }
    done
    say "debian packages: installed ${missing[*]}"
fi

# --- Rust toolchain ----------------------------------------------------------------------
if [ "$want_rust" -eq 1 ]; then
    cargo_bin=""
    if command -v cargo >/dev/null 2>&1; then
        cargo_bin="$(command -v cargo)"
    elif [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
        cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin/cargo"
        say "note: cargo is not on PATH; add ${CARGO_HOME:-$HOME/.cargo}/bin to PATH"
    fi
    if [ -z "$cargo_bin" ]; then
        say "ERROR: no Rust toolchain (cargo not on PATH nor in ${CARGO_HOME:-$HOME/.cargo}/bin)." >&2
        say "rustup cannot download toolchains on this network; install Rust on the machine image" >&2
        say "(Debian's 'cargo'/'rustc' packages are too old for this workspace's rust-version)." >&2
        exit 1
    fi
    say "rust: $("$cargo_bin" --version 2>/dev/null || echo "$cargo_bin (version unknown)")"
fi
