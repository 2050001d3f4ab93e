// One rank of the collective tracer's end-to-end test: rank.c RANK DELAY_MS
// ITERATIONS. Each step computes for 5 ms (a sleep), then all-reduces a
// buffer whose size varies with the step, as gradient buckets do; the
// delayed rank sleeps DELAY_MS more before each call. Every fourth step
// also all-gathers.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int ncclResult_t;
ncclResult_t ncclAllReduce(const void *, void *, size_t, int, int, void *, void *);
ncclResult_t ncclAllGather(const void *, void *, size_t, int, void *, void *);

static void sleep_ms(long ms) {
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0) {
	}
}

int main(int argc, char **argv) {
	if (argc != 4) {
		fprintf(stderr, "usage: %s RANK DELAY_MS ITERATIONS\n", argv[0]);
		return 2;
	}
	long delay = atol(argv[2]), iters = atol(argv[3]);
	static unsigned char buf[1 << 16];
	for (long i = 0; i < iters; i++) {
		sleep_ms(5 + delay);
		if (ncclAllReduce(buf, buf, 1000 + i % 11, 0, 0, NULL, NULL) != 0) return 1;
		if (i % 4 == 3 && ncclAllGather(buf, buf, 2000 + i % 7, 0, NULL, NULL) != 0) return 1;
	}
	return 0;
}
