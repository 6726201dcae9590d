/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A store on a full tmpfs: the checkpoint fails with a clear error in
 * status, nothing half-written is left, the process keeps running, and
 * the earlier image in the same store stays intact.
 */
#include "phosfs_test.h"

int main(void)
{
	rig r;
	rig_require(&r);
	plan(4);
	char small[96];
	snprintf(small, sizeof(small), "%s/small", r.dir);
	mkdir(small, 0755);
	if (mount("phos-test", small, "tmpfs", 0, "size=48m") != 0)
		skip_all("cannot mount a tmpfs");
	if (rig_mount(&r, small))
		bail("phosfs did not mount");
	snprintf(r.store, sizeof(r.store), "%s", small);
	pid_t little = rig_counter(&r, 4);
	char out[160], ctl[160], line[256], img[200], status[160], st[4096];
	rig_out(&r, little, out, sizeof(out));
	snprintf(ctl, sizeof(ctl), "%s/%d/ctl", r.mnt, (int)little);
	if (!rig_line(out, "count 5", 20000, NULL, 0))
		bail("the small counter did not start");
	int e = rig_ctl(ctl, "checkpoint stop\n", 16);
	rig_job_done(&r, little, 20000, line, sizeof(line));
	snprintf(img, sizeof(img), "%s/%d/1", small, (int)little);
	ok(e == 0 && rig_verify(img), "a small checkpoint fits (%s)", line);

	pid_t big = rig_counter(&r, 96);
	rig_out(&r, big, out, sizeof(out));
	snprintf(ctl, sizeof(ctl), "%s/%d/ctl", r.mnt, (int)big);
	snprintf(status, sizeof(status), "%s/%d/status", r.mnt, (int)big);
	if (!rig_line(out, "count 5", 20000, NULL, 0))
		bail("the big counter did not start");
	e = rig_ctl(ctl, "checkpoint stop\n", 16);
	rig_job_done(&r, big, 30000, line, sizeof(line));
	rig_read(status, st, sizeof(st));
	char *err = strstr(st, "error: ");
	diag("%.*s", err ? (int)strcspn(err, "\n") : 0, err ? err : "");
	ok(e == 0 && strstr(line, "failed") && err && strstr(err, "No space left on device"),
	   "the checkpoint that does not fit fails, and status says the store is full");
	char dir[200];
	snprintf(dir, sizeof(dir), "%s/%d", small, (int)big);
	DIR *d = opendir(dir);
	int left = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		left += strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strcmp(de->d_name, ".logs");
	if (d)
		closedir(d);
	long c0 = rig_count(out);
	ok(left == 0 && rig_alive(big) && rig_counts_past(out, c0, 5000), "nothing is left behind and the process keeps running");
	ok(rig_verify(img), "the earlier image is intact");
	kill(big, SIGKILL);
	kill(little, SIGKILL);
	rig_unmount(&r, SIGTERM);
	umount2(small, MNT_DETACH);
	rig_cleanup(&r);
	return done();
}
