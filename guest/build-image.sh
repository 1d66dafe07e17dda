#!/usr/bin/env bash
# Build (or find in the cache) a bootable autoballoon test guest: a Debian kernel plus a
# busybox initramfs with the guest agent and the spike/fill workloads. See guest/README.md.
#
# Usage:
#   guest/build-image.sh --agent PATH|none [--kernel-pkg PKG|6.1|6.12] [--print-dir]
#   guest/build-image.sh --agent PATH|none --vmlinuz FILE [--modules-dir DIR] [--print-dir]
#
#   --agent PATH       the autoballoon-guest binary (static; a dynamic one gets its shared
#                      libraries copied in, with a warning). "none": no agent in the image.
#   --kernel-pkg PKG   Debian kernel package, e.g. linux-image-6.1.0-56-amd64 or
#                      linux-image-6.12.117+deb12-amd64-unsigned.
#                      "6.1" (default): the one linux-image-amd64 depends on.
#                      "6.12": the newest linux-image-6.12.*+deb12-amd64-unsigned.
#   --vmlinuz FILE     use a locally built kernel instead of a package (e.g. the patched
#                      one); --modules-dir DIR is searched recursively for the virtio
#                      modules (without it they must be built in).
#   --print-dir        no progress output: stdout is only the image directory.
#
# stdout: one line, the image directory, which holds vmlinuz, initrd.img, manifest.json.
# Progress goes to stderr. The image is cached under
#   ${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}/guest/<hash>/
# keyed by a hash of every input, so a second run with the same inputs prints the
# directory at once. Kernel packages are downloaded to .../debs/ and deleted once the
# kernel and its virtio modules are extracted to .../kernels/<pkg>_<version>/
# (AUTOBALLOON_KEEP_DEBS=1 keeps them).
set -euo pipefail
set -E
trap 'echo "build-image: error: command failed at line $LINENO: $BASH_COMMAND" >&2' ERR

SELF="$(readlink -f "${BASH_SOURCE[0]}")"
GUEST_DIR="$(dirname "$SELF")"
CACHE="${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}"
# Load order; each module's own dependencies are checked against this list at build time.
MODULES=(virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_balloon virtio_console)
# Shipped but not loaded at boot (/lib/modules/autoballoon/extra/, load order in
# /etc/autoballoon/extra-modules): zram for swap on a ramdisk (`zram-swap MIB`), virtio_blk
# for a disk (`-drive ... -device virtio-blk-pci`; the host benchmark's file workload loads it
# with insmod). Skipped when the kernel has neither the module nor it built in (e.g. a
# --vmlinuz kernel without zram).
EXTRA_MODULES=(zsmalloc zram virtio_blk)
# The kernel cache's completeness marker: a cache extracted before the extra modules were
# taken lacks them and is extracted again (.complete alone is what older scripts check).
# An extraction touches the older markers too, so that older scripts sharing the cache
# take it as it is.
KCACHE_MARK=.complete-blk
KCACHE_OLD_MARKS=(.complete-zram)

agent=""
kernel_pkg="6.1"
vmlinuz_in=""
modules_dir_in=""
quiet=0

usage() { sed -n '5,26p' "$SELF" | sed 's/^# \{0,1\}//'; }
die() { echo "build-image: error: $*" >&2; exit 1; }
step() { [ "$quiet" -eq 1 ] || echo "build-image: $*" >&2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --agent) agent="${2:?--agent needs a path}"; shift 2 ;;
        --agent=*) agent="${1#*=}"; shift ;;
        --kernel-pkg) kernel_pkg="${2:?--kernel-pkg needs a value}"; shift 2 ;;
        --kernel-pkg=*) kernel_pkg="${1#*=}"; shift ;;
        --vmlinuz) vmlinuz_in="${2:?--vmlinuz needs a file}"; shift 2 ;;
        --vmlinuz=*) vmlinuz_in="${1#*=}"; shift ;;
        --modules-dir) modules_dir_in="${2:?--modules-dir needs a directory}"; shift 2 ;;
        --modules-dir=*) modules_dir_in="${1#*=}"; shift ;;
        --print-dir) quiet=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
[ -n "$agent" ] || { usage >&2; die "--agent is required (a path, or 'none')"; }

for t in busybox cpio gzip gcc sha256sum; do
    command -v "$t" >/dev/null 2>&1 || die "'$t' not found; run scripts/install-deps.sh"
done
# busybox must be the static one: it is copied into the initramfs as is.
BUSYBOX="$(command -v busybox)"
[ -x /bin/busybox ] && BUSYBOX=/bin/busybox
if ! file -L "$BUSYBOX" 2>/dev/null | grep -q 'statically linked'; then
    die "$BUSYBOX is not statically linked; install busybox-static (scripts/install-deps.sh)"
fi

mkdir -p "$CACHE/guest" "$CACHE/debs" "$CACHE/kernels"
# One build at a time per cache (parallel test jobs may all ask for the image).
exec 9>"$CACHE/.build-image.lock"
flock 9

# --- agent -------------------------------------------------------------------------------------
if [ "$agent" = none ]; then
    agent_sha="none"
else
    [ -f "$agent" ] || die "agent binary not found: $agent"
    agent="$(readlink -f "$agent")"
    agent_sha="$(sha256sum "$agent" | cut -d' ' -f1)"
fi

# --- kernel: resolve the package and version (apt metadata only, no download yet) ----------
apt_updated=0
apt_update_once() {
    [ "$apt_updated" -eq 0 ] || return 0
    [ "$(id -u)" -eq 0 ] || die "apt has no package lists and we are not root to run apt-get update"
    step "apt-get update (no package lists for kernel packages)"
    local log; log="$(mktemp)"
    apt-get update -qq > "$log" 2>&1 || { cat "$log" >&2; rm -f "$log"; die "apt-get update failed"; }
    rm -f "$log"
    apt_updated=1
}
candidate_version() { # PKG -> candidate version or empty
    apt-cache policy "$1" 2>/dev/null | sed -n 's/^  Candidate: //p' | grep -v '^(none)$' || true
}

resolve_kernel() { # $kernel_pkg (a spec) -> $kernel_pkg, $kernel_pkg_version
    if [ -z "$(candidate_version linux-image-amd64)" ]; then
        apt_update_once
        lists_stamp="$(stat -c '%n %Y %s' /var/lib/apt/lists/*_Packages* 2>/dev/null | sha256sum | cut -c1-16)"
    fi
    case "$kernel_pkg" in
        6.1|default)
            kernel_pkg="$(apt-cache show --no-all-versions linux-image-amd64 | sed -n 's/^Depends: //p' \
                | tr ',|' '\n\n' | sed 's/^ *//; s/ .*//' | grep -E '^linux-image-6\.1\.0-[0-9]+-amd64$' | head -n1 || true)"
            [ -n "$kernel_pkg" ] || die "cannot find the linux-image-6.1.0-*-amd64 that linux-image-amd64 depends on"
            ;;
        6.12)
            kernel_pkg=""
            for p in $(apt-cache pkgnames linux-image-6.12. | grep -E '^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$' | sort -Vr); do
                if [ -n "$(candidate_version "$p")" ]; then kernel_pkg="$p"; break; fi
            done
            [ -n "$kernel_pkg" ] || die "no linux-image-6.12.*+deb12-amd64-unsigned in apt (try: apt-cache search linux-image-6.12)"
            ;;
    esac
    kernel_pkg_version="$(candidate_version "$kernel_pkg")"
    if [ -z "$kernel_pkg_version" ]; then
        apt_update_once
        kernel_pkg_version="$(candidate_version "$kernel_pkg")"
    fi
    [ -n "$kernel_pkg_version" ] || die "apt knows no installable version of $kernel_pkg"
}

if [ -n "$vmlinuz_in" ]; then
    [ -f "$vmlinuz_in" ] || die "--vmlinuz: no such file: $vmlinuz_in"
    vmlinuz_in="$(readlink -f "$vmlinuz_in")"
    kernel_pkg="local"
    kernel_pkg_version="sha256:$(sha256sum "$vmlinuz_in" | cut -d' ' -f1)"
    if [ -n "$modules_dir_in" ]; then
        [ -d "$modules_dir_in" ] || die "--modules-dir: no such directory: $modules_dir_in"
        modules_dir_in="$(readlink -f "$modules_dir_in")"
        # Hash the modules we would take, so a rebuilt module makes a new image.
        mods_sha="$(for m in "${MODULES[@]}" "${EXTRA_MODULES[@]}"; do find "$modules_dir_in" -name "$m.ko*" -type f -print0 | sort -z | xargs -0r sha256sum; done | sha256sum | cut -d' ' -f1)"
        kernel_pkg_version="$kernel_pkg_version modules:$mods_sha"
    fi
else
    # apt-cache takes 1-2 s a call here, so the answer is remembered per spec until the apt
    # package lists change (an apt-get update re-resolves "6.1"/"6.12" to the newest).
    lists_stamp="$(stat -c '%n %Y %s' /var/lib/apt/lists/*_Packages* 2>/dev/null | sha256sum | cut -c1-16)"
    resolve_file="$CACHE/kernels/resolved-${kernel_pkg//\//_}"
    if [ -f "$resolve_file" ] && [ "$(sed -n 1p "$resolve_file")" = "$lists_stamp" ]; then
        kernel_pkg="$(sed -n 2p "$resolve_file")"
        kernel_pkg_version="$(sed -n 3p "$resolve_file")"
    else
        resolve_kernel
        printf '%s\n%s\n%s\n' "$lists_stamp" "$kernel_pkg" "$kernel_pkg_version" > "$resolve_file"
    fi
fi

# --- the hash of all inputs ---------------------------------------------------------------
busybox_sha="$(sha256sum "$BUSYBOX" | cut -d' ' -f1)"
gcc_version="$(gcc -dumpfullversion 2>/dev/null || gcc -dumpversion)"
libc_version="$(dpkg-query -W -f='${Version}' libc6-dev 2>/dev/null || echo unknown)"
inputs_file="$(mktemp)"
trap 'rm -f "$inputs_file"' EXIT
{
    echo "format 1"
    echo "modules ${MODULES[*]}"
    echo "extra_modules ${EXTRA_MODULES[*]}"
    echo "kernel_pkg $kernel_pkg $kernel_pkg_version"
    echo "agent_sha256 $agent_sha"
    echo "busybox_sha256 $busybox_sha"
    echo "gcc $gcc_version libc6-dev $libc_version"
    ( cd "$GUEST_DIR" && { echo build-image.sh; echo init; find rootfs -type f; ls workloads/*.c; } \
        | LC_ALL=C sort | xargs -d '\n' sha256sum )
    # the exec bits of the rootfs overlay matter too (git keeps no other mode bits)
    ( cd "$GUEST_DIR" && find rootfs -type f -perm -u+x -printf 'x %p\n' | LC_ALL=C sort )
} > "$inputs_file"
hash="$(sha256sum "$inputs_file" | cut -c1-16)"
out="$CACHE/guest/$hash"

# Images unused for 30 days are dropped (a cache hit refreshes the directory's mtime).
find "$CACHE/guest" -mindepth 1 -maxdepth 1 -type d -mtime +30 -exec rm -rf {} + 2>/dev/null || true

if [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ] && [ -f "$out/manifest.json" ]; then
    touch "$out"
    step "cache hit: $kernel_pkg $kernel_pkg_version, agent ${agent_sha:0:12} -> $out"
    echo "$out"
    exit 0
fi
step "building image $hash (kernel $kernel_pkg $kernel_pkg_version, agent ${agent_sha:0:12})"

work="$(mktemp -d "$CACHE/guest/.tmp-$hash-XXXXXX")"
trap 'rm -f "$inputs_file"; rm -rf "$work"' EXIT
stage="$work/root"
mkdir -p "$stage"

# --- kernel: download + extract (cached per package version) --------------------------------
if [ -n "$vmlinuz_in" ]; then
    kdir="$work/kernel"
    mkdir -p "$kdir/modules"
    cp "$vmlinuz_in" "$kdir/vmlinuz"
    kver="$(file -b "$vmlinuz_in" | sed -n 's/.*version \([^ ,]*\).*/\1/p')"
    [ -n "$kver" ] || kver="unknown"
    : > "$kdir/modules.builtin"
    if [ -n "$modules_dir_in" ]; then
        for m in "${MODULES[@]}" "${EXTRA_MODULES[@]}"; do
            f="$(find "$modules_dir_in" -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" -o -name "$m.ko.gz" | head -n1)"
            [ -n "$f" ] && cp "$f" "$kdir/modules/"
        done
        [ -f "$modules_dir_in/modules.builtin" ] && cp "$modules_dir_in/modules.builtin" "$kdir/"
    fi
    echo "$kver" > "$kdir/kernel-version"
else
    kdir="$CACHE/kernels/${kernel_pkg}_${kernel_pkg_version//:/%3a}"
    if [ ! -f "$kdir/$KCACHE_MARK" ]; then
        debdir="$CACHE/debs/${kernel_pkg}_${kernel_pkg_version//:/%3a}"
        deb="$(ls "$debdir"/*.deb 2>/dev/null | head -n1 || true)"
        if [ -z "$deb" ]; then
            step "downloading kernel: apt-get download $kernel_pkg=$kernel_pkg_version"
            mkdir -p "$debdir.part"
            # As root, apt would drop to _apt for the download and warn that it cannot.
            if ! ( cd "$debdir.part" && apt-get -q -o APT::Sandbox::User="$(id -un)" \
                    download "$kernel_pkg=$kernel_pkg_version" ) > "$work/apt.log" 2>&1; then
                cat "$work/apt.log" >&2
                die "apt-get download $kernel_pkg=$kernel_pkg_version failed"
            fi
            [ "$quiet" -eq 1 ] || sed 's/^/build-image:   /' "$work/apt.log" >&2
            rm -rf "$debdir"
            mv "$debdir.part" "$debdir"
            deb="$(ls "$debdir"/*.deb | head -n1)"
        else
            step "kernel package cached: $deb"
        fi
        step "extracting kernel and virtio modules from $(basename "$deb")"
        rm -rf "$kdir" "$kdir.part"
        mkdir -p "$kdir.part/x" "$kdir.part/modules"
        # Only what we need: the whole 6.12 package unpacks to ~500 MB.
        # A pattern that matches nothing (e.g. virtio_console, built into 6.12) makes tar fail
        # with "Not found in archive"; that alone is fine, any other error is not.
        if ! dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$kdir.part/x" --wildcards \
                './boot/vmlinuz-*' './boot/config-*' '*/modules/*/modules.builtin' \
                '*/modules/*/kernel/drivers/virtio/*' '*/modules/*/kernel/drivers/char/virtio_console.ko*' \
                '*/modules/*/kernel/mm/zsmalloc.ko*' '*/modules/*/kernel/drivers/block/zram/*' \
                '*/modules/*/kernel/drivers/block/virtio_blk.ko*' \
                2> "$kdir.part/tar.err"; then
            if grep -v -e 'Not found in archive' -e 'Exiting with failure status' "$kdir.part/tar.err" | grep -q .; then
                cat "$kdir.part/tar.err" >&2
                die "extracting $deb failed"
            fi
        fi
        rm -f "$kdir.part/tar.err"
        ls "$kdir.part"/x/boot/vmlinuz-* >/dev/null 2>&1 || die "no boot/vmlinuz-* in $deb"
        kv_dir="$(ls -d "$kdir.part"/x/lib/modules/*/ "$kdir.part"/x/usr/lib/modules/*/ 2>/dev/null | head -n1 || true)"
        [ -n "$kv_dir" ] || die "no lib/modules/<version>/ in $deb"
        basename "$kv_dir" > "$kdir.part/kernel-version"
        mv "$kdir.part"/x/boot/vmlinuz-* "$kdir.part/vmlinuz"
        mv "$kdir.part"/x/boot/config-* "$kdir.part/config" 2>/dev/null || true
        cp "$kv_dir/modules.builtin" "$kdir.part/modules.builtin" 2>/dev/null || : > "$kdir.part/modules.builtin"
        find "$kv_dir" -name '*.ko*' -type f -exec mv {} "$kdir.part/modules/" \;
        rm -rf "$kdir.part/x"
        for m in .complete "$KCACHE_MARK" "${KCACHE_OLD_MARKS[@]}"; do touch "$kdir.part/$m"; done
        mv "$kdir.part" "$kdir"
        # The extracted kernel is all we use again; the .deb (70-110 MB) is not worth keeping.
        [ "${AUTOBALLOON_KEEP_DEBS:-0}" = 1 ] || rm -rf "$debdir"
    else
        step "kernel cached: $kdir"
    fi
fi
kver="$(cat "$kdir/kernel-version")"

# --- modules: decompress, order, check dependencies -----------------------------------------
step "preparing modules for $kver"
mkdir -p "$stage/lib/modules/autoballoon" "$stage/etc/autoballoon"
: > "$stage/etc/autoballoon/modules"
loaded=" "
for m in "${MODULES[@]}"; do
    src="$(ls "$kdir/modules/$m.ko" "$kdir/modules/$m.ko."* 2>/dev/null | head -n1 || true)"
    if [ -z "$src" ]; then
        # modules.builtin lists paths like kernel/drivers/virtio/virtio.ko
        if grep -q "/$m\.ko\$" "$kdir/modules.builtin" 2>/dev/null; then
            step "  $m: built in"
            loaded="$loaded$m "
            continue
        elif [ -n "$vmlinuz_in" ]; then
            step "  $m: no module file; assuming it is built into the --vmlinuz kernel"
            loaded="$loaded$m "
            continue
        fi
        die "module $m not found in $kernel_pkg (and not listed as built in)"
    fi
    dst="$stage/lib/modules/autoballoon/$m.ko"
    case "$src" in
        *.ko) cp "$src" "$dst" ;;
        *.ko.xz) xz -dc "$src" > "$dst" ;;
        *.ko.zst) zstd -qdc "$src" > "$dst" ;;
        *.ko.gz) gzip -dc "$src" > "$dst" ;;
        *) die "unknown module compression: $src" ;;
    esac
    # Every dependency must be loaded before (or built in).
    deps="$(tr '\0' '\n' < "$dst" | sed -n 's/^depends=//p' | head -n1 | tr ',' ' ')"
    for d in $deps; do
        d="${d//-/_}"
        case "$loaded" in *" $d "*) ;; *) die "module $m depends on $d, which is not loaded before it; add it to MODULES in $SELF" ;; esac
    done
    echo "$m" >> "$stage/etc/autoballoon/modules"
    loaded="$loaded$m "
done

# Extra modules: decompressed into extra/, in load order, when the kernel has them.
mkdir -p "$stage/lib/modules/autoballoon/extra"
: > "$stage/etc/autoballoon/extra-modules"
for m in "${EXTRA_MODULES[@]}"; do
    src="$(ls "$kdir/modules/$m.ko" "$kdir/modules/$m.ko."* 2>/dev/null | head -n1 || true)"
    if [ -z "$src" ]; then
        grep -q "/$m\.ko\$" "$kdir/modules.builtin" 2>/dev/null && step "  $m: built in" || step "  $m: not in this kernel (optional, skipped)"
        continue
    fi
    dst="$stage/lib/modules/autoballoon/extra/$m.ko"
    case "$src" in
        *.ko) cp "$src" "$dst" ;;
        *.ko.xz) xz -dc "$src" > "$dst" ;;
        *.ko.zst) zstd -qdc "$src" > "$dst" ;;
        *.ko.gz) gzip -dc "$src" > "$dst" ;;
        *) die "unknown module compression: $src" ;;
    esac
    echo "$m" >> "$stage/etc/autoballoon/extra-modules"
done

# --- workloads ------------------------------------------------------------------------------
step "building workloads (spike, fill, work, pipes, hold)"
mkdir -p "$stage/usr/bin"
for w in spike fill work pipes hold; do
    gcc -O2 -Wall -static -pthread -o "$stage/usr/bin/$w" "$GUEST_DIR/workloads/$w.c"
    strip "$stage/usr/bin/$w" 2>/dev/null || true
done

# --- busybox + rootfs -------------------------------------------------------------------------
step "installing busybox applets"
mkdir -p "$stage"/{bin,sbin,usr/sbin,etc,proc,sys,dev,run,tmp,root,var,mnt}
chmod 1777 "$stage/tmp"
chmod 700 "$stage/root"
ln -s ../run "$stage/var/run"
cp "$BUSYBOX" "$stage/bin/busybox"
applets="$("$BUSYBOX" --list-full | grep -v '^bin/busybox$')"
# shellcheck disable=SC2046
mkdir -p $(printf '%s\n' "$applets" | sed -n "s|^\(.*\)/[^/]*\$|$stage/\1|p" | sort -u)
while read -r a; do
    [ -e "$stage/$a" ] || [ -L "$stage/$a" ] || ln -s /bin/busybox "$stage/$a"
done <<< "$applets"
cp -a "$GUEST_DIR/rootfs/." "$stage/"
install -m 0755 "$GUEST_DIR/init" "$stage/init"
# /dev/console must exist in the initramfs, or the kernel starts /init with no stdin, stdout
# and stderr ("unable to open an initial console"). /init re-opens it after devtmpfs anyway.
if [ "$(id -u)" -eq 0 ]; then
    mknod -m 600 "$stage/dev/console" c 5 1
    mknod -m 666 "$stage/dev/null" c 1 3
fi

# --- agent --------------------------------------------------------------------------------------
if [ "$agent" != none ]; then
    step "adding agent $agent"
    install -m 0755 "$agent" "$stage/usr/bin/autoballoon-guest"
    finfo="$(file -b "$agent")"
    case "$finfo" in
        *"dynamically linked"*)
            step "  WARNING: the agent is dynamically linked; copying its shared libraries (build it static)"
            ldd "$agent" | grep -oE '/[^ ]+' | while read -r lib; do
                [ -f "$lib" ] || continue
                mkdir -p "$stage$(dirname "$lib")"
                cp -L "$lib" "$stage$lib"
            done
            ;;
        *ELF*) ;;
        *script*) step "  note: the agent is a script ($finfo)" ;;
        *) step "  WARNING: the agent is not an ELF binary: $finfo" ;;
    esac
fi

# --- manifest + pack ------------------------------------------------------------------------------
json_str() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g'; }
{
    echo "{"
    echo "  \"hash\": \"$hash\","
    echo "  \"kernel_version\": \"$(json_str "$kver")\","
    echo "  \"kernel_pkg\": \"$(json_str "$kernel_pkg")\","
    echo "  \"kernel_pkg_version\": \"$(json_str "$kernel_pkg_version")\","
    echo "  \"modules\": [$(sed 's/.*/"&"/' "$stage/etc/autoballoon/modules" | paste -sd, | sed 's/,/, /g')],"
    echo "  \"agent\": \"$(json_str "$agent")\","
    echo "  \"agent_sha256\": \"$agent_sha\","
    echo "  \"busybox_sha256\": \"$busybox_sha\","
    echo "  \"gcc\": \"$(json_str "$gcc_version")\","
    echo "  \"built_at\": \"$(date -u +%FT%TZ)\","
    echo "  \"inputs\": ["
    sed 's/\\/\\\\/g; s/"/\\"/g; s/.*/    "&"/' "$inputs_file" | sed '$!s/$/,/'
    echo "  ]"
    echo "}"
} > "$work/manifest.json"
cp "$work/manifest.json" "$stage/etc/autoballoon/image.json"

step "packing initramfs"
( cd "$stage" && find . -mindepth 1 -print0 | LC_ALL=C sort -z \
    | cpio --null -o -H newc --owner=0:0 --quiet ) | gzip -6n > "$work/initrd.img"
cp "$kdir/vmlinuz" "$work/vmlinuz"
[ -f "$kdir/config" ] && cp "$kdir/config" "$work/config"
rm -rf "$stage"

chmod 755 "$work"
rm -rf "$out"
mv "$work" "$out"
step "done: $out (initrd $(du -k "$out/initrd.img" | cut -f1) KiB, kernel $kver)"
echo "$out"
