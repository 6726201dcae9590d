/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phos's CRIU carries --start-fd (mk/criu-patches/0003): a dump readies
 * all it can without the tree, then waits for a byte before it seizes
 * it, so that a checkpoint starts CRIU while the driver still works.
 * criu_dump_ready/criu_dump_go/criu_dump_drop (engine/criu.c):
 *
 *   - with phos's CRIU, ready starts CRIU at once, and the tree is not
 *     seized (not traced, not stopped) while it waits;
 *   - go then dumps it with --snapshot-pages; the tree runs on and the
 *     image holds its pages;
 *   - drop instead ends the waiting CRIU, which says why in its log, and
 *     the tree was never touched;
 *   - a CRIU without the option starts only at go, and is not given it.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../engine/criu.h"
#include "tap.h"

/* The TracerPid and state letter of pid, from /proc; -1 when unreadable. */
static int tracer_of(pid_t pid, char *state)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	int t = -1;
	*state = '?';
	while (f && fgets(line, sizeof(line), f)) {
		sscanf(line, "TracerPid: %d", &t);
		sscanf(line, "State: %c", state);
	}
	if (f)
		fclose(f);
	return t;
}

static bool file_has(const char *path, const char *what)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	bool found = false;
	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	if (f)
		fclose(f);
	return found;
}

/* A pages image (pages-N.img) in dir, as a file name ending of its size. */
static long long pages_bytes(const char *dir)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "cat '%s'/pages-*.img 2>/dev/null | wc -c", dir);
	FILE *p = popen(cmd, "r");
	long long n = -1;
	if (!p || fscanf(p, "%lld", &n) != 1)
		n = -1;
	if (p)
		pclose(p);
	return n;
}

int main(void)
{
	const char *criu = getenv("PHOS_CRIU");
	if (geteuid() != 0)
		skip_all("needs root: CRIU dumps a process");
	if (!criu || access(criu, X_OK))
		skip_all("no CRIU built here (PHOS_CRIU): run make deps");
	if (!criu_start_fd(criu))
		skip_all("this CRIU has no --start-fd: run make deps");
	plan(7);
	char dir[] = "/tmp/phos-criu-ahead-XXXXXX";
	if (!mkdtemp(dir))
		bail("mkdtemp: %s", strerror(errno));

	/* The tree: a session of its own, 8 MiB it keeps writing, and no
	 * files (the test's may be on mounts CRIU cannot look up). */
	pid_t app = fork();
	if (app == 0) {
		setsid();
		close_range(0, ~0u, 0);
		size_t n = 8u << 20;
		volatile unsigned char *m = malloc(n);
		for (unsigned v = 0;; v++) {
			for (size_t i = 0; m && i < n; i += 4096)
				m[i] = (unsigned char)v;
			usleep(1000);
		}
	}
	usleep(100000);

	char img[300], log[300];
	snprintf(img, sizeof(img), "%s/img", dir);
	snprintf(log, sizeof(log), "%s/dump.log", dir);
	mkdir(img, 0700);
	perr er = { 0 };
	criu_dumper d;
	int e = criu_dump_ready(criu, app, img, CRIU_LEAVE_RUNNING, 30, log, true, &d, &er);
	ok(!e && d.pid > 0 && d.go >= 0, "with phos's CRIU, ready starts CRIU at once (%s)", e ? pr_msg(&er) : "started");
	usleep(500000);
	char st, cst;
	int tr = tracer_of(app, &st);
	tracer_of(d.pid, &cst);
	ok(tr == 0 && st != 't' && st != 'T' && cst != 'Z' && cst != '?',
	   "half a second later CRIU still waits (state %c) and the tree is not seized (TracerPid %d, state %c)", cst,
	   tr, st);

	criu_tail tail;
	e = criu_dump_go(&d, &tail, &er);
	int w = e ? e : criu_dump_wait(&tail, &er);
	criu_dump_drop(&d);
	tr = tracer_of(app, &st);
	long long pb = pages_bytes(img);
	ok(!w && tr == 0 && st != 'Z' && pb >= (8 << 20),
	   "go dumps it with its pages saved after it runs on (%lld bytes of pages), and it runs on (%s)", pb,
	   w ? pr_msg(&er) : "dumped");

	char img2[300], log2[320];
	snprintf(img2, sizeof(img2), "%s/img2", dir);
	snprintf(log2, sizeof(log2), "%s/drop.log", dir);
	mkdir(img2, 0700);
	e = criu_dump_ready(criu, app, img2, CRIU_LEAVE_RUNNING, 30, log2, true, &d, &er);
	pid_t c = d.pid;
	usleep(200000);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	criu_dump_drop(&d);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	tr = tracer_of(app, &st);
	ok(!e && c > 0 && kill(c, 0) < 0 && errno == ESRCH && took < 1.5 && tr == 0 && st != 'Z',
	   "drop ends the waiting CRIU in %.2f s (reaped, not killed at its 2 s), and the tree runs on untouched",
	   took);
	ok(file_has(log2, "Not told to start") && pages_bytes(img2) <= 0,
	   "its log says it was not told to start, and it wrote no pages");

	/* A CRIU without the option: a script that records its arguments. */
	char old[256], args[1024] = "";
	snprintf(old, sizeof(old), "%s/old-criu", dir);
	FILE *f = fopen(old, "w");
	if (!f)
		bail("cannot write %s", old);
	fprintf(f, "#!/bin/sh\n[ \"$1\" = --help ] && { echo '  -R|--leave-running'; exit 0; }\necho \"$@\" > '%s.args'\n",
		old);
	fclose(f);
	chmod(old, 0755);
	e = criu_dump_ready(old, app, img2, CRIU_LEAVE_RUNNING, 30, log2, true, &d, &er);
	bool late = !e && d.pid == 0;
	e = e ? e : criu_dump_go(&d, NULL, &er);
	criu_dump_drop(&d);
	snprintf(log2, sizeof(log2), "%s.args", old);
	f = fopen(log2, "r");
	if (f) {
		if (!fgets(args, sizeof(args), f))
			*args = 0;
		fclose(f);
	}
	ok(late, "a CRIU without --start-fd is not started at ready");
	ok(!e && strstr(args, "dump -t") && !strstr(args, "--start-fd"), "but at go, without the option (%s)", args);

	kill(app, SIGKILL);
	waitpid(app, NULL, 0);
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		diag("could not remove %s", dir);
	return done();
}
