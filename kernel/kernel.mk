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
#   make kernel-test-kasan  the hook's scenarios (KASAN_TESTS) on the debug build
#                        with generic KASAN (kernel/config/kasan.config)
#   make kernel-check    identity and ABI fields and checkpatch --strict on
#                        every patch, and every prefix of the series builds
#   make kernel-deb      Debian packages of the patched kernel for real guests
#                        (Debian's cloud-amd64 config; FLAVOUR=amd64 for the
#                        generic one; 1-2 h cold)
#   make kernel-deb-test the spike scenario on the packaged kernel

KERNEL_DIR ?= kernel

.PHONY: kernel kernel-stock kernel-kunit kernel-test kernel-test-migrate kernel-test-debug kernel-test-kasan kernel-check kernel-deb kernel-deb-test

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

# The scenarios where the balloon's pages change hands: KUnit, the spike, spikes
# during migrations, offlining, contiguous allocations, unbind and unplug, CMA.
KASAN_TESTS ?= patched_kunit patched_spike_at_256_mib patched_spike_cycles_with_migrations \
  patched_offline_ballooned_memory patched_contiguous_allocations_get_ballooned_units_back \
  patched_driver_unbind_and_device_unplug_during_spikes patched_unmovable_burst_leaves_units_in_a_cma_area
kernel-test-kasan: agent
	PATCHED_VARIANT=kasan $(KERNEL_DIR)/scripts/kernel-test.sh $(AGENT) '$(KASAN_TESTS)'

kernel-check:
	$(KERNEL_DIR)/scripts/check-patches.sh
	$(KERNEL_DIR)/scripts/check-series-builds.sh

kernel-deb:
	$(KERNEL_DIR)/scripts/build-deb.sh

kernel-deb-test: agent
	$(KERNEL_DIR)/scripts/deb-test.sh $(AGENT)
