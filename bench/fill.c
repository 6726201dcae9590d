/* SPDX-License-Identifier: GPL-2.0-only */
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
 * after that, then where the workers' time went: "read_s R queue_s Q
 * wait_s W", summed over the workers (reading and checking the image,
 * queueing copies, waiting for a copy before reusing its buffer).
 * PHOS_FILL_PIECES=N gives each worker a ring of N pinned pieces
 * (default 2), PHOS_FILL_PIECE_KIB their size (default 2048), and
 * PHOS_FILL_SPIN=1 has it poll for a copy's end rather than sleep
 * (engine_fill_tune). Needs a GPU.
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
	perr er = { 0 };
	phosimg *img = NULL;
	if (phosimg_open(argv[1], &img)) {
		fprintf(stderr, "fill: %s\n", phosimg_last_error());
		return 1;
	}
	if (driver_open(&er)) {
		fprintf(stderr, "fill: %s\n", pr_msg(&er));
		phosimg_close(img);
		return 1;
	}
	const phosimg_info *in = phosimg_get_info(img);
	const char *np = getenv("PHOS_FILL_PIECES"), *kib = getenv("PHOS_FILL_PIECE_KIB"), *spin = getenv("PHOS_FILL_SPIN");
	engine_fill_tune.pieces = np ? atoi(np) : 0;
	engine_fill_tune.piece_kib = kib ? atoi(kib) : 0;
	engine_fill_tune.spin = spin && *spin == '1';
	int rc = 0;
	for (int a = 2; a < argc && !rc; a++) {
		int threads = atoi(argv[a]);
		double best = 0, create = 0, copy = 0, rd = 0, q = 0, wt = 0;
		for (int round = 0; round < 3 && !rc; round++) {
			engine_progress prog = { 0 };
			engine_parked out;
			watch w = { .prog = &prog };
			pthread_t th;
			double t0 = now();
			bool watching = pthread_create(&th, NULL, watcher, &w) == 0;
			int e = engine_copy_in(img, NULL, NULL, threads, &out, &prog, &er);
			double t1 = now();
			atomic_store(&w.stop, true);
			if (watching)
				pthread_join(th, NULL);
			if (e) {
				fprintf(stderr, "fill: %d threads: %s\n", threads, pr_msg(&er));
				rc = 1;
				break;
			}
			double gbs = (double)in->raw_bytes / (t1 - t0) / 1e9;
			if (gbs > best) {
				best = gbs;
				create = w.first ? w.first - t0 : 0;
				copy = w.first ? (double)in->raw_bytes / (t1 - w.first) / 1e9 : 0;
				rd = (double)atomic_load(&prog.fill_read_ns) * 1e-9;
				q = (double)atomic_load(&prog.fill_queue_ns) * 1e-9;
				wt = (double)atomic_load(&prog.fill_wait_ns) * 1e-9;
			}
			engine_parked_free(&out);
		}
		if (!rc)
			printf("threads %d GB/s %.1f create_s %.3f copy_GBs %.1f read_s %.2f queue_s %.2f wait_s %.2f\n",
			       threads, best, create, copy, rd, q, wt);
		fflush(stdout);
	}
	phosimg_close(img);
	return rc;
}
