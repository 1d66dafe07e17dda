#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# make kernel-test: build the patched and the stock kernel (cached), put each
# into the project's guest image with the agent, run the scenarios of
# crates/testbed/tests/kernel.rs, kernel_mm.rs and kernel_files.rs on real QEMU guests, and print one JSON summary
# line per variant (patched, stock, stock-deflate-on-oom).
#
#   kernel/scripts/kernel-test.sh AGENT ['TEST-NAME-FILTER ...']
#
# With filters (substrings of test names, space-separated) only the scenarios
# they match run, and a kernel variant without any is not a failure.
# AUTOBALLOON_KERNEL_CYCLES sets the number of spike+migration cycles (20).
# KERNEL_TEST_SKIP="NAME ..." leaves scenarios out.
# KERNEL_TEST_MIGRATE=1 (make kernel-test-migrate) runs only the
# *_spike_during_migrations scenarios (too long for make kernel-test: 20
# migrations at 64 MiB/s, 15-20 min per variant) and prints their records;
# AUTOBALLOON_SPIKE_MIGRATIONS sets their count (20).
# Exit status: non-zero if a test failed, the patched kernel had an OOM kill,
# or the stock kernel without deflate-on-oom had none.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=$(cd "$HERE/.." && pwd)
AGENT=${1:?usage: kernel-test.sh AGENT [FILTER]}
FILTER=${2:-}
step() { printf '[kernel-test] %s\n' "$*" >&2; }

t0=$SECONDS
export AUTOBALLOON_PATCHED_IMAGE AUTOBALLOON_STOCK_IMAGE AUTOBALLOON_KERNEL_RESULTS
images=$("$HERE/scripts/images.sh" "$AGENT") ||
	{ step "error: building the kernels or the guest images failed (see above)"; exit 1; }
AUTOBALLOON_PATCHED_IMAGE=$(sed -n 1p <<< "$images")
AUTOBALLOON_STOCK_IMAGE=$(sed -n 2p <<< "$images")
mkdir -p "$ROOT/run/kernel-test"
AUTOBALLOON_KERNEL_RESULTS=$ROOT/run/kernel-test/results-$(date +%Y%m%d-%H%M%S).jsonl
: > "$AUTOBALLOON_KERNEL_RESULTS"
step "guest images: $AUTOBALLOON_PATCHED_IMAGE (patched), $AUTOBALLOON_STOCK_IMAGE (stock)"
step "running the scenarios (crates/testbed/tests/kernel.rs, kernel_mm.rs); results: $AUTOBALLOON_KERNEL_RESULTS"
# deb_* scenarios need the Debian package of the kernel: make kernel-deb-test.
skip=(--skip deb_)
if [ "${KERNEL_TEST_MIGRATE:-0}" = 1 ]; then
	FILTER=${FILTER:-_spike_during_migrations}
else
	step "SKIPPED: *_spike_during_migrations (make kernel-test-migrate)"
	skip+=(--skip _spike_during_migrations)
fi
for t in ${KERNEL_TEST_SKIP:-}; do
	step "SKIPPED: $t (KERNEL_TEST_SKIP; see kernel/README.md)"
	skip+=(--skip "$t")
done
rc=0
(cd "$ROOT" && cargo test --locked -p autoballoon-testbed --test kernel --test kernel_mm --test kernel_files -- --ignored --test-threads=1 "${skip[@]}" $FILTER) || rc=$?
if [ "${KERNEL_TEST_MIGRATE:-0}" = 1 ]; then
	cat "$AUTOBALLOON_KERNEL_RESULTS"
else
	python3 "$HERE/scripts/summary.py" "$AUTOBALLOON_KERNEL_RESULTS" ${FILTER:+--filtered} || rc=$?
fi
step "done in $((SECONDS - t0)) s"
exit $rc
