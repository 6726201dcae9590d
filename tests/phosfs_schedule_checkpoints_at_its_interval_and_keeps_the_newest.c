/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * `schedule` on /<pid>/ctl takes checkpoints of a job at its interval
 * and keeps the newest N: every=2 keep=2 on examples/counter takes one
 * every 2 s and leaves two numbered images (and the one latest names);
 * status shows the interval and why. every=auto sets Young and Daly's
 * interval from what the job's checkpoints cost; off ends it. Bad
 * durations and words are refused, saying why. Needs root and FUSE.
 */
#include <math.h>

#include "phosfs_test.h"

/* The numbered checkpoints in dir; the highest in *top. */
static int numbered(const char *dir, int *top)
{
	DIR *d = opendir(dir);
	int n = 0;
	*top = 0;
	for (struct dirent *de; d && (de = readdir(d));) {
		char *end;
		long v = strtol(de->d_name, &end, 10);
		if (*de->d_name >= '1' && *de->d_name <= '9' && !*end) {
			n++;
			*top = v > *top ? (int)v : *top;
		}
	}
	if (d)
		closedir(d);
	return n;
}

/* The answer to a write of cmd to ctl (opened for reading too). */
static int answer(const char *ctl, const char *cmd, char *out, size_t len)
{
	int fd = open(ctl, O_RDWR);
	if (fd < 0)
		return errno;
	int e = write(fd, cmd, strlen(cmd)) < 0 ? errno : 0;
	ssize_t n = read(fd, out, len - 1);
	out[n > 0 ? n : 0] = 0;
	close(fd);
	return e;
}

int main(void)
{
	rig r;
	rig_require(&r);
	plan(6);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	pid_t pid = rig_counter(&r, 16);
	char out[160], ctl[160], status[160], st[8192], dir[PATH_MAX], reply[1024];
	rig_out(&r, pid, out, sizeof(out));
	rig_files(&r, pid, ctl, status);
	snprintf(dir, sizeof(dir), "%s/%d", r.store, (int)pid);
	if (!rig_line(out, "count 3", 20000, NULL, 0) || !rig_traced(&r, pid, 10000))
		bail("the counter did not start");

	static const struct {
		const char *cmd, *says;
	} bad[] = {
		{ "schedule\n", "needs every=" },
		{ "schedule every=5x\n", "bad duration '5x'" },
		{ "schedule every=0\n", "bad duration '0'" },
		{ "schedule every=auto keep=0\n", "bad keep '0'" },
		{ "schedule every=10 mtbf=1h\n", "mtbf= is for every=auto" },
		{ "schedule every=10 every=20\n", "repeated word 'every=20'" },
	};
	int refused = 0;
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		int e = answer(ctl, bad[i].cmd, reply, sizeof(reply));
		if (e == EINVAL && strstr(reply, bad[i].says))
			refused++;
		else
			diag("%s: errno %d, '%s'", bad[i].cmd, e, reply);
	}
	ok(refused == (int)(sizeof(bad) / sizeof(*bad)), "bad schedules are refused with EINVAL, saying what is wrong");

	if (answer(ctl, "schedule every=2 keep=2 stop\n", reply, sizeof(reply)))
		bail("schedule refused: %s", reply);
	rig_read(status, st, sizeof(st));
	ok(strstr(st, "checkpoint interval s: 2\n") && strstr(st, "checkpoint interval why: fixed\n"),
	   "status shows the interval and why");
	int top = 0, n = 0;
	for (int i = 0; i < 150 && top < 4; i++, usleep(100000))
		n = numbered(dir, &top);
	usleep(500000); /* the last one's pruning */
	n = numbered(dir, &top);
	char latest[PATH_MAX + 16], link[64] = "";
	snprintf(latest, sizeof(latest), "%s/latest", dir);
	ssize_t l = readlink(latest, link, sizeof(link) - 1);
	link[l > 0 ? l : 0] = 0;
	ok(top >= 4 && n == 2 && atoi(link) == top,
	   "it took a checkpoint every 2 s (4 in 15 s: the newest %d) and kept the newest 2 (%d there), latest -> %s", top,
	   n, link);
	rig_read(status, st, sizeof(st));
	ok(strstr(st, "scheduled checkpoints: ") && rig_stat(st, "scheduled checkpoints: ") >= 4,
	   "status counts them (%g taken)", rig_stat(st, "scheduled checkpoints: "));

	/* auto: from the cost of the job's last checkpoint. */
	if (answer(ctl, "schedule every=auto mtbf=1000\n", reply, sizeof(reply)))
		bail("schedule every=auto refused: %s", reply);
	rig_read(status, st, sizeof(st));
	double t = rig_stat(st, "checkpoint interval s: "), c = rig_stat(st, "cost ");
	double want = sqrt(2 * c * 1000);
	want = want < 10 ? 10 : want;
	ok(strstr(st, "Young and Daly") && c > 0 && fabs(t - want) <= 1,
	   "every=auto: Young and Daly's interval from the job's measured cost (%.3f s, MTBF 1000 s): %.0f s", c, t);

	if (answer(ctl, "schedule off\n", reply, sizeof(reply)))
		bail("schedule off refused: %s", reply);
	int before = 0, after = 0;
	numbered(dir, &before);
	sleep(3);
	numbered(dir, &after);
	rig_read(status, st, sizeof(st));
	ok(!strstr(st, "checkpoint interval") && after == before,
	   "schedule off ends it: no interval in status, no checkpoint in 3 s");
	kill(pid, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
