// SPDX-License-Identifier: GPL-2.0
/*
 * What MADV_PAGEOUT does to a transparent huge page held lazily, as the
 * project's QEMU patch holds memory it backed ahead of the guest
 * (scripts/qemu10/virtio-balloon-reported-hold-lazily.patch): each 2 MiB chunk
 * is populated (MADV_POPULATE_WRITE), made lazily free (MADV_FREE), maybe
 * written, then paged out (MADV_PAGEOUT). Five cases, each on a fresh mapping
 * of SIZE MiB with MADV_HUGEPAGE (as QEMU maps guest RAM):
 *   untouched   nothing written, then every page touched again
 *   written     one word written per 2 MiB before the page-out
 *   discarded   nothing written, then MADV_DONTNEED over the whole range (as
 *               free page reporting discards it) before touching it again
 *   collapsed   nothing written, then MADV_COLLAPSE on each 2 MiB (as the
 *               populating thread backs such a chunk again,
 *               virtio-balloon-populate-collapse.patch) before touching it
 *               again
 *   kept        nothing written, no page-out, then touched again
 * Prints the mapping's resident and huge-page KiB (smaps) after each step and
 * the minor faults the last touch took. docs/spikes.md, "What the hold's
 * page-out leaves behind".
 *
 *   pageout-split [SIZE_MIB]   (default 64)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

#define HUGE (2UL << 20)

/* What a case does between holding the mapping lazily and touching it again */
enum { WRITE = 1, PAGEOUT = 2, DISCARD = 4, COLLAPSE = 8 };

/* The Rss and AnonHugePages of the mapping at addr, in KiB. */
static void usage_of(void *addr, long *rss, long *huge)
{
	char line[256], want[64];
	FILE *f = fopen("/proc/self/smaps", "r");
	int in = 0;

	*rss = *huge = -1;
	snprintf(want, sizeof(want), "%lx-", (unsigned long)addr);
	while (f && fgets(line, sizeof(line), f)) {
		if (strchr(line, '-') && strchr(line, ' ') &&
		    strchr(line, '-') < strchr(line, ' ')) {
			unsigned long lo, hi;

			if (sscanf(line, "%lx-%lx", &lo, &hi) == 2)
				in = lo <= (unsigned long)addr &&
				     (unsigned long)addr < hi;
			continue;
		}
		if (in && !strncmp(line, "Rss:", 4))
			*rss = atol(line + 4);
		if (in && !strncmp(line, "AnonHugePages:", 14))
			*huge = atol(line + 14);
	}
	if (f)
		fclose(f);
}

static long minflt(void)
{
	struct rusage u;

	getrusage(RUSAGE_SELF, &u);
	return u.ru_minflt;
}

static void report(const char *what, void *a)
{
	long rss, huge;

	usage_of(a, &rss, &huge);
	printf("  %-34s resident %7ld KiB, huge %7ld KiB\n", what, rss, huge);
}

static void one(const char *name, size_t size, unsigned int steps)
{
	char *m = mmap(NULL, size + HUGE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *a;
	size_t off;
	long before;

	if (m == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	a = (char *)(((uintptr_t)m + HUGE - 1) & ~(HUGE - 1));
	printf("%s:\n", name);
	madvise(a, size, MADV_HUGEPAGE);
	for (off = 0; off < size; off += HUGE) {
		if (madvise(a + off, HUGE, MADV_POPULATE_WRITE) ||
		    madvise(a + off, HUGE, MADV_FREE)) {
			perror("madvise");
			exit(1);
		}
	}
	report("populated, held lazily", a);
	if (steps & WRITE) {
		for (off = 0; off < size; off += HUGE)
			a[off] = 1;
		report("one word written per 2 MiB", a);
	}
	if (steps & PAGEOUT) {
		for (off = 0; off < size; off += HUGE)
			madvise(a + off, HUGE, MADV_PAGEOUT);
		report("paged out", a);
	}
	if (steps & DISCARD) {
		madvise(a, size, MADV_DONTNEED);
		report("discarded whole", a);
	}
	if (steps & COLLAPSE) {
		for (off = 0; off < size; off += HUGE)
			if (madvise(a + off, HUGE, MADV_COLLAPSE))
				perror("MADV_COLLAPSE");
		report("collapsed", a);
	}
	before = minflt();
	for (off = 0; off < size; off += 4096)
		a[off] = 2;
	report("touched again", a);
	printf("  %ld minor faults for %zu KiB\n", minflt() - before,
	       size >> 10);
	munmap(m, size + HUGE);
}

int main(int argc, char **argv)
{
	size_t size = (argc > 1 ? strtoul(argv[1], NULL, 10) : 64) << 20;

	size &= ~(HUGE - 1);
	one("untouched", size, PAGEOUT);
	one("written", size, WRITE | PAGEOUT);
	one("discarded", size, PAGEOUT | DISCARD);
	one("collapsed", size, PAGEOUT | COLLAPSE);
	one("kept", size, 0);
	return 0;
}
