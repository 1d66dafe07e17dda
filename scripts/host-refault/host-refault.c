// SPDX-License-Identifier: GPL-2.0
/*
 * How fast this host faults memory back after discarding it, as QEMU discards
 * guest memory: one range at a time (free page reporting) or one 4 KiB page at a
 * time (the balloon's inflate queue).  Maps SIZE MiB with MADV_HUGEPAGE (as QEMU
 * maps guest RAM), touches it, then ROUNDS times: discards it whole, waits GAP s,
 * touches it again; discards it 4 KiB at a time, waits GAP s, touches it again.
 * Prints the seconds each step took.  docs/spikes.md, "The host's faults".
 *
 *   host-refault SIZE_MIB ROUNDS [GAP_S]
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define HUGE (2UL << 20)

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static double touch(char *p, size_t n)
{
	double t = now();

	for (size_t i = 0; i < n; i += 4096)
		p[i] = 1;
	return now() - t;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s SIZE_MIB ROUNDS [GAP_S]\n", argv[0]);
		return 2;
	}
	size_t n = (size_t)atol(argv[1]) << 20;
	int rounds = atoi(argv[2]);
	unsigned int gap = argc > 3 ? (unsigned int)atoi(argv[3]) : 0;
	char *raw = mmap(NULL, n + HUGE, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (raw == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	/* 2 MiB aligned, as QEMU aligns guest RAM. */
	char *p = (char *)(((unsigned long)raw + HUGE - 1) & ~(HUGE - 1));

	madvise(p, n, MADV_HUGEPAGE);
	printf("first touch %.3f s\n", touch(p, n));
	for (int r = 0; r < rounds; r++) {
		double t = now();

		madvise(p, n, MADV_DONTNEED);
		t = now() - t;
		sleep(gap);
		printf("whole discard %.3f s, refault %.3f s\n", t, touch(p, n));
		t = now();
		for (size_t i = 0; i < n; i += 4096)
			madvise(p + i, 4096, MADV_DONTNEED);
		t = now() - t;
		sleep(gap);
		printf("4 KiB discards %.3f s, refault %.3f s\n", t, touch(p, n));
	}
	return 0;
}
