/*
 * fill: times the fill of a restore alone, from an image into new device
 * memory, with the restore's own code (engine_copy_in): no CRIU, no
 * process. For the fill rate against the machine's pinned H2D bandwidth
 * (step-app --h2d) and the image read rate (image-bench read).
 *
 *   fill DIR THREADS...      (gpu-bundle/bin/fill)
 *
 * For each thread count, fills every object of image DIR (made by
 * image-bench write, or a checkpoint's) on its GPU, three times, and
 * prints "threads N GB/s X create_s C copy_GBs Y" for the fastest of the
 * three: X over the whole of engine_copy_in, C the seconds before its
 * first byte was copied (the device memory made and mapped), Y the rate
 * after that. Needs a GPU.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../engine/driver.h"
#include "../engine/engine.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Notes when the first byte of a fill was copied. */
typedef struct watch {
	engine_progress *prog;
	_Atomic bool stop;
	double first; /* 0 until then */
} watch;

static void *watcher(void *arg)
{
	watch *w = arg;
	while (!atomic_load(&w->stop) && !w->first) {
		if (atomic_load(&w->prog->done))
			w->first = now();
		else
			nanosleep(&(struct timespec){ 0, 200000 }, NULL);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: fill DIR THREADS...\n");
		return 2;
	}
	char err[ENGINE_ERR_MAX] = "";
	phosimg *img = NULL;
	if (phosimg_open(argv[1], &img)) {
		fprintf(stderr, "fill: %s\n", phosimg_last_error());
		return 1;
	}
	if (driver_open(err, sizeof(err))) {
		fprintf(stderr, "fill: %s\n", err);
		phosimg_close(img);
		return 1;
	}
	const phosimg_info *in = phosimg_get_info(img);
	int rc = 0;
	for (int a = 2; a < argc && !rc; a++) {
		int threads = atoi(argv[a]);
		double best = 0, create = 0, copy = 0;
		for (int round = 0; round < 3 && !rc; round++) {
			engine_progress prog = { 0 };
			engine_parked out;
			watch w = { .prog = &prog };
			pthread_t th;
			double t0 = now();
			bool watching = pthread_create(&th, NULL, watcher, &w) == 0;
			int e = engine_copy_in(img, NULL, NULL, threads, &out, &prog, err, sizeof(err));
			double t1 = now();
			atomic_store(&w.stop, true);
			if (watching)
				pthread_join(th, NULL);
			if (e) {
				fprintf(stderr, "fill: %d threads: %s\n", threads, err);
				rc = 1;
				break;
			}
			double gbs = (double)in->raw_bytes / (t1 - t0) / 1e9;
			if (gbs > best) {
				best = gbs;
				create = w.first ? w.first - t0 : 0;
				copy = w.first ? (double)in->raw_bytes / (t1 - w.first) / 1e9 : 0;
			}
			engine_parked_free(&out);
		}
		if (!rc)
			printf("threads %d GB/s %.1f create_s %.3f copy_GBs %.1f\n", threads, best, create, copy);
		fflush(stdout);
	}
	phosimg_close(img);
	return rc;
}
