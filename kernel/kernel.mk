# autoballoon guest kernel: include from the top-level Makefile
# (`include kernel/kernel.mk`).  Paths are relative to the repository root.
# Everything built goes to ~/.cache/autoballoon/ (override: AUTOBALLOON_CACHE).
#
#   make kernel          patched bzImage (base + kernel/patches), cached
#   make kernel-stock    same source and config without the series
#   make kernel-kunit    KUnit suites of kernel/.kunitconfig (UML)
#   make kernel-boot     QEMU boot scenarios on both kernels
#   make kernel-test     kernel-kunit + kernel-boot
#   make kernel-check    checkpatch --strict on every patch, and every prefix
#                        of the series builds
#   make kernel-deb      Debian packages of the patched kernel (slow)
#   kernel-test-in-suite what the top-level `make test` runs: KUnit and the
#                        patched boot scenarios, if already built (else skipped)

KERNEL_DIR ?= kernel

.PHONY: kernel kernel-stock kernel-kunit kernel-boot kernel-test kernel-check kernel-deb \
	kernel-test-in-suite

kernel:
	$(KERNEL_DIR)/build.sh patched

kernel-stock:
	$(KERNEL_DIR)/build.sh stock

kernel-kunit:
	$(KERNEL_DIR)/build.sh --kunit

kernel-boot:
	$(KERNEL_DIR)/scripts/boot-test.sh

kernel-test: kernel-kunit kernel-boot

kernel-check:
	$(KERNEL_DIR)/scripts/check-patches.sh
	$(KERNEL_DIR)/scripts/check-series-builds.sh

kernel-deb:
	$(KERNEL_DIR)/scripts/build-deb.sh

kernel-test-in-suite:
	$(KERNEL_DIR)/scripts/suite-test.sh
