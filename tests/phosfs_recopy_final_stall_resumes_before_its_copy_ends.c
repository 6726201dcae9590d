/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * recopy's final stall lets the process run again once CRIU has dumped
 * it, before the copy of what it wrote is off the GPU: what is left is
 * copy-on-write, so the image still holds the state at t2.
 *
 * phosfs's device-to-host copies run at 4 MB/s here (simcuda's
 * $SIMCUDA_D2H_MBPS; a copy reads its source at the end of that time, so
 * a write the tracer does not hold off would reach the image), its shadow
 * pool is 4 MiB, and cow_app (24 MiB) writes its buffers all the while.
 * Each of four recopy checkpoints: the stall ends before the last byte is
 * off the GPU, the image verifies, and the live process checks its
 * memory. A `cancel` after the final stall, while what is left is
 * copy-on-write, publishes nothing and lets the process go on intact;
 * the next recopy is whole, and the process, killed and restored from
 * it, is the state at t2, byte for byte.
 */
#include "phosfs_test.h"

int main(void)
{
	rig r;
	rig_require(&r);
	enum { N = 4 };
	plan(N + 5);
	r.opts[0] = "--chunk";
	r.opts[1] = "256K";
	r.opts[2] = "--shadow-pool";
	r.opts[3] = "4M";
	r.fs_env = "SIMCUDA_D2H_MBPS=4";
	char out[PATH_MAX], ctl[160], status[160], st[4096], image[PATH_MAX] = "";
	pid_t pid = rig_cow_start(&r, out, ctl, status);

	long protected_writes = 0;
	int nverify = 0;
	for (int it = 0; it < N; it++) {
		usleep((useconds_t)(rand() % 100000));
		char c[64], last[256] = "";
		int n = snprintf(c, sizeof(c), "checkpoint recopy name=r%d\n", it);
		int e = rig_ctl(ctl, c, (size_t)n);
		int done = !e && rig_job_done(&r, pid, 60000, last, sizeof(last)) && strstr(last, "done");
		rig_read(status, st, sizeof(st));
		double stall = rig_stat(st, "stall ms: "), off = rig_stat(st, "off gpu at ms: ");
		long sh = (long)rig_stat(st, "cow shadows: "), wt = (long)rig_stat(st, "cow waits: ");
		protected_writes += (sh > 0 ? sh : 0) + (wt > 0 ? wt : 0);
		snprintf(image, sizeof(image), "%s/%d/r%d", r.store, (int)pid, it);
		int img = done && rig_verify(image);
		int live = done && rig_cow_verified(pid, out, &nverify, 5000);
		ok(done && img && live && stall > 0 && off > stall,
		   "recopy %d: the stall (%.1f ms) ends before the last byte is off the GPU (%.1f ms); the image verifies, "
		   "the live process matches (%ld shadows, %ld waits)",
		   it, stall, off, sh, wt);
		if (!(done && img && live))
			diag("done=%d image=%d live=%d: %s", done, img, live, last);
	}
	ok(protected_writes > 0, "writes to chunks not yet off the GPU were shadowed or waited for (%ld)", protected_writes);

	/* cancel once the final stall is over (status shows it) and the
	 * copy goes on under CoW. */
	char last[256] = "";
	rig_ctl(ctl, "checkpoint recopy name=gone\n", 28);
	int in_cow = 0;
	for (int t = 0; t < 30000 && !in_cow; t += 5) {
		if (!rig_read(status, st, sizeof(st)) || strstr(st, "job: none\n"))
			break;
		in_cow = strstr(st, "stall ms: ") != NULL;
		if (!in_cow)
			usleep(5000);
	}
	int ce = in_cow ? rig_ctl(ctl, "cancel\n", 7) : -1;
	int ended = rig_job_done(&r, pid, 60000, last, sizeof(last));
	snprintf(image, sizeof(image), "%s/%d/gone", r.store, (int)pid);
	ok(in_cow && !ce && ended && strstr(last, "failed") && access(image, F_OK) != 0 &&
		   rig_cow_verified(pid, out, &nverify, 5000),
	   "cancel after the final stall publishes nothing, and the process runs on intact (%s)", last);

	rig_ctl(ctl, "checkpoint recopy name=after\n", 29);
	ended = rig_job_done(&r, pid, 60000, last, sizeof(last)) && strstr(last, "done");
	snprintf(image, sizeof(image), "%s/%d/after", r.store, (int)pid);
	ok(ended && rig_verify(image), "the next recopy is whole (%s)", last);

	int back = rig_kill_restore(&r, &pid, ended, image, st, sizeof(st));
	int restored = back && rig_cow_verified(pid, out, &nverify, 5000) && rig_restore_done(&r, 30000, st, sizeof(st));
	ok(restored, "restored from it, the process is the state at t2 (%s)", image);

	kill(pid, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
