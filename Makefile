# autoballoon — top-level targets. `make demo` and `make test` install what they need.
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CACHE ?= $(HOME)/.cache/autoballoon
export AUTOBALLOON_CACHE := $(CACHE)

TRIPLE := x86_64-unknown-linux-gnu
AGENT := target/$(TRIPLE)/release/autoballoon-guest
DEMOBIN := target/release/autoballoon-demo
IMAGE_PATH := run/image.path

.PHONY: all qemu10 qemu10-populate test-qemu10 deps build agent host testbed image demo migbench spikebench densitybench soak test unit-test integration-test test-host-pressure bench bench-save bench-host clean help guest-deb deb packaging-test systemd-test fuzz sim sim-ray-test sim-scale reproduce calibrate

all: build

help:
	@echo "make demo   - boot a guest, spike it, migrate it with QEMU's best (FPR + hinting), with autoballoon, and with no balloon"
	@echo "make fuzz   - every fuzz target (border, framer, qmp, procfs, libvirt, config) for FUZZ_SECONDS=60 each; installs cargo-fuzz; not part of make test"
	@echo "make test   - the whole suite (unit, property and QEMU integration tests, make kernel-test)"
	@echo "make bench  - writes bench/RESULTS.md: migrations at every moment and footprint per configuration against FPR, and the kernel bench (BENCH_QUICK=1, BENCH_RUNS=N)"
	@echo "make bench-save - keep what an unfinished make bench measured in bench/partial/ (commit it); make bench BENCH_RESUME=1 goes on from there on a fresh clone"
	@echo "make spikebench - spikes at steady state against FPR alone and no balloon (SPIKEBENCH_ARGS='--shapes 3x400 --cpus 1')"
	@echo "make densitybench - four guests over a job sequence: host memory against FPR alone (DENSITYBENCH_ARGS='--guests 2'; '--patched-image DIR' adds the patched kernel's rows)"
	@echo "make soak   - 1,000 verified spike cycles and 100 live migrations per arm (patched kernel; stock kernel + host controller) on QEMU 10 and the fixed 7.2; not part of make test (SOAK_ARGS='--cycles 6 --migrations 2', '--hours 24')"
	@echo "make bench-host - the host controller's CPU and RSS per VM (1/4/16 VMs), iBalloon's mixed workloads (static vs balancer), E1 balloon overhead (ballooned vs configured) and A1 auto-ballooning on an overcommitted host (vanilla vs pressure) into bench/host/RESULTS.md; HOSTBENCH_ONLY=cost,mixed,e1,a1 runs some, keeping the others' previous results"
	@echo "make migbench - migrations idle and after a spike against free page reporting (MIGBENCH_ARGS='--runs 2')"
	@echo "make sim    - the simulator's tests, then S1 (paper-spike: 24 h of 675 GB spikes on a 732 GB VM) under swapfree against static (docs/simulator.md)"
	@echo "make sim-ray-test - the simulator's Ray driver (crates/sim/ray) on a 3-node Ray cluster on this machine (loopback only): 8 hosts in 4 shards, binary and scenario through the object store, on >= 2 nodes, merge into the unsharded fleet summary (creates ~/.cache/autoballoon/venv-ray-<version> once, from PyPI)"
	@echo "make sim-scale - the simulator at scale: 10,000 VMs for 7 days (fleet-week, 1250 hosts x 8 VMs) on every core; prints the wall time"
	@echo "make reproduce - writes experiments/REPORT.md: every simulated experiment, the seed's number beside ours"
	@echo "make calibrate - fits the simulator's calibration (bench/results.json, bench/host/results.json, the seeds' numbers) into crates/sim/calibration.toml"
	@echo "make image  - build the guest image (cached under $(CACHE))"
	@echo "make kernel / kernel-test / kernel-deb - the patched guest kernel (see kernel/README.md)"
	@echo "make guest-deb - the guest agent's Debian package (under $(CACHE)/deb)"
	@echo "make deb   - the host daemon's Debian package: binary, unit, default config, man page (under $(CACHE)/deb)"
	@echo "make systemd-test - the host .deb under a real systemd (PID 1 in systemd-nspawn, Debian 12): unit, sandbox, socket directory, discovery (part of make test)"
	@echo "make qemu10 - QEMU 10 from bookworm-backports beside the system QEMU (under $(CACHE)/qemu)"
	@echo "make test-qemu10 - the QEMU integration tests with every VM under QEMU 10"
	@echo "make qemu10-populate - QEMU 10 with the project's balloon patches, x-populate-on-deflate and x-populate-reported (under $(CACHE)/qemu), and their tests"

deps:
	@scripts/install-deps.sh

# QEMU 10 (bookworm-backports) unpacked under $(CACHE)/qemu, side by side with the system's
# QEMU 7.2; prints the wrapper to use as AUTOBALLOON_QEMU. See docs/qemu-versions.md.
# `make test` installs it too (about 17 s and 28 MB of downloads the first time, nothing after) so that
# crates/testbed/tests/qemu10.rs runs; QEMU10=0 skips the install (that test then skips).
QEMU10 ?= 1
QEMU10_INSTALL := $(if $(filter 1,$(QEMU10)),scripts/install-qemu10.sh >/dev/null,true)
qemu10:
	@scripts/install-qemu10.sh

# QEMU 10.0.2 built from Debian's backports source with the project's balloon patches,
# x-populate-on-deflate and x-populate-reported (scripts/qemu10/; docs/spikes.md, "Backing
# deflated memory off the vCPU's thread" and "Backing reported memory ahead of a spike"),
# under $(CACHE)/qemu/qemu10-populate (about 6 min the first time), then their tests
# (crates/testbed/tests/populate_on_deflate.rs and hint_queue.rs, which also run on the fixed
# 7.2 of scripts/build-qemu72-fixed.sh, ported patches in scripts/qemu72/, where that is built).
# `make test` builds neither (its run would grow by the builds) but runs that test on what
# is built; `make bench` builds both for its spike stage.
qemu10-populate: testbed image
	@scripts/build-qemu10-populate.sh >/dev/null
	AUTOBALLOON_IMAGE="$$(cat $(IMAGE_PATH))" cargo test --locked -p autoballoon-testbed --test populate_on_deflate --test hint_queue -- --nocapture

# The agent is one static binary (no shared libraries) for the guest's initramfs.
agent: deps
	RUSTFLAGS='-C target-feature=+crt-static -C relocation-model=static' \
	  cargo build --release --locked -p autoballoon-guest --target $(TRIPLE)

host: deps
	cargo build --release --locked -p autoballoon

# The test bed's demo binary (it runs the controller in-process; the daemon is not needed).
testbed: deps
	cargo build --release --locked -p autoballoon-testbed

build: agent host

image: agent
	@mkdir -p run
	guest/build-image.sh --agent $(AGENT) --print-dir > $(IMAGE_PATH).tmp && mv $(IMAGE_PATH).tmp $(IMAGE_PATH)
	@echo "guest image: $$(cat $(IMAGE_PATH))"

# The guest agent's Debian package: the static agent and its systemd unit.
guest-deb: agent
	packaging/build-guest-deb.sh --agent $(AGENT) --out $(CACHE)/deb

# The host daemon's Debian package: the release binary, its unit, a default configuration
# with no VM (/etc/autoballoon/host.toml) and a man page generated from --help
# (packaging/build-host-deb.sh, packaging/gen-man.sh). Only cargo, libvirt-dev and
# pkg-config (the daemon links libvirt0), dpkg-deb and gzip are needed, so it does not go
# through `deps` (QEMU and the rest).
deb:
	@scripts/install-deps.sh --only pkg-config libvirt-dev
	cargo build --release --locked -p autoballoon
	packaging/build-host-deb.sh --host target/release/autoballoon --out $(CACHE)/deb

# The systemd units (systemd-analyze verify and security), the guest .deb and the host .deb
# (dpkg-deb --info/--contents, built from the binaries given). The release agent is built by
# `make image` already; the host binary is the debug one `cargo test` builds, so `make test`
# gains no release build.
packaging-test: agent
	cargo build --locked -p autoballoon
	packaging/test-packaging.sh --agent $(AGENT) --host target/debug/autoballoon

# The host .deb under a real systemd as PID 1 (packaging/test-systemd.sh): a Debian 12 root
# (debootstrap, cached under $(CACHE)/nspawn) booted in systemd-nspawn, the package installed
# with dpkg -i; checks the unit starts, reloads and stops, the socket directory, discovery of
# a fake QEMU's socket, the sandbox from the service's own mount namespace, and a reboot.
# About 3 min the first time (the root), 15-25 s after; part of `make test`.
systemd-test:
	@scripts/install-deps.sh --only pkg-config libvirt-dev systemd-container debootstrap
	cargo build --release --locked -p autoballoon
	packaging/test-systemd.sh --host target/release/autoballoon

# On QEMU 10 (QEMU10=0: the system's QEMU): Debian's 7.2 loses guest writes during TCG
# migrations and its free page hinting breaks destinations (docs/qemu-versions.md).
demo: testbed image
	$(DEMOBIN) --image "$$(cat $(IMAGE_PATH))" $(if $(filter 1,$(QEMU10)),--qemu "$$(scripts/install-qemu10.sh)") --out run/demo

# Spikes at steady state, each configuration against FPR alone and no balloon, on the
# system QEMU (docs/spikes.md); about 3 min a shape. Writes run/spikebench/SPIKES.md.
spikebench: testbed image
	target/release/autoballoon-spikebench --image "$$(cat $(IMAGE_PATH))" --out run/spikebench --results run/spikebench $(SPIKEBENCH_ARGS)

# Migrations idle and after a spike: autoballoon (plain QMP and `autoballoon migrate`), with
# and without free page reporting, against FPR alone (docs/migration.md). ~5 min a run.
migbench: testbed image
	target/release/autoballoon-migbench --image "$$(cat $(IMAGE_PATH))" --out run/migbench $(MIGBENCH_ARGS)

# Fuzzing (fuzz/, outside the workspace): each target FUZZ_SECONDS (60) on a corpus seeded
# from the fixtures; FUZZ_TARGETS="framer qmp" runs some. Not part of `make test`.
fuzz:
	fuzz/run.sh

unit-test: deps
	cargo test --locked --workspace --lib --bins

integration-test: image
	@scripts/check-free-space.sh
	@$(QEMU10_INSTALL)
	AUTOBALLOON_IMAGE="$$(cat $(IMAGE_PATH))" cargo test --locked --workspace --tests --doc -- --test-threads=1

# Host memory pressure from a real cgroup with a zram swap (tests/host_pressure.rs), alone
# and with its table; `make test` runs it too (docs/balancers.md).
test-host-pressure: image
	AUTOBALLOON_IMAGE="$$(cat $(IMAGE_PATH))" cargo test --locked -p autoballoon-testbed --test host_pressure -- --nocapture

# The simulator (crates/sim, docs/simulator.md): no QEMU, seconds on one core.
SIM := target/release/autoballoon-sim
sim:
	cargo test --locked -p autoballoon-sim
	cargo build --release --locked -p autoballoon-sim
	$(SIM) --scenario paper-spike --policy swapfree
	$(SIM) --scenario paper-spike --policy continuous-stock --no-baseline

# The fleet on Ray (crates/sim/ray, docs/simulator.md, Fleet on Ray): part of make test
# (a head and two worker nodes from local_cluster.py; about 12-16 s warm; the first run
# installs Ray into a cached venv, about 30 s more).
sim-ray-test:
	cargo build --release --locked -p autoballoon-sim
	AUTOBALLOON_SIM=$(SIM) bash crates/sim/ray/test.sh

# The simulator's speed at scale (issue 22, item 7): a figure to read, not a pass/fail test.
sim-scale:
	cargo build --release --locked -p autoballoon-sim
	$(SIM) --scenario fleet-week --policy swapfree --hosts 1250 --vms-per-host 8 --no-baseline

reproduce:
	cargo build --release --locked -p autoballoon-sim
	$(SIM) --reproduce experiments/REPORT.md --bench bench/results.json --bench-host bench/host/results.json

# The calibration's fitted values (docs/simulator.md, Calibration; make bench's and make
# bench-host's records) written into the file the
# binary embeds; then the binary is rebuilt with them and prints the fit beside them.
calibrate:
	cargo build --release --locked -p autoballoon-sim
	$(SIM) --calibrate-write crates/sim/calibration.toml --bench bench/results.json --bench-host bench/host/results.json
	cargo build --release --locked -p autoballoon-sim
	$(SIM) --calibrate --bench bench/results.json --bench-host bench/host/results.json

# Everything: the cargo suite (unit, property, doc and QEMU tests; the kernel scenarios
# are ignored there), the packages (and the host's under a real systemd), then the kernel
# scenarios, which build both kernels if not cached. Those run under QEMU 10 (or
# $AUTOBALLOON_QEMU if set): their 20 spike-and-migration cycles would meet Debian's 7.2
# losing TCG guest writes during migrations (docs/migration.md), which once left a
# destination with a stale page and a kernel that jumped into it.
test: image
	@scripts/check-free-space.sh
	@$(QEMU10_INSTALL)
	AUTOBALLOON_IMAGE="$$(cat $(IMAGE_PATH))" cargo test --locked --workspace -- --test-threads=1
	$(MAKE) packaging-test
	$(MAKE) systemd-test
	$(MAKE) sim-ray-test
	$(if $(filter 1,$(QEMU10)),AUTOBALLOON_QEMU="$${AUTOBALLOON_QEMU:-$$(scripts/install-qemu10.sh)}") $(MAKE) kernel-test

# The QEMU integration tests (crates/*/tests) with every VM under QEMU 10 instead of the
# system's QEMU 7.2 (AUTOBALLOON_QEMU); `make test` runs them under 7.2, plus tests/qemu10.rs.
test-qemu10: image
	AUTOBALLOON_QEMU="$$(scripts/install-qemu10.sh)" AUTOBALLOON_IMAGE="$$(cat $(IMAGE_PATH))" \
	  cargo test --locked --workspace --tests -- --test-threads=1

# Benchmarks (not tests): printed ratios, measured side by side in one run.
# `make bench` writes bench/RESULTS.md, bench/results.json and bench/*.svg (never edit them by
# hand): first the kernel benchmark (run/bench/kernel.json), then autoballoon-bench, the
# migrations at every moment and the footprint for each configuration side by side
# (crates/testbed/src/bench/), on the project's two QEMU builds with the balloon patches on
# (the `--populate` wrappers of scripts/build-qemu72-fixed.sh and build-qemu10-populate.sh:
# what the product's default uses where QEMU allows; the baselines run on the same binaries,
# hinting fixes included; Debian's own QEMU 10 is measured in docs/migration.md).
# BENCH_RUNS=N runs per point (2); BENCH_QUICK=1 one run, fewer
# moments, a short kernel bench (development); BENCH_KERNEL=0 skips the kernel bench;
# BENCH_ARGS passes options to autoballoon-bench (--help).
BENCH_KERNEL ?= 1
# BENCH_MIGRATION=0 skips the migration stage (autoballoon-bench).
BENCH_MIGRATION ?= 1
# Then autoballoon-spikebench (bench/SPIKES.md): spikes at steady state against FPR alone
# on both QEMU lines, each also with the project's balloon patches on (x-populate-on-deflate,
# and with it x-populate-reported, which the controller uses for the stock kernel's spikes;
# scripts/build-qemu72-fixed.sh --populate, scripts/build-qemu10-populate.sh --populate),
# 1, 2 and 4 vCPUs (about 3 h 20 min);
# BENCH_SPIKES=0 skips it, SPIKEBENCH_ARGS passes options (--help).
BENCH_SPIKES ?= 1
# Then autoballoon-densitybench (bench/DENSITY.md): four guests running a job sequence, host
# memory against FPR alone on the same kernel, runtime against no balloon, on QEMU 10, both
# kernels (about 20 min);
# BENCH_DENSITY=0 skips it, DENSITYBENCH_ARGS passes options (--help).
BENCH_DENSITY ?= 1
# The whole run takes several hours. BENCH_RESUME=1 goes on with an interrupted one: the
# stages that finished (run/bench/*.done) are skipped and autoballoon-bench keeps the points
# it had measured (its --resume; a group of points it had not finished is measured again
# whole); without it every stage starts afresh. A run longer than a session: `make
# bench-save` copies what it has measured (records, stages done, the kernel figures) into
# bench/partial/, to commit; on a fresh clone `make bench BENCH_RESUME=1` goes on from
# there, and a run that finishes removes bench/partial/.
BENCH_RESUME ?= 0
BENCH_PARTIAL := bench/partial
bench: agent testbed image
	@images=$$(kernel/scripts/images.sh $(AGENT)) && \
	patched=$$(sed -n 1p <<< "$$images") && stock=$$(sed -n 2p <<< "$$images") && \
	mkdir -p run/bench && \
	if [ "$(BENCH_RESUME)" = 1 ] && [ -d $(BENCH_PARTIAL) ] && [ ! -e run/bench/migration/results.jsonl ]; then \
	  echo "[bench] resuming the run saved in $(BENCH_PARTIAL)/ ($$(cat $(BENCH_PARTIAL)/migration/begun.txt 2>/dev/null || echo 'no migrations yet'))"; \
	  cp -r $(BENCH_PARTIAL)/. run/bench/; \
	fi && \
	if [ "$(BENCH_RESUME)" = 1 ]; then export BENCH_RESUME=1; else rm -f run/bench/*.done; export BENCH_RESUME=0; fi && \
	stage() { if [ -e run/bench/$$1.done ]; then echo "[bench] $$1: done by the run being resumed, skipped"; return 1; fi; }; \
	if [ "$(BENCH_KERNEL)" = 1 ] && stage kernel; then \
	  if [ -n "$$BENCH_QUICK" ] && [ "$$BENCH_QUICK" != 0 ]; then export AUTOBALLOON_BENCH_REPS=$${AUTOBALLOON_BENCH_REPS:-1} AUTOBALLOON_BENCH_CHURN=$${AUTOBALLOON_BENCH_CHURN:-2}; fi; \
	  AUTOBALLOON_PATCHED_IMAGE="$$patched" AUTOBALLOON_STOCK_IMAGE="$$stock" \
	    cargo bench --locked -p autoballoon-testbed --bench kernel || exit 1; \
	  touch run/bench/kernel.done; \
	fi; \
	if [ "$(BENCH_MIGRATION)" = 1 ] && stage migration; then \
	  target/release/autoballoon-bench --image "$$(cat $(IMAGE_PATH))" --patched-image "$$patched" \
	    --system-qemu "$$(scripts/build-qemu72-fixed.sh --populate)" --tools-disk "$$(scripts/bench-tools-disk.sh)" \
	    --qemu10 "$$(scripts/build-qemu10-populate.sh --populate)" --kernel-json run/bench/kernel.json --warm-host-mib 1536 \
	    --out run/bench/migration --results bench $(BENCH_ARGS) || exit 1; \
	  $(MAKE) calibrate || exit 1; \
	  touch run/bench/migration.done; \
	fi; \
	if [ "$(BENCH_SPIKES)" = 1 ] && stage spikes; then \
	  target/release/autoballoon-spikebench --image "$$(cat $(IMAGE_PATH))" --patched-image "$$patched" \
	    --qemu "$$(scripts/build-qemu72-fixed.sh),$$(scripts/build-qemu72-fixed.sh --populate),$$(scripts/install-qemu10.sh),$$(scripts/build-qemu10-populate.sh --populate)" --cpus 1,2,4 --warm-host-mib 1536 \
	    --out run/bench/spikes --results bench $(SPIKEBENCH_ARGS) || exit 1; \
	  touch run/bench/spikes.done; \
	fi; \
	if [ "$(BENCH_DENSITY)" = 1 ] && stage density; then \
	  target/release/autoballoon-densitybench --image "$$(cat $(IMAGE_PATH))" --patched-image "$$patched" --qemu "$$(scripts/install-qemu10.sh)" \
	    --out run/bench/density --results bench $(DENSITYBENCH_ARGS) || exit 1; \
	  touch run/bench/density.done; \
	fi; \
	rm -rf $(BENCH_PARTIAL)

# What an unfinished `make bench` has measured, kept in the repository (see BENCH_RESUME).
bench-save:
	@test -d run/bench || { echo "bench-save: no run/bench here: no run to save" >&2; exit 1; }
	@rm -rf $(BENCH_PARTIAL) && mkdir -p $(BENCH_PARTIAL) && \
	for f in run/bench/*.done run/bench/kernel.json; do if [ -e "$$f" ]; then cp "$$f" $(BENCH_PARTIAL)/; fi; done && \
	if [ -e run/bench/migration/results.jsonl ]; then \
	  mkdir -p $(BENCH_PARTIAL)/migration && \
	  for f in results.jsonl begun.txt setup.txt; do if [ -e run/bench/migration/$$f ]; then cp run/bench/migration/$$f $(BENCH_PARTIAL)/migration/; fi; done; \
	fi && \
	echo "bench-save: $$(ls $(BENCH_PARTIAL) | tr '\n' ' ')and $$(cat $(BENCH_PARTIAL)/migration/results.jsonl 2>/dev/null | wc -l) migration-stage record(s) in $(BENCH_PARTIAL)/"

# Four guests running a job sequence whose memory comes and goes, each configuration in
# turn on QEMU 10 (docs/spikes.md, Density); writes run/densitybench/DENSITY.md.
densitybench: testbed image
	target/release/autoballoon-densitybench --image "$$(cat $(IMAGE_PATH))" --qemu "$$(scripts/install-qemu10.sh)" \
	  --out run/densitybench --results run/densitybench $(DENSITYBENCH_ARGS)

# The soak (issue 21 item 6; docs/soak.md): per arm (the patched kernel with the agent on its
# kernel backend; the stock kernel with the host controller in-process, FPR on) and per QEMU
# (the fixed 7.2 and QEMU 10, SOAK_QEMU), 1,000 `spike ... verify` cycles of varied shapes and
# THP modes with 100 live migrations in between, some during a spike. Not part of `make
# test`: at the full sizes it runs for a day or more. Writes run/soak/REPORT.md, soak.json
# and the plots; fails on any OOM kill, failed allocation, bad page, kernel warning or
# balloon size disagreement. SOAK_ARGS passes options (--help), e.g.
# SOAK_ARGS='--cycles 6 --migrations 2' or '--hours 24' or '--arms stock'.
SOAK_QEMU ?= $$(scripts/build-qemu72-fixed.sh),$$(scripts/install-qemu10.sh)
soak: testbed image
	@images=$$(kernel/scripts/images.sh $(AGENT)) && patched=$$(sed -n 1p <<< "$$images") && \
	target/release/autoballoon-soak --image "$$(cat $(IMAGE_PATH))" --patched-image "$$patched" \
	  --qemu "$(SOAK_QEMU)" --out run/soak $(SOAK_ARGS)

# The host controller's own CPU and RSS per managed VM (1, 4, 16 fake VMs and one real guest)
# and the iBalloon seed's mixed-workload experiment on four real guests, static sizes against
# the balancer; writes bench/host/RESULTS.md and bench/host/results.json (docs/balancers.md,
# Benchmark). About 20 min; root (cgroups). BENCH_HOST_ARGS='--cost-only' or '--mixed-only'.
# A1 runs on the stock kernel of kernel/ (the same 6.12 as the patched one; built and cached
# by kernel/scripts/images.sh like make test's kernel scenarios).
bench-host: host image
	@stock=$$(kernel/scripts/images.sh $(AGENT) | sed -n 2p) && \
	AUTOBALLOON_BIN="$(CURDIR)/target/release/autoballoon" AUTOBALLOON_IMAGE="$$(cat $(IMAGE_PATH))" AUTOBALLOON_A1_IMAGE="$$stock" \
	  cargo bench --locked -p autoballoon-testbed --bench host -- $(BENCH_HOST_ARGS)

clean:
	cargo clean
	rm -rf run

-include kernel/kernel.mk
