/*
 * pipes: hold a given amount of unmovable kernel memory in pipe buffers.
 *
 *   pipes MIB HOLD_SECONDS
 *
 * Opens pipes of 4 MiB each (F_SETPIPE_SZ; root may go past pipe-max-size; where that is
 * refused, pipes of the default size and as many descriptors as RLIMIT_NOFILE's hard limit
 * allows), fills them with no reader, holds them HOLD_SECONDS (fractional allowed), then
 * exits, and the kernel frees the buffers. Pipe buffers are allocated GFP_HIGHUSER | __GFP_ACCOUNT: neither
 * movable nor allowed in CMA pageblocks, unlike the anonymous memory of spike and fill.
 * Prints:
 *
 *   PIPES mib=N filled=F secs=X.XX
 *
 * (filled = MiB written, secs = the time to write them). Exit 0 if all of it was written,
 * 1 if not, 2 on bad arguments.
 *
 * Build: gcc -O2 -static -o pipes pipes.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define PIPE_MIB 4
#define CHUNK (64 * 1024)

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    static char chunk[CHUNK];
    unsigned long want, target, written = 0;
    double hold, t0, secs;
    struct rlimit nofile;
    int warned = 0;
    char *end;
    size_t i;

    if (argc != 3)
        goto usage;
    want = strtoul(argv[1], &end, 10);
    if (*end || want == 0)
        goto usage;
    target = want << 20;
    hold = strtod(argv[2], &end);
    if (*end || hold < 0)
        goto usage;
    /* A varying non-zero pattern: nothing the host or KSM could merge. */
    for (i = 0; i < sizeof(chunk); i++)
        chunk[i] = (char)(i * 131 + 7) | 1;

    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
        nofile.rlim_cur = nofile.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nofile);
    }
    t0 = now();
    while (written < target) {
        int fds[2];

        if (pipe2(fds, O_NONBLOCK) < 0) {
            fprintf(stderr, "pipes: pipe2: %s\n", strerror(errno));
            break;
        }
        if (fcntl(fds[1], F_SETPIPE_SZ, PIPE_MIB << 20) < 0 && !warned) {
            fprintf(stderr, "pipes: F_SETPIPE_SZ: %s (default-size pipes)\n", strerror(errno));
            warned = 1;
        }
        /* Until this pipe is full (EAGAIN) or enough is written; both ends stay open. */
        for (;;) {
            ssize_t n = write(fds[1], chunk, sizeof(chunk));

            if (n < 0) {
                if (errno != EAGAIN) {
                    fprintf(stderr, "pipes: write: %s\n", strerror(errno));
                    goto done;
                }
                break;
            }
            written += n;
            if (written >= target)
                break;
        }
    }
done:
    secs = now() - t0;
    printf("PIPES mib=%lu filled=%lu secs=%.2f\n", want, written >> 20, secs);
    fflush(stdout);
    if (hold > 0) {
        struct timespec ts = { .tv_sec = (time_t)hold,
                               .tv_nsec = (long)((hold - (time_t)hold) * 1e9) };
        nanosleep(&ts, NULL);
    }
    return written >= target ? 0 : 1;

usage:
    fprintf(stderr, "usage: %s MIB HOLD_SECONDS\n", argv[0]);
    return 2;
}
