/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Restores run side by side up to --restores, wait in a queue of up to
 * --restore-queue beyond that, in the order they were asked for, and are
 * refused with EBUSY past it. phosfs runs with --restores 2
 * --restore-queue 1, and simcuda fills device memory at 8 MB/s, so that a
 * lazy restore of 32 MiB takes seconds:
 *
 *   1. cow_app (32 MiB, its own pid namespace) is checkpointed and runs on;
 *   2. four restores of its image are asked for at once: two are accepted
 *      and run, the third is accepted and queued, the fourth is refused
 *      (EBUSY), saying why; /status shows two running and one queued;
 *   3. the first two run at the same time (both resumed before either
 *      ended), the third starts only once one of them has ended;
 *   4. all three end done, as three clones with pids of their own, each
 *      checking its device memory; their CRIU logs are three files.
 */
#include "phosfs_test.h"

int main(void)
{
	rig r;
	rig_require(&r);
	plan(6);
	r.opts[0] = "--restores";
	r.opts[1] = "2";
	r.opts[2] = "--restore-queue";
	r.opts[3] = "1";
	r.fs_env = "SIMCUDA_H2D_MBPS=8";
	char app[PATH_MAX], cubin[PATH_MAX];
	rig_cow_app_paths(app, cubin);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	pid_t pid = rig_cow_app(&r, app, cubin, "32", "7", 20000);
	char out[PATH_MAX], ctl[160], status[160], last[256] = "", image[PATH_MAX];
	rig_out(&r, pid, out, sizeof(out));
	rig_files(&r, pid, ctl, status);
	int saved = pid > 0 && rig_checkpoint(&r, pid, "checkpoint name=a\n", last, sizeof(last));
	snprintf(image, sizeof(image), "%s/%d/a", r.store, (int)pid);
	ok(saved && rig_verify(image), "cow_app is checkpointed and runs on (%s)", last);
	if (!saved)
		bail("nothing to restore");

	char cmd[PATH_MAX + 16], reply[4][1024];
	snprintf(cmd, sizeof(cmd), "restore %s lazy\n", image);
	int e[4];
	unsigned id[4] = { 0 };
	for (int i = 0; i < 4; i++) {
		e[i] = rig_ctl_answer(&r, cmd, reply[i], sizeof(reply[i]));
		if (sscanf(reply[i], "restore %u", &id[i]) != 1)
			id[i] = 0;
	}
	char rootst[160], st[8192] = "";
	snprintf(rootst, sizeof(rootst), "%s/status", r.mnt);
	rig_read(rootst, st, sizeof(st));
	ok(!e[0] && !e[1] && !e[2] && id[0] && id[1] && id[2] && e[3] == EBUSY &&
		   strstr(reply[3], "--restore-queue 1"),
	   "of four restores asked at once, three are accepted and the fourth is refused: %s", reply[3]);
	int shown = strstr(st, "restores: 2 running, 1 queued") != NULL;
	char q[64];
	snprintf(q, sizeof(q), "restore %u: queued", id[2]);
	shown = shown && strstr(st, q);
	ok(shown, "/status shows two running and the third queued");
	if (!shown)
		diag("%s", st);

	/* Both first ones run before either has ended; the third waits. */
	char s0[8192], s1[8192], s2[8192];
	int both = 0, third_waited = 1;
	for (int t = 0; t < 60000 && !both; t += 10, usleep(10000)) {
		char p[160];
		snprintf(p, sizeof(p), "%s/restores/%u", r.mnt, id[0]);
		rig_read(p, s0, sizeof(s0));
		snprintf(p, sizeof(p), "%s/restores/%u", r.mnt, id[1]);
		rig_read(p, s1, sizeof(s1));
		snprintf(p, sizeof(p), "%s/restores/%u", r.mnt, id[2]);
		rig_read(p, s2, sizeof(s2));
		both = strstr(s0, "state: resumed") && strstr(s1, "state: resumed");
		if (!strstr(s2, "state: queued") && !strstr(s0, "state: done") && !strstr(s1, "state: done"))
			third_waited = 0;
		if (strstr(s0, "state: failed") || strstr(s1, "state: failed"))
			break;
	}
	ok(both && third_waited, "the first two run side by side, and the third waits for one of them to end");
	if (!both)
		diag("%s\n%s", s0, s1);

	pid_t clone[3] = { 0 };
	int good = 0, nverify = 0;
	char logs[3][PATH_MAX] = { "", "", "" };
	for (int i = 0; i < 3; i++) {
		const char *how = rig_restore_follow(&r, id[i], 1, 60000, st, sizeof(st));
		clone[i] = rig_restored(st);
		const char *l = strstr(st, "log: ");
		if (l)
			snprintf(logs[i], sizeof(logs[i]), "%.*s", (int)strcspn(l + 5, "\n"), l + 5);
		if (!strcmp(how, "done") && clone[i] > 0 && clone[i] != pid && rig_alive(clone[i]) &&
		    rig_cow_verified(clone[i], out, &nverify, 10000))
			good++;
		else
			diag("restore %u: %s: %s", id[i], how, st);
	}
	ok(good == 3 && clone[0] != clone[1] && clone[1] != clone[2] && clone[0] != clone[2],
	   "all three end done: clones %d, %d and %d, each checking its device memory", (int)clone[0], (int)clone[1],
	   (int)clone[2]);
	ok(*logs[0] && *logs[1] && *logs[2] && strcmp(logs[0], logs[1]) && strcmp(logs[1], logs[2]) &&
		   access(logs[0], F_OK) == 0 && access(logs[2], F_OK) == 0,
	   "each restore has a CRIU log of its own");
	pid_t all[] = { pid, clone[0], clone[1], clone[2] };
	rig_kill_all(all, 4);
	rig_cleanup(&r);
	return done();
}
