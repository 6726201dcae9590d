/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phos's CRIU carries --pages-threads (mk/criu-patches/0004): a restore
 * reads each task's pages with helper threads of the task: in a pid
 * namespace the restore makes, with tids from above the image's highest
 * pid or tid, a range for each task; in the caller's, the kernel's next
 * ones. criu_restore passes it (engine/criu.c, PHOS_RESTORE_PAGE_THREADS).
 * For a tree in the test's pid namespace, then for one whose root is pid
 * 1 of a namespace of its own (not under ASan, below):
 *
 *   1. a tree of three processes (a root and two forked children), each
 *      with 6 threads and 48 MiB of its own bytes, in memory of its own
 *      (memory a child shares copy-on-write with its parent CRIU reads
 *      before the child is forked, not in the restorer), is dumped and
 *      restored with 8 threads a task;
 *   2. each restored process holds its bytes, read back through
 *      /proc/PID/mem, and its threads have their old tids (in their own
 *      namespace): no helper took a tid a thread needed, and none is
 *      left;
 *   3. CRIU's log shows every task's pages read by several threads.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../engine/criu.h"
#include "tap.h"

#define MEM (48u << 20)
#define THREADS 6

/* Process k's word at offset i of the region. */
static uint64_t word(unsigned k, size_t i)
{
	uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)(k + 1) << 56);
	return x ^ (x >> 29);
}

static void *idle(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

/* Process k of the tree: its bytes at room + k * MEM, its threads. */
static void member(uint8_t *room, unsigned k)
{
	uint64_t *m = mmap(room + (size_t)k * MEM, MEM, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
			   -1, 0);
	if (m == MAP_FAILED)
		_exit(1);
	for (size_t i = 0; i < MEM / 8; i++)
		m[i] = word(k, i);
	for (int t = 0; t < THREADS; t++) {
		pthread_t th;
		pthread_create(&th, NULL, idle, NULL);
	}
}

/* The tid of task tid of pid in its innermost pid namespace (NSpid's
 * last field), or -1. */
static int ns_tid(pid_t pid, const char *tid)
{
	char p[384], line[256];
	snprintf(p, sizeof(p), "/proc/%d/task/%s/status", (int)pid, tid);
	FILE *f = fopen(p, "r");
	int v = -1;
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "NSpid:", 6)) {
			char *last = strrchr(line, '\t');
			v = last ? atoi(last + 1) : -1;
		}
	if (f)
		fclose(f);
	return v;
}

/* Process k for good: member, then a byte on ready, no file left. */
static void __attribute__((noreturn)) run(uint8_t *room, unsigned k, int ready)
{
	member(room, k);
	char b = 1;
	if (write(ready, &b, 1) != 1)
		_exit(1);
	close_range(0, ~0u, 0);
	for (;;)
		pause();
}

/* The tids of pid in its own pid namespace, sorted, into t (n at most);
 * how many. */
static int tids(pid_t pid, int *t, int n)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/task", (int)pid);
	DIR *d = opendir(p);
	int c = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		if (de->d_name[0] != '.' && c < n)
			t[c++] = ns_tid(pid, de->d_name);
	if (d)
		closedir(d);
	for (int i = 1; i < c; i++)
		for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
			int x = t[j];
			t[j] = t[j - 1];
			t[j - 1] = x;
		}
	return c;
}

/* Whether pid holds process k's bytes at m. */
static bool holds(pid_t pid, const uint64_t *m, unsigned k)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/mem", (int)pid);
	int fd = open(p, O_RDONLY);
	uint64_t *b = malloc(1u << 20);
	bool same = fd >= 0 && b;
	for (size_t off = 0; same && off < MEM; off += 1u << 20) {
		same = pread(fd, b, 1u << 20, (off_t)((uintptr_t)m + off)) == (ssize_t)(1u << 20);
		for (size_t i = 0; same && i < (1u << 20) / 8; i++)
			same = b[i] == word(k, off / 8 + i);
	}
	free(b);
	if (fd >= 0)
		close(fd);
	return same;
}

/* The children of pid, from /proc (n at most); how many. */
static int children(pid_t pid, pid_t *c, int n)
{
	char p[96];
	snprintf(p, sizeof(p), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	FILE *f = fopen(p, "r");
	int k = 0, v;
	while (f && k < n && fscanf(f, "%d", &v) == 1)
		c[k++] = v;
	if (f)
		fclose(f);
	return k;
}

/* The three checks for a tree in the test's pid namespace, or (own) in
 * one of its own, whose images and logs go to dir; criu: the binary. */
static void tree(const char *criu, const char *dir, bool own)
{
	const char *what = own ? "own pid namespace" : "this pid namespace";
	/* Room for three regions: process k's is the k-th, mapped by it
	 * alone. */
	uint8_t *room = mmap(NULL, 3 * MEM, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (room == MAP_FAILED)
		bail("mmap: %s", strerror(errno));
	munmap(room, 3 * MEM);
	int ready[2];
	if (pipe(ready))
		bail("pipe: %s", strerror(errno));
	/* own: the root is pid 1 of a pid namespace of its own, made by a
	 * child that ends once it has forked it. */
	int where[2];
	if (pipe(where))
		bail("pipe: %s", strerror(errno));
	pid_t mid = fork(), root = -1;
	if (mid == 0) {
		if (own && unshare(CLONE_NEWPID) != 0)
			_exit(1);
		pid_t r = fork();
		if (r != 0) {
			_exit(write(where[1], &r, sizeof(r)) == sizeof(r) ? 0 : 1);
		}
		setsid();
		for (unsigned k = 1; k <= 2; k++)
			if (fork() == 0) /* before the root maps its own */
				run(room, k, ready[1]);
		run(room, 0, ready[1]);
	}
	close(ready[1]);
	close(where[1]);
	if (read(where[0], &root, sizeof(root)) != sizeof(root) || root <= 0)
		bail("the tree's root was not made%s", own ? " (a pid namespace needs root)" : "");
	close(where[0]);
	waitpid(mid, NULL, 0);
	char b;
	for (int i = 0; i < 3; i++)
		if (read(ready[0], &b, 1) != 1)
			bail("the tree did not start");
	close(ready[0]);
	usleep(100000);
	pid_t pids[3] = { root };
	if (children(root, pids + 1, 2) != 2)
		bail("the tree has not its two children");
	int before[3][THREADS + 2], nb[3];
	for (int i = 0; i < 3; i++)
		nb[i] = tids(pids[i], before[i], THREADS + 2);
	int nsp[3]; /* each one's pid in its own namespace */
	for (int i = 0; i < 3; i++) {
		char t[16];
		snprintf(t, sizeof(t), "%d", (int)pids[i]);
		nsp[i] = ns_tid(pids[i], t);
	}
	/* Pids after the tree's, used and freed now: CRIU's own processes
	 * then get pids well above the helpers' range. */
	for (int i = 0; i < 64; i++) {
		pid_t p = fork();
		if (p == 0)
			_exit(0);
		if (p > 0)
			waitpid(p, NULL, 0);
	}

	char img[300], dlog[300], log[300];
	snprintf(img, sizeof(img), "%s/img-%s", dir, what);
	snprintf(dlog, sizeof(dlog), "%s/dump-%s.log", dir, what);
	snprintf(log, sizeof(log), "%s/restore-%s.log", dir, what);
	mkdir(img, 0700);
	perr er = { 0 };
	int e = criu_dump(criu, root, img, CRIU_LEAVE_KILLED, 60, dlog, NULL, &er);
	if (e)
		bail("criu dump: %s", pr_msg(&er));
	for (int t = 0; t < 100 && (kill(root, 0) == 0 || kill(pids[1], 0) == 0 || kill(pids[2], 0) == 0); t++)
		usleep(20000);
	setenv("PHOS_DEBUG", "1", 1); /* CRIU's log at -v4: the restorer's lines */
	pid_t back = 0;
	criu_restore_stats st;
	e = criu_restore(criu, img, NULL, NULL, log, NULL, &back, &st, &er);
	unsetenv("PHOS_DEBUG");
	ok(!e && (own || back == root) && st.pages_restored >= 3 * (MEM / 4096),
	   "%s: the tree of three, 6 threads and 48 MiB each, is restored with 8 threads a task (%llu pages; %s)",
	   what, (unsigned long long)st.pages_restored, e ? pr_msg(&er) : "restored");
	/* Each one again, by its pid in its namespace. */
	pid_t now[3] = { back }, kids[2] = { 0 };
	if (!e && children(back, kids, 2) != 2)
		e = -ESRCH;
	for (int j = 0; !e && j < 2; j++) {
		char t[16];
		snprintf(t, sizeof(t), "%d", (int)kids[j]);
		int v = ns_tid(kids[j], t);
		for (int i = 1; i < 3; i++)
			if (v == nsp[i])
				now[i] = kids[j];
	}

	bool all = !e, same_tids = !e;
	for (int i = 0; !e && i < 3; i++) {
		int after[THREADS + 2];
		int na = tids(now[i], after, THREADS + 2);
		all = all && holds(now[i], (const uint64_t *)(room + (size_t)i * MEM), (unsigned)i);
		same_tids = same_tids && na == nb[i] && !memcmp(after, before[i], sizeof(int) * (size_t)na);
	}
	ok(all && same_tids, "%s: each process holds its own bytes, and its threads their old tids (%s, %s)", what,
	   all ? "bytes" : "BYTES DIFFER", same_tids ? "tids" : "TIDS DIFFER");

	/* The restorer's line, one per task: "Reading pages with N threads". */
	FILE *f = fopen(log, "r");
	char line[1024], seen[128] = "";
	int tasks = 0, several = 0;
	while (f && fgets(line, sizeof(line), f)) {
		const char *at = strstr(line, "Reading pages with ");
		int n;
		if (at && sscanf(at, "Reading pages with %d", &n) == 1) {
			tasks++;
			several += n > 1;
			size_t l = strlen(seen);
			snprintf(seen + l, sizeof(seen) - l, "%s%d", l ? " " : "", n);
		}
	}
	if (f)
		fclose(f);
	ok(tasks == 3 && several == 3, "%s: CRIU's log shows each task's pages read by several threads (threads: %s)",
	   what, *seen ? seen : "no line");
	for (int i = 0; i < 3; i++)
		if (now[i] > 0)
			kill(now[i], SIGKILL);

}

int main(void)
{
	const char *criu = getenv("PHOS_CRIU");
	if (geteuid() != 0)
		skip_all("needs root: CRIU dumps a process");
	if (!criu || access(criu, X_OK))
		skip_all("no CRIU built here (PHOS_CRIU): run make deps");
	setenv("PHOS_RESTORE_PAGE_THREADS", "8", 1);
	if (criu_pages_threads(criu) < 2)
		skip_all("this CRIU has no --pages-threads: run make deps");
	plan(6);
	char dir[] = "/tmp/phos-criu-threads-XXXXXX";
	if (!mkdtemp(dir))
		bail("mkdtemp: %s", strerror(errno));

	tree(criu, dir, false);
#ifdef __SANITIZE_ADDRESS__
	/* The tree is this program's forks. CRIU 4.2.1 (with or without
	 * --pages-threads) dies of SIGSEGV restoring an ASan process as
	 * pid 1 of a namespace of its own. */
	for (int i = 0; i < 3; i++)
		skip("own pid namespace: CRIU cannot restore an ASan process as a namespace's pid 1");
#else
	tree(criu, dir, true);
#endif

	/* PHOS_KEEP_LOGS: the images and CRIU's logs stay. */
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (getenv("PHOS_KEEP_LOGS"))
		diag("kept %s", dir);
	else if (system(cmd) != 0)
		diag("could not remove %s", dir);
	return done();
}
