/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Two traced processes that block on each other (tests/apps/pair_app, the
 * pattern of two ranks in an all-reduce): rank 1 is held on the host, so
 * rank 0 waits for it inside the device. A checkpoint of the pair cannot
 * quiesce rank 0, whose work cannot end while rank 1 is stopped.
 *
 * It must fail within its deadline, name the process and what holds it,
 * publish nothing, and leave both running: when rank 1 is let go, both
 * go on and every result they check is right.
 *
 *   1. rank 0 waits in cuMemcpyDtoH (a call the tracer gates), with
 *      phosfs --checkpoint-timeout 0.5 and `checkpoint stop`: the error
 *      names the thread and the call;
 *   2. rank 0 waits in cuStreamSynchronize, `checkpoint cow timeout=1`:
 *      the error says its device work did not finish;
 *   3. the pair untraced (PHOS_TRACE=0): the checkpoint is refused at
 *      once, naming both (rank 1 maps rank 0's memory: the driver would
 *      checkpoint it, and could not restore it), and nothing is locked;
 *   4. untraced with NCCL loaded (tests/apps/libnccl.so.2): the same;
 *   5. traced with NCCL (the stub; the ranks all-reduce each step on a
 *      communicator of 2): /<pid>/nccl of each rank lists it under one
 *      name, with the operations it issued, before and after a
 *      checkpoint that fails in time.
 *
 * Each waits at most its deadline plus the time the job takes to start
 * and end.
 */
#include "phosfs_test.h"
#include "pair_test.h"

/* Holds rank 1 (SIGUSR1 to rank 0) and waits until it says so, and a
 * little more, so that rank 0 waits for it in the device. */
static int hold(pid_t pid, const char *out, int n)
{
	kill(pid, SIGUSR1);
	char want[32];
	snprintf(want, sizeof(want), "rank 1 holds");
	for (int t = 0; t <= 10000; t += 50, usleep(50000)) {
		FILE *f = fopen(out, "r");
		char l[256];
		int k = 0;
		while (f && fgets(l, sizeof(l), f))
			k += !strncmp(l, want, strlen(want));
		if (f)
			fclose(f);
		if (k >= n) {
			usleep(200000);
			return 1;
		}
	}
	return 0;
}

/* Writes cmd to pid's ctl and waits for its job: status's "last job"
 * and "error" lines into last, the seconds it took into *secs. */
static int checkpoint(rig *r, pid_t pid, const char *cmd, char *last, size_t len, double *secs)
{
	char ctl[160], status[160];
	rig_files(r, pid, ctl, status);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	int e = rig_ctl(ctl, cmd, strlen(cmd));
	int ended = !e && rig_job_done(r, pid, 30000, last, len);
	clock_gettime(CLOCK_MONOTONIC, &b);
	char st[4096];
	const char *er = rig_read(status, st, sizeof(st)) ? strstr(st, "\nerror: ") : NULL;
	size_t at = strlen(last);
	if (er)
		snprintf(last + at, len - at, "; %.*s", (int)strcspn(er + 1, "\n"), er + 1);
	*secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	return ended;
}

/* Whether the store holds no image of pid. */
static int nothing_published(rig *r, pid_t pid)
{
	char dir[200];
	snprintf(dir, sizeof(dir), "%s/%d", r->store, (int)pid);
	DIR *d = opendir(dir);
	int n = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		n += de->d_name[0] != '.' && strcmp(de->d_name, "latest");
	if (d)
		closedir(d);
	return n == 0;
}

/* pid's first child (rank 1), from /proc; 0 if none. */
static pid_t first_child(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	FILE *f = fopen(path, "r");
	int c = 0;
	if (f && fscanf(f, "%d", &c) != 1)
		c = 0;
	if (f)
		fclose(f);
	return (pid_t)c;
}

/* The first line of pid's /nccl into line. */
static int nccl_line(rig *r, pid_t pid, char *line, size_t len)
{
	char path[200], buf[4096];
	snprintf(path, sizeof(path), "%s/%d/nccl", r->mnt, (int)pid);
	if (!rig_read(path, buf, sizeof(buf)) || !*buf)
		return 0;
	snprintf(line, len, "%.*s", (int)strcspn(buf, "\n"), buf);
	return 1;
}

/* Whether lines a and b ("NAME RANK SIZE OPS") name one communicator of
 * size 2, ranks ra and rb, each past `past` operations. */
static int same_comm(const char *a, const char *b, int ra, int rb, unsigned past)
{
	char na[32], nb[32], extra[16];
	int xa, xb, sa, sb;
	unsigned long long oa, ob;
	return sscanf(a, "%31s %d %d %llu %15s", na, &xa, &sa, &oa, extra) == 4 &&
	       sscanf(b, "%31s %d %d %llu %15s", nb, &xb, &sb, &ob, extra) == 4 && !strcmp(na, nb) && xa == ra &&
	       xb == rb && sa == 2 && sb == 2 && oa > past && ob > past;
}

int main(void)
{
	rig r;
	rig_require(&r);
	char app[PATH_MAX], cubin[PATH_MAX];
	rig_app_path("PHOS_PAIR_APP", "apps/pair_app", app);
	snprintf(cubin, sizeof(cubin), "%s/pair.cubin", test_path("PHOS_KERNELS", "../kernels"));
	if (access(cubin, R_OK))
		skip_all("tests/kernels/pair.cubin is not built (it needs nvcc)");
	plan(16);
	r.opts[0] = "--checkpoint-timeout";
	r.opts[1] = "0.5";
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	char *const cmd[] = { app, cubin, NULL };
	pid_t pid = rig_phos_run(&r, cmd);
	char out[PATH_MAX];
	rig_out(&r, pid, out, sizeof(out));
	ok(pid > 0 && both_past(out, 40, 20000) && rig_traced(&r, pid, 10000),
	   "two ranks meet step after step under the tracer (pid %d)", (int)pid);

	char last[1024], want[64];
	double secs = 0;
	snprintf(want, sizeof(want), "process %d did not park", (int)pid);
	int held = hold(pid, out, 1);
	int ended = held && checkpoint(&r, pid, "checkpoint stop\n", last, sizeof(last), &secs);
	diag("%s (%.2f s)", last, secs);
	ok(ended && strstr(last, "failed") && secs < 0.5 + 2.5,
	   "with rank 1 held, a stop checkpoint fails within phosfs's 0.5 s deadline (%.2f s)", secs);
	ok(strstr(last, want) && strstr(last, "within 500 ms") && strstr(last, "its main thread is still inside cuMemcpyDtoH"),
	   "its error names rank 0 and the call it waits in");
	ok(nothing_published(&r, pid), "nothing is published");
	unsigned s0 = last_step(out, 0);
	kill(pid, SIGUSR1); /* let rank 1 go */
	ok(rig_alive(pid) && both_past(out, s0 + 40, 20000) && !rig_line(out, "WRONG", 0, NULL, 0),
	   "let go, both ranks go on, and every sum is right");

	kill(pid, SIGUSR2); /* rank 0 waits in cuStreamSynchronize */
	held = both_past(out, last_step(out, 0) + 20, 20000) && hold(pid, out, 2);
	ended = held && checkpoint(&r, pid, "checkpoint cow timeout=1\n", last, sizeof(last), &secs);
	diag("%s (%.2f s)", last, secs);
	ok(ended && strstr(last, "failed") && secs < 1 + 2.5,
	   "waiting in cuStreamSynchronize, a cow checkpoint fails within its own 1 s deadline (%.2f s)", secs);
	ok(strstr(last, want) && strstr(last, "within 1000 ms") && strstr(last, "device work did not finish"),
	   "its error names rank 0 and says its device work did not finish");
	ok(nothing_published(&r, pid), "nothing is published");
	s0 = last_step(out, 0);
	kill(pid, SIGUSR1);
	ok(rig_alive(pid) && both_past(out, s0 + 40, 20000) && !rig_line(out, "WRONG", 0, NULL, 0),
	   "let go, both go on again, every sum right");
	kill(pid, SIGKILL);

	setenv("PHOS_TRACE", "0", 1);
	pid = rig_phos_run(&r, cmd);
	unsetenv("PHOS_TRACE");
	rig_out(&r, pid, out, sizeof(out));
	held = pid > 0 && both_past(out, 40, 20000) && hold(pid, out, 1);
	ended = held && checkpoint(&r, pid, "checkpoint stop\n", last, sizeof(last), &secs);
	diag("%s (%.2f s)", last, secs);
	snprintf(want, sizeof(want), "and %d untraced: if one maps the other's device memory", (int)pid);
	ok(ended && strstr(last, "failed") && strstr(last, want) && secs < 2.5,
	   "untraced, the pair is refused at once (%.2f s), naming both and why", secs);
	ok(nothing_published(&r, pid), "nothing is published");
	s0 = last_step(out, 0);
	kill(pid, SIGUSR1);
	ok(rig_alive(pid) && both_past(out, s0 + 40, 20000) && !rig_line(out, "WRONG", 0, NULL, 0),
	   "let go, both go on unlocked, every sum right");
	kill(pid, SIGKILL);

	char stub[PATH_MAX];
	snprintf(stub, sizeof(stub), "%s", test_path("PHOS_NCCL_STUB", "apps/libnccl.so.2"));
	char *const with_nccl[] = { app, cubin, stub, NULL };
	setenv("PHOS_TRACE", "0", 1);
	pid = rig_phos_run(&r, with_nccl);
	unsetenv("PHOS_TRACE");
	rig_out(&r, pid, out, sizeof(out));
	ended = pid > 0 && both_past(out, 40, 20000) &&
		checkpoint(&r, pid, "checkpoint stop\n", last, sizeof(last), &secs);
	diag("%s (%.2f s)", last, secs);
	snprintf(want, sizeof(want), "and %d untraced: if one maps the other's device memory", (int)pid);
	ok(ended && strstr(last, "failed") && strstr(last, want) && nothing_published(&r, pid),
	   "untraced with NCCL loaded, the checkpoint is refused before anything stops");
	s0 = last_step(out, 0);
	ok(rig_alive(pid) && both_past(out, s0 + 40, 20000), "and both go on");
	kill(pid, SIGKILL);

	pid = rig_phos_run(&r, with_nccl);
	rig_out(&r, pid, out, sizeof(out));
	pid_t child = 0;
	char a[256] = "", b[256] = "";
	int up = pid > 0 && both_past(out, 40, 20000) && rig_traced(&r, pid, 10000) && (child = first_child(pid)) > 0 &&
		 rig_traced(&r, child, 10000) && nccl_line(&r, pid, a, sizeof(a)) && nccl_line(&r, child, b, sizeof(b));
	diag("rank 0: %s; rank 1: %s", a, b);
	ok(up && same_comm(a, b, 0, 1, 40), "each rank lists the communicator under one name, its rank, size 2 and its all-reduces");
	held = up && hold(pid, out, 1);
	ended = held && checkpoint(&r, pid, "checkpoint stop\n", last, sizeof(last), &secs);
	kill(pid, SIGUSR1);
	s0 = last_step(out, 0);
	up = ended && strstr(last, "failed") && both_past(out, s0 + 40, 20000) && nccl_line(&r, pid, a, sizeof(a)) &&
	     nccl_line(&r, child, b, sizeof(b));
	diag("%s; then rank 0: %s; rank 1: %s", last, a, b);
	ok(up && same_comm(a, b, 0, 1, s0), "after a checkpoint that failed in time, both list it still, counted on");
	kill(pid, SIGKILL);
	rig_cleanup(&r);
	return done();
}
