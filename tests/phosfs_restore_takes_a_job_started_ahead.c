/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phosfs keeps restore jobs started ahead (--job-pool N, default 1): a
 * job process that has loaded the driver and waits for its request, so
 * that a restore does not pay for starting one and for cuInit.
 *   - once mounted, one `phosfs --job pool` process waits, phosfs's child;
 *   - a restore takes it: that process runs the restore and ends, the
 *     restored cow_app runs and checks its memory, and another waits in
 *     its place;
 *   - killed while it waits, it is replaced at the next restore, which
 *     succeeds all the same;
 *   - unmounted, phosfs lets go of it: it ends;
 *   - with --job-pool 0 none waits, and a restore starts its own job.
 */
#include <dirent.h>

#include "phosfs_test.h"

/* The `phosfs --job pool` processes whose parent is fs (any parent if fs
 * is 0): how many, the first in *first. */
static int pooled(pid_t fs, pid_t *first)
{
	DIR *d = opendir("/proc");
	int n = 0;
	*first = 0;
	for (struct dirent *e; d && (e = readdir(d));) {
		pid_t pid = (pid_t)atoi(e->d_name);
		if (pid <= 0)
			continue;
		char path[64], cmd[256] = "";
		snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
		FILE *f = fopen(path, "r");
		size_t got = f ? fread(cmd, 1, sizeof(cmd) - 1, f) : 0;
		if (f)
			fclose(f);
		/* "phosfs\0--job\0pool\0…" */
		size_t a = strnlen(cmd, got);
		if (a + 1 >= got || strcmp(cmd + a + 1, "--job") || a + 7 >= got || strcmp(cmd + a + 7, "pool"))
			continue;
		pid_t parent = 0;
		char state = rig_proc_stat(pid, &parent);
		if (state == 'Z' || (fs && parent != fs))
			continue;
		if (!n++)
			*first = pid;
	}
	if (d)
		closedir(d);
	return n;
}

/* Waits up to ms for want pooled processes of fs. */
static int pooled_within(pid_t fs, int want, int ms, pid_t *first)
{
	int n = 0;
	for (int i = 0; i <= ms / 50 && (n = pooled(fs, first)) != want; i++)
		usleep(50000);
	return n;
}

/* Checkpoints pid (cow_app, output out) as name, kills it, restores it:
 * 1 when the restored one runs and checks its memory; *pid becomes it. */
static int round_trip(rig *r, pid_t *pid, const char *out, const char *name, int *nverify)
{
	char c[64], last[256] = "", st[4096] = "", img[PATH_MAX];
	snprintf(c, sizeof(c), "checkpoint cow name=%s\n", name);
	snprintf(img, sizeof(img), "%s/%d/%s", r->store, (int)*pid, name);
	int done = rig_checkpoint(r, *pid, c, last, sizeof(last)) && rig_verify(img);
	int back = done && rig_kill_restore(r, pid, 1, img, st, sizeof(st));
	if (!back)
		diag("%s: %s %s", name, last, st);
	return back && rig_cow_verified(*pid, out, nverify, 10000);
}

int main(void)
{
	rig r;
	rig_require(&r);
	char app[PATH_MAX], cubin[PATH_MAX];
	rig_cow_app_paths(app, cubin);
	plan(6);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	pid_t first = 0, next = 0;
	int n = pooled_within(r.fs, 1, 5000, &first);
	ok(n == 1, "a restore job waits, started ahead by phosfs (pid %d)", (int)first);

	char *const cmd[] = { app, cubin, "8", "7", NULL };
	char out[PATH_MAX];
	pid_t pid = rig_app_up(&r, cmd, 20000, out);
	if (pid <= 0)
		bail("cow_app did not start");
	int nverify = 0;
	int back = round_trip(&r, &pid, out, "a", &nverify);
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d", (int)first);
	n = pooled_within(r.fs, 1, 5000, &next);
	ok(back && access(path, F_OK) != 0 && n == 1 && next != first,
	   "a restore takes it: it ran the restore and ended, cow_app runs on from its image, and another waits "
	   "(pid %d)",
	   (int)next);

	kill(next, SIGKILL);
	for (int i = 0; i < 100 && pooled(r.fs, &first) > 0; i++)
		usleep(20000);
	back = round_trip(&r, &pid, out, "b", &nverify);
	n = pooled_within(r.fs, 1, 5000, &first);
	ok(back && n == 1 && first != next, "killed while it waits, it is replaced, and the restore succeeds (pid %d)",
	   (int)first);

	kill(pid, SIGKILL);
	rig_reap();
	rig_unmount(&r, SIGTERM);
	snprintf(path, sizeof(path), "/proc/%d", (int)first);
	int gone = 0;
	for (int i = 0; i < 100 && !(gone = access(path, F_OK) != 0 || rig_proc_stat(first, NULL) == 'Z'); i++)
		usleep(50000);
	ok(gone, "unmounted, phosfs lets go of it, and it ends");

	r.opts[0] = "--job-pool";
	r.opts[1] = "0";
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount again");
	usleep(500000);
	ok(pooled(r.fs, &first) == 0, "with --job-pool 0, no job waits");
	pid = rig_app_up(&r, cmd, 20000, out);
	nverify = 0;
	ok(pid > 0 && round_trip(&r, &pid, out, "c", &nverify), "and a restore starts its own job, and succeeds");
	kill(pid, SIGKILL);
	rig_cleanup(&r);
	return done();
}
