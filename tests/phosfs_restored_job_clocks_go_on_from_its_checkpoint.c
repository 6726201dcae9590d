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
	char out[160], last[256], st[4096], image[PATH_MAX];
	rig_out(&r, p, out, sizeof(out));
	if (!rig_line(out, "count 3", 30000, NULL, 0))
		bail("the counter did not start");
	int dumped = rig_checkpoint(&r, p, "checkpoint stop kill name=k\n", last, sizeof(last));
	for (int i = 0; i < 250 && rig_alive(p); i++)
		usleep(20000);
	rig_reap();
	sleep(3);
	snprintf(image, sizeof(image), "%s/%d/k", r.store, (int)p);
	pid_t back = 0;
	long c0 = rig_count(out);
	int on = dumped && rig_restore(&r, image, &back, st, sizeof(st)) == 0 && rig_counts_past(out, c0 + 3, 10000);
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
	int again = on && rig_checkpoint(&r, back, "checkpoint stop kill name=k2\n", last, sizeof(last));
	for (int i = 0; i < 250 && rig_alive(back); i++)
		usleep(20000);
	rig_reap();
	sleep(2);
	snprintf(image, sizeof(image), "%s/%d/k2", r.store, (int)back);
	pid_t back2 = 0;
	c0 = rig_count(out);
	again = again && rig_restore(&r, image, &back2, st, sizeof(st)) == 0 && rig_counts_past(out, c0 + 3, 10000);
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
