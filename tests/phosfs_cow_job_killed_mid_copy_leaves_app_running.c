/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The job that copies a CoW checkpoint is killed with -9 while the
 * process runs and its memory is being copied. The tracer learns of it
 * (a pidfd of the job came with the CoW table), stops protecting and
 * drops the table; the process runs on with its memory intact, nothing is
 * published, and the next checkpoint is whole.
 *
 * phosfs copies in 64 KiB chunks through 1 MiB of staging, so that the
 * copy of cow_app's 64 MiB lasts long enough to be caught.
 */
#include "phosfs_test.h"

int main(void)
{
	rig r;
	rig_require(&r);
	char app[PATH_MAX], cubin[PATH_MAX];
	rig_cow_app_paths(app, cubin);
	plan(4);
	r.opts[0] = "--chunk";
	r.opts[1] = "64K";
	r.opts[2] = "--staging";
	r.opts[3] = "1M";
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	pid_t pid = rig_cow_app(&r, app, cubin, "64", "7", 30000);
	char out[PATH_MAX], ctl[160], status[160], st[4096] = "", last[256] = "";
	rig_out(&r, pid, out, sizeof(out));
	snprintf(ctl, sizeof(ctl), "%s/%d/ctl", r.mnt, (int)pid);
	snprintf(status, sizeof(status), "%s/%d/status", r.mnt, (int)pid);
	int up = pid > 0;
	ok(up, "cow_app runs under the tracer");

	/* Kill the job once it copies; a try whose copy ended first is done again. */
	int caught = 0, nverify = 0;
	for (int attempt = 0; attempt < 10 && !caught && up; attempt++) {
		char c[64];
		int n = snprintf(c, sizeof(c), "checkpoint name=k%d\n", attempt);
		if (rig_ctl(ctl, c, (size_t)n))
			break;
		pid_t job = 0;
		for (int i = 0; i < 20000 && !caught; i++) {
			if (rig_read(status, st, sizeof(st)) && strstr(st, "job: none\n"))
				break;
			if (strstr(st, "step: copy\n") && (job = rig_checkpoint_job(pid)) > 0 && kill(job, SIGKILL) == 0)
				caught = 1;
			else
				usleep(500);
		}
		rig_job_done(&r, pid, 30000, last, sizeof(last));
		if (!caught)
			diag("attempt %d: the copy ended before the job could be killed (%s)", attempt, last);
	}
	rig_read(status, st, sizeof(st));
	char image[PATH_MAX];
	snprintf(image, sizeof(image), "%s/%d/k", r.store, (int)pid);
	ok(caught && strstr(last, "failed") && strstr(st, "killed by signal 9"),
	   "the job killed during the copy fails the checkpoint (%s)", last);
	ok(caught && rig_alive(pid) && rig_cow_verified(pid, out, &nverify, 10000) && rig_line(out, "ops", 0, NULL, 0),
	   "the process runs on, its device memory intact");
	rig_ctl(ctl, "checkpoint name=after\n", 22);
	int whole = rig_job_done(&r, pid, 60000, last, sizeof(last)) && strstr(last, "done");
	snprintf(image, sizeof(image), "%s/%d/after", r.store, (int)pid);
	ok(whole && rig_verify(image) && rig_cow_verified(pid, out, &nverify, 10000), "the next checkpoint is whole (%s)", last);
	if (!whole) {
		rig_read(status, st, sizeof(st));
		char *err = strstr(st, "error: ");
		diag("%.*s", err ? (int)strcspn(err, "\n") : 0, err ? err : "");
	}

	kill(pid, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
