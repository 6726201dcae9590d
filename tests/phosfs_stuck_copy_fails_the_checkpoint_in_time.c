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
 */
#include <time.h>

#include "phosfs_test.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(void)
{
	rig r;
	rig_require(&r);
	plan(3);
	r.fs_env = "SIMCUDA_D2H_MBPS=1";
	r.opts[0] = "--dump-timeout";
	r.opts[1] = "1";
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");

	pid_t p = rig_counter(&r, 16);
	char out[160], ctl[160], status[160], line[256], st[4096];
	rig_out(&r, p, out, sizeof(out));
	rig_files(&r, p, ctl, status);
	if (!rig_line(out, "count 3", 30000, NULL, 0))
		bail("the counter did not start");
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
	return done();
}
