/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A cow checkpoint saves the host memory of t1, though its pages are
 * written after the process runs on, and when CRIU cannot do that, they
 * are written in the stall as before.
 *
 * tests/apps/host_writer runs under phos: a thread rewrites 32 MiB of host
 * memory in a tight loop (a plain mapping, one marked MADV_DONTFORK, one
 * MADV_WIPEONFORK), checking each page before it rewrites it, while the
 * main thread has the device (simcuda's stream thread, as DMA) write a
 * pinned buffer round after round. With phos's CRIU (--snapshot-pages),
 * the stall takes a copy-on-write snapshot of each process and CRIU
 * writes the pages from it while the process runs: status shows the
 * criu-pages step.
 *
 * Each iteration, after a random pause: a cow checkpoint; the image
 * verifies; the running process checks all its memory; it is killed and
 * restored from the image, and the restored copy checks all its memory
 * from t1 on, every word of every page. Then the same, a few times, with
 * a CRIU that lacks --snapshot-pages: phosfs says so once, and the pages
 * are written in the stall.
 *
 * PHOS_HOST_ITERATIONS sets the number of iterations (default 100).
 */
#include "phosfs_test.h"

/* One checkpoint and restore of pid (output out); *pid becomes the
 * restored process. Returns 1 when all held; after says whether status
 * showed the criu-pages step. */
static int round_trip(rig *r, pid_t *pid, const char *out, int it, int *nverify, bool *after)
{
	char c[64], last[256] = "", image[PATH_MAX], ctl[160], status[160], st[4096] = "";
	rig_files(r, *pid, ctl, status);
	int n = snprintf(c, sizeof(c), "checkpoint name=h%d\n", it);
	int e = rig_ctl(ctl, c, (size_t)n);
	int done = !e && rig_job_done(r, *pid, 60000, last, sizeof(last)) && strstr(last, "done");
	rig_read(status, st, sizeof(st));
	const char *steps = strstr(st, "steps ms:");
	*after = steps && strstr(steps, " criu-pages ") && strstr(st, "protocol: cow\n");
	snprintf(image, sizeof(image), "%s/%d/h%d", r->store, (int)*pid, it);
	int img = done && rig_verify(image);
	int live = done && rig_cow_verified(*pid, out, nverify, 10000);
	int back = rig_kill_restore(r, pid, img, image, st, sizeof(st));
	int restored = back && rig_cow_verified(*pid, out, nverify, 10000);
	if (!(done && img && live && restored))
		diag("e=%s done=%d image=%d live=%d restored=%d: %s", e ? strerror(e) : "0", done, img, live, restored,
		     last);
	return done && img && live && restored;
}

/* A criu (at path) that runs real but does not list --snapshot-pages. */
static void old_criu(const char *real, const char *path)
{
	rig_script(path,
		   "#!/bin/sh\nif [ \"$1\" = --help ]; then\n\t'%s' --help | sed '/--snapshot-pages/,+1d'\n\texit 0\nfi\n"
		   "exec '%s' \"$@\"\n",
		   real, real);
}

int main(void)
{
	rig r;
	rig_require(&r);
	char app[PATH_MAX];
	rig_app_path("PHOS_HOST_WRITER", "apps/host_writer", app);
	int iters = getenv("PHOS_HOST_ITERATIONS") ? atoi(getenv("PHOS_HOST_ITERATIONS")) : 100;
	const int old_iters = 3;
	plan(iters + old_iters + 4);
	unsigned seed = (unsigned)time(NULL);
	diag("seed %u", seed);
	srand(seed);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	ok(!rig_log_has(&r, "has no --snapshot-pages"), "phosfs finds --snapshot-pages in phos's CRIU");

	char *const cmd[] = { app, "32", NULL };
	char out[PATH_MAX], st[4096] = "";
	pid_t pid = rig_app_up(&r, cmd, 20000, out);
	ok(pid > 0, "host_writer runs under the tracer");
	if (pid <= 0)
		bail("host_writer did not start");

	int nverify = 0, good = 0, snapshots = 0;
	char prev[PATH_MAX] = "";
	for (int it = 0; it < iters; it++) {
		r.restore_mode = it % 2 ? "lazy" : "eager";
		usleep((useconds_t)(rand() % 200000));
		bool after = false;
		int held = round_trip(&r, &pid, out, it, &nverify, &after);
		ok(held && after, "checkpoint %d: pages written after the stall; the live process and its %s restore hold t1",
		   it, r.restore_mode);
		good += held;
		snapshots += after;
		char image[PATH_MAX];
		snprintf(image, sizeof(image), "%s/%d/h%d", r.store, (int)pid, it);
		if (!rig_next_iteration(prev, image, held, st, it, iters))
			break;
	}
	ok(good == iters && snapshots == iters, "%d of %d checkpoints held t1, %d with their pages written after the stall",
	   good, iters, snapshots);

	/* The same under a CRIU without the patch. */
	kill(pid, SIGKILL);
	rig_reap();
	rig_unmount(&r, SIGTERM);
	char wrapper[PATH_MAX];
	snprintf(wrapper, sizeof(wrapper), "%s/old-criu", r.dir);
	old_criu(r.criu, wrapper);
	snprintf(r.criu, sizeof(r.criu), "%s", wrapper);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount again");
	ok(rig_log_has(&r, "has no --snapshot-pages"), "phosfs says once that the CRIU it runs has no --snapshot-pages");
	pid = rig_app_up(&r, cmd, 20000, out);
	nverify = 0;
	int up = pid > 0;
	for (int it = iters; up && it < iters + old_iters; it++) {
		r.restore_mode = "eager";
		usleep((useconds_t)(rand() % 200000));
		bool after = true;
		int held = round_trip(&r, &pid, out, it, &nverify, &after);
		ok(held && !after, "without it, checkpoint %d writes the pages in the stall, and holds t1", it);
	}
	for (int it = iters; !up && it < iters + old_iters; it++)
		ok(0, "host_writer did not start again");

	kill(pid, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
