/*
 * spike: periodic memory spikes for autoballoon tests.
 *
 *   spike THREADS MIB_PER_THREAD HOLD_SECONDS SLEEP_SECONDS CYCLES [verify|zeroes] [ramp=MIB_PER_S]
 *
 * Each cycle: every thread mmaps MIB_PER_THREAD MiB and writes a non-zero word into every
 * page; once all threads are done the memory is held HOLD_SECONDS, then every thread
 * munmaps it (so it really goes back to the kernel) and the program sleeps SLEEP_SECONDS.
 * Seconds may be fractional. One line per cycle:
 *
 *   SPIKE cycle=N threads=T mib=M alloc_s=X.XX ok=K
 *
 * (mib = MiB per thread, alloc_s = wall time from the start of the cycle until every
 * thread has mapped and touched its memory, ok = threads whose mmap succeeded), and at the
 * end:
 *
 *   SPIKE done cycles=N failed=F
 *
 * (failed = number of thread allocations that failed over all cycles). A failed mmap is
 * counted and reported, never fatal. Exit status 0 if nothing failed, 1 otherwise,
 * 2 on bad arguments.
 *
 * With "verify", every 8-byte word of every page is written (a value that differs per
 * word, page, thread and cycle) and, after the hold, every thread reads all of its pages
 * back before it unmaps them. One more line per cycle, once every thread has verified:
 *
 *   SPIKE verified cycle=N pages=P bad=B
 *
 * (P = pages checked, B = pages with at least one wrong word), plus, for the first bad
 * page of each thread, "SPIKE bad cycle=N thread=T page=I word=J got=X want=Y". The done
 * line then ends with "bad=B" (bad pages over all cycles), and bad pages fail the run
 * (exit status 1).
 *
 * With "zeroes", every page gets its one word as without options, and after the hold every
 * thread reads all of its pages back: the word it wrote, and zeroes in the rest of the page
 * (memory the kernel handed out must hold nothing of what was there before, e.g. a block
 * that came out of the balloon and whose zeroing the kernel skipped). Lines and exit status
 * as with "verify".
 *
 * With "ramp=R", every thread touches its memory at R MiB/s at most (a slow ramp rather
 * than a spike: a program that grows gradually); alloc_s then includes the pacing.
 *
 * Build: gcc -O2 -static -pthread -o spike spike.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static long nthreads, mib;
static double hold_s, sleep_s;
static long cycles;
static size_t page_size;
static int verify;
static int zeroes; /* check the rest of each page reads as zeroes */
static double ramp_mib_s; /* 0: as fast as it goes */
static long *thread_bad; /* per thread, per current cycle: pages that read back wrong */
static long *thread_pages; /* per thread, per current cycle: pages verified */

static pthread_barrier_t bar_start, bar_touched, bar_release, bar_freed;
static int *thread_ok; /* per thread, per current cycle */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_secs(double s)
{
    if (s <= 0)
        return;
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/* With a ramp, sleeps until `done` bytes are due since `t0`; every 2 MiB. */
static void pace(double t0, size_t done)
{
    if (ramp_mib_s > 0 && done % (2u << 20) == 0)
        sleep_secs(t0 + (double)done / (double)(1 << 20) / ramp_mib_s - now());
}

static void *worker(void *arg)
{
    long id = (long)arg;
    size_t len = (size_t)mib << 20;
    for (long c = 0; c < cycles; c++) {
        pthread_barrier_wait(&bar_start);
        void *p = NULL;
        if (len > 0) {
            p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED)
                p = NULL;
        }
        if (p != NULL || len == 0) {
            thread_ok[id] = 1;
            /* A distinct non-zero word per page: never a zero page, never mergeable. */
            uint64_t tag = 0xA5A5000000000000ULL ^ ((uint64_t)(id + 1) << 40) ^ ((uint64_t)(c + 1) << 24);
            char *b = p;
            double t0 = now();
            if (!verify) {
                for (size_t off = 0; off < len; off += page_size) {
                    pace(t0, off);
                    *(volatile uint64_t *)(b + off) = tag | (off / page_size) | 1;
                }
            } else {
                for (size_t off = 0; off < len; off += page_size) {
                    pace(t0, off);
                    uint64_t base = tag | ((uint64_t)(off / page_size) << 12) | 1;
                    uint64_t *w = (uint64_t *)(b + off);
                    for (size_t j = 0; j < page_size / 8; j++)
                        w[j] = base ^ ((uint64_t)j << 1);
                }
            }
        } else {
            thread_ok[id] = 0;
        }
        pthread_barrier_wait(&bar_touched);
        pthread_barrier_wait(&bar_release); /* main thread holds in between */
        thread_bad[id] = 0;
        thread_pages[id] = 0;
        if (p != NULL && (verify || zeroes)) {
            uint64_t tag = 0xA5A5000000000000ULL ^ ((uint64_t)(id + 1) << 40) ^ ((uint64_t)(c + 1) << 24);
            const char *b = p;
            for (size_t off = 0; off < len; off += page_size) {
                uint64_t base = tag | ((uint64_t)(off / page_size) << 12) | 1;
                const volatile uint64_t *w = (const volatile uint64_t *)(b + off);
                for (size_t j = 0; j < page_size / 8; j++) {
                    uint64_t want = zeroes ? (j == 0 ? tag | (off / page_size) | 1 : 0) : base ^ ((uint64_t)j << 1);
                    uint64_t got = w[j];
                    if (got != want) {
                        if (!thread_bad[id])
                            printf("SPIKE bad cycle=%ld thread=%ld page=%zu word=%zu got=%#llx want=%#llx\n",
                                   c + 1, id, off / page_size, j, (unsigned long long)got,
                                   (unsigned long long)want);
                        thread_bad[id]++;
                        break;
                    }
                }
                thread_pages[id]++;
            }
        }
        if (p != NULL)
            munmap(p, len);
        pthread_barrier_wait(&bar_freed);
    }
    return NULL;
}

static int parse_long(const char *s, long *out, long min)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min)
        return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0))
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    int bad_opt = argc < 6;
    for (int i = 6; i < argc && !bad_opt; i++) {
        if (strcmp(argv[i], "verify") == 0)
            verify = 1;
        else if (strcmp(argv[i], "zeroes") == 0)
            zeroes = 1;
        else if (strncmp(argv[i], "ramp=", 5) == 0)
            bad_opt = parse_double(argv[i] + 5, &ramp_mib_s) || !(ramp_mib_s > 0);
        else
            bad_opt = 1;
    }
    if (bad_opt || (verify && zeroes) ||
        parse_long(argv[1], &nthreads, 1) || parse_long(argv[2], &mib, 0) ||
        parse_double(argv[3], &hold_s) || parse_double(argv[4], &sleep_s) ||
        parse_long(argv[5], &cycles, 1) || nthreads > 1024) {
        fprintf(stderr,
                "usage: %s THREADS MIB_PER_THREAD HOLD_SECONDS SLEEP_SECONDS CYCLES [verify|zeroes] [ramp=MIB_PER_S]\n"
                "  e.g. %s 2 100 1 0 1   (2 threads x 100 MiB, hold 1 s, 1 cycle)\n",
                argv[0], argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    thread_ok = calloc((size_t)nthreads, sizeof *thread_ok);
    thread_bad = calloc((size_t)nthreads, sizeof *thread_bad);
    thread_pages = calloc((size_t)nthreads, sizeof *thread_pages);
    pthread_t *tids = calloc((size_t)nthreads, sizeof *tids);
    if (!thread_ok || !thread_bad || !thread_pages || !tids) {
        fprintf(stderr, "spike: out of memory for thread table\n");
        return 1;
    }
    unsigned n = (unsigned)nthreads + 1;
    pthread_barrier_init(&bar_start, NULL, n);
    pthread_barrier_init(&bar_touched, NULL, n);
    pthread_barrier_init(&bar_release, NULL, n);
    pthread_barrier_init(&bar_freed, NULL, n);

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    for (long i = 0; i < nthreads; i++) {
        int e = pthread_create(&tids[i], &attr, worker, (void *)i);
        if (e) {
            fprintf(stderr, "spike: pthread_create: %s\n", strerror(e));
            return 1;
        }
    }

    long failed = 0, bad = 0;
    for (long c = 0; c < cycles; c++) {
        double t0 = now();
        pthread_barrier_wait(&bar_start);
        pthread_barrier_wait(&bar_touched);
        double alloc_s = now() - t0;
        long ok = 0;
        for (long i = 0; i < nthreads; i++)
            ok += thread_ok[i];
        failed += nthreads - ok;
        printf("SPIKE cycle=%ld threads=%ld mib=%ld alloc_s=%.2f ok=%ld\n", c + 1, nthreads, mib,
               alloc_s, ok);
        sleep_secs(hold_s);
        pthread_barrier_wait(&bar_release);
        pthread_barrier_wait(&bar_freed);
        if (verify || zeroes) {
            long pages = 0, b = 0;
            for (long i = 0; i < nthreads; i++) {
                pages += thread_pages[i];
                b += thread_bad[i];
            }
            bad += b;
            printf("SPIKE verified cycle=%ld pages=%ld bad=%ld\n", c + 1, pages, b);
        }
        if (c + 1 < cycles)
            sleep_secs(sleep_s);
    }
    for (long i = 0; i < nthreads; i++)
        pthread_join(tids[i], NULL);
    if (verify || zeroes)
        printf("SPIKE done cycles=%ld failed=%ld bad=%ld\n", cycles, failed, bad);
    else
        printf("SPIKE done cycles=%ld failed=%ld\n", cycles, failed);
    return failed || bad ? 1 : 0;
}
