/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A lazily restored process runs before its device memory is back, and
 * every way it reaches that memory waits for it: a kernel launched with
 * cuLaunchKernel, cuLaunchKernelEx (a cluster dimension, the cooperative
 * attribute) or cuLaunchCooperativeKernel, and the queries of what lies
 * at an address (cuPointerGetAttribute, cuPointerGetAttributes), which
 * the driver answers only where memory is mapped. Triton's launchers ask
 * cuPointerGetAttribute of every tensor before they launch with it, so
 * torch.compile's first step after a lazy restore failed with "invalid
 * argument" until the query waited too. tests/apps/launch_app does all
 * of it each step, checking against host copies.
 *   1. it runs under the tracer;
 *   2. checkpointed with cow, killed, and restored lazily with its fill
 *      slowed down (simcuda's $SIMCUDA_H2D_MBPS, in phosfs alone), it
 *      runs on at once: its queries and launches waited for the buffers
 *      they touch, and its memory is what it should be;
 * With managed memory (launch_app --managed), which cannot be parked:
 *   3. a cow checkpoint is refused, status saying why;
 *   4. a checkpoint that names no protocol is a stop, which leaves the
 *      memory where it is for the driver's checkpoint; the driver refuses
 *      it (as driver 580 refuses managed memory, measured on an H200): the
 *      checkpoint fails saying so, nothing is published, and the process
 *      runs on intact, freeing its managed memory (which the tracer
 *      leaves to the driver) and making it again.
 */
#include "phosfs_test.h"

static pid_t up(rig *r, char *app, char *cubin, char *more, char *out)
{
	char *const cmd[] = { app, cubin, more, NULL };
	pid_t pid = rig_phos_run(r, cmd);
	rig_out(r, pid, out, PATH_MAX);
	return pid > 0 && rig_line(out, "step 50", 20000, NULL, 0) && rig_traced(r, pid, 10000) ? pid : -1;
}

int main(void)
{
	rig r;
	rig_require(&r);
	char app[PATH_MAX], cubin[PATH_MAX], out[PATH_MAX], ctl[160], status[160], st[8192], last[256];
	rig_app_path("PHOS_LAUNCH_APP", "apps/launch_app", app);
	snprintf(cubin, sizeof(cubin), "%s/cow.cubin", test_path("PHOS_KERNELS", "../kernels"));
	if (access(cubin, R_OK))
		skip_all("tests/kernels/cow.cubin is not built");
	plan(4);
	r.fs_env = "SIMCUDA_H2D_MBPS=8";
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	int nverify = 0;
	pid_t pid = up(&r, app, cubin, NULL, out);
	ok(pid > 0 && rig_cow_verified(pid, out, &nverify, 5000),
	   "launch_app launches each way, and asks where its buffers are, under the tracer");

	char img[PATH_MAX];
	snprintf(img, sizeof(img), "%s/%d/c", r.store, (int)pid);
	r.restore_mode = "lazy";
	int taken = rig_checkpoint(&r, pid, "checkpoint cow name=c\n", last, sizeof(last));
	int back = rig_kill_restore(&r, &pid, taken && rig_verify(img), img, st, sizeof(st));
	int early = back && rig_line(out, "launch_app:", 0, NULL, 0) == 0;
	int verified = back && rig_cow_verified(pid, out, &nverify, 10000);
	int filled = back && rig_restore_done(&r, 30000, st, sizeof(st));
	double waits = rig_stat(st, "on-demand waits: ");
	ok(early && verified && filled && waits > 0,
	   "restored lazily, it runs on at once, its queries and launches waiting for what they touch (%.0f waits), "
	   "and its memory is intact",
	   waits);
	if (!(early && verified && filled))
		rig_line(out, "launch_app:", 0, last, sizeof(last)), diag("taken %d back %d: %s", taken, back, last);
	kill(pid, SIGKILL);
	rig_reap();

	pid = up(&r, app, cubin, "--managed", out);
	nverify = 0; /* another output file */
	rig_files(&r, pid, ctl, status);
	int e = pid > 0 ? rig_ctl(ctl, "checkpoint cow\n", 15) : 0;
	int refused = e == EOPNOTSUPP && rig_read(status, st, sizeof(st)) &&
		      strstr(st, "stop-only: it uses managed memory, which cannot be parked\n");
	const char *why = strstr(st, "\nstop-only: ");
	diag("%.*s", why ? (int)strcspn(why + 1, "\n") : 0, why ? why + 1 : "");
	ok(refused && rig_cow_verified(pid, out, &nverify, 5000),
	   "with managed memory, a cow checkpoint is refused (%s), status saying why, and the process runs on",
	   strerror(e));

	snprintf(img, sizeof(img), "%s/%d/s", r.store, (int)pid);
	taken = rig_checkpoint(&r, pid, "checkpoint name=s\n", last, sizeof(last));
	rig_read(status, st, sizeof(st));
	why = strstr(st, "\nerror: ");
	diag("%.*s", why ? (int)strcspn(why + 1, "\n") : 0, why ? why + 1 : "");
	ok(!taken && strstr(st, "checkpoint stop name=s: failed") && strstr(st, "managed memory") &&
		   access(img, F_OK) != 0 && rig_line(out, "step 250", 30000, NULL, 0) &&
		   rig_cow_verified(pid, out, &nverify, 5000),
	   "a checkpoint that names no protocol is a stop, which the driver refuses for managed memory: it fails "
	   "saying so, publishes nothing, and the process runs on intact, freeing and making its managed memory "
	   "again");
	kill(pid, SIGKILL);
	rig_cleanup(&r);
	return done();
}
