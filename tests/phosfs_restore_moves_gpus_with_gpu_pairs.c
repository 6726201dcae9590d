/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * `restore DIR device=OLD=NEW` brings a process back on another GPU: the
 * driver is given gpuPairs, phosfs fills the new GPU, and the process
 * runs on with every byte of its device memory.
 *
 * simcuda emulates three GPUs here: two H200s and an H100. cow_app runs
 * on GPU 0 under phos and is checkpointed (stop kill). Then:
 *   - a move onto the H100 is refused (another chip), and one onto GPU 5
 *     (there is none), and a malformed list; nothing is started, and the
 *     image stays good;
 *   - device=0=1 restores it: status names the move, the process's GPU 0
 *     now has GPU 1's UUID (the driver saw the pairs), and cow_app checks
 *     all its device memory against its host copies;
 *   - checkpointed again, its image records the GPUs as the process sees
 *     them (GPU 0 is the machine's GPU 1: the tracer says so at park), and
 *     restored with device=0=1 again, now a GPU mapped to itself (the
 *     explicit pairs path), it checks again.
 */
#include "phosfs_test.h"
#include "simcuda/simcuda.h"

#define H200 "NVIDIA H200 (simcuda)"

/* Byte 15 of the UUID of pid's device 0: simcuda's machine ordinal. */
static int gpu_of(pid_t pid)
{
	unsigned char u[16];
	return simcuda_device_uuid(pid, 0, u) ? -1 : u[15];
}

/* Restores image with the restore command's tail `how`; 0 or an errno,
 * status in st. */
static int restore_with(rig *r, const char *image, const char *how, char *st, size_t len)
{
	char cmd[PATH_MAX + 128];
	snprintf(cmd, sizeof(cmd), "restore %s %s\n", image, how);
	pid_t pid = 0;
	return rig_restore_cmd(r, cmd, &pid, st, len);
}

static int checkpoint_kill(rig *r, pid_t pid, const char *ctl, const char *name, char *image, size_t len)
{
	char c[64], last[256] = "", st[4096] = "";
	int n = snprintf(c, sizeof(c), "checkpoint stop name=%s kill\n", name);
	int e = rig_ctl(ctl, c, (size_t)n);
	int done = !e && rig_job_done(r, pid, 60000, last, sizeof(last)) && strstr(last, "done");
	for (int k = 0; k < 100 && rig_alive(pid); k++)
		usleep(20000);
	snprintf(image, len, "%s/%d/%s", r->store, (int)pid, name);
	if (!done) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%d/status", r->mnt, (int)pid);
		diag("checkpoint %s of %d: %s; %s; its status: %s", name, (int)pid, e ? strerror(e) : "accepted", last,
		     rig_read(path, st, sizeof(st)) ? st : "(none)");
	}
	return done && !rig_alive(pid) && rig_verify(image);
}

int main(void)
{
	setenv("SIMCUDA_DEVICES", "3", 1);
	setenv("SIMCUDA_DEVICE_NAMES", H200 ":" H200 ":NVIDIA H100 (simcuda)", 1);
	rig r;
	rig_require(&r);
	plan(9);
	char out[PATH_MAX], ctl[160], status[160], st[4096], image[PATH_MAX];
	pid_t pid = rig_cow_start(&r, out, ctl, status);
	int nverify = 0;
	ok(gpu_of(pid) == 0 && rig_cow_verified(pid, out, &nverify, 5000), "cow_app runs on GPU 0 and checks");

	ok(checkpoint_kill(&r, pid, ctl, "a", image, sizeof(image)), "checkpoint stop kill: the image verifies");

	int e1 = restore_with(&r, image, "device=0=2", st, sizeof(st));
	int chip = e1 == EINVAL && strstr(st, "only onto the same chip") && !rig_alive(pid);
	if (!chip)
		diag("onto the H100: %s; %s", strerror(e1), st);
	int e2 = restore_with(&r, image, "device=0=5", st, sizeof(st));
	int none = e2 == ENODEV && strstr(st, "this machine has no GPU 5") && !rig_alive(pid);
	if (!none)
		diag("onto GPU 5: %s; %s", strerror(e2), st);
	int e3 = restore_with(&r, image, "device=0=GPU-12", st, sizeof(st));
	int bad = e3 == EINVAL && !rig_alive(pid);
	ok(chip && none && bad && rig_verify(image),
	   "a move onto another chip, onto a GPU this machine lacks, or malformed is refused, and the image stays good");

	int e = restore_with(&r, image, "device=0=1", st, sizeof(st));
	pid = e ? pid : rig_restored(st);
	int back = !e && pid > 0 && rig_alive(pid);
	int named = strstr(st, "moved gpus: 0 (GPU-") && strstr(st, ") -> 1 (GPU-");
	if (!back || !named)
		diag("device=0=1: %s; %s", strerror(e), st);
	ok(back && named, "restore device=0=1 brings it back, and status names the move");
	ok(back && gpu_of(pid) == 1, "the driver moved the process's GPU 0 onto GPU 1 (gpuPairs)");
	ok(back && rig_cow_verified(pid, out, &nverify, 5000), "on GPU 1, every byte of its device memory checks");

	rig_files(&r, pid, ctl, status);
	int again = back && checkpoint_kill(&r, pid, ctl, "b", image, sizeof(image));
	/* The image records the GPU the process is on, not phosfs's GPU 0. */
	phosimg *img = NULL;
	if (again && phosimg_open(image, &img) == 0) {
		const phosimg_info *in = phosimg_get_info(img);
		again = in->meta.device_count == 3 && in->meta.devices[0].uuid[15] == 1 &&
			in->meta.devices[1].uuid[15] == 0;
		if (!again)
			diag("image b records GPU 0 as %d and GPU 1 as %d", in->meta.devices[0].uuid[15],
			     in->meta.device_count > 1 ? in->meta.devices[1].uuid[15] : -1);
		phosimg_close(img);
	}
	e = again ? restore_with(&r, image, "eager device=0=1", st, sizeof(st)) : -1;
	pid = e ? pid : rig_restored(st);
	int self = !e && pid > 0 && rig_alive(pid) && strstr(st, "moved gpus: 0 (GPU-");
	if (!self)
		diag("second restore: %s; %s", e > 0 ? strerror(e) : "not tried", st);
	ok(self, "checkpointed again on GPU 1 (the image says so: its GPUs 0 and 1 swapped) and restored with explicit pairs");
	ok(self && gpu_of(pid) == 1 && rig_cow_verified(pid, out, &nverify, 5000), "it checks again");

	kill(pid, SIGKILL);
	rig_cleanup(&r);
	return done();
}
