/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Two ranks that all-reduce in a loop (tests/apps/pair_app with the stub
 * NCCL, tests/apps/libnccl.so.2: each step an ncclAllReduce on their
 * communicator, then kernel `meet`, which waits for the other rank's), so
 * that at almost any moment one rank's step waits inside the device for
 * the other's. Without a cut, quiescing both at once catches one rank
 * launched and the other not, and neither finishes. They meet in device
 * memory rank 0 made and rank 1 imported from its fd, as NCCL's ranks
 * share their buffers. Rank 0 also keeps host memory it made with
 * cuMemCreate (PAIR_HOST_MEM=1, as NCCL makes its host buffers), which
 * its CPU writes and checks each step, and which must come back as host
 * memory.
 *
 * Checkpointed at 100 random moments, with stop, cow and recopy in turn: the cut
 * runs each rank up to the other's count first, so every checkpoint
 * succeeds, within its deadline; status shows the cut (each rank's pid,
 * its communicator and target) and its time as the step "cut". The ranks
 * check every sum, all along. The image holds the shared memory once, as
 * rank 0's object, and records rank 1's import of it. Killed, the job is
 * restored from the last image, and both ranks go on from where it was
 * taken, every sum right: they share the memory again. Checkpointed with
 * cow once more, killed, and restored lazily, they go on again.
 */
#include "phosfs_test.h"
#include "pair_test.h"

#define TRIES 100

int main(void)
{
	rig r;
	rig_require(&r);
	setenv("PAIR_HOST_MEM", "1", 1);
	char out[PATH_MAX], ctl[160], status[160];
	pid_t pid = pair_start(&r, 8, out);
	rig_files(&r, pid, ctl, status);
	ok(pid > 0 && both_past(out, 40, 20000) && rig_traced(&r, pid, 10000),
	   "two ranks all-reduce and meet step after step under the tracer (pid %d)", (int)pid);

	unsigned seed = (unsigned)time(NULL);
	diag("seed %u", seed);
	srand(seed);
	int done_ok = 0, cut_shown = 0;
	double worst = 0;
	char last[256] = "", st[8192], name[32] = "";
	for (int i = 1; i <= TRIES; i++) {
		usleep((useconds_t)(rand() % 50000));
		snprintf(name, sizeof(name), "c%d", i);
		char c[96];
		static const char *proto[] = { "stop", "cow", "recopy" };
		snprintf(c, sizeof(c), "checkpoint %s name=%s\n", proto[i % 3], name);
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		int good = rig_checkpoint(&r, pid, c, last, sizeof(last));
		clock_gettime(CLOCK_MONOTONIC, &b);
		double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
		worst = secs > worst ? secs : worst;
		done_ok += good;
		if (!good && rig_read(status, st, sizeof(st)))
			diag("%s: %s", c, strstr(st, "\nerror: ") ? strstr(st, "\nerror: ") + 1 : last);
		if (rig_read(status, st, sizeof(st)) && strstr(st, "nccl cut: ") && strstr(st, " cut "))
			cut_shown++;
	}
	ok(done_ok == TRIES, "%d of %d checkpoints at random moments succeed (the slowest took %.2f s)", done_ok, TRIES,
	   worst);
	rig_read(status, st, sizeof(st));
	const char *cl = strstr(st, "nccl cut: "), *sl = strstr(st, "steps ms: ");
	diag("%.*s", cl ? (int)strcspn(cl, "\n") : 0, cl ? cl : "");
	diag("%.*s", sl ? (int)strcspn(sl, "\n") : 0, sl ? sl : "");
	ok(cut_shown == TRIES, "status shows each one's cut, and its time as a step");
	ok(!rig_line(out, "WRONG", 0, NULL, 0) && both_past(out, last_step(out, 0) + 20, 20000),
	   "every sum is right all along, and the ranks go on");

	char img[PATH_MAX];
	snprintf(img, sizeof(img), "%s/%d/%s", r.store, (int)pid, name);
	phosimg *im = NULL;
	const phosimg_info *in = phosimg_open(img, &im) ? NULL : phosimg_get_info(im);
	int good = in && in->share_count == 1;
	for (uint32_t i = 0; good && i < in->meta.member_count; i++) /* rank 1 is rank 0's child */
		if (in->meta.members[i].pid == in->shares[0].pid)
			good = in->meta.members[i].ppid == in->objects[in->shares[0].object].pid ? 2 : 0;
	ok(good == 2, "the image holds the shared memory as rank 0's object, and rank 1's import of it as a share");
	phosimg_close(im);

	unsigned at = last_step(out, 0);
	pid_t back = pid;
	r.restore_mode = "eager";
	int restored = rig_kill_restore(&r, &back, rig_verify(img), img, st, sizeof(st));
	ok(restored && both_past(out, at + 40, 20000) && !rig_line(out, "WRONG", 0, NULL, 0),
	   "killed and restored eagerly from the last image, both ranks go on, every sum right (pid %d)", (int)back);

	char again[PATH_MAX];
	snprintf(again, sizeof(again), "%s/%d/again", r.store, (int)back);
	ok(rig_checkpoint(&r, back, "checkpoint cow name=again\n", last, sizeof(last)) && rig_verify(again),
	   "the restored job is checkpointed again with cow");
	at = last_step(out, 0);
	r.restore_mode = "lazy";
	restored = rig_kill_restore(&r, &back, 1, again, st, sizeof(st));
	ok(restored && both_past(out, at + 40, 20000) && !rig_line(out, "WRONG", 0, NULL, 0),
	   "killed and restored lazily from that image, both ranks go on, every sum right (pid %d)", (int)back);
	kill(back, SIGKILL);
	rig_cleanup(&r);
	return done();
}
