/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * No ctl write waits for a job, and every step of a restore has a
 * deadline. phosfs runs with --restore-timeout 2 and a CRIU whose restore
 * never ends (a script that sleeps in its place; dumps are the real
 * CRIU's):
 *
 *   1. examples/counter is checkpointed;
 *   2. a restore of it is accepted at once (the write returns with its id)
 *      while CRIU hangs, and so is a second one; a malformed command
 *      written meanwhile is refused at once;
 *   3. each restore fails once its criu-restore step has run 2 s, saying
 *      which step ran out of time; the hung CRIU is killed;
 *   4. `phos restore` of the same image exits non-zero with that cause;
 *   5. the image is intact, and phosfs still answers.
 */
#include "phosfs_test.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Restore id from an answer "restore ID", or 0. */
static unsigned id_of(const char *reply)
{
	unsigned id = 0;
	return sscanf(reply, "restore %u", &id) == 1 ? id : 0;
}

int main(void)
{
	rig r;
	rig_require(&r);
	plan(6);
	/* The CRIU phosfs runs: the real one, except that restore hangs and
	 * leaves its pid for the test. */
	char real[PATH_MAX], script[PATH_MAX], hung[PATH_MAX];
	snprintf(real, sizeof(real), "%s", r.criu);
	snprintf(script, sizeof(script), "%s/criu", r.dir);
	snprintf(hung, sizeof(hung), "%s/hung", r.dir);
	rig_script(script, "#!/bin/sh\nif [ \"$1\" = restore ]; then echo $$ >> %s; exec sleep 600; fi\nexec %s \"$@\"\n",
		   hung, real);
	snprintf(r.criu, sizeof(r.criu), "%s", script);
	r.opts[0] = "--restore-timeout";
	r.opts[1] = "2";
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	pid_t pid = rig_counter(&r, 16);
	char ctl[160], status[160], last[256] = "", image[PATH_MAX];
	rig_files(&r, pid, ctl, status);
	int saved = pid > 0 && rig_traced(&r, pid, 10000) &&
		    rig_checkpoint(&r, pid, "checkpoint stop name=a kill\n", last, sizeof(last));
	snprintf(image, sizeof(image), "%s/%d/a", r.store, (int)pid);
	ok(saved && rig_verify(image), "examples/counter is checkpointed (%s)", last);
	if (!saved)
		bail("nothing to restore");

	char cmd[PATH_MAX + 32], reply[1024], reply2[1024], rootctl[160];
	snprintf(cmd, sizeof(cmd), "restore %s eager\n", image);
	snprintf(rootctl, sizeof(rootctl), "%s/ctl", r.mnt);
	double t0 = now_s();
	int e1 = rig_ctl_answer(&r, cmd, reply, sizeof(reply));
	int hanging = rig_exists(hung, 10000);
	double t1 = now_s();
	int e2 = rig_ctl_answer(&r, cmd, reply2, sizeof(reply2));
	int bad = rig_ctl(rootctl, "restore\n", 8);
	double t2 = now_s();
	unsigned id1 = id_of(reply), id2 = id_of(reply2);
	ok(!e1 && !e2 && id1 && id2 && id2 != id1 && hanging && bad == EINVAL && t1 - t0 < 12 && t2 - t1 < 1.0,
	   "while CRIU hangs, two restores are accepted at once (ids %u and %u) and a malformed command is refused "
	   "at once (%.3f s for both)",
	   id1, id2, t2 - t1);

	char st[8192] = "";
	const char *how = id1 ? rig_restore_follow(&r, id1, 1, 15000, st, sizeof(st)) : "";
	double t3 = now_s();
	int timed = !strcmp(how, "failed") && strstr(st, "did not end within 2 s (in step criu-restore") && t3 - t0 < 10;
	ok(timed, "the restore fails after 2 s of criu-restore (%.1f s), saying which step ran out of time",
	   t3 - t0);
	if (!timed)
		diag("%s: %s", how, st);
	how = id2 ? rig_restore_follow(&r, id2, 1, 15000, st, sizeof(st)) : "";
	/* Every CRIU that hung was killed with what it had started. */
	FILE *f = fopen(hung, "r");
	int n = 0, gone = 0;
	for (int p; f && fscanf(f, "%d", &p) == 1; n++)
		for (int k = 0; k < 50; k++, usleep(20000))
			if (!rig_alive(p)) {
				gone++;
				break;
			}
	if (f)
		fclose(f);
	ok(!strcmp(how, "failed") && n == 2 && gone == 2, "the second fails the same way; both hung CRIUs were killed (%d of %d)",
	   gone, n);

	/* The command line says the cause. */
	char out[2 * PATH_MAX + 64], line[2048] = "";
	snprintf(out, sizeof(out), "%s 2>&1 restore %s eager; echo exit=$?", r.phos, image);
	FILE *p = popen(out, "r");
	char all[8192] = "";
	size_t got = 0;
	while (p && fgets(line, sizeof(line), p) && got < sizeof(all) - 1) {
		snprintf(all + got, sizeof(all) - got, "%s", line);
		got = strlen(all);
	}
	if (p)
		pclose(p);
	ok(strstr(all, "did not end within 2 s") && strstr(all, "exit=1"), "phos restore exits 1 with the cause");
	if (!strstr(all, "exit=1"))
		diag("%s", all);
	char v[160];
	snprintf(v, sizeof(v), "%s/version", r.mnt);
	ok(rig_verify(image) && rig_read(v, st, sizeof(st)), "the image is intact and phosfs answers");
	rig_cleanup(&r);
	return done();
}
