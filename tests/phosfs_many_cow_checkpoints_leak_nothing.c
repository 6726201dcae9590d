/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Checkpoint after checkpoint of one process leaks nothing and never
 * fails: cow_app runs under phos on 8 MiB, and is checkpointed (CoW, the
 * default) PHOS_MANY_CHECKPOINTS times in a row (default 1000), each
 * image removed once the next one is done, as a keep-the-latest cron job
 * would.
 *
 * Every checkpoint must end done. Every 25th image is verified and the
 * running process checks its device memory against its host copies.
 * After the first tenth (when pools and caches are warm) and at the end,
 * phosfs's open fds, its resident memory, the application's open fds and
 * the store's log folder are measured. A leak of one fd a checkpoint
 * would add hundreds: the fds may differ by a few (what a job has open
 * for a moment), phosfs's memory may grow by 8 MiB at most, and the logs
 * are pruned to their bound. At the end the last image restores, and its process
 * checks.
 */
#include "phosfs_test.h"

/* The number of open fds of pid. */
static int fds_of(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	int n = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return d ? n : -1;
}

/* pid's resident memory in KiB (VmRSS), or -1. */
static long rss_of(pid_t pid)
{
	char path[64], l[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	long kb = -1;
	while (f && fgets(l, sizeof(l), f))
		if (!strncmp(l, "VmRSS:", 6))
			kb = atol(l + 6);
	if (f)
		fclose(f);
	return kb;
}

/* The number of entries in dir, or -1. */
static int entries(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	if (d)
		closedir(d);
	return d ? n : -1;
}

typedef struct usage {
	int fs_fds, app_fds, logs;
	long fs_kb;
} usage;

static usage measure(rig *r, pid_t pid)
{
	char logs[PATH_MAX];
	snprintf(logs, sizeof(logs), "%s/%d/.logs", r->store, (int)pid);
	return (usage){ fds_of(r->fs), fds_of(pid), entries(logs), rss_of(r->fs) };
}

int main(void)
{
	rig r;
	rig_require(&r);
	char app[PATH_MAX], cubin[PATH_MAX];
	rig_cow_app_paths(app, cubin);
	int n = getenv("PHOS_MANY_CHECKPOINTS") ? atoi(getenv("PHOS_MANY_CHECKPOINTS")) : 1000;
	if (n < 20)
		n = 20;
	plan(6);
#ifdef __SANITIZE_ADDRESS__
	/* ASan holds freed memory in a quarantine (256 MiB), which would count
	 * as growth: phosfs gets none. */
	r.fs_env = "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:quarantine_size_mb=0";
#endif
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	unsigned seed = (unsigned)time(NULL);
	char seed_s[16], out[PATH_MAX], st[4096];
	snprintf(seed_s, sizeof(seed_s), "%u", seed);
	pid_t pid = rig_cow_app(&r, app, cubin, "8", seed_s, 20000);
	rig_out(&r, pid, out, sizeof(out));
	ok(pid > 0, "cow_app runs under the tracer (seed %u)", seed);
	if (pid <= 0)
		bail("cow_app did not start");

	char prev[PATH_MAX] = "", image[PATH_MAX], last[256], first_fail[512] = "";
	int good = 0, checked = 0, nverify = 0, warm_at = n / 10;
	usage warm = { 0 }, end = { 0 };
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < n; i++) {
		char cmd[64];
		snprintf(cmd, sizeof(cmd), "checkpoint name=c%d\n", i);
		snprintf(image, sizeof(image), "%s/%d/c%d", r.store, (int)pid, i);
		int done = rig_checkpoint(&r, pid, cmd, last, sizeof(last));
		if (done && i % 25 == 24)
			done = rig_verify(image) && rig_cow_verified(pid, out, &nverify, 5000) && ++checked;
		good += done;
		if (!done && !*first_fail)
			snprintf(first_fail, sizeof(first_fail), "checkpoint %d: %s", i, last);
		if (*prev) {
			char rm[PATH_MAX + 16];
			snprintf(rm, sizeof(rm), "rm -rf '%s'", prev);
			if (system(rm) != 0)
				diag("could not remove %s", prev);
		}
		snprintf(prev, sizeof(prev), "%s", image);
		if (i == warm_at)
			warm = measure(&r, pid);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	end = measure(&r, pid);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	if (*first_fail)
		diag("%s", first_fail);
	ok(good == n && checked == n / 25, "%d of %d checkpoints in a row ended done, in %.1f s; %d images checked",
	   good, n, secs, checked);
	ok(warm.fs_fds > 0 && end.fs_fds <= warm.fs_fds + 4, "phosfs's open fds: %d after %d checkpoints, %d after %d",
	   warm.fs_fds, warm_at + 1, end.fs_fds, n);
	ok(warm.app_fds > 0 && end.app_fds <= warm.app_fds + 4,
	   "the application's open fds: %d after %d checkpoints, %d after %d", warm.app_fds, warm_at + 1, end.app_fds, n);
	ok(warm.fs_kb > 0 && end.fs_kb - warm.fs_kb <= 8192 && end.logs > 0 && end.logs <= 64,
	   "phosfs's memory grew by %ld KiB over %d checkpoints (at most 8 MiB); the store keeps %d job logs",
	   end.fs_kb - warm.fs_kb, n - warm_at, end.logs);

	pid_t back = pid;
	int restored = rig_verify(prev) && rig_kill_restore(&r, &back, 1, prev, st, sizeof(st)) &&
		       rig_cow_verified(back, out, &nverify, 5000);
	if (!restored)
		diag("restore of %s: %s", prev, st);
	ok(restored, "the last image restores, and its process checks");
	kill(back, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
