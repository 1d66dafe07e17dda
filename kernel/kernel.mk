# autoballoon guest kernel: include from the top-level Makefile
# (`include kernel/kernel.mk`).  Paths are relative to the repository root.
# Everything built goes to ~/.cache/autoballoon/ (override: AUTOBALLOON_CACHE).
#
#   make kernel          patched bzImage (base + kernel/patches), cached
#   make kernel-stock    same source and config without the series
#   make kernel-kunit    KUnit suites of kernel/.kunitconfig (UML)
#   make kernel-test     both kernels in the project's guest image, with the
#                        agent: KUnit at boot, floor, spike, 20 spike+migration
#                        cycles; one JSON summary line per variant
#   make kernel-test-migrate  live migrations while the hook serves a verified
#                        spike (patched and stock; 20 each, AUTOBALLOON_SPIKE_MIGRATIONS)
#   make kernel-test-debug  the same on the debug build of the series (lockdep,
#                        DEBUG_VM, DEBUG_LIST): any kernel warning fails a test
#   make kernel-test-kasan  KUnit and the boot scenarios that fit (KASAN_TESTS) on
#                        the debug build with generic KASAN (kernel/config/kasan.config)
#   make kernel-bench-vmem  the series against virtio-mem (the stock kernel with
#                        CONFIG_VIRTIO_MEM, kernel/build.sh vmem): spikes, shrinks,
#                        resident memory, idle migrations (run/bench/virtio-mem.json)
#   make kernel-test-vmem  the series' balloon beside virtio-mem (the patched kernel
#                        with CONFIG_VIRTIO_MEM, kernel/build.sh patched-vmem): plug,
#                        balloon, unplug memory holding units, spike
#   make kernel-check    identity and ABI fields and checkpatch --strict on
#                        every patch, and every prefix of the series builds
#   make kernel-deb      Debian packages of the patched kernel for real guests
#                        (Debian's cloud-amd64 config; FLAVOUR=amd64 for the
#                        generic one; 1-2 h cold)
#   make kernel-deb-test the spike scenario on the packaged kernel

KERNEL_DIR ?= kernel

.PHONY: kernel kernel-stock kernel-kunit kernel-test kernel-test-migrate kernel-test-debug kernel-test-kasan kernel-bench-vmem kernel-test-vmem kernel-check kernel-deb kernel-deb-test

kernel:
	$(KERNEL_DIR)/build.sh patched

kernel-stock:
	$(KERNEL_DIR)/build.sh stock

kernel-kunit:
	$(KERNEL_DIR)/build.sh --kunit

# AGENT (the static guest agent) and its target come from the top-level Makefile.
kernel-test: agent
	$(KERNEL_DIR)/scripts/kernel-test.sh $(AGENT)

kernel-test-migrate: agent
	KERNEL_TEST_MIGRATE=1 $(KERNEL_DIR)/scripts/kernel-test.sh $(AGENT)

kernel-test-debug: agent
	PATCHED_VARIANT=debug $(KERNEL_DIR)/scripts/kernel-test.sh $(AGENT)

# KUnit at boot (the store, the zeroed map, the hook from every context, the spec's order,
# offlining, speculative references, HWPoison) and the boot scenarios that fit, under
# KASAN.  KASAN's shadow takes an eighth of the guest's memory at boot (256 MiB of the
# 2 GiB guest), so the scenarios balloon it to 512 MiB instead of 256 and spike
# 4 x 256 MiB instead of 4 x 384 (AUTOBALLOON_KERNEL_SHRUNK_MIB, AUTOBALLOON_KERNEL_SPIKE_MIB).
# Two kinds go to 768 MiB (KASAN_768_TESTS): the offlining pair, which adds a 512 MiB dimm
# (320 MiB of shadow; at 512 the balloon did not get there in 3 min), and the file reads,
# which need page cache to drop (at 512 the guest kept none: the clean-cache pass reclaimed
# 3 MiB in 214 stalls and the hook served the rest, as it should with no cache left).
# The two CMA scenarios (KASAN_CMA_TESTS) boot a 5 GiB guest (640 MiB of shadow): the
# burst's guest is ballooned to 1152 MiB instead of 512 (AUTOBALLOON_KERNEL_CMA_SHRUNK_MIB),
# and the balloon keeps 1536 MiB instead of 512 when the two gigantic pages are asked for
# (AUTOBALLOON_KERNEL_CONTIG_BALLOON_MIB; with 512 both pages found ranges without units).
KASAN_TESTS ?= patched_kunit patched_floor patched_spike_at patched_guest_target patched_transparent patched_the_same_target \
	patched_page_poisoning patched_suspend patched_driver_unbind patched_thp patched_two_numa patched_with_free \
	patched_shows patched_balloon_units patched_balloon_takes
KASAN_768_TESTS ?= patched_offline patched_file_reads
KASAN_CMA_TESTS ?= patched_contiguous patched_unmovable_burst
kernel-test-kasan: agent
	PATCHED_VARIANT=kasan AUTOBALLOON_KERNEL_SHRUNK_MIB=512 AUTOBALLOON_KERNEL_SPIKE_MIB=256 \
		$(KERNEL_DIR)/scripts/kernel-test.sh $(AGENT) '$(KASAN_TESTS)'
	PATCHED_VARIANT=kasan AUTOBALLOON_KERNEL_SHRUNK_MIB=768 AUTOBALLOON_KERNEL_SPIKE_MIB=256 \
		$(KERNEL_DIR)/scripts/kernel-test.sh $(AGENT) '$(KASAN_768_TESTS)'
	PATCHED_VARIANT=kasan AUTOBALLOON_KERNEL_CMA_SHRUNK_MIB=1152 AUTOBALLOON_KERNEL_CONTIG_BALLOON_MIB=1536 \
		$(KERNEL_DIR)/scripts/kernel-test.sh $(AGENT) '$(KASAN_CMA_TESTS)'

# The guest image directory of kernel variant $(1) (kernel/build.sh), as a shell command.
variant_image = guest/build-image.sh --agent $(AGENT) --vmlinuz "$$($(KERNEL_DIR)/build.sh $(1) | tail -1)" --print-dir

# The guests run under $(AUTOBALLOON_QEMU) (default: the system's QEMU); AUTOBALLOON_BENCH_REPS
# rounds (3): about a minute once the kernels are built (the vmem build: about 10 min cold).
kernel-bench-vmem: agent
	@images=$$(kernel/scripts/images.sh $(AGENT)) && patched=$$(sed -n 1p <<< "$$images") && \
	vmem=$$($(call variant_image,vmem)) && \
	AUTOBALLOON_PATCHED_IMAGE="$$patched" AUTOBALLOON_VMEM_IMAGE="$$vmem" \
	  cargo bench --locked -p autoballoon-testbed --bench virtio_mem

# The guest runs under $(AUTOBALLOON_QEMU); its record goes to run/kernel-test/vmem-*.jsonl.
kernel-test-vmem: agent
	@patched=$$($(call variant_image,patched-vmem)) && \
	stock=$$($(call variant_image,vmem)) && \
	mkdir -p run/kernel-test && \
	AUTOBALLOON_PATCHED_VMEM_IMAGE="$$patched" AUTOBALLOON_VMEM_IMAGE="$$stock" AUTOBALLOON_KERNEL_RESULTS="$(CURDIR)/run/kernel-test/vmem-$$(date +%Y%m%d-%H%M%S).jsonl" \
	  cargo test --locked -p autoballoon-testbed --test kernel_vmem -- --ignored --test-threads=1

kernel-check:
	$(KERNEL_DIR)/scripts/check-patches.sh
	$(KERNEL_DIR)/scripts/check-series-builds.sh

kernel-deb:
	$(KERNEL_DIR)/scripts/build-deb.sh

kernel-deb-test: agent
	$(KERNEL_DIR)/scripts/deb-test.sh $(AGENT)
