/*
 * hold: keep N MiB of memory the host has backed, lazily freed, until told to let go.
 *
 *   hold MIB
 *
 * Maps MIB MiB (2 MiB aligned, MADV_HUGEPAGE), writes every page so that it is backed in
 * the guest and on the host, then marks it MADV_FREE: the pages stay mapped and counted as
 * used, so free page reporting does not give them back to the host, but the kernel drops
 * them without swap as soon as it needs memory. Prints
 *
 *   HOLD ready mib=M touch_s=X.XX
 *
 * then waits; SIGTERM or SIGINT unmaps the memory and exits ("HOLD released"). A probe for
 * docs/spikes.md: memory kept warm for a recurring spike inside the guest.
 *
 * Build: gcc -O2 -static -o hold hold.c
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define HUGE (2UL << 20)

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	char *end;
	long mib = argc == 2 ? strtol(argv[1], &end, 10) : -1;

	if (argc != 2 || *end || mib <= 0) {
		fprintf(stderr, "usage: hold MIB\n");
		return 2;
	}
	size_t len = (size_t)mib << 20;
	char *raw = mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED) {
		perror("hold: mmap");
		return 1;
	}
	char *p = (char *)(((uintptr_t)raw + HUGE - 1) & ~(HUGE - 1));
	madvise(p, len, MADV_HUGEPAGE);
	double t0 = now_s();
	for (size_t off = 0; off < len; off += 4096)
		p[off] = 1;
	double touch_s = now_s() - t0;
	if (madvise(p, len, MADV_FREE) != 0) {
		perror("hold: madvise(MADV_FREE)");
		return 1;
	}
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	printf("HOLD ready mib=%ld touch_s=%.2f\n", mib, touch_s);
	fflush(stdout);
	while (!stop)
		pause();
	munmap(raw, len + HUGE);
	printf("HOLD released\n");
	return 0;
}
