/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A checkpoint of two ranks that share device memory (tests/apps/pair_app
 * with the stub NCCL: rank 1 maps memory rank 0 made and exported) that
 * fails after both have parked and let go of their memory: rank 0 keeps
 * an io_uring ring (PAIR_RING=1, let through with PHOS_ALLOW_IO_URING=1),
 * which CRIU's dump cannot take. Each failure must give every process
 * its memory back, the import and the owner's exported fds included, and
 * leave nothing published:
 *   - stop, cow and recopy each fail, saying CRIU's dump failed;
 *   - both ranks go on after each, every sum right (they still share the
 *     memory: otherwise they could not meet);
 *   - no image is published.
 */
#include "phosfs_test.h"
#include "pair_test.h"

int main(void)
{
	rig r;
	rig_require(&r);
	setenv("PAIR_RING", "1", 1);
	setenv("PHOS_ALLOW_IO_URING", "1", 1);
	char out[PATH_MAX], ctl[160], status[160], st[8192], last[256] = "";
	pid_t pid = pair_start(&r, 4, out);
	rig_files(&r, pid, ctl, status);
	ok(pid > 0 && both_past(out, 40, 20000) && rig_traced(&r, pid, 10000) &&
		   !rig_line(out, "rank 0: no io_uring ring", 0, NULL, 0),
	   "two ranks that share device memory run under the tracer, rank 0 with an io_uring ring (pid %d)", (int)pid);

	static const char *proto[] = { "stop", "cow", "recopy" };
	int failed = 0, went_on = 0;
	for (int i = 0; i < 3; i++) {
		char c[96];
		snprintf(c, sizeof(c), "checkpoint %s name=f%d\n", proto[i], i);
		int good = rig_checkpoint(&r, pid, c, last, sizeof(last));
		rig_read(status, st, sizeof(st));
		const char *err = strstr(st, "\nerror: ");
		diag("%s: %.*s", proto[i], err ? (int)strcspn(err + 1, "\n") : 0, err ? err + 1 : "");
		failed += !good && err && strstr(err, "criu dump failed");
		unsigned at = last_step(out, 0) < last_step(out, 1) ? last_step(out, 0) : last_step(out, 1);
		went_on += both_past(out, at + 40, 20000) && !rig_line(out, "WRONG", 0, NULL, 0);
	}
	ok(failed == 3, "stop, cow and recopy each fail in CRIU's dump, after the park (%d of 3)", failed);
	ok(went_on == 3, "both ranks go on after each failure, every sum right: they share their memory again");
	char img[PATH_MAX];
	int none = 1;
	for (int i = 0; i < 3; i++) {
		snprintf(img, sizeof(img), "%s/%d/f%d", r.store, (int)pid, i);
		none &= access(img, F_OK) != 0;
	}
	ok(none, "no image is published");
	kill(pid, SIGKILL);
	rig_cleanup(&r);
	return done();
}
