#!/usr/bin/env bash
# `make fuzz`: runs every fuzz target for FUZZ_SECONDS (60) each, on a corpus seeded from
# the project's fixtures, and prints executions, coverage and crashes per target. Installs
# what it needs (cargo-fuzz from crates.io, a C++ compiler for libFuzzer) by itself; builds
# with the stable toolchain (RUSTC_BOOTSTRAP=1 for the sanitizer flags).
#   FUZZ_SECONDS=30 FUZZ_TARGETS="framer qmp" make fuzz
# A crash leaves its input under fuzz/artifacts/TARGET/ and makes this exit 1: turn it
# into a unit test beside the parser, then fix the parser.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd .. && pwd)
SECONDS_EACH=${FUZZ_SECONDS:-60}
TARGETS=${FUZZ_TARGETS:-"border framer qmp procfs libvirt config"}
export PATH="$HOME/.cargo/bin:$PATH"
export RUSTC_BOOTSTRAP=1

if ! command -v c++ >/dev/null; then
    echo "fuzz: installing a C++ compiler (libFuzzer is C++)"
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq g++ >/dev/null; else sudo apt-get install -y -qq g++ >/dev/null; fi
fi
# The targets link the host crate, which links libvirt's library (libvirt-dev, pkg-config).
"$ROOT/scripts/install-deps.sh" --only pkg-config libvirt-dev >/dev/null
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz from crates.io"
    cargo install cargo-fuzz --locked
fi

# Seed corpora from the fixtures (copies; the corpus dirs are not in git).
seed() { mkdir -p "corpus/$1"; }
for t in $TARGETS; do seed "$t"; done
n=0
split_lines() { # FILE DIR PREFIX: each `<- ` line of a QMP log as one input
    while IFS= read -r line; do
        case "$line" in "<- "*) n=$((n + 1)); printf '%s\n' "${line#<- }" > "$2/$3-$n" ;; esac
    done < "$1"
}
for f in "$ROOT"/crates/qmp/tests/fixtures/*.qmp.log; do
    b=$(basename "$f" .qmp.log)
    [ -d corpus/qmp ] && split_lines "$f" corpus/qmp "$b"
    # The framer's first two bytes are its bound and its chunk size.
    [ -d corpus/framer ] && { printf '\x3f\x05'; cat "$f"; } > "corpus/framer/$b"
done
if [ -d corpus/procfs ]; then
    for d in "$ROOT"/crates/core/fixtures/*/; do
        for f in meminfo vmstat pressure-memory buddyinfo; do
            if [ -e "$d/$f" ]; then cp "$d/$f" "corpus/procfs/$(basename "$d")-$f"; fi
        done
    done
fi
[ -d corpus/libvirt ] && cp "$ROOT"/crates/host/fixtures/libvirt/* corpus/libvirt/ && cp "$ROOT"/docs/examples/*.xml corpus/libvirt/
[ -d corpus/config ] && cp "$ROOT"/docs/example-host.toml corpus/config/
if [ -d corpus/border ]; then
    # 48 bytes of numbers first: a 4 GiB VM (KiB), actual 4 GiB (bytes), no balloon stats.
    for f in seeds/border/*; do
        { printf '\x00\x00\x40\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00'; head -c 32 /dev/zero; cat "$f"; } > "corpus/border/$(basename "$f")"
    done
fi

cargo fuzz build 2>&1 | tail -n 3
mkdir -p logs
status=0
printf '%-8s %12s %8s %8s %8s\n' target execs "exec/s" cov crashes
for t in $TARGETS; do
    log="logs/$t.log"
    set +e
    cargo fuzz run "$t" "corpus/$t" -- -max_total_time="$SECONDS_EACH" -print_final_stats=1 >"$log" 2>&1
    rc=$?
    set -e
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*$' || echo "?")
    rate=$(grep -o 'exec/s: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*$' || echo "?")
    crashes=$(find "artifacts/$t" -type f 2>/dev/null | wc -l)
    printf '%-8s %12s %8s %8s %8s\n' "$t" "$execs" "$rate" "$cov" "$crashes"
    if [ "$rc" != 0 ] || [ "$crashes" != 0 ]; then
        status=1
        echo "fuzz: $t failed (exit $rc); see fuzz/$log and fuzz/artifacts/$t/" >&2
    fi
done
exit $status
