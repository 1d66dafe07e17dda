/*
 * work: one phase of a mixed workload, timed (the iBalloon mixed-workload benchmark,
 * crates/testbed/src/hostbench/).
 *
 *   work mem MIB PASSES [ROUNDS]
 *                         memory-bound: mmap MIB MiB, write every page once, then PASSES
 *                         sweeps that read and rewrite one word per cache line of every
 *                         page's first half, with ROUNDS (default 0) rounds of an integer
 *                         hash on each word (compute between the accesses); munmap
 *   work cpu MOPS         CPU-bound: MOPS million rounds of an integer hash in registers
 *                         (no memory beyond the stack)
 *   work files PATH NFILES KIB WARM_S SECS WRITE_PCT
 *                         file-server-like: PATH (a block device or a file of at least
 *                         NFILES x KIB KiB) holds NFILES files of KIB KiB each, read and
 *                         written whole through the page cache (buffered pread/pwrite in
 *                         64 KiB pieces). Each operation picks a file, 80 % of them among
 *                         the first fifth of the files (a hot set, as file servers see),
 *                         and writes it (WRITE_PCT % of operations) or reads it. WARM_S
 *                         seconds warm the cache uncounted, then SECS seconds are counted
 *                         (the ESX paper's dbench-like throughput)
 *
 * Each page's first half holds pseudo-random words and its second half zeros, so a page
 * compresses about 2:1 (a swap on zram holds about twice its RAM, as real data might);
 * nothing is all-zero or identical. Sequential sweeps over a working set larger than the
 * guest's RAM miss on every page (LRU), so the phase's time shows how much it swapped.
 * Prints one line:
 *
 *   WORK kind=mem mib=N passes=P rounds=R secs=X.XX sum=H
 *   WORK kind=cpu mops=N secs=X.XX sum=H
 *   WORK kind=files files=N kib=K write_pct=W ops=N reads=R writes=W mib=M secs=X.XX
 *        ops_per_s=X.X mib_per_s=X.XX
 *
 * Exit 0 on success, 1 if the mapping (or PATH) failed, 2 on bad arguments.
 * Build: gcc -O2 -static -o work work.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static int usage(const char *argv0)
{
    fprintf(stderr, "usage: %s mem MIB PASSES [ROUNDS] | cpu MOPS | files PATH NFILES KIB WARM_S SECS WRITE_PCT\n", argv0);
    return 2;
}

static long arg(const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    return (errno || end == s || *end || v < 0) ? -1 : v;
}

static int mem(long mib, long passes, long rounds)
{
    size_t len = (size_t)mib << 20, pg = (size_t)sysconf(_SC_PAGESIZE);
    double t0 = now();
    uint64_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "work: mmap %ld MiB: %s\n", mib, strerror(errno));
        printf("WORK kind=mem mib=%ld error=mmap\n", mib);
        return 1;
    }
    size_t words = pg / 8, half = words / 2, pages = len / pg;
    uint64_t seed = 0x9E3779B97F4A7C15ULL;
    for (size_t i = 0; i < pages; i++) {
        uint64_t *w = p + i * words;
        for (size_t j = 0; j < half; j++)
            w[j] = xorshift(&seed);
        w[0] = 0xF00D000000000000ULL | i;
    }
    /* One word per 64-byte line of the random half, read and rewritten. */
    uint64_t acc = 0;
    for (long r = 0; r < passes; r++) {
        for (size_t i = 0; i < pages; i++) {
            uint64_t *w = p + i * words;
            for (size_t j = 1; j < half; j += 8) {
                uint64_t v = w[j];
                for (long k = 0; k < rounds; k++)
                    v = (v ^ (v >> 29)) * 0x100000001B3ULL;
                acc += v;
                w[j] = xorshift(&seed) ^ acc;
            }
        }
    }
    double secs = now() - t0;
    munmap(p, len);
    /* The sum keeps the sweeps from being optimised away. */
    printf("WORK kind=mem mib=%ld passes=%ld rounds=%ld secs=%.2f sum=%016llx\n", mib, passes, rounds, secs, (unsigned long long)acc);
    return 0;
}

static int cpu(long mops)
{
    double t0 = now();
    uint64_t h = 0xCBF29CE484222325ULL;
    for (long m = 0; m < mops; m++)
        for (int i = 0; i < 1000000; i++) {
            h ^= (uint64_t)i;
            h *= 0x100000001B3ULL;
            h ^= h >> 29;
        }
    printf("WORK kind=cpu mops=%ld secs=%.2f sum=%016llx\n", mops, now() - t0, (unsigned long long)h);
    return 0;
}

/* Whole-file operations on PATH for WARM_S + SECS seconds; only the last SECS are counted. */
static int files(const char *path, long nfiles, long kib, long warm, long secs, long write_pct)
{
    int fd = open(path, O_RDWR);
    if (fd < 0) {
        fprintf(stderr, "work: %s: %s\n", path, strerror(errno));
        printf("WORK kind=files files=%ld error=open\n", nfiles);
        return 1;
    }
    const size_t piece = 64 << 10, fsize = (size_t)kib << 10;
    char *buf = malloc(piece);
    if (!buf)
        return 1;
    uint64_t seed = 0x243F6A8885A308D3ULL, sum = 0;
    for (size_t i = 0; i < piece / 8; i++)
        ((uint64_t *)buf)[i] = xorshift(&seed);
    long hot = nfiles / 5 > 0 ? nfiles / 5 : 1;
    long ops = 0, reads = 0, writes = 0;
    double bytes = 0, t0 = now(), start = t0 + warm, end = start + secs, t;
    int counting = warm == 0;
    while ((t = now()) < end) {
        if (!counting && t >= start) {
            counting = 1;
            ops = reads = writes = 0;
            bytes = 0;
        }
        uint64_t r = xorshift(&seed);
        long f = (r % 100) < 80 ? (long)((r >> 8) % (uint64_t)hot) : (long)((r >> 8) % (uint64_t)nfiles);
        int wr = (long)((r >> 40) % 100) < write_pct;
        off_t base = (off_t)f * (off_t)fsize;
        for (size_t off = 0; off < fsize; off += piece) {
            size_t n = fsize - off < piece ? fsize - off : piece;
            ssize_t got;
            if (wr) {
                ((uint64_t *)buf)[0] = r ^ off;
                got = pwrite(fd, buf, n, base + (off_t)off);
            } else {
                got = pread(fd, buf, n, base + (off_t)off);
                sum += ((uint64_t *)buf)[0];
            }
            if (got != (ssize_t)n) {
                fprintf(stderr, "work: %s at %lld: %s\n", path, (long long)(base + (off_t)off), got < 0 ? strerror(errno) : "short");
                printf("WORK kind=files files=%ld error=io\n", nfiles);
                return 1;
            }
        }
        ops++;
        wr ? writes++ : reads++;
        bytes += (double)fsize;
    }
    double counted = now() - (warm > 0 ? start : t0);
    close(fd);
    free(buf);
    printf("WORK kind=files files=%ld kib=%ld write_pct=%ld ops=%ld reads=%ld writes=%ld mib=%.1f secs=%.2f ops_per_s=%.1f mib_per_s=%.2f sum=%016llx\n",
           nfiles, kib, write_pct, ops, reads, writes, bytes / 1048576.0, counted, ops / counted, bytes / 1048576.0 / counted, (unsigned long long)sum);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "mem") == 0) {
        long mib = arg(argv[2]), passes = arg(argv[3]), rounds = argc == 5 ? arg(argv[4]) : 0;
        if (mib <= 0 || passes < 0 || rounds < 0)
            return usage(argv[0]);
        return mem(mib, passes, rounds);
    }
    if (argc == 3 && strcmp(argv[1], "cpu") == 0) {
        long mops = arg(argv[2]);
        if (mops <= 0)
            return usage(argv[0]);
        return cpu(mops);
    }
    if (argc == 8 && strcmp(argv[1], "files") == 0) {
        long n = arg(argv[3]), kib = arg(argv[4]), warm = arg(argv[5]), secs = arg(argv[6]), wpct = arg(argv[7]);
        if (n <= 0 || kib <= 0 || warm < 0 || secs <= 0 || wpct < 0 || wpct > 100)
            return usage(argv[0]);
        return files(argv[2], n, kib, warm, secs, wpct);
    }
    return usage(argv[0]);
}
