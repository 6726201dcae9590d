/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the tests of tests/apps/pair_app share: finding it, its cubin and
 * the stub NCCL, and reading how far its two ranks have got from its
 * output ("rank R step N" lines). Included after phosfs_test.h.
 */
#ifndef PHOS_PAIR_TEST_H
#define PHOS_PAIR_TEST_H

#include <stdio.h>
#include <unistd.h>

/* pair_app, its cubin and tests/apps/libnccl.so.2 into app, cubin and
 * stub (PATH_MAX each), or skips the whole test. */
static inline void pair_paths(char *app, char *cubin, char *stub)
{
	rig_app_path("PHOS_PAIR_APP", "apps/pair_app", app);
	snprintf(cubin, PATH_MAX, "%s/pair.cubin", test_path("PHOS_KERNELS", "../kernels"));
	snprintf(stub, PATH_MAX, "%s", test_path("PHOS_NCCL_STUB", "apps/libnccl.so.2"));
	if (access(cubin, R_OK) || access(stub, R_OK))
		skip_all("tests/kernels/pair.cubin or tests/apps/libnccl.so.2 is not built");
}

/* Mounts phosfs for r (set up by rig_require) and runs pair_app with the
 * stub NCCL under phos run, its output in out (PATH_MAX); plans tests
 * (after the skips). Its environment is this process's. The pid. */
static inline pid_t pair_start(rig *r, int tests, char *out)
{
	char app[PATH_MAX], cubin[PATH_MAX], stub[PATH_MAX];
	pair_paths(app, cubin, stub);
	plan(tests);
	if (rig_mount(r, NULL))
		bail("phosfs did not mount");
	char *const cmd[] = { app, cubin, stub, NULL };
	pid_t pid = rig_phos_run(r, cmd);
	rig_out(r, pid, out, PATH_MAX);
	return pid;
}

/* The highest N of the lines "rank R step N" of out. */
static inline unsigned last_step(const char *out, int rank)
{
	FILE *f = fopen(out, "r");
	char l[256];
	unsigned best = 0, n, r;
	while (f && fgets(l, sizeof(l), f))
		if (sscanf(l, "rank %u step %u", &r, &n) == 2 && (int)r == rank && n > best)
			best = n;
	if (f)
		fclose(f);
	return best;
}

/* Whether both ranks get past step `past` within ms. */
static inline int both_past(const char *out, unsigned past, int ms)
{
	for (int t = 0; t <= ms; t += 50, usleep(50000))
		if (last_step(out, 0) > past && last_step(out, 1) > past)
			return 1;
	return 0;
}

#endif
