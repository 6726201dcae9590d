/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A restore puts its tree in the cgroups of the process that asked
 * (engine/cgroup.c): /proc/PID/cgroup is read, each hierarchy's line is
 * found among this mount namespace's cgroup mounts, and a child joins
 * them between fork and exec.
 *
 *   1. this process's own cgroups resolve to cgroup.procs files that
 *      exist and list it, one per hierarchy mounted here;
 *   2. a child that enters them stays where it was (they are its own);
 *   3. a hierarchy that is not mounted here, or a cgroup above this
 *      cgroup namespace's root ("/../x"), is left out, not an error;
 *   4. malformed lines are refused with -EINVAL, naming the line;
 *   5. a path too long for a cgroup.procs file is -ENAMETOOLONG;
 *   6. a cgroup that does not exist makes enter fail and name it;
 *   7. keeping the cgroups it may write, one that is gone fails, named
 *      (one on a read-only mount would be left out, and said: no test
 *      makes such a mount);
 *   8. 2000 lines of random bytes are refused or resolved, never a crash.
 * 2 needs root; nothing here moves a process out of its cgroups.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../engine/cgroup.h"
#include "tap.h"

/* Whether the cgroup.procs at path lists pid. */
static int lists(const char *path, pid_t pid)
{
	FILE *f = fopen(path, "re");
	int found = 0, p;
	while (f && !found && fscanf(f, "%d", &p) == 1)
		found = p == pid;
	if (f)
		fclose(f);
	return found;
}

int main(void)
{
	plan(8);
	char text[ENGINE_CGROUPS_TEXT_MAX];
	engine_cgroups cg;
	perr er = { 0 };
	if (engine_cgroups_read(getpid(), text, sizeof(text)))
		skip_all("no /proc/self/cgroup here");
	int e = engine_cgroups_resolve(text, &cg, &er);
	if (!e && cg.n == 0) {
		skip("no cgroup hierarchy is mounted here");
		skip("no cgroup hierarchy is mounted here");
	} else {
		int listed = 0;
		const char *p = cg.procs;
		for (int i = 0; !e && i < cg.n; i++, p += strlen(p) + 1) {
			diag("%s", p);
			listed += lists(p, getpid());
		}
		ok(!e && listed == cg.n, "this process's cgroups resolve to %d cgroup.procs files that list it (%s)", cg.n,
		   e ? er.msg : "");
		if (geteuid() != 0) {
			skip("joining a cgroup needs root");
		} else {
			pid_t c = fork();
			if (c == 0) {
				const char *failed = "";
				_exit(engine_cgroups_enter(&cg, &failed) ? 1 : 0);
			}
			int st = -1;
			waitpid(c, &st, 0);
			ok(c > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "a child enters them (its own cgroups)");
		}
	}

	e = engine_cgroups_resolve("99:phos-no-such-controller:/x\n0::/../x\n0::/a/../..\n", &cg, &er);
	ok(!e && cg.n == 0,
	   "a hierarchy not mounted here, and cgroups above the namespace's root, are left out (%d, %d found)", e,
	   cg.n);

	static const char *const bad[] = { "no colons\n", "1:memory\n", "0::relative\n", "1:memory:\n" };
	int refused = 0;
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		perr b = { 0 };
		refused += engine_cgroups_resolve(bad[i], &cg, &b) == -EINVAL && strstr(b.msg, "malformed cgroup line");
	}
	ok(refused == 4, "malformed lines are refused, naming the line (%d of 4)", refused);

	/* Longer than a cgroup.procs path may be, in this process's v2 or
	 * first hierarchy. */
	char deep[1000] = "0::/";
	memset(deep + 4, 'd', sizeof(deep) - 6);
	deep[sizeof(deep) - 2] = '\n';
	deep[sizeof(deep) - 1] = 0;
	e = engine_cgroups_resolve(deep, &cg, &er);
	int mounted_v2 = strstr(text, "\n0::/") || !strncmp(text, "0::/", 4);
	ok(e == -ENAMETOOLONG || (!mounted_v2 && e == 0), "a path too long to join is -ENAMETOOLONG (%d)", e);

	snprintf(text, sizeof(text), "0::/phos-test-no-such-cgroup-%d\n", (int)getpid());
	e = engine_cgroups_resolve(text, &cg, &er);
	const char *failed = "";
	int ee = !e && cg.n ? engine_cgroups_enter(&cg, &failed) : -ENOENT;
	ok(ee == -ENOENT && (!cg.n || strstr(failed, "phos-test-no-such-cgroup")),
	   "a cgroup that does not exist fails enter, which names it (%d: %s)", ee, failed);
	char dropped[512];
	perr gone = { 0 };
	int had = cg.n, left = engine_cgroups_keep_writable(&cg, dropped, sizeof(dropped), &gone);
	ok(had ? left == -ENOENT && strstr(gone.msg, "phos-test-no-such-cgroup") : left == 0,
	   "keeping those it may write, one that is gone is an error that names it (%d: %s)", left, gone.msg);

	srand((unsigned)time(NULL));
	int odd = 0;
	for (int i = 0; i < 2000; i++) {
		size_t n = (size_t)rand() % 200;
		for (size_t k = 0; k < n; k++)
			text[k] = (char)(rand() % 4 ? " :/,\n0123456789abcmemory"[rand() % 24] : rand() % 255 + 1);
		text[n] = 0;
		e = engine_cgroups_resolve(text, &cg, &er);
		odd += e && e != -EINVAL && e != -ENAMETOOLONG && e != -E2BIG;
		odd += !e && (cg.n < 0 || cg.n > ENGINE_CGROUPS_MAX);
	}
	ok(!odd, "2000 lines of random bytes are refused or resolved (%d odd answers)", odd);
	return done();
}
