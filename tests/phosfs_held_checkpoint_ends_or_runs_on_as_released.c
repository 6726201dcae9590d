/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A checkpoint with hold=SECONDS leaves the tree stopped after its dump,
 * publishes the image, and waits for `release kill` or `release resume`;
 * with no word in time, the tree runs on. This is what a migration needs:
 * the source stays as it was until the target has the image, and runs on
 * if it never gets it.
 *
 * tests/apps/cow_app runs under phos on simcuda. Three recopy checkpoints
 * with hold:
 *   1. released with resume: while held, the process is stopped ('T'),
 *      the image is published and verifies, a second checkpoint and a
 *      release before publication are refused; after the release it runs
 *      on, its device memory exact, and status says how it was released;
 *   2. held with no release: after its 2 s it runs on by itself;
 *   3. released with kill: the process ends, and its image restores with
 *      its device memory exact.
 * A release with nothing held, and kill with hold=, are refused.
 */
#include "phosfs_test.h"

/* Waits up to ms for status to show the hold step. */
static bool holding(const char *status, int ms)
{
	char st[4096];
	for (int i = 0; i <= ms / 20; i++, usleep(20000))
		if (rig_read(status, st, sizeof(st)) && strstr(st, "step: hold\n"))
			return true;
	return false;
}

/* Writes cmd to ctl, opened for reading too, and reads back the answer. */
static void ask(const char *ctl, const char *cmd, char *reply, size_t len)
{
	*reply = 0;
	int fd = open(ctl, O_RDWR);
	if (fd < 0)
		return;
	if (write(fd, cmd, strlen(cmd)) >= 0 || errno) {
		ssize_t n = pread(fd, reply, len - 1, 0);
		reply[n > 0 ? n : 0] = 0;
		reply[strcspn(reply, "\n")] = 0;
	}
	close(fd);
}

int main(void)
{
	rig r;
	rig_require(&r);
	plan(11);
	r.opts[0] = "--chunk";
	r.opts[1] = "256K";
	char out[PATH_MAX], ctl[160], status[160], st[4096], last[256], reply[512], image[PATH_MAX];
	pid_t pid = rig_cow_start(&r, out, ctl, status);
	int nverify = 0;

	ask(ctl, "release resume\n", reply, sizeof(reply));
	char more[256];
	ask(ctl, "checkpoint recopy kill hold=5\n", more, sizeof(more));
	ok(strstr(reply, "error: no checkpoint of process") && strstr(more, "kill and hold= together"),
	   "a release with nothing held, and kill with hold=, are refused (%s; %s)", reply, more);

	/* 1. released with resume */
	rig_ctl(ctl, "checkpoint recopy name=h1 hold=30\n", 34);
	bool held = holding(status, 60000);
	snprintf(image, sizeof(image), "%s/%d/h1", r.store, (int)pid);
	ok(held && rig_state_within(pid, 'T', 2000) && rig_verify(image),
	   "held: the process is stopped, and its image is published and verifies");
	ask(ctl, "checkpoint stop name=other\n", reply, sizeof(reply));
	ok(strstr(reply, "error: ") != NULL, "another checkpoint is refused while one holds the process (%s)", reply);
	ask(ctl, "release resume\n", reply, sizeof(reply));
	int fin = rig_job_done(&r, pid, 30000, last, sizeof(last)) && strstr(last, "done");
	rig_read(status, st, sizeof(st));
	ok(!strncmp(reply, "ok", 2) && fin && strstr(st, "released: resume (it ran on)"),
	   "release resume ends the job, and status says so (%s; %s)", reply, last);
	ok(rig_cow_verified(pid, out, &nverify, 10000) && rig_alive(pid),
	   "the process runs on after the hold, its device memory exact");

	/* 2. no release: the deadline lets it run on */
	rig_ctl(ctl, "checkpoint recopy name=h2 hold=2\n", 33);
	held = holding(status, 60000);
	fin = rig_job_done(&r, pid, 30000, last, sizeof(last)) && strstr(last, "done");
	rig_read(status, st, sizeof(st));
	ok(held && fin && strstr(st, "released: none in time (it ran on)") &&
		   rig_cow_verified(pid, out, &nverify, 10000),
	   "with no release in 2 s, the process runs on by itself, exact");

	/* 3. released with kill */
	rig_ctl(ctl, "checkpoint recopy name=h3 hold=30\n", 34);
	held = holding(status, 60000);
	ask(ctl, "release kill\n", reply, sizeof(reply));
	bool gone = false;
	for (int i = 0; i < 200 && !gone; i++, usleep(25000))
		gone = !rig_alive(pid);
	ok(held && !strncmp(reply, "ok", 2) && gone, "release kill ends the held process (%s)", reply);
	rig_reap();
	snprintf(image, sizeof(image), "%s/%d/h3", r.store, (int)pid);
	ok(rig_verify(image), "its image verifies");
	pid_t again = 0;
	int e = rig_restore(&r, image, &again, st, sizeof(st));
	ok(!e && again > 0, "it restores (%s)", e ? st : "restored");
	if (!e && again > 0) {
		/* It writes to the output it had. */
		ok(rig_cow_verified(again, out, &nverify, 10000), "the restored process's device memory is exact");
		rig_kill_all(&again, 1);
	} else {
		ok(0, "the restored process's device memory is exact");
	}
	rig_cleanup(&r);
	return done();
}
