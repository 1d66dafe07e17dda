/*
 * fill: dirty a given amount of memory once, then give it back.
 *
 *   fill MIB        mmap MIB MiB, write every byte, munmap, exit
 *   fill pct:P      P % of MemAvailable (from /proc/meminfo)
 *   fill 0          all of MemAvailable less a 32 MiB margin
 *
 * Every byte is written with a varying non-zero pattern (no zero pages, nothing KSM could
 * merge), so after exit the freed pages keep dirty contents in the guest's free lists.
 * Prints:
 *
 *   FILL mib=N secs=X.XX
 *
 * (secs = mmap + write time). Exit 0 on success, 1 if the mapping failed, 2 on bad
 * arguments.
 *
 * Build: gcc -O2 -static -pthread -o fill fill.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MARGIN_MIB 32

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* MemAvailable in KiB, or -1. */
static long mem_available_kb(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemAvailable: %ld kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb;
}

static void usage(const char *argv0)
{
    fprintf(stderr, "usage: %s MIB | pct:P | 0\n"
                    "  MIB    MiB to fill\n"
                    "  pct:P  P %% of MemAvailable\n"
                    "  0      MemAvailable - %d MiB\n",
            argv0, MARGIN_MIB);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        usage(argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    long mib;
    char *end;
    errno = 0;
    if (strncmp(argv[1], "pct:", 4) == 0) {
        double pct = strtod(argv[1] + 4, &end);
        if (errno || end == argv[1] + 4 || *end || !(pct > 0) || pct > 100) {
            usage(argv[0]);
            return 2;
        }
        long avail = mem_available_kb();
        if (avail < 0) {
            fprintf(stderr, "fill: cannot read MemAvailable from /proc/meminfo\n");
            return 1;
        }
        mib = (long)((double)avail * pct / 100.0 / 1024.0);
    } else {
        mib = strtol(argv[1], &end, 10);
        if (errno || end == argv[1] || *end || mib < 0) {
            usage(argv[0]);
            return 2;
        }
        if (mib == 0) {
            long avail = mem_available_kb();
            if (avail < 0) {
                fprintf(stderr, "fill: cannot read MemAvailable from /proc/meminfo\n");
                return 1;
            }
            mib = avail / 1024 - MARGIN_MIB;
            if (mib < 0)
                mib = 0;
        }
    }

    size_t len = (size_t)mib << 20;
    double t0 = now();
    if (len > 0) {
        unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            fprintf(stderr, "fill: mmap %ld MiB: %s\n", mib, strerror(errno));
            printf("FILL mib=%ld error=mmap\n", mib);
            return 1;
        }
        /* Per 1 MiB chunk: memset with a byte that varies by chunk (never 0), then stamp a
         * distinct word at the start of each page so no two pages are identical. */
        long pg = sysconf(_SC_PAGESIZE);
        for (size_t off = 0; off < len; off += (size_t)1 << 20) {
            unsigned char v = (unsigned char)(0xA5 + (off >> 20) * 7);
            if (v == 0)
                v = 0x5A;
            memset(p + off, v, (size_t)1 << 20);
            for (size_t q = 0; q < ((size_t)1 << 20); q += (size_t)pg)
                *(volatile uint64_t *)(p + off + q) = 0xF111000000000000ULL | ((off + q) / (size_t)pg) | 1;
        }
        double secs = now() - t0;
        printf("FILL mib=%ld secs=%.2f\n", mib, secs);
        munmap(p, len);
    } else {
        printf("FILL mib=0 secs=0.00\n");
    }
    return 0;
}
