/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A job restored long after its checkpoint must not see its monotonic
 * clock jump by the time the image lay in the store: PyTorch's NCCL
 * heartbeat monitor and watchdog time themselves on it, and would take
 * the jump for a hang. CRIU restores a tree into a time namespace of its
 * own whose offsets carry its clocks on from the dump.
 *
 *   - a counter is checkpointed with stop kill; 3 s later it is
 *     restored, and counts on;
 *   - the restored job's time namespace is not this machine's;
 *   - its CLOCK_MONOTONIC offset (/proc/PID/timens_offsets) is about
 *     minus the time between dump and restore: at least the 3 s, and
 *     not much more;
 *   - checkpointed again, and restored 2 s later, its offset has grown
 *     by those 2 s more: the namespace it had is carried on.
 *
 * Skips where the kernel has no time namespaces.
 */
#include "phosfs_test.h"

/* The monotonic offset of pid's time namespace, in seconds; 0 if none
 * is readable. */
static double monotonic_offset(pid_t pid)
{
	char path[64], l[128];
	snprintf(path, sizeof(path), "/proc/%d/timens_offsets", (int)pid);
	FILE *f = fopen(path, "r");
	double off = 0;
	while (f && fgets(l, sizeof(l), f)) {
		char name[32];
		long long s, ns;
		if (sscanf(l, "%31s %lld %lld", name, &s, &ns) == 3 && (!strcmp(name, "monotonic") || !strcmp(name, "1")))
			off = (double)s + (double)ns / 1e9;
	}
	if (f)
		fclose(f);
	return off;
}

static void ns_of(pid_t pid, char *out, size_t len)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/time", (int)pid);
	ssize_t n = readlink(path, out, len - 1);
	out[n > 0 ? n : 0] = 0;
}

/* Checkpoints pid with stop kill as image `name`, waits until it is gone
 * and `later` seconds more, and restores it into *back; whether it then
 * counts on in out (st: the restore's status, last: the checkpoint's). */
static int dump_wait_restore(rig *r, pid_t pid, const char *name, int later, pid_t *back, const char *out, char *last,
			     size_t lastlen, char *st, size_t stlen)
{
	char cmd[64], image[PATH_MAX];
	snprintf(cmd, sizeof(cmd), "checkpoint stop kill name=%s\n", name);
	int dumped = rig_checkpoint(r, pid, cmd, last, lastlen);
	for (int i = 0; i < 250 && rig_alive(pid); i++)
		usleep(20000);
	rig_reap();
	sleep((unsigned)later);
	snprintf(image, sizeof(image), "%s/%d/%s", r->store, (int)pid, name);
	long c0 = rig_count(out);
	return dumped && rig_restore(r, image, back, st, stlen) == 0 && rig_counts_past(out, c0 + 3, 10000);
}

int main(void)
{
	rig r;
	rig_require(&r);
	if (access("/proc/self/ns/time", F_OK))
		skip_all("this kernel has no time namespaces");
	plan(4);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	pid_t p = rig_counter(&r, 8);
	char out[160], last[256], st[4096];
	rig_out(&r, p, out, sizeof(out));
	if (!rig_line(out, "count 3", 30000, NULL, 0))
		bail("the counter did not start");
	pid_t back = 0;
	int on = dump_wait_restore(&r, p, "k", 3, &back, out, last, sizeof(last), st, sizeof(st));
	ok(on, "checkpointed with stop kill and restored 3 s later, the job counts on (%s)", last);
	if (!on)
		diag("%s", st);
	char theirs[64] = "", ours[64] = "";
	if (back > 0)
		ns_of(back, theirs, sizeof(theirs));
	ns_of(getpid(), ours, sizeof(ours));
	ok(on && *theirs && strcmp(theirs, ours), "it has a time namespace of its own (%s; here %s)", theirs, ours);
	double off = back > 0 ? monotonic_offset(back) : 0;
	ok(on && off <= -3.0 && off > -20.0,
	   "its monotonic clock goes on from the dump: offset %.2f s, about minus the time the image lay", off);

	/* Again, from the restored job. */
	pid_t back2 = 0;
	int again = on && dump_wait_restore(&r, back, "k2", 2, &back2, out, last, sizeof(last), st, sizeof(st));
	double off2 = back2 > 0 ? monotonic_offset(back2) : 0;
	ok(again && off2 <= off - 2.0 && off2 > off - 20.0,
	   "checkpointed again and restored 2 s later, it counts on, its offset %.2f s (was %.2f s)", off2, off);
	if (!again)
		diag("%s %s", last, st);
	if (back2 > 0)
		kill(rig_job_root(back2), SIGKILL);
	rig_unmount(&r, SIGTERM);
	rig_cleanup(&r);
	return done();
}
