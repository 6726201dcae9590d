/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * While a lazy restore is still bringing a process's device memory back,
 * /<pid>/status says so: the process is "restoring", its tracer is served
 * by the restore (it is not registered with phosfs until then), and its
 * member line says gpu=restoring rather than untraced. Once the restore
 * is over, the tracer is back: "traced: yes", gpu=traced, and its device
 * bytes are shown. A checkpoint asked before then waits for the restore
 * to end and takes the process through its tracer: asked at once, its
 * tree would look untraced, and the driver would copy memory still being
 * filled.
 *
 * The fill is slowed down (simcuda's $SIMCUDA_H2D_MBPS, in phosfs alone,
 * with two fill threads) so that the 32 MiB of examples/counter take
 * seconds to come back. Needs root, FUSE and CRIU.
 */
#include "phosfs_test.h"

/* Waits up to ms for the status at path to hold every one of want (NULL
 * ended); the last status read is left in st. */
static int status_says(const char *path, const char *const *want, int ms, char *st, size_t len)
{
	for (int t = 0; t <= ms; t += 50) {
		int all = rig_read(path, st, len) != NULL;
		for (int i = 0; all && want[i]; i++)
			all = strstr(st, want[i]) != NULL;
		if (all)
			return 1;
		usleep(50000);
	}
	return 0;
}

int main(void)
{
	rig r;
	rig_require(&r);
	r.fs_env = "SIMCUDA_H2D_MBPS=4";
	r.opts[0] = "--fill-threads";
	r.opts[1] = "2";
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	plan(5);
	pid_t pid = rig_counter(&r, 32);
	char out[PATH_MAX], ctl[160], status[160], st[8192], last[256] = "";
	rig_out(&r, pid, out, sizeof(out));
	rig_files(&r, pid, ctl, status);
	int up = pid > 0 && rig_line(out, "count 3", 20000, NULL, 0);
	const char *traced[] = { "traced: yes", "gpu=traced", "device bytes: ", NULL };
	up = up && status_says(status, traced, 5000, st, sizeof(st));
	char image[PATH_MAX];
	snprintf(image, sizeof(image), "%s/%d/a", r.store, (int)pid);
	const char cmd[] = "checkpoint stop name=a kill\n";
	int saved = up && rig_ctl(ctl, cmd, sizeof(cmd) - 1) == 0 && rig_job_done(&r, pid, 60000, last, sizeof(last)) &&
		    strstr(last, "done");
	for (int k = 0; k < 100 && pid > 0 && rig_alive(pid); k++)
		usleep(20000);
	rig_reap();
	saved = saved && rig_verify(image);
	if (!saved)
		diag("checkpoint: %s; status: %s", last, st);
	ok(saved, "examples/counter, traced, is checkpointed (stop kill)");

	int e = saved ? rig_restore(&r, image, &pid, st, sizeof(st)) : -1;
	int back = e == 0 && rig_alive(pid);
	rig_files(&r, pid, ctl, status);
	const char *during[] = { "state: restoring\n", "traced: restoring\n", "gpu=restoring", NULL };
	int shown = back && status_says(status, during, 0, st, sizeof(st));
	/* The restore must still be under way for the look to mean anything. */
	char root[8192];
	char rootst[160];
	snprintf(rootst, sizeof(rootst), "%s/status", r.mnt);
	int underway = back && rig_read(rootst, root, sizeof(root)) && strstr(root, "job: restore");
	if (!shown || !underway)
		diag("restore: %s; under way: %d; status: %s", e > 0 ? strerror(e) : "not tried", underway, st);
	ok(shown && underway,
	   "while its lazy restore fills, status says the process is restoring and its tracer is the restore's");

	/* Asked now, a checkpoint would find the tracer unregistered, and the
	 * driver would copy memory still being filled: it waits. */
	const char early[] = "checkpoint stop name=b\n";
	int e2 = back ? rig_ctl(ctl, early, sizeof(early) - 1) : -1;
	char w[8192] = "";
	int waiting = e2 == 0 && rig_read(status, w, sizeof(w)) && strstr(w, "step: waiting\n");
	int taken = e2 == 0 && rig_job_done(&r, pid, 60000, last, sizeof(last)) && strstr(last, "done");
	int over = waiting && rig_read(rootst, root, sizeof(root)) && strstr(root, "job: none") &&
		   strstr(root, "fully restored ms: ");
	char b[PATH_MAX];
	snprintf(b, sizeof(b), "%s/%d/b", r.store, (int)pid);
	phosimg *img = NULL;
	uint64_t bytes = 0;
	if (taken && rig_verify(b) && phosimg_open(b, &img) == 0) {
		bytes = phosimg_get_info(img)->raw_bytes;
		phosimg_close(img);
	}
	if (!over || !taken || bytes < (32u << 20))
		diag("checkpoint during the restore: %s; restore over: %d; %s; %llu device bytes in the image",
		     e2 > 0 ? strerror(e2) : e2 ? "not tried" : "accepted", over, last, (unsigned long long)bytes);
	ok(over && taken && bytes >= (32u << 20),
	   "a checkpoint asked while it is restoring is accepted at once, waits for the restore to end, then takes it "
	   "through its tracer");

	int again = taken && status_says(status, traced, 10000, st, sizeof(st)) && !strstr(st, "restoring");
	if (!again)
		diag("after the restore and the checkpoint: %s", st);
	ok(again, "its tracer is registered again: traced, with its device bytes");

	kill(pid, SIGUSR1);
	ok(again && rig_line(out, "verify ok", 20000, NULL, 0), "and the counter's device memory checks");
	kill(pid, SIGKILL);
	rig_cleanup(&r);
	return done();
}
