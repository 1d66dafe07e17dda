# autoballoon — top-level targets. `make demo` and `make test` install what they need.
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CACHE ?= $(HOME)/.cache/autoballoon
export AUTOBALLOON_CACHE := $(CACHE)

TRIPLE := x86_64-unknown-linux-gnu
AGENT := target/$(TRIPLE)/release/autoballoon-guest
HOSTBIN := target/release/autoballoon
IMAGE_PATH := run/image.path

.PHONY: all deps build agent host image demo test unit-test integration-test clean help

all: build

help:
	@echo "make demo   - boot a guest, spike it, migrate it with and without autoballoon"
	@echo "make test   - the whole suite (unit, property and QEMU integration tests)"
	@echo "make image  - build the guest image (cached under $(CACHE))"
	@echo "make kernel / kernel-test / kernel-deb - the patched guest kernel (see kernel/README.md)"

deps:
	@scripts/install-deps.sh

# The agent is one static binary (no shared libraries) for the guest's initramfs.
agent: deps
	RUSTFLAGS='-C target-feature=+crt-static -C relocation-model=static' \
	  cargo build --release --locked -p autoballoon-guest --target $(TRIPLE)

host: deps
	cargo build --release --locked -p autoballoon

build: agent host

image: agent
	@mkdir -p run
	guest/build-image.sh --agent $(AGENT) --print-dir > $(IMAGE_PATH).tmp && mv $(IMAGE_PATH).tmp $(IMAGE_PATH)
	@echo "guest image: $$(cat $(IMAGE_PATH))"

demo: build image
	$(HOSTBIN) demo --image "$$(cat $(IMAGE_PATH))" --out run/demo

unit-test: deps
	cargo test --locked --workspace --lib --bins

integration-test: image
	AUTOBALLOON_IMAGE="$$(cat $(IMAGE_PATH))" cargo test --locked --workspace --tests --doc -- --test-threads=1

test: image
	AUTOBALLOON_IMAGE="$$(cat $(IMAGE_PATH))" cargo test --locked --workspace -- --test-threads=1
	@if [ -f kernel/kernel.mk ] && grep -q '^kernel-test-in-suite' kernel/kernel.mk; then $(MAKE) kernel-test-in-suite; fi

clean:
	cargo clean
	rm -rf run

-include kernel/kernel.mk
