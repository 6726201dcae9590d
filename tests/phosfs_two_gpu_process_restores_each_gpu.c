/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * One process using two GPUs is checkpointed with every protocol (stop,
 * cow, recopy) and restored: each GPU's memory comes back to its own GPU,
 * at its old addresses, byte for byte; and restored with the GPUs swapped
 * (device=0=1,1=0), it runs on with each buffer on the other GPU.
 *
 * simcuda emulates two GPUs. tests/apps/two_gpu_app keeps a buffer on
 * each, with memsets, host copies, peer copies both ways and, with peer
 * access enabled, plain copies between the GPUs, and a host copy of each; on SIGUSR1 it checks both, and prints the UUIDs behind
 * its ordinals.
 */
#include "phosfs_test.h"

/* Asks the app to check, and returns its "verify ok" line (empty when it
 * failed or did not answer). */
static int verified(pid_t pid, const char *out, int *nverify, char *line, size_t len)
{
	*line = 0;
	if (!rig_cow_verified(pid, out, nverify, 5000))
		return 0;
	FILE *f = fopen(out, "r");
	char l[256];
	while (f && fgets(l, sizeof(l), f))
		if (!strncmp(l, "verify ok", 9))
			snprintf(line, len, "%.*s", (int)strcspn(l, "\n"), l);
	if (f)
		fclose(f);
	return *line != 0;
}

/* Whether the image has objects on both GPUs. */
static int on_both(const char *image)
{
	phosimg *img = NULL;
	if (phosimg_open(image, &img))
		return 0;
	const phosimg_info *in = phosimg_get_info(img);
	int seen[2] = { 0, 0 };
	for (uint32_t i = 0; i < in->object_count; i++)
		if (in->objects[i].device < 2)
			seen[in->objects[i].device] = 1;
	int ok = seen[0] && seen[1] && in->meta.device_count == 2;
	phosimg_close(img);
	return ok;
}

int main(void)
{
	setenv("SIMCUDA_DEVICES", "2", 1);
	rig r;
	rig_require(&r);
	char app[PATH_MAX];
	rig_app_path("PHOS_TWO_GPU_APP", "apps/two_gpu_app", app);
	plan(7);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	unsigned seed = (unsigned)time(NULL);
	diag("seed %u", seed);
	char seed_s[16];
	snprintf(seed_s, sizeof(seed_s), "%u", seed);
	char *const cmd[] = { app, "8", seed_s, NULL };
	pid_t pid = rig_phos_run(&r, cmd);
	char out[PATH_MAX], ctl[160], status[160], st[4096] = "", line[256], first[256] = "";
	rig_out(&r, pid, out, sizeof(out));
	snprintf(ctl, sizeof(ctl), "%s/%d/ctl", r.mnt, (int)pid);
	snprintf(status, sizeof(status), "%s/%d/status", r.mnt, (int)pid);
	int up = pid > 0 && rig_line(out, "ops 200", 20000, NULL, 0);
	for (int i = 0; i < 100 && up && !(rig_read(status, st, sizeof(st)) && strstr(st, "traced: yes")); i++)
		usleep(50000);
	int nverify = 0;
	/* Peer access on: it also copies between the GPUs with plain copies,
	 * which reach the tracer's memory only through it. */
	up = up && strstr(st, "traced: yes") && rig_line(out, "peer access on", 0, NULL, 0) &&
	     verified(pid, out, &nverify, first, sizeof(first));
	ok(up, "two_gpu_app runs under the tracer on two GPUs, with peer access, and checks (%s)", first);
	if (!up) {
		char said[2048] = "";
		diag("two_gpu_app said: %s", rig_read(out, said, sizeof(said)) ? said : "nothing");
		bail("two_gpu_app did not start (%s)", out);
	}

	static const char *const protos[] = { "stop", "cow", "recopy" };
	for (int i = 0; i < 3; i++) {
		usleep((useconds_t)(rand_r(&seed) % 200000));
		char c[64], last[256] = "", image[PATH_MAX];
		int n = snprintf(c, sizeof(c), "checkpoint %s name=%s\n", protos[i], protos[i]);
		rig_files(&r, pid, ctl, status);
		int done = rig_ctl(ctl, c, (size_t)n) == 0 && rig_job_done(&r, pid, 60000, last, sizeof(last)) &&
			   strstr(last, "done");
		snprintf(image, sizeof(image), "%s/%d/%s", r.store, (int)pid, protos[i]);
		int img = done && rig_verify(image) && on_both(image);
		int live = done && verified(pid, out, &nverify, line, sizeof(line));
		int back = rig_kill_restore(&r, &pid, img, image, st, sizeof(st));
		int again = back && verified(pid, out, &nverify, line, sizeof(line));
		ok(done && img && live && again,
		   "%s: the image holds memory of both GPUs, and the restore checks on each (%s)", protos[i], line);
		if (!(done && img && live && again))
			diag("done=%d image=%d live=%d back=%d: %s; %s", done, img, live, back, last, st);
	}

	/* Swapped: GPU 0's memory goes to GPU 1 and back. */
	char c[] = "checkpoint stop name=swap kill\n", last[256] = "", image[PATH_MAX];
	rig_files(&r, pid, ctl, status);
	int stopped = rig_ctl(ctl, c, sizeof(c) - 1) == 0 && rig_job_done(&r, pid, 60000, last, sizeof(last)) &&
		   strstr(last, "done");
	for (int k = 0; k < 100 && rig_alive(pid); k++)
		usleep(20000);
	rig_reap();
	snprintf(image, sizeof(image), "%s/%d/swap", r.store, (int)pid);
	char cmd2[PATH_MAX + 64];
	snprintf(cmd2, sizeof(cmd2), "restore %s device=0=1,1=0\n", image);
	int e = stopped ? rig_restore_cmd(&r, cmd2, &pid, st, sizeof(st)) : -1;
	int moved = !e && rig_alive(pid) && strstr(st, "moved gpus: 0 (") && strstr(st, ") -> 1 (") &&
		    strstr(st, "1 (GPU-") && strstr(st, ") -> 0 (");
	ok(moved, "restored with device=0=1,1=0: status names both moves");
	if (!moved)
		diag("stopped=%d e=%d: %s; %s", stopped, e, last, st);
	/* Its ordinal 0 is now the machine's GPU 1, and 1 is GPU 0. */
	int swapped = moved && verified(pid, out, &nverify, line, sizeof(line)) &&
		      strstr(line, "-000000000001 GPU-") && strstr(line, "-000000000000");
	ok(swapped, "with the GPUs swapped, every byte of both buffers checks (%s)", line);

	kill(pid, SIGKILL);
	rig_reap();

	/* Without peer access, a plain copy between the GPUs is the driver's
	 * peer copy for cuMemAlloc memory; the tracer's memory needs it made
	 * one explicitly. Checked live and after a checkpoint and restore. */
	char *const cmd3[] = { app, "8", seed_s, "nopeer", NULL };
	pid = rig_phos_run(&r, cmd3);
	rig_out(&r, pid, out, sizeof(out));
	snprintf(ctl, sizeof(ctl), "%s/%d/ctl", r.mnt, (int)pid);
	nverify = 0;
	int off = pid > 0 && rig_line(out, "ops 200", 20000, NULL, 0) && rig_line(out, "peer access off", 0, NULL, 0) &&
		  verified(pid, out, &nverify, line, sizeof(line));
	char c3[] = "checkpoint stop name=nopeer kill\n";
	int stopped3 = off && rig_ctl(ctl, c3, sizeof(c3) - 1) == 0 &&
		       rig_job_done(&r, pid, 60000, last, sizeof(last)) && strstr(last, "done");
	snprintf(image, sizeof(image), "%s/%d/nopeer", r.store, (int)pid);
	for (int k = 0; k < 100 && stopped3 && rig_alive(pid); k++)
		usleep(20000);
	int back3 = stopped3 && !rig_restore(&r, image, &pid, st, sizeof(st)) &&
		    verified(pid, out, &nverify, line, sizeof(line));
	ok(off && back3, "without peer access, plain copies between the GPUs run and check, before and after a restore (%s)",
	   line);
	if (!(off && back3)) {
		char said[2048] = "";
		diag("off=%d stopped=%d: %s; it said: %s", off, stopped3, st, rig_read(out, said, sizeof(said)) ? said : "");
	}
	kill(pid, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
