# shellcheck shell=bash
# What scripts/build-qemu72-fixed.sh and scripts/build-qemu10-populate.sh share: a private
# apt configuration for deb-src, ninja with a progress line, and the wrappers of a build
# that carries x-populate-on-deflate (their build dependencies go through
# scripts/install-deps.sh --only), and the --help of those scripts and of
# scripts/install-deps.sh and scripts/install-qemu10.sh (qb_usage). Sourced, not run; the
# caller defines say() and die() (qb_usage needs neither) and runs under `set -euo pipefail`.

# qb_usage SCRIPT: prints SCRIPT's header comment (after the #! line, up to its first line
# that is not a comment) without the leading "# ", for --help.
qb_usage() {
    awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$1"
}

# qb_apt_options DIR: sets QB_APT to apt-get options that read only DIR/sources.list and keep
# their lists and downloads under DIR (/etc/apt is left alone); makes DIR's folders.
qb_apt_options() {
    local dir=$1
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
    QB_APT=(-o "Dir::Etc::SourceList=$dir/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
        -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache" -o "Debug::NoLocking=1"
        -o "APT::Sandbox::User=$(id -un)")
}

# qb_apply_series TREE PATCH...: applies each patch to TREE (freshly unpacked) in order.
qb_apply_series() {
    local tree=$1 p
    shift
    for p in "$@"; do
        patch -d "$tree" -p1 --quiet < "$p" || die "$(basename "$p") does not apply to $tree"
    done
}

# qb_ninja BUILD_DIR: builds qemu-system-x86_64 there (nice 19, all cores), a progress line a
# minute on stderr, the log in BUILD_DIR/ninja.log.
qb_ninja() {
    local b=$1 ticker rc=0
    ( set +e; while sleep 60; do say "  ninja: $(tail -1 "$b/ninja.log" 2>/dev/null | cut -d' ' -f1) steps"; done ) &
    ticker=$!
    # shellcheck disable=SC2064  # the ticker's pid, now
    trap "kill $ticker 2>/dev/null || true" EXIT
    nice -n 19 ninja -C "$b" -j "$(nproc)" qemu-system-x86_64 >"$b/ninja.log" 2>&1 || rc=$?
    kill "$ticker" 2>/dev/null || true
    wait "$ticker" 2>/dev/null || true
    trap - EXIT
    [ "$rc" -eq 0 ] || { tail -20 "$b/ninja.log" >&2; die "the build failed (log: $b/ninja.log)"; }
}

# qb_populate_wrapper BIN WHAT: writes BIN/qemu-system-x86_64-populate, which runs
# BIN/qemu-system-x86_64 with the project's balloon properties on for every balloon,
# x-populate-on-deflate, x-migrate-skip-ballooned and x-zeroed (--populate prints it); WHAT
# names the build in its comment.
qb_populate_wrapper() {
    local bin=$1 what=$2
    cat > "$bin/qemu-system-x86_64-populate" <<WRAP
#!/bin/sh
# $what with x-populate-on-deflate, x-migrate-skip-ballooned and x-zeroed on.
exec "\$(dirname "\$0")/qemu-system-x86_64" -global virtio-balloon-device.x-populate-on-deflate=on -global virtio-balloon-device.x-migrate-skip-ballooned=on -global virtio-balloon-device.x-zeroed=on "\$@"
WRAP
    chmod +x "$bin/qemu-system-x86_64-populate"
}

# qb_offers_populate WRAPPER: the QEMU behind WRAPPER offers x-populate-on-deflate.
qb_offers_populate() {
    "$1" -device virtio-balloon-pci,help 2>/dev/null | grep -q 'x-populate-on-deflate'
}
