/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A checkpoint asked while a lazy restore still brings its tree's device
 * memory back waits for the restore, but not for ever: phosfs runs with
 * --checkpoint-wait 1, and the fill is slowed down (simcuda's
 * $SIMCUDA_H2D_MBPS, in phosfs alone) so that the 32 MiB of
 * examples/counter take about 8 s to come back.
 *
 * The checkpoint is accepted at once and waits (step: waiting); after a
 * second it fails, and says the process was still being restored and
 * which option bounds the wait. The process is not touched: the restore
 * ends, the counter counts on and its device memory checks, and a
 * checkpoint asked then is taken. Needs root, FUSE and CRIU.
 */
#include "phosfs_test.h"

int main(void)
{
	rig r;
	rig_require(&r);
	r.fs_env = "SIMCUDA_H2D_MBPS=4";
	r.opts[0] = "--fill-threads";
	r.opts[1] = "2";
	r.opts[2] = "--checkpoint-wait";
	r.opts[3] = "1";
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	plan(4);
	pid_t pid = rig_counter(&r, 32);
	char out[PATH_MAX], ctl[160], status[160], st[8192], last[256] = "";
	rig_out(&r, pid, out, sizeof(out));
	rig_files(&r, pid, ctl, status);
	int up = pid > 0 && rig_line(out, "count 3", 20000, NULL, 0) && rig_traced(&r, pid, 5000);
	char image[PATH_MAX];
	snprintf(image, sizeof(image), "%s/%d/a", r.store, (int)pid);
	int saved = up && rig_checkpoint(&r, pid, "checkpoint stop name=a kill\n", last, sizeof(last));
	for (int k = 0; k < 100 && pid > 0 && rig_alive(pid); k++)
		usleep(20000);
	rig_reap();
	saved = saved && rig_verify(image);
	int e = saved ? rig_restore(&r, image, &pid, st, sizeof(st)) : -1;
	int back = e == 0 && rig_alive(pid);
	if (!back)
		diag("checkpoint: %s; restore: %s; %s", last, e > 0 ? strerror(e) : "not tried", st);
	ok(back, "examples/counter, checkpointed (stop kill), is restored lazily and runs");

	rig_files(&r, pid, ctl, status);
	const char cmd[] = "checkpoint name=b\n";
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int e2 = back ? rig_ctl(ctl, cmd, sizeof(cmd) - 1) : -1;
	char w[8192] = "";
	int waiting = e2 == 0 && rig_read(status, w, sizeof(w)) && strstr(w, "step: waiting\n");
	int ended = e2 == 0 && rig_job_done(&r, pid, 20000, last, sizeof(last));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	rig_read(status, st, sizeof(st));
	char rootst[160], root[8192] = "";
	snprintf(rootst, sizeof(rootst), "%s/status", r.mnt);
	int underway = rig_read(rootst, root, sizeof(root)) && strstr(root, "job: restore");
	int said = strstr(last, "failed") && strstr(st, "was still being restored") &&
		   strstr(st, "--checkpoint-wait");
	char b[PATH_MAX];
	snprintf(b, sizeof(b), "%s/%d/b", r.store, (int)pid);
	if (!waiting || !ended || !said || !underway)
		diag("accepted: %s; waiting: %d; %s after %.1f s; restore under way: %d; status: %s",
		     e2 > 0 ? strerror(e2) : e2 ? "not tried" : "yes", waiting, last, secs, underway, st);
	ok(waiting && ended && said && underway && secs < 5 && access(b, F_OK) != 0,
	   "a checkpoint asked during the restore waits, and after --checkpoint-wait (1 s) fails and says why, the "
	   "restore still under way (%.1f s)",
	   secs);

	int filled = rig_restore_done(&r, 60000, st, sizeof(st));
	kill(pid, SIGUSR1);
	int intact = filled && rig_alive(pid) && rig_line(out, "verify ok", 20000, NULL, 0);
	if (!intact)
		diag("after the restore: filled %d; %s", filled, st);
	ok(intact, "the restore ends, and the counter runs on with its device memory intact");

	int taken = intact && rig_traced(&r, pid, 10000) &&
		    rig_checkpoint(&r, pid, "checkpoint name=c\n", last, sizeof(last));
	snprintf(image, sizeof(image), "%s/%d/c", r.store, (int)pid);
	ok(taken && rig_verify(image), "a checkpoint asked after the restore is taken (%s)", last);
	kill(pid, SIGKILL);
	rig_cleanup(&r);
	return done();
}
