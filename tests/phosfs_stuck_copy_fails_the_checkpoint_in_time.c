/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A stop checkpoint waits, with its process stopped, until the device
 * memory is off the GPU. When that copy makes no progress (a device copy
 * or the store hangs), the wait ends at phosfs's --dump-timeout: the
 * checkpoint fails saying so, the process runs on with its memory, and
 * nothing is published.
 *
 * phosfs runs with --dump-timeout 1, and its device-to-host copies at
 * 1 MB/s (simcuda's $SIMCUDA_D2H_MBPS): each 4 MiB chunk takes 4 s, so
 * no chunk comes off the GPU within the second.
 *
 * Then its copies never end (SIMCUDA_D2H_MBPS=hang, as on a GPU that
 * hangs): the copy's threads, cancelled, are given ENGINE_COPY_GRACE_S
 * and left behind; the job process reports and ends all the same, no
 * half image stays in the store, and the next checkpoint is taken (and
 * fails the same way) rather than refused as busy.
 */
#include <time.h>

#include "phosfs_test.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define GRACE_S 5 /* engine/copy-out.h's ENGINE_COPY_GRACE_S */

/* Entries of dir (the store's pid directory) that are image h0 or h1,
 * whole or half (".h0.tmp-PID.N"). */
static int images(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		if (strstr(de->d_name, "h0") || strstr(de->d_name, "h1")) {
			diag("left in the store: %s", de->d_name);
			n++;
		}
	if (d)
		closedir(d);
	return n;
}

/* phosfs with --dump-timeout 1 and simcuda's env (its copies' speed)
 * mounted on r, and a counter with 16 MiB of device memory counting
 * under it: its pid, output file, ctl and status. */
static pid_t start(rig *r, char *env, char *out, char *ctl, char *status)
{
	r->fs_env = env;
	r->opts[0] = "--dump-timeout";
	r->opts[1] = "1";
	if (rig_mount(r, NULL))
		bail("phosfs did not mount");
	pid_t p = rig_counter(r, 16);
	rig_out(r, p, out, 160);
	rig_files(r, p, ctl, status);
	if (!rig_line(out, "count 3", 30000, NULL, 0))
		bail("the counter did not start");
	return p;
}

/* Copies that never end: two checkpoints in a row each fail in time. */
static void hung_copies(void)
{
	rig r;
	rig_require(&r);
	char out[160], ctl[160], status[160], line[256], st[4096], dir[200];
	pid_t p = start(&r, "SIMCUDA_D2H_MBPS=hang", out, ctl, status);
	snprintf(dir, sizeof(dir), "%s/%d", r.store, (int)p);
	int failed = 0, taken = 0;
	double worst = 0;
	for (int i = 0; i < 2; i++) {
		char cmd[64];
		int n = snprintf(cmd, sizeof(cmd), "checkpoint stop name=h%d\n", i);
		double t0 = now_s();
		taken += rig_ctl(ctl, cmd, (size_t)n) == 0;
		failed += rig_job_done(&r, p, 60000, line, sizeof(line)) && strstr(line, "failed");
		worst = now_s() - t0 > worst ? now_s() - t0 : worst;
	}
	rig_read(status, st, sizeof(st));
	char *err = strstr(st, "error: ");
	diag("%.*s", err ? (int)strcspn(err, "\n") : 0, err ? err : "");
	ok(taken == 2 && failed == 2 && worst < 1 + GRACE_S + 8,
	   "with copies that never end, two checkpoints in a row are taken and each fails in %.1f s at most", worst);
	long c0 = rig_count(out);
	int left = images(dir);
	bool said = rig_log_has(&r, "left to the job process's exit");
	diag("%d images in %s; the log %s the threads left", left, dir, said ? "tells of" : "does not tell of");
	ok(left == 0 && said && rig_alive(p) && rig_counts_past(out, c0 + 3, 10000),
	   "their threads are left behind, no half image stays, and the process counts on");
	kill(p, SIGKILL);
	rig_unmount(&r, SIGTERM);
	rig_cleanup(&r);
}

int main(void)
{
	rig r;
	rig_require(&r);
	plan(5);
	char out[160], ctl[160], status[160], line[256], st[4096];
	pid_t p = start(&r, "SIMCUDA_D2H_MBPS=1", out, ctl, status);
	double t0 = now_s();
	int e = rig_ctl(ctl, "checkpoint stop name=x\n", 23);
	int ended = e == 0 && rig_job_done(&r, p, 60000, line, sizeof(line));
	double took = now_s() - t0;
	rig_read(status, st, sizeof(st));
	char *err = strstr(st, "error: ");
	diag("%.*s", err ? (int)strcspn(err, "\n") : 0, err ? err : "");
	ok(ended && strstr(line, "failed") && err && strstr(err, "made no progress for 1 s"),
	   "the checkpoint fails, saying its copy made no progress within --dump-timeout");
	ok(ended && took < 15, "it ends in %.1f s, not when the copy would have (16 s)", took);

	char dir[200];
	snprintf(dir, sizeof(dir), "%s/%d/x", r.store, (int)p);
	struct stat sb;
	long c0 = rig_count(out);
	ok(stat(dir, &sb) != 0 && rig_alive(p) && rig_counts_past(out, c0 + 3, 10000),
	   "nothing of it is in the store, and the process counts on");
	kill(p, SIGKILL);
	rig_unmount(&r, SIGTERM);
	rig_cleanup(&r);
	hung_copies();
	return done();
}
