/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A job that is a process tree, on a real mount with real CRIU:
 *
 *   phos run -- sh -c 'THIS --tree-app; …'
 *     sh                     the launcher, between phos run and the job
 *     └ THIS --tree-app      a CUDA process (on simcuda, under the tracer)
 *       ├ child 1            forked after cuInit; never uses CUDA
 *       └ child 2            the same
 *
 * The parent keeps a count in device memory and, every tick, sends it to
 * both children over pipes; each child checks that the requests come in
 * order, keeps its own running sum, and answers with it, which the parent
 * checks. The shell's pid is checkpointed with `stop` (through a member's
 * ctl: the image is the whole tree), the tree is killed with -9 and
 * restored; it goes on counting, every member checking its own state, and
 * the parent checks every byte of its device memory on SIGUSR1.
 *
 * The job runs with `phos run --host-pids`: no pid namespace of its own,
 * so the restore gives every member its old pid back (the other tree
 * test runs in a namespace of its own).
 */
#include <cuda.h>

#include "phosfs_test.h"

#define APP_MIB 32

/* ---- the job ------------------------------------------------------------ */

static volatile sig_atomic_t verify_asked;
static void on_usr1(int sig)
{
	(void)sig;
	verify_asked = 1;
}

static uint8_t pattern(uint64_t off)
{
	return (uint8_t)(off * 131 + (off >> 12));
}

/* A child: answers each request n (1, 2, 3, …) with the sum 1 + … + n
 * plus its id * 1000000, after checking n is the next one. */
static void child_main(int id, int in, int out)
{
	uint64_t expect = 1, sum = 0;
	for (;;) {
		uint64_t n;
		if (read(in, &n, sizeof(n)) != (ssize_t)sizeof(n))
			_exit(0);
		if (n != expect) {
			printf("child %d FAILED: request %llu, expected %llu\n", id, (unsigned long long)n,
			       (unsigned long long)expect);
			fflush(stdout);
			_exit(1);
		}
		sum += n;
		expect++;
		uint64_t r = sum + (uint64_t)id * 1000000;
		if (write(out, &r, sizeof(r)) != (ssize_t)sizeof(r))
			_exit(1);
	}
}

static int tree_app(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGUSR1, on_usr1);
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr d;
	size_t size = (size_t)APP_MIB << 20;
	if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
	    cuMemAlloc(&d, size)) {
		printf("tree-app FAILED: CUDA did not start\n");
		return 2;
	}
	uint8_t *host = malloc(size);
	for (size_t i = 0; i < size; i++)
		host[i] = pattern(i);
	if (cuMemcpyHtoD(d, host, size))
		return 2;
	int req[2][2], rep[2][2];
	for (int c = 0; c < 2; c++) {
		if (pipe(req[c]) || pipe(rep[c]))
			return 2;
		pid_t p = fork();
		if (p == 0) {
			close(req[c][1]);
			close(rep[c][0]);
			child_main(c + 1, req[c][0], rep[c][1]);
		}
		close(req[c][0]);
		close(rep[c][1]);
	}
	printf("tree-app ready\n");
	uint64_t sum = 0;
	for (uint64_t n = 1;; n++) {
		/* The count, in device memory: the first 8 bytes. */
		if (cuMemcpyHtoD(d, &n, sizeof(n)))
			return 2;
		sum += n;
		for (int c = 0; c < 2; c++) {
			uint64_t r;
			if (write(req[c][1], &n, sizeof(n)) != (ssize_t)sizeof(n) ||
			    read(rep[c][0], &r, sizeof(r)) != (ssize_t)sizeof(r) ||
			    r != sum + (uint64_t)(c + 1) * 1000000) {
				printf("tree-app FAILED: child %d did not answer %llu\n", c + 1, (unsigned long long)n);
				return 1;
			}
		}
		printf("count %llu\n", (unsigned long long)n);
		if (verify_asked) {
			verify_asked = 0;
			uint64_t got;
			int good = cuMemcpyDtoH(host, d, size) == 0;
			memcpy(&got, host, 8);
			good = good && got == n;
			for (size_t i = 8; good && i < size; i++)
				good = host[i] == pattern(i);
			printf(good ? "verify ok count %llu\n" : "verify FAILED count %llu\n", (unsigned long long)n);
		}
		usleep(50000);
	}
}

/* ---- the test ----------------------------------------------------------- */

/* The pids of pid's children, from /proc/PID/task/PID/children. */
static int children(pid_t pid, pid_t *out, int cap)
{
	char path[96];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	FILE *f = fopen(path, "r");
	int n = 0;
	if (f) {
		int v;
		while (n < cap && fscanf(f, "%d", &v) == 1)
			out[n++] = v;
		fclose(f);
	}
	return n;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--tree-app"))
		return tree_app();
	rig r;
	rig_require(&r);
	char self[PATH_MAX];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[sl > 0 ? sl : 0] = 0;
	plan(9);
	r.host_pids = true;
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");

	/* phos run -- sh -c 'APP --tree-app; echo …': sh stays between. */
	char script[PATH_MAX + 64];
	snprintf(script, sizeof(script), "'%s' --tree-app; echo tree-app exited $?", self);
	pid_t sh = rig_shell_job(&r, script);
	char out[PATH_MAX];
	rig_out(&r, sh, out, sizeof(out));
	int ready = sh > 0 && rig_line(out, "count 5", 15000, NULL, 0);
	pid_t app[1] = { 0 }, kids[4] = { 0 };
	int nkids = 0;
	if (ready && children(sh, app, 1) == 1)
		nkids = children(app[0], kids, 4);
	ok(ready && app[0] > 0 && nkids == 2, "the job is a tree: sh %d, the CUDA process %d, %d forked children", (int)sh,
	   (int)app[0], nkids);

	char path[256], st[4096];
	snprintf(path, sizeof(path), "%s/%d/status", r.mnt, (int)sh);
	rig_read(path, st, sizeof(st));
	char want[64];
	snprintf(want, sizeof(want), "member: %d ", (int)app[0]);
	char *m = strstr(st, want);
	ok(strstr(st, "members: 4\n") && m && !strncmp(strchr(m + strlen(want), ' '), " gpu=traced", 11) &&
		   strstr(st, "gpu=forked") && strstr(st, "gpu=none"),
	   "status lists the four members, which one is traced, which were forked from it");
	if (!strstr(st, "members: 4\n"))
		diag("%s", st);

	/* Through a member's ctl: the image is still the whole tree. */
	snprintf(path, sizeof(path), "%s/%d/ctl", r.mnt, (int)kids[0]);
	int e = rig_ctl(path, "checkpoint stop name=tree\n", 26);
	char last[256] = "";
	ok(e == 0 && rig_job_done(&r, sh, 30000, last, sizeof(last)) && strstr(last, "done"),
	   "checkpoint stop through a child's ctl runs as the job's (%s)", e ? strerror(e) : last);
	if (!strstr(last, "done")) {
		snprintf(path, sizeof(path), "%s/%d/status", r.mnt, (int)sh);
		diag("%s", rig_read(path, st, sizeof(st)) ? st : "");
	}

	char image[PATH_MAX];
	snprintf(image, sizeof(image), "%s/%d/tree", r.store, (int)sh);
	phosimg *img;
	int members = 0, traced = 0, owned = 1;
	if (phosimg_open(image, &img) == 0) {
		const phosimg_info *in = phosimg_get_info(img);
		members = (int)in->meta.member_count;
		for (uint32_t i = 0; i < in->meta.member_count; i++)
			traced += !!(in->meta.members[i].flags & PHOSIMG_MEMBER_TRACED);
		for (uint32_t i = 0; i < in->object_count; i++)
			owned &= in->objects[i].pid == app[0];
		phosimg_close(img);
	}
	ok(members == 4 && traced == 1 && owned, "one image holds the tree: 4 members, 1 traced, whose device memory it is");

	long before = rig_count(out);
	ok(rig_counts_past(out, before, 5000), "after the checkpoint the tree runs on (count %ld)", before);

#ifdef __SANITIZE_ADDRESS__
	/* CRIU restores no AddressSanitizer process that forked without exec:
	 * the restored parent dies of SIGSEGV. A ten-line program that
	 * mallocs and forks fails the same way, without phos. */
	for (int i = 0; i < 4; i++)
		skip("CRIU cannot restore a forked AddressSanitizer process");
	kill(-sh, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
#endif
	kill(-sh, SIGKILL);
	for (int i = 0; i < 100 && (rig_alive(sh) || rig_alive(app[0]) || rig_alive(kids[0]) || rig_alive(kids[1])); i++)
		usleep(50000);
	long at_kill = rig_count(out);
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "restore %s\n", image);
	pid_t back = 0;
	e = rig_restore_cmd(&r, cmd, &back, st, sizeof(st));
	ok(e == 0 && back == sh && rig_alive(sh) && rig_alive(app[0]) && rig_alive(kids[0]) && rig_alive(kids[1]),
	   "after kill -9, the restore brings back all four with their pids (%s)", e ? strerror(e) : "ok");
	if (e)
		diag("%s", st);

	ok(rig_counts_past(out, at_kill + 5, 10000), "the restored tree goes on: the parent counts and both children answer in order");
	kill(app[0], SIGUSR1);
	char line[256] = "";
	rig_line(out, "verify ", 5000, line, sizeof(line));
	ok(!strncmp(line, "verify ok", 9), "the CUDA process's device memory is intact (%s)", line);
	ok(!rig_line(out, "child ", 0, NULL, 0) && !rig_line(out, "tree-app FAILED", 0, NULL, 0),
	   "no member found its state wrong");

	pid_t all[] = { sh, app[0], kids[0], kids[1] };
	rig_kill_all(all, sizeof(all) / sizeof(*all));
	rig_cleanup(&r);
	return done();
}
