/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A real phosfs on a temporary mount, with simcuda as its driver, and
 * examples/counter started under it by `phos run`: for the end-to-end
 * tests. The test process is a child subreaper, so that processes CRIU
 * restores (and killed ones) are reaped here.
 */
#ifndef PHOS_PHOSFS_TEST_H
#define PHOS_PHOSFS_TEST_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "../image-format/phosimg.h"
#include "tap.h"
#include "testpath.h"

typedef struct rig {
	char dir[64], mnt[96], store[128], sock[96];
	char phosfs[PATH_MAX], phos[PATH_MAX], counter[PATH_MAX], simcuda[PATH_MAX], libphos[PATH_MAX],
		criu[PATH_MAX];
	pid_t fs;
	const char *opts[8]; /* more phosfs options, NULL-terminated */
	const char *restore_mode; /* "eager" or "lazy" for rig_restore; NULL: the default (lazy) */
	bool host_pids; /* phos run --host-pids (else --pid-ns): no pid namespace of the job's own */
	char *fs_env; /* "NAME=VALUE" in phosfs's environment alone, or NULL */
} rig;

/* Whether phosfs's log has a line holding s. */
static inline int rig_log_has(rig *r, const char *s)
{
	char path[160], l[1024];
	snprintf(path, sizeof(path), "%s/phosfs.log", r->dir);
	FILE *f = fopen(path, "r");
	int found = 0;
	while (f && !found && fgets(l, sizeof(l), f))
		found = strstr(l, s) != NULL;
	if (f)
		fclose(f);
	return found;
}

static inline void rig_cleanup(rig *r);

/* The rig a bail out takes down: it is in main's frame, which is still
 * there while bail runs. */
static rig *rig_bailing;

static inline void rig_on_bail(void)
{
	if (rig_bailing)
		rig_cleanup(rig_bailing);
}

/* Skips the whole test unless root, FUSE, CRIU and the programs are here. */
static inline void rig_require(rig *r)
{
	memset(r, 0, sizeof(*r));
	rig_bailing = r;
	tap_on_bail = rig_on_bail;
	if (geteuid() != 0)
		skip_all("needs root (FUSE and CRIU)");
	if (access("/dev/fuse", R_OK | W_OK) != 0)
		skip_all("no /dev/fuse");
	snprintf(r->phosfs, sizeof(r->phosfs), "%s", test_path("PHOS_PHOSFS", "../phosfs/phosfs"));
	snprintf(r->phos, sizeof(r->phos), "%s", test_path("PHOS_CLI", "../phos"));
	snprintf(r->counter, sizeof(r->counter), "%s", test_path("PHOS_COUNTER", "../examples/counter"));
	snprintf(r->simcuda, sizeof(r->simcuda), "%s", test_path("PHOS_SIMCUDA", "../simcuda"));
	snprintf(r->libphos, sizeof(r->libphos), "%s", test_path("PHOS_LIBPHOS", "../libphos.so"));
	snprintf(r->criu, sizeof(r->criu), "%s", test_path("PHOS_CRIU", "../../deps/criu/sbin/criu"));
	if (access(r->criu, X_OK) != 0)
		skip_all("no CRIU (make deps)");
	if (access(r->phosfs, X_OK) || access(r->phos, X_OK) || access(r->counter, X_OK))
		skip_all("phosfs, phos or examples/counter not built");
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	snprintf(r->dir, sizeof(r->dir), "/tmp/phos-fs.XXXXXX");
	if (!mkdtemp(r->dir))
		bail("mkdtemp: %s", strerror(errno));
	snprintf(r->mnt, sizeof(r->mnt), "%s/mnt", r->dir);
	snprintf(r->store, sizeof(r->store), "%s/store", r->dir);
	snprintf(r->sock, sizeof(r->sock), "%s/sock", r->dir);
	mkdir(r->mnt, 0755);
	setenv("PHOS_MOUNT", r->mnt, 1);
	setenv("PHOS_SOCKET", r->sock, 1);
	setenv("PHOS_LIBPHOS", r->libphos, 1);
	setenv("LD_LIBRARY_PATH", r->simcuda, 1);
	/* ASan builds: the tracer is preloaded ahead of the runtime. */
	setenv("ASAN_OPTIONS", "verify_asan_link_order=0:detect_leaks=0", 1);
}

static inline int rig_exists(const char *path, int ms)
{
	for (int i = 0; i <= ms / 20; i++) {
		if (access(path, F_OK) == 0)
			return 1;
		usleep(20000);
	}
	return 0;
}

/* Reaps whatever ended among our children (and adopted processes). */
static inline void rig_reap(void)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

static inline int rig_alive(pid_t pid)
{
	rig_reap();
	return kill(pid, 0) == 0;
}

/* The number after key in a status text st (such as "cow waits: "), or
 * -1 when st lacks key. */
static inline double rig_stat(const char *st, const char *key)
{
	const char *l = strstr(st, key);
	return l ? atof(l + strlen(key)) : -1;
}

/* Mounts phosfs with the store at store (NULL: the rig's). */
static inline int rig_mount(rig *r, const char *store)
{
	char log[128];
	snprintf(log, sizeof(log), "%s/phosfs.log", r->dir);
	r->fs = fork();
	if (r->fs == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		dup2(fd, 2);
		if (r->fs_env)
			putenv(r->fs_env);
		const char *argv[24] = { "phosfs", "--socket", r->sock, "--store", store ? store : r->store,
					 "--criu", r->criu, "-f" };
		int n = 8;
		/* As people give it (phosfs also reads it from the environment). */
		const char *plugins = getenv("PHOS_CRIU_PLUGINS");
		if (plugins && *plugins) {
			argv[n++] = "--criu-plugins";
			argv[n++] = plugins;
		}
		for (int i = 0; i < 8 && r->opts[i]; i++)
			argv[n++] = r->opts[i];
		argv[n++] = r->mnt;
		execv(r->phosfs, (char *const *)argv);
		_exit(127);
	}
	char v[128];
	snprintf(v, sizeof(v), "%s/version", r->mnt);
	return rig_exists(v, 5000) ? 0 : -1;
}

/* Stops phosfs: with SIGTERM, or with SIGKILL (then the dead mount is
 * taken away). */
static inline void rig_unmount(rig *r, int sig)
{
	if (r->fs > 0) {
		kill(r->fs, sig);
		waitpid(r->fs, NULL, 0);
		r->fs = 0;
	}
	if (sig == SIGKILL)
		umount2(r->mnt, MNT_DETACH);
}

/* After a failed test: the last lines of phosfs's log, and of what each
 * job wrote (its own words on .out, its tracer's on .err; a line repeated
 * is shown once, with its count), as diagnostics, so that a CI log shows
 * their side too. */
static inline void rig_show_log(rig *r)
{
	char cmd[PATH_MAX + 512];
	snprintf(cmd, sizeof(cmd), "tail -n 30 %s/phosfs.log | sed 's/^/# phosfs: /' >&2", r->dir);
	if (system(cmd) != 0)
		diag("no phosfs log in %s", r->dir);
	snprintf(cmd, sizeof(cmd),
		 "for f in %s/run/*.out %s/run/*.err; do [ -s \"$f\" ] && tail -n 400 \"$f\" | uniq -c | tail -n 8 | "
		 "sed \"s|^ *\\([0-9]*\\) |# $(basename \"$f\") (\\1x): |\"; done >&2; true",
		 r->store, r->store);
	if (system(cmd) != 0)
		diag("cannot show the jobs' output in %s/run", r->store);
}

static inline void rig_cleanup(rig *r)
{
	rig_bailing = NULL;
	rig_unmount(r, SIGTERM);
	if (tap_failed)
		rig_show_log(r);
	const char *keep = getenv("PHOS_TEST_KEEP");
	if (keep && *keep) { /* for a look at the store and its logs */
		diag("kept %s", r->dir);
		return;
	}
	char cmd[160];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", r->dir);
	if (system(cmd) != 0)
		diag("could not remove %s", r->dir);
}

/* Starts `phos run -- CMD…` (stderr quiet); returns the pid it prints. */
static inline pid_t rig_phos_run(rig *r, char *const cmd[])
{
	int p[2];
	if (pipe(p))
		return -1;
	pid_t c = fork();
	if (c == 0) {
		close(p[0]);
		dup2(p[1], 1);
		int nul = open("/dev/null", O_WRONLY);
		dup2(nul, 2);
		char *argv[32] = { "phos", "run" };
		int n = 2;
		argv[n++] = r->host_pids ? "--host-pids" : "--pid-ns";
		argv[n++] = "--";
		for (int i = 0; cmd[i] && i < 27; i++)
			argv[n++] = cmd[i];
		execv(r->phos, argv);
		_exit(127);
	}
	close(p[1]);
	char buf[32] = "";
	ssize_t n = read(p[0], buf, sizeof(buf) - 1);
	close(p[0]);
	return n > 0 ? (pid_t)atoi(buf) : -1;
}

/* Starts examples/counter MIB under `phos run`; returns its pid. */
static inline pid_t rig_counter(rig *r, int mib)
{
	char arg[16];
	snprintf(arg, sizeof(arg), "%d", mib);
	char *const cmd[] = { r->counter, arg, NULL };
	return rig_phos_run(r, cmd);
}

/* Starts `phos run -- /bin/sh -c script`; returns the shell's pid. */
static inline pid_t rig_shell_job(rig *r, const char *script)
{
	char *const cmd[] = { "/bin/sh", "-c", (char *)script, NULL };
	return rig_phos_run(r, cmd);
}

/* Kills each of the n pids that is > 0 with SIGKILL, and reaps. */
static inline void rig_kill_all(const pid_t *pids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (pids[i] > 0)
			kill(pids[i], SIGKILL);
	rig_reap();
}

/* Path of a process's output file in the store. */
static inline void rig_out(rig *r, pid_t pid, char *out, size_t len)
{
	snprintf(out, len, "%s/run/%d.out", r->store, (int)pid);
}

/* Waits up to ms for a line of file to start with prefix; copies the
 * last such line into line. */
static inline int rig_line(const char *file, const char *prefix, int ms, char *line, size_t len)
{
	for (int i = 0; i <= ms / 50; i++) {
		FILE *f = fopen(file, "r");
		char l[256];
		int found = 0;
		while (f && fgets(l, sizeof(l), f))
			if (!strncmp(l, prefix, strlen(prefix))) {
				found = 1;
				if (line)
					snprintf(line, len, "%.*s", (int)strcspn(l, "\n"), l);
			}
		if (f)
			fclose(f);
		if (found)
			return 1;
		usleep(50000);
	}
	return 0;
}

/* The number of "count N" lines' last N in file (0 if none). */
static inline long rig_count(const char *file)
{
	char l[256] = "";
	if (!rig_line(file, "count ", 0, l, sizeof(l)))
		return 0;
	return atol(l + 6);
}

/* Whether the counter's output goes past count c0 within ms. */
static inline int rig_counts_past(const char *file, long c0, int ms)
{
	for (int i = 0; i <= ms / 100; i++) {
		if (rig_count(file) > c0)
			return 1;
		usleep(100000);
	}
	return 0;
}

/* Writes cmd to a ctl file; returns 0 or the errno. */
static inline int rig_ctl(const char *path, const char *cmd, size_t len)
{
	int fd = open(path, O_WRONLY);
	if (fd < 0)
		return errno;
	ssize_t n = write(fd, cmd, len);
	int e = n < 0 ? errno : 0;
	close(fd);
	return e;
}

/* Reads a file of the mount into buf. */
static inline char *rig_read(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return NULL;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	return n >= 0 ? buf : NULL;
}

/* Waits until the process's job ends; returns status's "last job" line. */
static inline int rig_job_done(rig *r, pid_t pid, int ms, char *last, size_t len)
{
	char path[160], st[4096];
	snprintf(path, sizeof(path), "%s/%d/status", r->mnt, (int)pid);
	for (int i = 0; i <= ms / 50; i++) {
		if (rig_read(path, st, sizeof(st)) && strstr(st, "job: none\n")) {
			char *l = strstr(st, "last job: ");
			snprintf(last, len, "%.*s", l ? (int)strcspn(l, "\n") : 0, l ? l : "");
			return 1;
		}
		usleep(50000);
	}
	return 0;
}

/* Waits up to ms for pid's status to say it is traced (its tracer has
 * registered): 1, or 0. */
static inline int rig_traced(rig *r, pid_t pid, int ms)
{
	char path[160], st[8192];
	snprintf(path, sizeof(path), "%s/%d/status", r->mnt, (int)pid);
	for (int t = 0; t <= ms; t += 20, usleep(20000))
		if (rig_read(path, st, sizeof(st)) && strstr(st, "traced: yes"))
			return 1;
	return 0;
}

/* Writes cmd to the mount's ctl, opened for reading too, and reads back
 * its answer into reply ("restore 3", or "error: …"); 0 or the write's
 * errno. */
static inline int rig_ctl_answer(rig *r, const char *cmd, char *reply, size_t len)
{
	char ctl[160];
	snprintf(ctl, sizeof(ctl), "%s/ctl", r->mnt);
	*reply = 0;
	int fd = open(ctl, O_RDWR);
	if (fd < 0)
		return errno;
	ssize_t n = write(fd, cmd, strlen(cmd));
	int e = n < 0 ? errno : 0;
	ssize_t got = read(fd, reply, len - 1);
	reply[got > 0 ? got : 0] = 0;
	close(fd);
	return e;
}

/* Follows restore id (/restores/ID, into st) until its tree runs, or with
 * full until it has ended, for up to ms. Its state: "resumed", "done",
 * "failed", or "" when it did neither in time. */
static inline const char *rig_restore_follow(rig *r, unsigned id, int full, int ms, char *st, size_t len)
{
	char path[160];
	snprintf(path, sizeof(path), "%s/restores/%u", r->mnt, id);
	for (int t = 0; t <= ms; t += 2) {
		if (!rig_read(path, st, len))
			return "";
		if (strstr(st, "state: failed"))
			return "failed";
		if (strstr(st, "state: done"))
			return "done";
		if (!full && strstr(st, "state: resumed"))
			return "resumed";
		usleep(2000);
	}
	return "";
}

/* Asks for restore cmd ("restore DIR …\n") and waits until its tree runs;
 * *pid is its pid. 0, or the ctl write's errno, or the failed restore's
 * (st says why), or ETIMEDOUT. st: /restores/ID as it was last. */
static inline int rig_restore_cmd(rig *r, const char *cmd, pid_t *pid, char *st, size_t len)
{
	char reply[1024];
	unsigned id = 0;
	*st = 0;
	int e = rig_ctl_answer(r, cmd, reply, sizeof(reply));
	if (e) {
		snprintf(st, len, "%s", reply);
		return e;
	}
	if (sscanf(reply, "restore %u", &id) != 1)
		return EPROTO;
	const char *how = rig_restore_follow(r, id, 0, 120000, st, len);
	if (!*how)
		return ETIMEDOUT;
	if (!strcmp(how, "failed")) {
		const char *no = strstr(st, "errno: ");
		return no && atoi(no + 7) > 0 ? atoi(no + 7) : EIO;
	}
	const char *at = strstr(st, "restored pid: ");
	int back = at ? atoi(at + 14) : 0;
	if (back <= 0)
		return ESRCH;
	*pid = back;
	return 0;
}

/* Restores the image at dir through /ctl (in r->restore_mode); 0 when
 * status then names the restored process, whose pid goes to *pid: a job
 * of `phos run` comes back in a pid namespace of its own, under another
 * pid than the one it had. Else an errno (the status is left in st). A
 * lazy restore returns once the process runs; its memory may still be
 * coming back. */
static inline int rig_restore(rig *r, const char *dir, pid_t *pid, char *st, size_t len)
{
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "restore %s%s%s\n", dir, r->restore_mode ? " " : "",
		 r->restore_mode ? r->restore_mode : "");
	return rig_restore_cmd(r, cmd, pid, st, len);
}

/* Kills *pid with -9 and waits until it is gone; then, when img (the
 * image at dir verified), restores it. 1 when the process runs again, as
 * *pid. */
static inline int rig_kill_restore(rig *r, pid_t *pid, int img, const char *dir, char *st, size_t len)
{
	kill(*pid, SIGKILL);
	for (int k = 0; k < 100 && rig_alive(*pid); k++)
		usleep(20000);
	rig_reap();
	return img && rig_restore(r, dir, pid, st, len) == 0 && rig_alive(*pid);
}

/* The end of an iteration of a checkpoint loop: removes the image before
 * this one (prev, PATH_MAX) and keeps image as prev. When the process
 * could not be restored (back false), reports the iterations after it,
 * up to iters, as not run and returns 0: the loop ends. */
static inline int rig_next_iteration(char *prev, const char *image, int back, const char *st, int it, int iters)
{
	if (*prev) {
		char rm[PATH_MAX + 16];
		snprintf(rm, sizeof(rm), "rm -rf '%s'", prev);
		if (system(rm) != 0)
			diag("could not remove %s", prev);
	}
	snprintf(prev, PATH_MAX, "%s", image);
	if (back)
		return 1;
	diag("the process could not be restored: %s", st);
	for (int k = it + 1; k < iters; k++)
		ok(0, "iteration %d: not run (no process to checkpoint)", k);
	return 0;
}

/* Waits up to ms for the restore in progress to end (status says
 * "fully restored ms"); its status is left in st. 1 when it did. */
static inline int rig_restore_done(rig *r, int ms, char *st, size_t len)
{
	char status[160];
	snprintf(status, sizeof(status), "%s/status", r->mnt);
	for (int t = 0; t < ms; t += 20) {
		if (rig_read(status, st, len) && strstr(st, "job: none") && strstr(st, "fully restored ms: "))
			return 1;
		usleep(20000);
	}
	return 0;
}

/* Whether the image at path opens and verifies. */
static inline int rig_verify(const char *path)
{
	phosimg *img;
	if (phosimg_open(path, &img))
		return 0;
	int e = phosimg_verify(img);
	phosimg_close(img);
	return e == 0;
}

/* tests/apps/cow_app and its cubin into app and cubin (PATH_MAX each), or
 * skips the whole test. */
static inline void rig_cow_app_paths(char *app, char *cubin)
{
	snprintf(app, PATH_MAX, "%s", test_path("PHOS_COW_APP", "apps/cow_app"));
	snprintf(cubin, PATH_MAX, "%s/cow.cubin", test_path("PHOS_KERNELS", "../kernels"));
	if (access(app, X_OK) || access(cubin, R_OK))
		skip_all("tests/apps/cow_app or its cubin is not built (the cubin needs nvcc)");
}

/* Writes an executable script at path, its text fmt; bails if it cannot. */
__attribute__((format(printf, 2, 3))) static inline void rig_script(const char *path, const char *fmt, ...)
{
	FILE *f = fopen(path, "w");
	if (!f)
		bail("cannot write %s", path);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	if (fclose(f) || chmod(path, 0755))
		bail("cannot write %s", path);
}

/* The test program tests/<rel> (env names it elsewhere) into app
 * (PATH_MAX), or skips the whole test when it is not built. */
static inline void rig_app_path(const char *env, const char *rel, char *app)
{
	snprintf(app, PATH_MAX, "%s", test_path(env, rel));
	if (access(app, X_OK)) {
		char why[PATH_MAX + 32];
		snprintf(why, sizeof(why), "tests/%s is not built", rel);
		skip_all(why);
	}
}

/* Starts cmd under phos run, its output's path into out (PATH_MAX), and
 * waits up to ms for its 200th operation ("ops 200", as cow_app and
 * host_writer say it), then for status to show it traced. Returns its
 * pid, or -1 if it did not get that far. */
static inline pid_t rig_app_up(rig *r, char *const cmd[], int ms, char *out)
{
	pid_t pid = rig_phos_run(r, cmd);
	char status[160], st[4096] = "";
	rig_out(r, pid, out, PATH_MAX);
	snprintf(status, sizeof(status), "%s/%d/status", r->mnt, (int)pid);
	int up = pid > 0 && rig_line(out, "ops 200", ms, NULL, 0);
	for (int i = 0; i < 100 && up && !(rig_read(status, st, sizeof(st)) && strstr(st, "traced: yes")); i++)
		usleep(50000);
	return up && strstr(st, "traced: yes") ? pid : -1;
}

/* Starts `cow_app CUBIN MIB SEED` under phos run: rig_app_up. */
static inline pid_t rig_cow_app(rig *r, char *app, char *cubin, char *mib, char *seed, int ms)
{
	char *const cmd[] = { app, cubin, mib, seed, NULL };
	char out[PATH_MAX];
	return rig_app_up(r, cmd, ms, out);
}

/* pid's state letter and parent, from /proc/PID/stat; state 0 and
 * parent 0 if unknown. */
static inline char rig_proc_stat(pid_t pid, pid_t *parent)
{
	char path[64], buf[512] = "";
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = 0;
	char *close = strrchr(buf, ')');
	char state = 0;
	int pp = 0;
	if (!close || sscanf(close + 1, " %c %d", &state, &pp) != 2)
		state = 0, pp = 0;
	if (parent)
		*parent = (pid_t)pp;
	return state;
}

/* pid's children, of every thread (each thread's
 * /proc/PID/task/TID/children): up to max of them into out; how many
 * there are. */
static inline int rig_children(pid_t pid, pid_t *out, int max)
{
	char path[96];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	int n = 0;
	for (struct dirent *t; d && (t = readdir(d));) {
		if (t->d_name[0] == '.')
			continue;
		char p[PATH_MAX], buf[4096] = "";
		snprintf(p, sizeof(p), "%s/%s/children", path, t->d_name);
		FILE *f = fopen(p, "r");
		size_t got = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
		if (f)
			fclose(f);
		buf[got] = 0;
		for (char *s = strtok(buf, " \n"); s; s = strtok(NULL, " \n")) {
			if (n < max)
				out[n] = (pid_t)atoi(s);
			n++;
		}
	}
	if (d)
		closedir(d);
	return n;
}

/* pid's parent; 0 if unknown. */
static inline pid_t rig_parent(pid_t pid)
{
	pid_t pp;
	rig_proc_stat(pid, &pp);
	return pp;
}

/* Waits up to ms for pid's state letter to be state ('T' stopped, 'Z' a
 * zombie); true if it came. */
static inline bool rig_state_within(pid_t pid, char state, int ms)
{
	for (int waited = 0; waited < ms; waited += 10) {
		if (rig_proc_stat(pid, NULL) == state)
			return true;
		usleep(10000);
	}
	return rig_proc_stat(pid, NULL) == state;
}

/* The root of pid's job as CRIU dumps it: phos's init, pid's parent, when
 * pid runs in a pid namespace of its own; else pid. */
static inline pid_t rig_job_root(pid_t pid)
{
	char path[64], comm[32] = "";
	pid_t pp = rig_parent(pid);
	if (pp <= 1)
		return pid;
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pp);
	FILE *f = fopen(path, "r");
	if (f && !fgets(comm, sizeof(comm), f))
		*comm = 0;
	if (f)
		fclose(f);
	return strcmp(comm, "phos-init\n") ? pid : (pid_t)pp;
}

/* The pid a restore's status (st) names: "restored pid: N"; 0 if none. */
static inline pid_t rig_restored(const char *st)
{
	const char *at = strstr(st, "restored pid: ");
	return at ? (pid_t)atoi(at + 14) : 0;
}

/* pid's ctl and status files (160 bytes each): again after a restore,
 * which may give the process another pid. */
static inline void rig_files(rig *r, pid_t pid, char *ctl, char *status)
{
	snprintf(ctl, 160, "%s/%d/ctl", r->mnt, (int)pid);
	snprintf(status, 160, "%s/%d/status", r->mnt, (int)pid);
}

/* Mounts phosfs (with r->opts) and starts cow_app on 24 MiB under phos,
 * with a seed from the clock that it prints; fills out (its output), ctl
 * and status (its files). Reports the start as a test; bails out when
 * either fails. */
static inline pid_t rig_cow_start(rig *r, char *out, char *ctl, char *status)
{
	char app[PATH_MAX], cubin[PATH_MAX];
	rig_cow_app_paths(app, cubin);
	if (rig_mount(r, NULL))
		bail("phosfs did not mount");
	unsigned seed = (unsigned)time(NULL);
	diag("seed %u", seed);
	srand(seed);
	char seed_s[16];
	snprintf(seed_s, sizeof(seed_s), "%u", seed);
	pid_t pid = rig_cow_app(r, app, cubin, "24", seed_s, 20000);
	rig_out(r, pid, out, PATH_MAX);
	rig_files(r, pid, ctl, status);
	ok(pid > 0, "cow_app runs under the tracer");
	if (pid <= 0)
		bail("cow_app did not start (%s)", out);
	return pid;
}

/* Asks cow_app pid (output in out) to check its device memory, and waits
 * up to ms for one more "verify ok" line than *before (which it counts
 * on); 0 on "verify FAILED" or none. */
static inline int rig_cow_verified(pid_t pid, const char *out, int *before, int ms)
{
	kill(pid, SIGUSR1);
	for (int i = 0; i <= ms / 25; i++, usleep(25000)) {
		FILE *f = fopen(out, "r");
		char l[256];
		int n = 0, bad = 0;
		while (f && fgets(l, sizeof(l), f)) {
			n += !strncmp(l, "verify ok", 9);
			if (!strncmp(l, "verify FAILED", 13)) {
				diag("%s", l);
				bad = 1;
			}
		}
		if (f)
			fclose(f);
		if (bad)
			return 0;
		if (n > *before) {
			*before = n;
			return 1;
		}
	}
	diag("no verify line from %d", (int)pid);
	return 0;
}

/* Writes cmd ("checkpoint …\n") to pid's ctl and waits up to 60 s for
 * the job to end, its "last job" line into last: 1 when it ended done. */
static inline int rig_checkpoint(rig *r, pid_t pid, const char *cmd, char *last, size_t len)
{
	char ctl[160], status[160];
	rig_files(r, pid, ctl, status);
	*last = 0;
	return rig_ctl(ctl, cmd, strlen(cmd)) == 0 && rig_job_done(r, pid, 60000, last, len) && strstr(last, "done");
}

/* The pid of the job process checkpointing pid's job, or 0. */
static inline pid_t rig_checkpoint_job(pid_t pid)
{
	char cmd[128], line[32] = "";
	snprintf(cmd, sizeof(cmd), "pgrep -f -- '--job stop --pid %d '", (int)rig_job_root(pid));
	FILE *p = popen(cmd, "r");
	if (p && !fgets(line, sizeof(line), p))
		line[0] = 0;
	if (p)
		pclose(p);
	return (pid_t)atoi(line);
}

#endif
