/*
 * An LD_PRELOAD measuring device, not part of the product: what would a spike gain if QEMU
 * backed the pages the balloon deflates as soon as the guest names them, off the vCPU's
 * thread, instead of leaving each page to fault in when the guest first touches it?
 *
 * QEMU's virtio-balloon answers each deflated page with madvise(MADV_WILLNEED) on it
 * (hw/virtio/virtio-balloon.c, balloon_deflate_page()), which does nothing for anonymous
 * memory that is not swapped out. This library turns that call into MADV_POPULATE_WRITE
 * (Linux 5.14): the host allocates and maps the page then.
 *
 *   AB_POPULATE=sync    populate in the caller (QEMU's main loop, before the deflation is
 *                       acknowledged to the guest)
 *   AB_POPULATE=async   (default) queue the range and return at once; one worker thread
 *                       populates the queue in order, merging adjacent ranges (a QEMU that
 *                       acknowledged first and populated in a thread of its own)
 *   AB_POPULATE=off     pass every call through unchanged
 *   AB_POPULATE=skip    answer MADV_WILLNEED at once, without the system call (what the
 *                       deflation's one call per 4 KiB page costs QEMU; docs/spikes.md)
 *
 * Build and use: scripts/populate-on-deflate/wrap-qemu.sh QEMU [MODE] prints a wrapper.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

enum mode { MODE_OFF, MODE_SYNC, MODE_ASYNC, MODE_SKIP };

#define QUEUE_LEN 65536

static int (*real_madvise)(void *, size_t, int);
static enum mode mode = MODE_ASYNC;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t nonempty = PTHREAD_COND_INITIALIZER;
static struct range { uintptr_t start, end; } queue[QUEUE_LEN];
static unsigned long head, tail, dropped, populated_pages, skipped;

static void *worker(void *unused)
{
	(void)unused;
	for (;;) {
		struct range r;

		pthread_mutex_lock(&lock);
		while (head == tail)
			pthread_cond_wait(&nonempty, &lock);
		/* madvise() merged whatever followed on directly while it was queued. */
		r = queue[tail++ % QUEUE_LEN];
		pthread_mutex_unlock(&lock);
		if (real_madvise((void *)r.start, r.end - r.start, MADV_POPULATE_WRITE) == 0)
			__atomic_add_fetch(&populated_pages, (r.end - r.start) >> 12, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void init(void)
{
	const char *m = getenv("AB_POPULATE");
	pthread_t t;

	real_madvise = dlsym(RTLD_NEXT, "madvise");
	if (m && !strcmp(m, "off"))
		mode = MODE_OFF;
	else if (m && !strcmp(m, "sync"))
		mode = MODE_SYNC;
	else if (m && !strcmp(m, "skip"))
		mode = MODE_SKIP;
	if (mode == MODE_ASYNC && pthread_create(&t, NULL, worker, NULL) != 0)
		mode = MODE_SYNC;
	fprintf(stderr, "populate-on-deflate: mode %s\n",
		mode == MODE_OFF ? "off" : mode == MODE_SYNC ? "sync" : mode == MODE_SKIP ? "skip" : "async");
}

__attribute__((destructor)) static void report(void)
{
	if (mode == MODE_SKIP)
		fprintf(stderr, "populate-on-deflate: %lu calls skipped\n",
			__atomic_load_n(&skipped, __ATOMIC_RELAXED));
	else if (mode != MODE_OFF)
		fprintf(stderr, "populate-on-deflate: %lu pages populated, %lu ranges dropped\n",
			__atomic_load_n(&populated_pages, __ATOMIC_RELAXED), dropped);
}

int madvise(void *addr, size_t len, int advice)
{
	pthread_once(&once, init);
	if (advice != MADV_WILLNEED || mode == MODE_OFF)
		return real_madvise(addr, len, advice);
	if (mode == MODE_SKIP) {
		__atomic_add_fetch(&skipped, 1, __ATOMIC_RELAXED);
		return 0;
	}
	if (mode == MODE_SYNC) {
		if (real_madvise(addr, len, MADV_POPULATE_WRITE) == 0) {
			__atomic_add_fetch(&populated_pages, len >> 12, __ATOMIC_RELAXED);
			return 0;
		}
		return real_madvise(addr, len, advice);
	}
	pthread_mutex_lock(&lock);
	if (head - tail < QUEUE_LEN) {
		uintptr_t s = (uintptr_t)addr;
		struct range *last = head != tail ? &queue[(head - 1) % QUEUE_LEN] : NULL;

		if (last && last->end == s)
			last->end = s + len;
		else
			queue[head++ % QUEUE_LEN] = (struct range){ s, s + len };
		pthread_cond_signal(&nonempty);
	} else {
		dropped++;
	}
	pthread_mutex_unlock(&lock);
	return 0;
}
