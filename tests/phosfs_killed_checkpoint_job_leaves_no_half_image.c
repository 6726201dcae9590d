/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A checkpoint job killed with -9 mid-copy left its half image
 * (.N.tmp-PID.0) in the store for good, and the name N was skipped:
 *
 *   1. cow_app's checkpoint job is killed while it copies (64 KiB chunks
 *      through 1 MiB of staging make the copy last); the checkpoint fails;
 *   2. no half image is left in the store, and the next checkpoint, with
 *      no name, takes the number the killed one had.
 */
#include "phosfs_test.h"

/* How many entries of dir hold ".tmp-" (half images). */
static int half_images(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		n += strstr(de->d_name, ".tmp-") != NULL;
	if (d)
		closedir(d);
	return n;
}

int main(void)
{
	rig r;
	rig_require(&r);
	char app[PATH_MAX], cubin[PATH_MAX];
	rig_cow_app_paths(app, cubin);
	plan(3);
	r.opts[0] = "--chunk";
	r.opts[1] = "64K";
	r.opts[2] = "--staging";
	r.opts[3] = "1M";
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	pid_t pid = rig_cow_app(&r, app, cubin, "64", "7", 30000);
	char ctl[160], status[160], st[4096] = "", last[256] = "", dir[PATH_MAX];
	rig_files(&r, pid, ctl, status);
	snprintf(dir, sizeof(dir), "%s/%d", r.store, (int)pid);
	ok(pid > 0, "cow_app runs under the tracer");

	int caught = 0, attempts = 0;
	for (; attempts < 10 && !caught && pid > 0; attempts++) {
		if (rig_ctl(ctl, "checkpoint\n", 11))
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
	}
	/* The killed one was number `attempts`: the ones before it were done. */
	char killed[PATH_MAX + 16];
	snprintf(killed, sizeof(killed), "%s/%d", dir, attempts);
	ok(caught && strstr(last, "failed") && half_images(dir) == 0 && access(killed, F_OK) != 0,
	   "the checkpoint whose job was killed fails, and leaves no half image (%s)", last);
	rig_ctl(ctl, "checkpoint\n", 11);
	int whole = rig_job_done(&r, pid, 60000, last, sizeof(last)) && strstr(last, "done");
	char name[32];
	snprintf(name, sizeof(name), "name=%d", attempts);
	ok(whole && strstr(last, name) && rig_verify(killed), "the next checkpoint takes its number, %d (%s)", attempts,
	   last);
	kill(pid, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
