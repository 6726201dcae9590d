/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Two traced processes that share device memory and an event through
 * legacy CUDA IPC (tests/apps/ipc_app: cuIpcGetMemHandle,
 * cuIpcOpenMemHandle, cuIpcCloseMemHandle, cuIpcGetEventHandle,
 * cuIpcOpenEventHandle), as torch.multiprocessing hands tensors between
 * processes. The driver has no legacy handle for the tracer's VMM memory;
 * the tracer's own handles stand in for it:
 *   1. under the tracer the two run, step after step, each checking what
 *      the other wrote through its mapping;
 *   2-4. checkpointed with stop, cow and recopy while they run, at random
 *      moments: each is published, and the two go on, every check right;
 *   5. the image holds each shared object once, as rank 0's, and rank 1's
 *      mappings of it as shares;
 *   6. killed and restored eagerly from the cow image, both go on, every
 *      check right, and handles made after the restore open too;
 *   7. killed and restored lazily from the recopy image, the same;
 *   8. restored lazily onto the other GPU from the stop image, the same;
 *   9. with rank 0 untraced, rank 1 opens the driver's handles as they
 *      are (the program runs as it would untraced), and a checkpoint is
 *      refused before anything stops, naming the untraced rank 0 beside
 *      rank 1, while both run on.
 * Runs with two simcuda devices.
 */
#include "phosfs_test.h"
#include "pair_test.h"

/* Checkpoints pid with cmd at a random moment; 1 when published. */
static int take(rig *r, pid_t pid, const char *cmd)
{
	char last[256], st[8192], status[160];
	usleep((useconds_t)(rand() % 40000));
	int good = rig_checkpoint(r, pid, cmd, last, sizeof(last));
	snprintf(status, sizeof(status), "%s/%d/status", r->mnt, (int)pid);
	if (!good && rig_read(status, st, sizeof(st)))
		diag("%s: %s", cmd, strstr(st, "\nerror: ") ? strstr(st, "\nerror: ") + 1 : last);
	return good;
}

/* Whether both ranks go past step `past` (plus 40) with no WRONG line. */
static int go_on(const char *out, unsigned past)
{
	return both_past(out, past + 40, 20000) && !rig_line(out, "WRONG", 0, NULL, 0);
}

int main(void)
{
	rig r;
	rig_require(&r);
	setenv("SIMCUDA_DEVICES", "2", 1);
	char app[PATH_MAX], out[PATH_MAX], st[8192], img[3][PATH_MAX];
	rig_app_path("PHOS_IPC_APP", "apps/ipc_app", app);
	plan(9);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	char *const cmd[] = { app, NULL };
	pid_t pid = rig_phos_run(&r, cmd);
	rig_out(&r, pid, out, sizeof(out));
	ok(pid > 0 && go_on(out, 0) && rig_traced(&r, pid, 10000),
	   "two traced processes share memory and an event through CUDA IPC, step after step (pid %d)", (int)pid);

	unsigned seed = (unsigned)time(NULL);
	diag("seed %u", seed);
	srand(seed);
	static const char *proto[] = { "stop", "cow", "recopy" };
	for (int i = 0; i < 3; i++) {
		char c[96];
		snprintf(img[i], sizeof(img[i]), "%s/%d/%s", r.store, (int)pid, proto[i]);
		snprintf(c, sizeof(c), "checkpoint %s name=%s\n", proto[i], proto[i]);
		unsigned at = last_step(out, 0);
		ok(take(&r, pid, c) && rig_verify(img[i]) && go_on(out, at),
		   "checkpointed with %s while they run, both go on, every check right", proto[i]);
	}

	phosimg *im = NULL;
	const phosimg_info *in = phosimg_open(img[1], &im) ? NULL : phosimg_get_info(im);
	int shares = in ? (int)in->share_count : -1, owned = 0;
	for (int i = 0; i < shares; i++) {
		pid_t importer = in->shares[i].pid, owner = in->objects[in->shares[i].object].pid;
		for (uint32_t m = 0; m < in->meta.member_count; m++) /* rank 1 is rank 0's child */
			owned += in->meta.members[m].pid == importer && in->meta.members[m].ppid == owner;
	}
	ok(shares == 2 && owned == 2,
	   "the image holds A and B's slab once, as rank 0's objects, and rank 1's mappings as %d shares", shares);
	phosimg_close(im);

	pid_t back = pid;
	static const struct {
		int img;
		const char *mode, *what;
	} restores[] = {
		{ 1, "eager", "killed and restored eagerly from the cow image, both go on, every check right, handles "
			      "made after the restore too" },
		{ 2, "lazy", "killed and restored lazily from the recopy image, both go on" },
		{ 0, "lazy device=0=1", "killed and restored lazily onto the other GPU from the stop image, both go on" },
	};
	for (int i = 0; i < 3; i++) {
		unsigned at = last_step(out, 0);
		r.restore_mode = restores[i].mode;
		int good = rig_kill_restore(&r, &back, 1, img[restores[i].img], st, sizeof(st)) && go_on(out, at + 25);
		ok(good, "%s (pid %d)", restores[i].what, (int)back);
		if (!good)
			diag("%s", st);
	}
	kill(back, SIGKILL);
	rig_reap();

	setenv("IPC_UNTRACED_EXPORTER", "1", 1);
	pid = rig_phos_run(&r, cmd);
	unsetenv("IPC_UNTRACED_EXPORTER");
	rig_out(&r, pid, out, sizeof(out));
	char ctl[160], status[160], last[256] = "";
	rig_files(&r, pid, ctl, status);
	int ran = pid > 0 && go_on(out, 0);
	char want[96];
	snprintf(want, sizeof(want), "and %d untraced: if one maps the other's device memory", (int)pid);
	int refused = ran && !rig_checkpoint(&r, pid, "checkpoint stop name=x\n", last, sizeof(last)) &&
		      rig_read(status, st, sizeof(st)) && strstr(st, want);
	const char *why = strstr(st, "\nerror: ");
	diag("%.*s", why ? (int)strcspn(why + 1, "\n") : 0, why ? why + 1 : "");
	ok(ran && refused && go_on(out, last_step(out, 0)),
	   "with rank 0 untraced, its handles open as the driver's, and a checkpoint is refused, naming it, "
	   "while both run on");
	kill(pid, SIGKILL);
	rig_cleanup(&r);
	return done();
}
