/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phos run (run.h): a job in a pid namespace of its own.
 *
 *   phos run ──fork──> init (pid 1 of a new pid namespace, in a mount
 *                        │  namespace of its own with a /proc of its pid
 *                        │  namespace and a /dev/shm of its own;
 *                        │  PHOS_JOB=1; stdio /dev/null, its
 *                        │  own session)
 *                        └──fork──> the job (pid 2; LD_PRELOAD=libphos.so;
 *                                   output to STORE/run/<host pid>.out/.err)
 *
 * The init is this same program again (run_init), so that its
 * environment holds the mark; CRIU dumps it with the tree (and its mount
 * namespace: the /proc and /dev/shm, the rest as external mounts) and
 * restores it into new namespaces, where it goes on waiting for its job.
 * The job tells phos run its host pid (from the host's /proc, which the
 * init keeps open until the job has started) through a pipe closed on
 * exec, or why it could not start.
 *
 * The /proc of its own is what the CUDA driver needs: it opens
 * /proc/<getpid()>/…, which in the host's /proc is another process. The
 * /dev/shm of its own (a tmpfs) is what the job shares there by name,
 * which CRIU saves with it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "run.h"

/* The init's job, for its signal handlers. */
static volatile pid_t init_job;

static void pass_on(int sig)
{
	if (init_job > 0)
		kill(init_job, sig);
}

/* Our pid as the host's /proc names it: proc, an fd of the host's /proc,
 * or -1 where /proc is the host's. */
static pid_t host_pid(int proc)
{
	char buf[32];
	ssize_t n = readlinkat(proc >= 0 ? proc : AT_FDCWD, proc >= 0 ? "self" : "/proc/self", buf, sizeof(buf) - 1);
	if (n <= 0)
		return getpid();
	buf[n] = 0;
	return (pid_t)atoi(buf);
}

/* In the job's process: output to the store, the tracer preloaded,
 * argv run. Tells `ready` its pid (read from proc: see host_pid), or why
 * it failed, and never returns. */
/* The descriptors from 3 on that go to the job: systemd's socket
 * activation ($LISTEN_FDS of them, 1 to 64), or none. */
static unsigned passed_fds(void)
{
	const char *v = getenv("LISTEN_FDS");
	int n = v ? atoi(v) : 0;
	return n > 0 && n <= 64 ? (unsigned)n : 0;
}

/* Closes every descriptor from 3 on but the passed ones and keep: those
 * phos run inherited are no business of the job's, and CRIU cannot dump
 * one of a mount outside the job's namespace. */
static void close_others(int keep)
{
	unsigned lo = 3 + passed_fds();
	if (keep > (int)lo)
		close_range(lo, (unsigned)keep - 1, 0);
	close_range(keep >= (int)lo ? (unsigned)keep + 1 : lo, ~0u, 0);
}

static void exec_job(char *const argv[], const run_opts *o, int ready, int proc, bool mark)
{
	pid_t self = host_pid(proc);
	close_others(ready);
	char out[PATH_MAX + 32], err[PATH_MAX + 32];
	snprintf(out, sizeof(out), "%s/run/%d.out", o->store, (int)self);
	snprintf(err, sizeof(err), "%s/run/%d.err", o->store, (int)self);
	int in = open("/dev/null", O_RDONLY);
	int fo = open(out, O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0644);
	int fe = open(err, O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0644);
	if (in < 0 || fo < 0 || fe < 0) {
		dprintf(ready, "cannot open %s: %s", fo < 0 ? out : fe < 0 ? err : "/dev/null", strerror(errno));
		_exit(127);
	}
	dup2(in, 0);
	dup2(fo, 1);
	dup2(fe, 2);
	close(in), close(fo), close(fe);
	if (mark) {
		/* The root's mark: without an init, the job is the root. */
		char job[32];
		snprintf(job, sizeof(job), "%d", (int)getpid());
		setenv("PHOS_JOB", job, 1);
	} else {
		unsetenv("PHOS_JOB");
	}
	const char *pre = getenv("LD_PRELOAD");
	char *preload = malloc(strlen(o->libphos) + (pre ? strlen(pre) : 0) + 2);
	if (preload) {
		sprintf(preload, "%s%s%s", o->libphos, pre && *pre ? ":" : "", pre && *pre ? pre : "");
		setenv("LD_PRELOAD", preload, 1);
		free(preload);
	}
	if (passed_fds()) { /* they are the job's now (sd_listen_fds checks) */
		char me[16];
		snprintf(me, sizeof(me), "%d", (int)getpid());
		setenv("LISTEN_PID", me, 1);
	}
	dprintf(ready, "pid %d", (int)self);
	execvp(argv[0], argv);
	dprintf(ready, "\ncannot run %s: %s", argv[0], strerror(errno));
	_exit(127);
}

void run_passed_signals(sigset_t *set)
{
	static const int sigs[] = { SIGHUP,  SIGINT,   SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2,
				    SIGCONT, SIGWINCH, SIGALRM, SIGXCPU, SIGPWR };
	sigemptyset(set);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(*sigs); i++)
		sigaddset(set, sigs[i]);
}

int run_status_path(const char *store, pid_t root, char *path, size_t len)
{
	char link[64], ns[64];
	if (root > 0)
		snprintf(link, sizeof(link), "/proc/%d/ns/pid", (int)root);
	else
		snprintf(link, sizeof(link), "/proc/self/ns/pid");
	ssize_t n = readlink(link, ns, sizeof(ns) - 1);
	if (n <= 0)
		return -errno;
	ns[n] = 0;
	unsigned long ino = 0;
	if (sscanf(ns, "pid:[%lu]", &ino) != 1)
		return -EPROTO;
	snprintf(path, len, "%s/run/ns-%lu.status", store, ino);
	return 0;
}

/* In the init, once its job has ended: says how (code, the init's exit
 * status) in its status file, whole or not at all. */
static void say_status(const char *store, int code)
{
	char path[PATH_MAX], tmp[PATH_MAX + 16];
	if (run_status_path(store, 0, path, sizeof(path)))
		return;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	bool ok = dprintf(fd, "%d\n", code) > 0;
	if (close(fd) || !ok || rename(tmp, path))
		unlink(tmp);
}

/* The init: starts the job, passes signals on to it, reaps every orphan
 * of the namespace, and ends with the job's status, which it also writes
 * in its status file (run_status_path): after a restore, it is no child
 * of the phos run that follows it. proc (the host's /proc) is closed once
 * the job has its pid from it: CRIU cannot dump an fd of a mount outside
 * the job's namespace. */
static int init_main(char *const argv[], const run_opts *o, int ready, int proc)
{
	int nul = open("/dev/null", O_RDWR);
	if (nul >= 0) {
		dup2(nul, 0);
		dup2(nul, 1);
		dup2(nul, 2);
		if (nul > 2)
			close(nul);
	}
	sigset_t passed;
	run_passed_signals(&passed);
	struct sigaction sa = { .sa_handler = pass_on, .sa_flags = SA_RESTART };
	sigemptyset(&sa.sa_mask);
	for (int sig = 1; sig < NSIG; sig++)
		if (sigismember(&passed, sig) == 1)
			sigaction(sig, &sa, NULL);
	pid_t job = fork();
	if (job == 0)
		exec_job(argv, o, ready, proc, false);
	close(proc);
	if (job < 0) {
		dprintf(ready, "cannot start %s: %s", argv[0], strerror(errno));
		return 127;
	}
	init_job = job;
	close(ready);
	for (;;) {
		int st;
		pid_t p = waitpid(-1, &st, 0);
		if (p < 0 && errno == EINTR)
			continue;
		if (p < 0)
			return 127;
		if (p == job) {
			int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			say_status(o->store, code);
			return code;
		}
	}
}

int run_init(int argc, char **argv)
{
	/* phos-init FD PROCFD STORE LIBPHOS -- CMD... */
	if (argc < 7 || strcmp(argv[5], "--"))
		return 2;
	int ready = atoi(argv[1]), proc = atoi(argv[2]);
	prctl(PR_SET_NAME, "phos-init");
	fcntl(ready, F_SETFD, FD_CLOEXEC);
	fcntl(proc, F_SETFD, FD_CLOEXEC);
	run_opts o = { .store = argv[3], .libphos = argv[4] };
	return init_main(argv + 6, &o, ready, proc);
}

/* Gives the job a /dev/shm of its own: an empty tmpfs as large as the
 * machine's, in place of the copy of the machine's (when there is one).
 * What the job's processes share there by name (POSIX semaphores and
 * shared memory: multiprocessing's locks, PyTorch's CUDA IPC reference
 * counts) is then the job's: CRIU saves that tmpfs's files in the image
 * and a restore, a clone beside its original too, gets them back in a
 * /dev/shm of its own. Returns 0, or -errno with *step set. */
static int own_shm(const char **step)
{
	struct statvfs vs;
	if (statvfs("/dev/shm", &vs) != 0)
		return 0; /* no /dev/shm here: none there either */
	char opts[64];
	snprintf(opts, sizeof(opts), "mode=1777,size=%llu", (unsigned long long)vs.f_blocks * vs.f_frsize);
	if (umount2("/dev/shm", MNT_DETACH) != 0 && errno != EINVAL) {
		*step = "unmounting the machine's /dev/shm";
		return -errno;
	}
	if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0) {
		*step = "mounting a tmpfs on /dev/shm";
		return -errno;
	}
	return 0;
}

/* Gives this process (pid 1 of its pid namespace) a mount namespace of
 * its own, its mounts private copies of ours, with a /proc of its pid
 * namespace, a /dev/shm of its own (own_shm) and without phosfs's mount
 * (mnt): a copy of that would outlive the phosfs it belongs to, and CRIU
 * cannot dump a dead FUSE mount. *proc is an fd of the host's /proc,
 * opened before. Returns 0, or -errno with why saying which step failed. */
static int own_proc(const char *mnt, int *proc, char *why, size_t whylen)
{
	*proc = open("/proc", O_PATH | O_DIRECTORY);
	const char *step = *proc < 0 ? "opening /proc" : NULL;
	if (!step && unshare(CLONE_NEWNS) != 0)
		step = "unsharing the mount namespace";
	else if (!step && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		step = "making its mounts private";
	else if (!step && mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
		step = "mounting /proc";
	else if (!step && mnt && *mnt && umount2(mnt, MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT)
		step = "unmounting phosfs";
	else if (!step)
		own_shm(&step);
	if (!step)
		return 0;
	int e = -errno;
	snprintf(why, whylen, "cannot give the job a /proc and /dev/shm of its own (%s: %s)", step, strerror(-e));
	return e;
}

/* In pid 1 of the new namespace: becomes the init, by exec, so that its
 * environment (/proc/PID/environ) carries the mark of a job's root,
 * PHOS_JOB=1. Never returns. */
static void exec_init(char *const argv[], const run_opts *o, int ready)
{
	setsid();
	/* Nothing of phos run's but the pipe (and what socket activation
	 * passes) goes on into the job. */
	close_others(ready);
	int fd = fcntl(ready, F_SETFD, 0) == 0 ? ready : -1;
	char why[256];
	int proc;
	if (own_proc(o->mount, &proc, why, sizeof(why))) {
		dprintf(ready, "%s", why);
		_exit(127);
	}
	char fds[16], procs[16];
	snprintf(fds, sizeof(fds), "%d", fd);
	snprintf(procs, sizeof(procs), "%d", proc);
	size_t n = 0;
	while (argv[n])
		n++;
	char **v = calloc(n + 7, sizeof(*v));
	if (fd < 0 || !v) {
		dprintf(ready, "cannot start the job's init: %s", strerror(errno));
		_exit(127);
	}
	v[0] = "phos-init";
	v[1] = fds;
	v[2] = procs;
	v[3] = (char *)o->store;
	v[4] = (char *)o->libphos;
	v[5] = "--";
	memcpy(v + 6, argv, n * sizeof(*v));
	setenv("PHOS_JOB", "1", 1);
	/* By its name: /proc/self/exe itself would open the file on the
	 * mount of the namespace we left, which CRIU cannot find. */
	char self[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[len > 0 ? len : 0] = 0;
	execv(len > 0 ? self : "/proc/self/exe", v);
	dprintf(ready, "cannot start the job's init (%s): %s", len > 0 ? self : "/proc/self/exe", strerror(errno));
	_exit(127);
}

int run_job(char *const argv[], const run_opts *o, pid_t *job, pid_t *root, char *why, size_t whylen, char *msg,
	    size_t msglen)
{
	int ready[2];
	*msg = 0;
	if (why)
		*why = 0;
	if (pipe2(ready, O_CLOEXEC) != 0) {
		snprintf(msg, msglen, "pipe: %s", strerror(errno));
		return -errno;
	}
	bool own_ns = false;
	if (o->pid_ns) {
		own_ns = unshare(CLONE_NEWPID) == 0;
		if (!own_ns && why)
			snprintf(why, whylen, "cannot give the job a pid namespace of its own (%s)", strerror(errno));
	}
	pid_t c = fork();
	if (c < 0) {
		int e = -errno;
		snprintf(msg, msglen, "fork: %s", strerror(-e));
		close(ready[0]);
		close(ready[1]);
		return e;
	}
	if (c == 0) {
		close(ready[0]);
		if (o->mask) /* what phos run blocked, to read it from a signalfd */
			sigprocmask(SIG_SETMASK, o->mask, NULL);
		if (own_ns)
			exec_init(argv, o, ready[1]);
		setsid();
		exec_job(argv, o, ready[1], -1, true);
	}
	close(ready[1]);
	char said[PATH_MAX + 128];
	size_t len = 0;
	for (ssize_t n; len < sizeof(said) - 1 && (n = read(ready[0], said + len, sizeof(said) - 1 - len)) != 0;) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		len += (size_t)n;
	}
	close(ready[0]);
	said[len] = 0;
	int pid = 0;
	char *nl = strchr(said, '\n');
	if (sscanf(said, "pid %d", &pid) != 1 || pid <= 0 || nl) {
		snprintf(msg, msglen, "%s", nl ? nl + 1 : *said ? said : "the job did not start");
		waitpid(c, NULL, 0);
		return -ENOEXEC;
	}
	*job = pid;
	*root = c;
	return 0;
}
