// SPDX-License-Identifier: GPL-2.0
/*
 * touchmem THREADS MIB [HOLD_S]: THREADS threads each malloc MIB/THREADS
 * MiB and write one byte per 4 KiB page, then hold it HOLD_S seconds.
 * Prints the time it took.  Minimal stand-in for the project's spike
 * workload, for kernel boot tests.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static size_t per_thread;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *touch(void *arg)
{
	char *p = malloc(per_thread);
	size_t i;

	if (!p) {
		fprintf(stderr, "touchmem: malloc failed\n");
		exit(2);
	}
	for (i = 0; i < per_thread; i += 4096)
		p[i] = 1;
	return p;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 1;
	long mib = argc > 2 ? atol(argv[2]) : 100;
	int hold = argc > 3 ? atoi(argv[3]) : 0;
	pthread_t tid[256];
	double t0, t1;
	int i;

	if (threads < 1 || threads > 256)
		return 1;
	per_thread = (size_t)mib * 1048576 / threads;
	t0 = now();
	for (i = 0; i < threads; i++)
		pthread_create(&tid[i], NULL, touch, NULL);
	for (i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	t1 = now();
	printf("touchmem: threads=%d mib=%ld seconds=%.3f\n", threads, mib, t1 - t0);
	fflush(stdout);
	if (hold)
		sleep(hold);
	return 0;
}
