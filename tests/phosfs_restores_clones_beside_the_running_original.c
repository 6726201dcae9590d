/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Restore anywhere: a job of `phos run` lives in a pid namespace of its
 * own, so its image restores whatever pids are taken, even beside the
 * original, which still runs (the scale-out clone of a server):
 *
 *   1. cow_app runs under `phos run`: pid 2 of its namespace, under phos's
 *      init; /phos shows it by its host pid, and so does status;
 *   2. a cow checkpoint of it records the tree with both pids of each
 *      member, the init flagged as the namespace's;
 *   3. while it runs on, the image is restored twice (one eager, one lazy):
 *      two clones, each a new namespace with new host pids, each checking
 *      every byte of its device memory against its host copies, then
 *      again after it ran on; the original checks too;
 *   4. /phos lists all three, and a clone is checkpointed in turn, its
 *      image under its own pid;
 *   5. an image of a job with host pids (phos run --host-pids) cannot be
 *      restored while its process runs: EBUSY, with the reason in status;
 *      nor while it is a zombie its parent has not reaped, which status
 *      says, naming the parent.
 */
#include <dirent.h>

#include "phosfs_test.h"

/* The pid process pid has in its own namespace, from /proc. */
static pid_t inner_pid(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	pid_t in = 0;
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "NSpid:", 6)) {
			char *p = line + 6, *end;
			for (long x; (x = strtol(p, &end, 10)) > 0 && end != p; p = end)
				in = (pid_t)x;
		}
	if (f)
		fclose(f);
	return in;
}

/* Whether the mount's root lists pid (readdir; any live pid's directory
 * can be looked up). */
static int listed(rig *r, pid_t pid)
{
	char name[16];
	snprintf(name, sizeof(name), "%d", (int)pid);
	DIR *d = opendir(r->mnt);
	struct dirent *de;
	int found = 0;
	while (d && !found && (de = readdir(d)))
		found = !strcmp(de->d_name, name);
	if (d)
		closedir(d);
	return found;
}

int main(void)
{
	rig r;
	rig_require(&r);
	plan(11);
	char out[PATH_MAX], ctl[160], status[160], st[4096], last[256] = "", image[PATH_MAX];
	pid_t pid = rig_cow_start(&r, out, ctl, status);
	pid_t root = rig_job_root(pid);
	rig_read(status, st, sizeof(st));
	ok(root != pid && inner_pid(pid) == 2 && inner_pid(root) == 1 && listed(&r, pid) && !listed(&r, root) &&
		   strstr(st, "pid in its namespace: 2\n"),
	   "phos run starts the job as pid 2 of a namespace of its own (host pid %d, its init %d); /phos shows it by "
	   "its host pid",
	   (int)pid, (int)root);
	if (!strstr(st, "pid in its namespace: 2\n"))
		diag("%s", st);

	int e = rig_ctl(ctl, "checkpoint name=c\n", 18);
	int ckd = !e && rig_job_done(&r, pid, 60000, last, sizeof(last)) && strstr(last, "done");
	snprintf(image, sizeof(image), "%s/%d/c", r.store, (int)pid);
	int marked = 0;
	phosimg *img;
	if (ckd && rig_verify(image) && phosimg_open(image, &img) == 0) {
		const phosimg_info *in = phosimg_get_info(img);
		const phosimg_member *m = in->meta.members;
		marked = in->meta.member_count == 2 && m[0].pid == root && (m[0].flags & PHOSIMG_MEMBER_NS_INIT) &&
			 m[0].ns_pid == 1 && m[1].pid == pid && m[1].ns_pid == 2 &&
			 (m[1].flags & PHOSIMG_MEMBER_TRACED) && in->version_minor >= 4;
		phosimg_close(img);
	}
	ok(ckd && marked, "its cow image records the init and the job with both pids (%s)", last);

	int nverify = 0;
	int live = rig_cow_verified(pid, out, &nverify, 5000);
	pid_t clone[2] = { 0, 0 };
	static const char *const modes[] = { "eager", "lazy" };
	int back[2] = { 0, 0 };
	for (int i = 0; i < 2 && ckd; i++) {
		r.restore_mode = modes[i];
		back[i] = rig_restore(&r, image, &clone[i], st, sizeof(st)) == 0 && rig_alive(clone[i]) &&
			  clone[i] != pid && inner_pid(clone[i]) == 2;
		if (!back[i])
			diag("%s restore: %s", modes[i], st);
		back[i] = back[i] && rig_restore_done(&r, 30000, st, sizeof(st));
	}
	ok(live && back[0] && back[1] && clone[0] != clone[1] && rig_alive(pid),
	   "the image restores twice beside the running original: clones %d (eager) and %d (lazy), pid 2 each in a new "
	   "namespace",
	   (int)clone[0], (int)clone[1]);

	/* One asked at a time: their lines go to the same output file. */
	int c0 = back[0] && rig_cow_verified(clone[0], out, &nverify, 10000);
	int c1 = back[1] && rig_cow_verified(clone[1], out, &nverify, 10000);
	ok(c0 && c1, "each clone checks every byte of its device memory against its host copies");
	int o = rig_cow_verified(pid, out, &nverify, 10000);
	usleep(300000);
	int again = c0 && c1 && rig_cow_verified(clone[0], out, &nverify, 10000) &&
		    rig_cow_verified(clone[1], out, &nverify, 10000);
	ok(o && again && !rig_line(out, "verify FAILED", 0, NULL, 0),
	   "the original checks too, and both clones check again after running on");
	ok(listed(&r, pid) && listed(&r, clone[0]) && listed(&r, clone[1]), "/phos lists the original and both clones");

	char cctl[160], cstatus[160], cimage[PATH_MAX];
	rig_files(&r, clone[1], cctl, cstatus);
	e = back[1] ? rig_ctl(cctl, "checkpoint stop name=d\n", 23) : -1;
	ckd = !e && rig_job_done(&r, clone[1], 60000, last, sizeof(last)) && strstr(last, "done");
	snprintf(cimage, sizeof(cimage), "%s/%d/d", r.store, (int)clone[1]);
	ok(ckd && rig_verify(cimage) && rig_cow_verified(clone[1], out, &nverify, 10000),
	   "a clone is checkpointed in turn, its image under its own pid (%s)", last);

	pid_t all[] = { pid, clone[0], clone[1] };
	rig_kill_all(all, 3);

	/* Host pids: the restore needs the pid free, and says so. */
	r.host_pids = true;
	char app[PATH_MAX], cubin[PATH_MAX];
	rig_cow_app_paths(app, cubin);
	pid_t h = rig_cow_app(&r, app, cubin, "8", "5", 20000);
	rig_files(&r, h, ctl, status);
	e = h > 0 ? rig_ctl(ctl, "checkpoint stop name=h\n", 23) : -1;
	ckd = !e && rig_job_done(&r, h, 60000, last, sizeof(last)) && strstr(last, "done");
	snprintf(image, sizeof(image), "%s/%d/h", r.store, (int)h);
	ok(ckd && rig_verify(image) && inner_pid(h) == h, "a job run with --host-pids has no namespace of its own (%s)",
	   last);
	pid_t got = 0;
	r.restore_mode = NULL;
	e = ckd ? rig_restore(&r, image, &got, st, sizeof(st)) : -1;
	char want[96];
	snprintf(want, sizeof(want), "process %d is running: restoring needs its pid free", (int)h);
	ok(e == EBUSY && strstr(st, want) && rig_alive(h) && rig_verify(image),
	   "its image is not restored while it runs: EBUSY, and status says why; the image stays good");
	if (e != EBUSY)
		diag("%s", st);

	/* Its parent (phos run) stopped, the killed process stays a zombie.
	 * The parent must be stopped before the kill: one still in its wait
	 * when the child ends reaps it before the stop takes hold. */
	pid_t parent = rig_parent(h);
	bool zombie = false;
	if (parent > 1 && !kill(parent, SIGSTOP) && rig_state_within(parent, 'T', 5000)) {
		kill(h, SIGKILL);
		zombie = rig_state_within(h, 'Z', 5000);
	}
	if (!zombie)
		diag("process %d did not stay a zombie under its stopped parent %d", (int)h, (int)parent);
	e = zombie ? rig_restore(&r, image, &got, st, sizeof(st)) : -1;
	snprintf(want, sizeof(want), "process %d has ended, but its parent %d has not reaped it", (int)h, (int)parent);
	ok(e == EBUSY && strstr(st, want), "nor while it is a zombie its parent has not reaped: status names the parent");
	if (e != EBUSY || !strstr(st, want))
		diag("%s", st);
	if (parent > 1)
		kill(parent, SIGCONT);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
