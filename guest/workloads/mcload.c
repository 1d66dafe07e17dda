/*
 * mcload: a memcached load generator over a unix socket (the guest kernels of the test bed
 * may have no TCP/IP), memcached's text protocol, one request in flight per connection.
 *
 *   mcload SOCKET SECONDS SETS GETS [CONNS] [KEYS] [VALUE_BYTES]
 *
 * Each of CONNS threads (default 4) sends, in a loop for SECONDS, SETS `set` requests then
 * GETS `get` requests (the set:get ratio, e.g. 1 10) on keys drawn from KEYS (default
 * 10000) with VALUE_BYTES values (default 1024). The keys are set once first, so that gets
 * hit. Prints one line:
 *   MCLOAD ops=N secs=S ops_per_s=R sets=A gets=B hits=H errors=E
 * and exits 0, or non-zero with a message on stderr.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const char *sock_path;
static double seconds;
static long sets_per_round, gets_per_round, keys, value_bytes;

struct result {
	long sets, gets, hits, errors;
};

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int connect_unix(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	if (fd < 0)
		return -1;
	strncpy(a.sun_path, sock_path, sizeof(a.sun_path) - 1);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int write_all(int fd, const char *b, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, b, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Reads until the buffer ends with `end` (a reply's last line); returns its length. */
static ssize_t read_reply(int fd, char *buf, size_t cap, const char *end, const char *alt)
{
	size_t n = 0, el = strlen(end), al = alt ? strlen(alt) : 0;

	for (;;) {
		ssize_t r = read(fd, buf + n, cap - 1 - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		n += (size_t)r;
		buf[n] = 0;
		if ((n >= el && !memcmp(buf + n - el, end, el)) || (al && n >= al && !memcmp(buf + n - al, alt, al)))
			return (ssize_t)n;
		if (n + 1 >= cap)
			return -1;
	}
}

static int do_set(int fd, long key, char *val, char *buf, size_t cap)
{
	int h = snprintf(buf, cap, "set k%ld 0 0 %ld\r\n", key, value_bytes);

	if (write_all(fd, buf, (size_t)h) || write_all(fd, val, (size_t)value_bytes) || write_all(fd, "\r\n", 2))
		return -1;
	if (read_reply(fd, buf, cap, "\r\n", NULL) < 0)
		return -1;
	return strncmp(buf, "STORED", 6) ? -1 : 0;
}

/* 1: hit, 0: miss, -1: error. */
static int do_get(int fd, long key, char *buf, size_t cap)
{
	int h = snprintf(buf, cap, "get k%ld\r\n", key);

	if (write_all(fd, buf, (size_t)h))
		return -1;
	if (read_reply(fd, buf, cap, "END\r\n", NULL) < 0)
		return -1;
	return strncmp(buf, "VALUE", 5) ? 0 : 1;
}

static void *worker(void *arg)
{
	struct result *res = arg;
	size_t cap = (size_t)value_bytes + 256;
	char *buf = malloc(cap), *val = malloc((size_t)value_bytes);
	unsigned int seed = (unsigned int)(uintptr_t)arg;
	int fd = connect_unix();
	double end = now() + seconds;

	if (!buf || !val || fd < 0) {
		res->errors++;
		return NULL;
	}
	memset(val, 'v', (size_t)value_bytes);
	while (now() < end) {
		for (long i = 0; i < sets_per_round; i++) {
			if (do_set(fd, rand_r(&seed) % keys, val, buf, cap))
				res->errors++;
			res->sets++;
		}
		for (long i = 0; i < gets_per_round; i++) {
			int r = do_get(fd, rand_r(&seed) % keys, buf, cap);

			if (r < 0)
				res->errors++;
			res->hits += r > 0;
			res->gets++;
		}
		if (res->errors > 100)
			break;
	}
	close(fd);
	free(buf);
	free(val);
	return NULL;
}

int main(int argc, char **argv)
{
	long conns = 4;
	struct result *res;
	pthread_t *t;
	double t0, el;
	long ops = 0, sets = 0, gets = 0, hits = 0, errors = 0;

	if (argc < 5) {
		fprintf(stderr, "usage: mcload SOCKET SECONDS SETS GETS [CONNS] [KEYS] [VALUE_BYTES]\n");
		return 2;
	}
	sock_path = argv[1];
	seconds = atof(argv[2]);
	sets_per_round = atol(argv[3]);
	gets_per_round = atol(argv[4]);
	conns = argc > 5 ? atol(argv[5]) : 4;
	keys = argc > 6 ? atol(argv[6]) : 10000;
	value_bytes = argc > 7 ? atol(argv[7]) : 1024;
	if (seconds <= 0 || sets_per_round < 0 || gets_per_round < 0 || sets_per_round + gets_per_round == 0 || conns < 1 || keys < 1 || value_bytes < 1) {
		fprintf(stderr, "mcload: bad arguments\n");
		return 2;
	}
	/* Every key set once, so that gets hit. */
	{
		size_t cap = (size_t)value_bytes + 256;
		char *buf = malloc(cap), *val = malloc((size_t)value_bytes);
		int fd = connect_unix();

		if (!buf || !val || fd < 0) {
			fprintf(stderr, "mcload: cannot connect to %s: %s\n", sock_path, strerror(errno));
			return 1;
		}
		memset(val, 'v', (size_t)value_bytes);
		for (long k = 0; k < keys; k++) {
			if (do_set(fd, k, val, buf, cap)) {
				fprintf(stderr, "mcload: set k%ld failed\n", k);
				return 1;
			}
		}
		close(fd);
		free(buf);
		free(val);
	}
	res = calloc((size_t)conns, sizeof(*res));
	t = calloc((size_t)conns, sizeof(*t));
	if (!res || !t)
		return 1;
	t0 = now();
	for (long i = 0; i < conns; i++)
		pthread_create(&t[i], NULL, worker, &res[i]);
	for (long i = 0; i < conns; i++)
		pthread_join(t[i], NULL);
	el = now() - t0;
	for (long i = 0; i < conns; i++) {
		sets += res[i].sets;
		gets += res[i].gets;
		hits += res[i].hits;
		errors += res[i].errors;
	}
	ops = sets + gets;
	printf("MCLOAD ops=%ld secs=%.3f ops_per_s=%.1f sets=%ld gets=%ld hits=%ld errors=%ld\n", ops, el, ops / el, sets, gets, hits, errors);
	return errors ? 1 : 0;
}
