/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Copy-on-write checkpoints taken at random moments hold exactly the
 * device state at t1.
 *
 * tests/apps/cow_app runs under phos: it mutates eight buffers with
 * kernels (one reads a buffer and writes another; one writes every buffer
 * through a device-resident pointer array, the T** that only the safety
 * net can hold), memsets, copies from the host, and frees and allocates
 * buffers again, and keeps a host copy of every buffer. phosfs copies in
 * 256 KiB chunks through a 4 MiB shadow pool, so writes during the copy
 * are shadowed, and also wait for an empty pool.
 *
 * Each iteration, after a random pause: `echo checkpoint > ctl` (CoW, the
 * default); the image verifies; the running process checks its device
 * memory against its host copies (CoW must not disturb it); then it is
 * killed with -9 and restored from that image, and checks again. Its host
 * copies come back as they were at t1, and it runs on from there, so a
 * byte of the image that is not the t1 byte fails the check.
 *
 * The restores alternate between eager and lazy. A lazily restored
 * process runs on at once, its buffers coming back while it runs, and
 * checks every buffer while they do; the next checkpoint waits for the
 * fill to end.
 *
 * PHOS_COW_ITERATIONS sets the number of iterations (default 100).
 */
#include "phosfs_test.h"

int main(void)
{
	rig r;
	rig_require(&r);
	int iters = getenv("PHOS_COW_ITERATIONS") ? atoi(getenv("PHOS_COW_ITERATIONS")) : 100;
	plan(iters + 6);
	r.opts[0] = "--chunk";
	r.opts[1] = "256K";
	r.opts[2] = "--shadow-pool";
	r.opts[3] = "4M";
	char out[PATH_MAX], ctl[160], status[160], st[4096], prev[PATH_MAX] = "";
	pid_t pid = rig_cow_start(&r, out, ctl, status);

	long shadows = 0, net = 0, waits = 0, lazy_waits = 0;
	int nverify = 0, good = 0, lazy_good = 0;
	for (int it = 0; it < iters; it++) {
		bool lazy = it % 2;
		r.restore_mode = lazy ? "lazy" : "eager";
		usleep((useconds_t)(rand() % 150000));
		char c[64], last[256] = "", image[PATH_MAX];
		int n = snprintf(c, sizeof(c), "checkpoint name=c%d\n", it);
		rig_files(&r, pid, ctl, status);
		int e = rig_ctl(ctl, c, (size_t)n);
		int done = !e && rig_job_done(&r, pid, 60000, last, sizeof(last)) && strstr(last, "done");
		rig_read(status, st, sizeof(st));
		int cow = strstr(st, "protocol: cow\n") != NULL && rig_stat(st, "cow tables ms: ") >= 0;
		long sh = (long)rig_stat(st, "cow shadows: "), nw = (long)rig_stat(st, "safety-net waits: "),
		     w = (long)rig_stat(st, "cow waits: ");
		snprintf(image, sizeof(image), "%s/%d/c%d", r.store, (int)pid, it);
		int img = done && rig_verify(image);
		int live = done && rig_cow_verified(pid, out, &nverify, 5000);
		int back = rig_kill_restore(&r, &pid, img, image, st, sizeof(st));
		int restored = back && rig_cow_verified(pid, out, &nverify, 5000);
		int filled = back && rig_restore_done(&r, 30000, st, sizeof(st));
		restored = restored && filled;
		long lw = (long)rig_stat(st, "on-demand waits: ");
		if (lazy && restored) {
			lazy_good++;
			lazy_waits += lw > 0 ? lw : 0;
		}
		char line[128] = "", more[64] = "";
		rig_line(out, "verify ok", 0, line, sizeof(line));
		if (lazy)
			snprintf(more, sizeof(more), "; on-demand waits %ld", lw);
		ok(done && cow && img && live && restored, "iteration %d: cow image verifies, the live process and its %s restore match t1 (%s; shadows %ld, waits %ld, net %ld%s)",
		   it, r.restore_mode, line, sh, w, nw, more);
		if (!(done && cow && img && live && restored))
			diag("e=%s done=%d cow=%d image=%d live=%d restored=%d: %s", e ? strerror(e) : "0", done, cow, img,
			     live, restored, last);
		good += done && cow && img && live && restored;
		shadows += sh > 0 ? sh : 0;
		net += nw > 0 ? nw : 0;
		waits += w > 0 ? w : 0;
		if (!rig_next_iteration(prev, image, back, st, it, iters))
			break;
	}
	ok(shadows > 0, "writes during the copies were shadowed (%ld shadows in %d iterations)", shadows, good);
	ok(net > 0, "T** launches during the copies were held by the safety net (%ld; %ld other waits)", net, waits);
	ok(lazy_good > 0 && lazy_waits > 0,
	   "lazily restored processes ran before their memory was back: %ld calls waited for a buffer in %d lazy restores",
	   lazy_waits, lazy_good);

	/* cancel during a CoW checkpoint: nothing is published, the process
	 * runs on intact, and the next checkpoint works. */
	char image[PATH_MAX], last[256] = "";
	rig_files(&r, pid, ctl, status);
	rig_ctl(ctl, "checkpoint name=gone\n", 21);
	int ce = rig_ctl(ctl, "cancel\n", 7);
	int ended = rig_job_done(&r, pid, 60000, last, sizeof(last));
	snprintf(image, sizeof(image), "%s/%d/gone", r.store, (int)pid);
	int live = rig_cow_verified(pid, out, &nverify, 5000);
	ok(!ce && ended && strstr(last, "failed") && access(image, F_OK) != 0 && live,
	   "cancel during a cow checkpoint publishes nothing; the process runs on intact (%s)", last);
	rig_ctl(ctl, "checkpoint name=after\n", 22);
	ended = rig_job_done(&r, pid, 60000, last, sizeof(last));
	snprintf(image, sizeof(image), "%s/%d/after", r.store, (int)pid);
	ok(ended && strstr(last, "done") && rig_verify(image) && rig_cow_verified(pid, out, &nverify, 5000),
	   "and the next cow checkpoint is whole (%s)", last);

	kill(pid, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
