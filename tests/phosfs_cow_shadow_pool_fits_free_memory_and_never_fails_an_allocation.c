/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The CoW shadow pool takes what device memory is free, and never makes
 * an allocation of the application fail.
 *
 * tests/apps/pool_app keeps its memory in one 16 MiB arena, as XLA and
 * PyTorch's allocator do: each step writes all of it (so each write
 * protects every chunk of the arena at once), and allocates 8 MiB more
 * for a moment. Every process here has 36 MiB of device memory
 * (simcuda's SIMCUDA_MEMORY_MIB), and the copy crosses a bus of 40 MB/s,
 * so that the app runs many steps during it.
 *
 * 1. With the automatic pool (the default), a cow checkpoint's pool is
 *    what the device's free memory allows less the reserve: smaller than
 *    the arena here. The app's allocations never wait for it, its arena
 *    is exact throughout, and the image restores exactly.
 * 2. With --shadow-pool 16M, the pool takes the room the app's 8 MiB
 *    needs: its allocations during the copy wait for the copy to be off
 *    the GPU, then succeed (the tracer says so on the app's stderr). A
 *    checkpoint that finds the app's 8 MiB allocated gets a smaller pool
 *    (what cuMemCreate allows), so cow checkpoints go on until one made
 *    an allocation wait, ten at most; the app never fails, and its last
 *    image restores exactly.
 */
#include "phosfs_test.h"

#define ARENA (16ull << 20)

/* Whether file holds a line with s. */
static bool has(const char *file, const char *s)
{
	char buf[65536] = "";
	return rig_read(file, buf, sizeof(buf)) && strstr(buf, s);
}

/* Starts pool_app under phos run; its output's path into out, its
 * stderr's into err. */
static pid_t start(rig *r, char *app, char *out, char *err)
{
	char *const cmd[] = { app, "16", "8", NULL };
	pid_t pid = rig_app_up(r, cmd, 20000, out);
	snprintf(err, PATH_MAX, "%.*s.err", (int)strlen(out) - 4, out);
	return pid;
}

/* Kills pid, restores image, and has the restored app check its arena:
 * 1 when it is exact. The restored app is killed afterwards. */
static int restores_exactly(rig *r, pid_t pid, const char *image, char *out, int *nverify)
{
	char st[4096];
	int back = rig_kill_restore(r, &pid, rig_verify(image), image, st, sizeof(st));
	int exact = back && rig_cow_verified(pid, out, nverify, 10000);
	if (!back)
		diag("no restore of %s: %s", image, st);
	if (back)
		rig_kill_all(&pid, 1);
	return exact;
}

static void automatic(rig *r, char *app)
{
	r->opts[0] = "--chunk";
	r->opts[1] = "256K";
	if (rig_mount(r, NULL))
		bail("phosfs did not mount");
	char out[PATH_MAX], err[PATH_MAX], last[256], st[4096], status[160], ctl[160], image[PATH_MAX];
	pid_t pid = start(r, app, out, err);
	ok(pid > 0, "pool_app runs under the tracer, in 36 MiB of device memory");
	if (pid <= 0)
		bail("pool_app did not start (%s)", out);
	rig_files(r, pid, ctl, status);
	int done = rig_checkpoint(r, pid, "checkpoint cow name=auto\n", last, sizeof(last));
	rig_read(status, st, sizeof(st));
	double pool = rig_stat(st, "cow shadow pool: ");
	ok(done && pool > 0 && pool < (double)ARENA,
	   "the automatic pool is what free memory allows less the reserve: %.0f bytes, less than the 16 MiB arena (%s)",
	   pool, last);
	int nverify = 0;
	int live = rig_cow_verified(pid, out, &nverify, 10000);
	ok(live && rig_alive(pid) && !has(out, "failed") && !has(err, "waits until the copy is off the GPU"),
	   "the app ran through the copy, its arena exact, and no allocation waited for the pool");
	snprintf(image, sizeof(image), "%s/%d/auto", r->store, (int)pid);
	ok(restores_exactly(r, pid, image, out, &nverify), "its image restores, the arena exact");
	rig_unmount(r, SIGTERM);
}

static void too_large(rig *r, char *app)
{
	r->opts[2] = "--shadow-pool";
	r->opts[3] = "16M";
	if (rig_mount(r, NULL))
		bail("phosfs did not mount again");
	char out[PATH_MAX], err[PATH_MAX], last[256] = "", st[4096], status[160], ctl[160], image[PATH_MAX];
	pid_t pid = start(r, app, out, err);
	rig_files(r, pid, ctl, status);
	/* A checkpoint that freezes the app while its 8 MiB are allocated
	 * finds 12 MiB free and gets a smaller pool, which leaves room:
	 * checkpoints go on until one with the whole 16 MiB made an
	 * allocation wait, ten at most. */
	int done = 0, tries = 0, full = 0;
	while (pid > 0 && tries < 10 && (tries < 3 || !has(err, "waits until the copy is off the GPU"))) {
		char cmd[64];
		snprintf(cmd, sizeof(cmd), "checkpoint cow name=big%d\n", tries++);
		done += rig_checkpoint(r, pid, cmd, last, sizeof(last));
		rig_read(status, st, sizeof(st));
		full += rig_stat(st, "cow shadow pool: ") >= (double)ARENA;
		usleep(100000);
	}
	ok(done == tries && full > 0, "%d cow checkpoints with --shadow-pool 16M are published, %d with the whole 16 MiB (%s)",
	   done, full, last);
	int nverify = 0;
	int live = pid > 0 && rig_cow_verified(pid, out, &nverify, 10000);
	ok(live && rig_alive(pid) && !has(out, "failed"),
	   "the app's allocations never failed, and its arena is exact");
	ok(has(err, "waits until the copy is off the GPU"),
	   "an allocation the pool left no room for waited for the copy, then succeeded");
	snprintf(image, sizeof(image), "%s/%d/big%d", r->store, (int)pid, tries - 1);
	ok(pid > 0 && restores_exactly(r, pid, image, out, &nverify), "its last image restores, the arena exact");
}

int main(void)
{
	rig r;
	rig_require(&r);
	char app[PATH_MAX];
	rig_app_path("PHOS_POOL_APP", "apps/pool_app", app);
	setenv("SIMCUDA_MEMORY_MIB", "36", 1);
	r.fs_env = "SIMCUDA_D2H_MBPS=40";
	plan(8);
	automatic(&r, app);
	too_large(&r, app);
	rig_cleanup(&r);
	return done();
}
