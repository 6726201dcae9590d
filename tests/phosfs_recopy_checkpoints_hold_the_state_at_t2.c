/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Recopy checkpoints taken at random moments hold exactly the device state
 * at t2, the start of their final stall.
 *
 * tests/apps/cow_app runs under phos (see the CoW test): kernels that read
 * one buffer and write another, a T** kernel, memsets, 2D sets, host
 * copies, stream memory operations, batched copies, frees and allocations,
 * with a host copy of every buffer. A recopy first lets it run while its
 * memory is copied, marking what it writes, then stops it, copies again
 * what was written, and dumps it (t2).
 *
 * Each iteration, after a random pause: `checkpoint recopy`; the image
 * verifies; the running process checks its device memory against its
 * host copies; it is killed with -9 and restored from the image, and
 * checks again. Its host copies come back as they were at t2, so a byte of
 * the image that is not the t2 byte fails the check. The last iteration
 * is a `recopy kill`, as a migration takes it: the checkpoint ends the
 * process, and the restore runs on.
 *
 * The restores alternate between eager and lazy, as in the CoW test.
 *
 * PHOS_RECOPY_ITERATIONS sets the number of iterations (default 40).
 */
#include "phosfs_test.h"

int main(void)
{
	rig r;
	rig_require(&r);
	int iters = getenv("PHOS_RECOPY_ITERATIONS") ? atoi(getenv("PHOS_RECOPY_ITERATIONS")) : 40;
	if (iters < 2)
		iters = 2;
	plan(iters + 3);
	r.opts[0] = "--chunk";
	r.opts[1] = "256K";
	char out[PATH_MAX], ctl[160], status[160], st[4096], prev[PATH_MAX] = "";
	pid_t pid = rig_cow_start(&r, out, ctl, status);

	long clean = 0, dirty = 0;
	int nverify = 0;
	for (int it = 0; it < iters; it++) {
		bool last_one = it == iters - 1, lazy = it % 2;
		r.restore_mode = lazy ? "lazy" : "eager";
		usleep((useconds_t)(rand() % 150000));
		char c[64], last[256] = "", image[PATH_MAX];
		int n = snprintf(c, sizeof(c), "checkpoint recopy name=r%d%s\n", it, last_one ? " kill" : "");
		rig_files(&r, pid, ctl, status);
		int e = rig_ctl(ctl, c, (size_t)n);
		int done = !e && rig_job_done(&r, pid, 60000, last, sizeof(last)) && strstr(last, "done");
		rig_read(status, st, sizeof(st));
		int recopy = strstr(st, "protocol: recopy\n") != NULL;
		long cl = (long)rig_stat(st, "recopy: "), dr = -1;
		const char *d = strstr(st, "copy while running, ");
		if (d)
			dr = atol(d + strlen("copy while running, "));
		clean += cl > 0 ? cl : 0;
		dirty += dr > 0 ? dr : 0;
		snprintf(image, sizeof(image), "%s/%d/r%d", r.store, (int)pid, it);
		int img = done && rig_verify(image);
		/* recopy kill ends the process; otherwise it runs on intact. */
		int live = done && (last_one ? !rig_alive(pid) || (usleep(500000), !rig_alive(pid))
					     : rig_cow_verified(pid, out, &nverify, 5000));
		int back = rig_kill_restore(&r, &pid, img, image, st, sizeof(st));
		int restored = back && rig_cow_verified(pid, out, &nverify, 5000);
		restored = restored && rig_restore_done(&r, 30000, st, sizeof(st));
		char line[128] = "";
		rig_line(out, "verify ok", 0, line, sizeof(line));
		ok(done && recopy && img && live && restored,
		   "iteration %d: %s image verifies, %s, its %s restore matches t2 (%s; %ld bytes from the running copy, %ld dirty)",
		   it, last_one ? "recopy kill" : "recopy", last_one ? "the process ended" : "the live process matches",
		   r.restore_mode, line, cl, dr);
		if (!(done && recopy && img && live && restored))
			diag("e=%s done=%d recopy=%d image=%d live=%d restored=%d: %s", e ? strerror(e) : "0", done, recopy,
			     img, live, restored, last);
		if (!rig_next_iteration(prev, image, back, st, it, iters))
			break;
	}
	ok(clean > 0, "the final stalls took %ld bytes from the copies made while the process ran", clean);
	ok(dirty > 0, "and copied %ld bytes written meanwhile again", dirty);

	kill(pid, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
