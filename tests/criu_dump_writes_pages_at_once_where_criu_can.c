/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phos's CRIU carries --parallel-pages (mk/criu-patches/): a dump writes
 * the pages of a tree's processes at once, one writer each. criu_dump
 * asks for it only where the CRIU it runs has it (engine/criu.c):
 *
 *   - a CRIU whose --help does not list the option is not given it, and
 *     its dump runs as before;
 *   - one that lists it is given it;
 *   - one whose --help never ends is given up on within its deadline, and
 *     not given the option;
 *   - the CRIU phos builds (make deps) has it.
 *
 * That such a dump of a tree restores byte for byte is checked by the
 * tree tests (phosfs_process_tree_restores_every_member and others),
 * which dump with it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../engine/criu.h"
#include "tap.h"

/* A fake criu at dir/name: --help prints help (with the option when
 * `has`), or sleeps for ever when help is NULL; a dump writes its
 * arguments to dir/name.args. */
static void fake(const char *dir, const char *name, const char *help, char *path, size_t len)
{
	snprintf(path, len, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	if (!f)
		bail("cannot write %s", path);
	fprintf(f, "#!/bin/sh\nif [ \"$1\" = --help ]; then\n");
	if (help)
		fprintf(f, "  printf '%%s\\n' 'Usage:' '  criu dump|pre-dump -t PID [<options>]' '%s'\n  exit 0\n", help);
	else
		fprintf(f, "  exec sleep 600\n");
	fprintf(f, "fi\necho \"$@\" > '%s.args'\nexit 0\n", path);
	fclose(f);
	chmod(path, 0755);
}

/* The arguments the fake at path was dumped with, into out. */
static void args_of(const char *path, char *out, size_t len)
{
	char p[512];
	snprintf(p, sizeof(p), "%s.args", path);
	*out = 0;
	FILE *f = fopen(p, "r");
	if (f) {
		if (!fgets(out, (int)len, f))
			*out = 0;
		fclose(f);
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(void)
{
	plan(5);
	char dir[] = "/tmp/phos-criu-parallel-XXXXXX";
	if (!mkdtemp(dir))
		bail("mkdtemp: %s", strerror(errno));
	char old[256], patched[256], stuck[256], log[300], args[1024];
	fake(dir, "old", "  -R|--leave-running    leave tasks in running state after checkpoint", old, sizeof(old));
	fake(dir, "patched", "  --parallel-pages      write the pages of every task at once", patched, sizeof(patched));
	fake(dir, "stuck", NULL, stuck, sizeof(stuck));
	snprintf(log, sizeof(log), "%s/dump.log", dir);

	perr er = { 0 };
	bool has = criu_parallel_pages(old);
	int e = criu_dump(old, getpid(), dir, CRIU_LEAVE_RUNNING, 10, log, NULL, &er);
	args_of(old, args, sizeof(args));
	ok(!has && !e && strstr(args, "dump -t") && !strstr(args, "--parallel-pages"),
	   "a CRIU without --parallel-pages dumps as before, not given it (%s)", e ? pr_msg(&er) : "dumped");

	has = criu_parallel_pages(patched);
	e = criu_dump(patched, getpid(), dir, CRIU_LEAVE_RUNNING, 10, log, NULL, &er);
	args_of(patched, args, sizeof(args));
	ok(has && !e && strstr(args, "--parallel-pages"), "a CRIU that lists it is given it");

	double t0 = now_s();
	has = criu_parallel_pages(stuck);
	double took = now_s() - t0;
	ok(!has && took < 8, "a CRIU whose --help never ends is given up on in %.1f s, without the option", took);

	ok(criu_parallel_pages(patched) && !criu_parallel_pages(old), "each CRIU's answer holds when asked again");

	const char *real = getenv("PHOS_CRIU");
	if (real && access(real, X_OK) == 0)
		ok(criu_parallel_pages(real), "the CRIU make deps builds (%s) has --parallel-pages", real);
	else
		skip("no CRIU built here (PHOS_CRIU): run make deps");

	char cmd[400];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		diag("could not remove %s", dir);
	return done();
}
