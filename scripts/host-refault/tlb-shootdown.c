// SPDX-License-Identifier: GPL-2.0
/*
 * What TLB shootdowns cost a thread that computes while another thread of its
 * process changes its mappings, as the project's populating thread does to
 * guest RAM while the vCPUs run (MADV_COLLAPSE, then MADV_FREE, on each 2 MiB
 * chunk it backs: about 1,100 shootdowns a spike of 1.2 GiB). A worker pinned
 * to CPU 1 counts loop iterations for two seconds; the main thread, pinned to
 * CPU 0, makes a page it wrote read-only and writable again RATE times a
 * second (0: nothing): each read-only switch flushes the worker's TLB, and
 * nothing else is done, so the memory bus stays quiet. Prints the iterations
 * and the TLB shootdowns CPU 1 took (/proc/interrupts). Run it with RATE 0 and
 * others in turn and compare. docs/spikes.md, "An earlier request".
 *
 * cc -O2 -pthread -o /tmp/tlb-shootdown tlb-shootdown.c
 * for r in 0 1000 0 5000 0 20000; do /tmp/tlb-shootdown $r; done
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static atomic_int stop;

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void pin(int cpu)
{
	cpu_set_t s;

	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	pthread_setaffinity_np(pthread_self(), sizeof(s), &s);
}

/* TLB shootdowns CPU 1 has taken, or -1. */
static long shootdowns(void)
{
	char line[4096];
	long cpu0, cpu1 = -1;
	FILE *f = fopen("/proc/interrupts", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, " TLB: %ld %ld", &cpu0, &cpu1) == 2)
			break;
	if (f)
		fclose(f);
	return cpu1;
}

static void *work(void *arg)
{
	volatile unsigned long x = 0;
	unsigned long n = 0;

	pin(1);
	while (!atomic_load(&stop)) {
		for (int i = 0; i < 1000; i++)
			x += (unsigned long)i * i;
		n++;
	}
	*(unsigned long *)arg = n;
	return NULL;
}

int main(int argc, char **argv)
{
	int rate = argc > 1 ? atoi(argv[1]) : 0;
	unsigned long iterations = 0;
	long calls = 0, tlb;
	pthread_t worker;
	double t0, end;
	char *page;

	pin(0);
	page = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	tlb = shootdowns();
	pthread_create(&worker, NULL, work, &iterations);
	t0 = now();
	end = t0 + 2;
	while (now() < end) {
		if (rate) {
			double next;

			page[0]++;
			mprotect(page, 4096, PROT_READ);
			mprotect(page, 4096, PROT_READ | PROT_WRITE);
			calls++;
			next = t0 + (double)calls / rate;
			while (now() < next)
				;
		}
	}
	atomic_store(&stop, 1);
	pthread_join(worker, NULL);
	printf("%d flushes a second: %ld, worker %lu iterations, CPU 1 took %ld TLB shootdowns\n",
	       rate, calls, iterations, shootdowns() - tlb);
	return 0;
}
