/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phosfs killed with -9 leaves its mount dead ("Transport endpoint is not
 * connected"); it could not start again until someone unmounted it by
 * hand. And a restarted phosfs did not list a pid that has checkpoints but
 * no process, nor say which was its last:
 *
 *   1. examples/counter is checkpointed twice, then phosfs is killed -9
 *      and the counter too; a half image of a writer that died is left in
 *      its folder of the store;
 *   2. phosfs starts again on the same mount point, over the dead mount;
 *   3. it cleared the half image;
 *   4. / lists the pid, its status says its last checkpoint is 2, and so
 *      does `phos ls`;
 *   5. its image restores.
 */
#include "phosfs_test.h"

int main(void)
{
	rig r;
	rig_require(&r);
	plan(5);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	pid_t pid = rig_counter(&r, 8);
	char ctl[160], status[160], last[256] = "", st[8192];
	rig_files(&r, pid, ctl, status);
	int saved = pid > 0 && rig_traced(&r, pid, 10000) && rig_checkpoint(&r, pid, "checkpoint\n", last, sizeof(last)) &&
		    rig_checkpoint(&r, pid, "checkpoint\n", last, sizeof(last)) && strstr(last, "name=2");
	kill(r.fs, SIGKILL);
	waitpid(r.fs, NULL, 0);
	r.fs = 0;
	kill(pid, SIGKILL);
	rig_reap();
	/* A writer that died: a child that has ended has a pid no one runs. */
	pid_t dead = fork();
	if (dead == 0)
		_exit(0);
	waitpid(dead, NULL, 0);
	char half[PATH_MAX];
	snprintf(half, sizeof(half), "%s/%d/.3.tmp-%d.0", r.store, (int)pid, (int)dead);
	struct stat sb;
	int dead_mount = stat(r.mnt, &sb) != 0 && errno == ENOTCONN;
	ok(saved && dead_mount && mkdir(half, 0700) == 0,
	   "two checkpoints, then phosfs and the counter are killed: the mount is dead (%s)", last);

	ok(rig_mount(&r, NULL) == 0, "phosfs starts again over its dead mount");
	ok(access(half, F_OK) != 0, "it cleared the half image of the writer that died");

	char name[16];
	snprintf(name, sizeof(name), "%d", (int)pid);
	DIR *d = opendir(r.mnt);
	int listed = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		listed = listed || !strcmp(de->d_name, name);
	if (d)
		closedir(d);
	int said = rig_read(status, st, sizeof(st)) && strstr(st, "last checkpoint: 2\n");
	char cmd[PATH_MAX + 32], line[512] = "";
	snprintf(cmd, sizeof(cmd), "%s ls", r.phos);
	FILE *p = popen(cmd, "r");
	int ls = 0;
	while (p && fgets(line, sizeof(line), p)) {
		char lp[16] = "", state[32] = "", traced[32] = "", lastc[32] = "";
		if (sscanf(line, "%15s %31s %31s %31s", lp, state, traced, lastc) == 4 && !strcmp(lp, name))
			ls = !strcmp(lastc, "2");
	}
	if (p)
		pclose(p);
	ok(listed && said && ls, "/ lists %d, and its status and phos ls say its last checkpoint is 2", (int)pid);
	if (!said)
		diag("%s", st);

	char image[PATH_MAX];
	pid_t back = 0;
	snprintf(image, sizeof(image), "%s/%d/2", r.store, (int)pid);
	ok(rig_restore(&r, image, &back, st, sizeof(st)) == 0 && rig_alive(back), "its image restores (%d)", (int)back);
	kill(back, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
