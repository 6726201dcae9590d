/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A zombie child keeps its pid across a cow checkpoint and restore, when
 * its parent is a thread other than the main one, in a job with a pid
 * namespace of its own. CRIU names such zombies from the children the
 * kernel lists for each thread of the parent, main thread first; the
 * snapshot clone a cow dump makes (--snapshot-pages) is a child of the
 * main thread too, and was once taken for the zombie: the restore then
 * gave the zombie the clone's pid.
 *
 * host_writer (HOST_WRITER_ZOMBIE=1: its sweeping thread forks a child
 * that exits and is never reaped) runs under phos run --pid-ns:
 *   - it has one zombie child; its pid in the job's namespace is noted;
 *   - a cow checkpoint succeeds; killed and restored, host_writer has a
 *     zombie child with that pid in its namespace, and no other child;
 *   - its memory checks.
 */
#include "phosfs_test.h"

/* pid's children (of every thread): how many, and the pid in its own
 * namespace (the last of NSpid) of the first zombie among them. */
static int children(pid_t pid, pid_t *zombie_ns)
{
	pid_t c[16];
	int n = rig_children(pid, c, 16);
	*zombie_ns = 0;
	for (int i = 0; i < n && i < 16 && !*zombie_ns; i++) {
		if (rig_proc_stat(c[i], NULL) != 'Z')
			continue;
		char sp[64], st[2048] = "";
		snprintf(sp, sizeof(sp), "/proc/%d/status", (int)c[i]);
		rig_read(sp, st, sizeof(st));
		char *l = strstr(st, "NSpid:");
		char *end = l ? l + strcspn(l, "\n") : NULL;
		if (end) {
			*end = 0;
			*zombie_ns = (pid_t)atoi(strrchr(l, '\t') + 1);
		}
	}
	return n;
}

int main(void)
{
	rig r;
	rig_require(&r);
	char app[PATH_MAX];
	rig_app_path("PHOS_HOST_WRITER", "apps/host_writer", app);
	plan(3);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	setenv("HOST_WRITER_ZOMBIE", "1", 1);
	char *const cmd[] = { app, "8", NULL };
	char out[PATH_MAX], last[256] = "", st[4096] = "", img[PATH_MAX];
	pid_t pid = rig_app_up(&r, cmd, 20000, out);
	if (pid <= 0)
		bail("host_writer did not start");
	pid_t z = 0, back_z = 0;
	int n = children(pid, &z);
	ok(n == 1 && z > 0, "host_writer has one child, a zombie of its sweeping thread (pid %d in the job)", (int)z);

	snprintf(img, sizeof(img), "%s/%d/z", r.store, (int)pid);
	int good = rig_checkpoint(&r, pid, "checkpoint cow name=z\n", last, sizeof(last)) && rig_verify(img);
	int back = good && rig_kill_restore(&r, &pid, 1, img, st, sizeof(st));
	int m = back ? children(pid, &back_z) : -1;
	ok(back && m == 1 && back_z == z,
	   "restored from a cow checkpoint, it has one child, a zombie with the same pid (%d, %d children): %s",
	   (int)back_z, m, last);
	int nverify = 0;
	ok(back && rig_cow_verified(pid, out, &nverify, 10000), "and all its memory checks");
	kill(pid, SIGKILL);
	rig_cleanup(&r);
	return done();
}
