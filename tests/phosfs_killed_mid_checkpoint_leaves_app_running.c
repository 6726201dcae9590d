/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phosfs killed with -9 in the middle of a checkpoint: the job runs in a
 * process of its own and finishes, so the application gets its memory
 * back and keeps running, and the image it was writing is published
 * whole. The earlier image stays intact and verifies, and a new phosfs
 * on the same store shows both and checkpoints the process again.
 */
#include "phosfs_test.h"

int main(void)
{
	rig r;
	rig_require(&r);
	plan(5);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	pid_t pid = rig_counter(&r, 128);
	char out[160], ctl[160], line[256], img[200];
	rig_out(&r, pid, out, sizeof(out));
	snprintf(ctl, sizeof(ctl), "%s/%d/ctl", r.mnt, (int)pid);
	if (!rig_line(out, "count 5", 20000, NULL, 0))
		bail("the counter did not start");
	int e = rig_ctl(ctl, "checkpoint stop name=early\n", 27);
	rig_job_done(&r, pid, 20000, line, sizeof(line));
	snprintf(img, sizeof(img), "%s/%d/early", r.store, (int)pid);
	ok(e == 0 && rig_verify(img), "an earlier checkpoint is made (%s)", line);

	/* The process must connect again before the next job parks it. */
	char status[160], st[4096];
	snprintf(status, sizeof(status), "%s/%d/status", r.mnt, (int)pid);
	for (int i = 0; i < 100 && !(rig_read(status, st, sizeof(st)) && strstr(st, "traced: yes")); i++)
		usleep(50000);
	e = rig_ctl(ctl, "checkpoint stop name=late\n", 26);
	usleep(50000); /* the job is parking or copying now */
	rig_unmount(&r, SIGKILL);
	long c0 = rig_count(out);
	ok(e == 0 && rig_alive(pid) && rig_counts_past(out, c0, 10000), "the application keeps running after phosfs died");
	snprintf(img, sizeof(img), "%s/%d/late", r.store, (int)pid);
	char early[200];
	snprintf(early, sizeof(early), "%s/%d/early", r.store, (int)pid);
	ok(rig_verify(early), "the earlier image is intact and verifies");
	ok(access(img, F_OK) != 0 || rig_verify(img), "the interrupted checkpoint is whole or absent, never half");

	if (rig_mount(&r, NULL))
		bail("phosfs did not mount again");
	for (int i = 0; i < 100 && !(rig_read(status, st, sizeof(st)) && strstr(st, "traced: yes")); i++)
		usleep(50000);
	e = rig_ctl(ctl, "checkpoint stop name=after\n", 27);
	rig_job_done(&r, pid, 20000, line, sizeof(line));
	snprintf(img, sizeof(img), "%s/%d/checkpoints/after", r.mnt, (int)pid);
	ok(e == 0 && rig_verify(img) && rig_alive(pid), "a new phosfs checkpoints it again (%s)", line);
	kill(pid, SIGKILL);
	rig_cleanup(&r);
	return done();
}
