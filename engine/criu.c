/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Running CRIU. Its log goes to a file; when it fails, the first error it
 * logged becomes the job's error.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/procstatus.h"
#include "criu.h"
#include "criu-image.h"
#include "fuse-wait.h"
#include "progress.h"

const char *engine_criu_plugins;

/* Error lines CRIU prints on these machines that are no error of the
 * dump: they never explain a failure. */
static const char *const harmless[] = {
	"Can't setup RLIMIT_NOFILE for self", /* without CAP_SYS_RESOURCE */
	"Unable to create tun",               /* probing, where /dev/net/tun is missing */
};

/* The message of an "Error (file:line): message" log line, or NULL. */
static char *error_message(char *line)
{
	char *at = strstr(line, "Error (");
	if (!at)
		return NULL;
	char *msg = strstr(at, "): ");
	msg = msg ? msg + 3 : at;
	msg[strcspn(msg, "\n")] = 0;
	for (size_t i = 0; i < sizeof(harmless) / sizeof(*harmless); i++)
		if (strstr(msg, harmless[i]))
			return NULL;
	return msg;
}

/* The file mapped at addr in pid, from /proc (the process still runs
 * after a failed dump), into path; "" if unknown. */
static void mapped_file(pid_t pid, unsigned long long addr, char *path, size_t len)
{
	char p[64], line[1024];
	snprintf(p, sizeof(p), "/proc/%d/maps", (int)pid);
	*path = 0;
	FILE *f = fopen(p, "re");
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi;
		int off = 0;
		if (sscanf(line, "%llx-%llx %*s %*s %*s %*s %n", &lo, &hi, &off) < 2 || addr < lo || addr >= hi)
			continue;
		if (off > 0)
			snprintf(path, len, "%.*s", (int)strcspn(line + off, "\n"), line + off);
		break;
	}
	if (f)
		fclose(f);
}

/* CRIU's first real error line in log, malloc'd (NULL if none); where
 * there is none but an image CRIU needed was missing, its name goes to
 * missing (len bytes). */
static char *first_error(const char *log, char *missing, size_t len)
{
	*missing = 0;
	FILE *f = fopen(log, "re");
	if (!f)
		return NULL;
	char line[1024], *msg = NULL;
	while (!msg && fgets(line, sizeof(line), f)) {
		msg = error_message(line);
		/* Logged at info level: an image CRIU needed was not there. */
		char *no = strstr(line, "No pagemap-");
		if (!msg && no && !*missing)
			snprintf(missing, len, "%.*s", (int)strcspn(no + 3, " \n"), no + 3);
	}
	fclose(f);
	return msg ? strdup(msg) : NULL;
}

/* "Can't handle non-regular mapping on PID's map ADDR": what is mapped
 * there, and what to do. */
static void explain_mapping(const char *msg, int mpid, unsigned long long a, char *out, size_t len)
{
	char file[512], what[600];
	mapped_file(mpid, a, file, sizeof(file));
	if (!*file)
		snprintf(file, sizeof(file), "a device");
	if (!strncmp(file, "/dev/nvidia", 11))
		snprintf(what, sizeof(what),
			 "process %d is a forked child of a CUDA process (such as a PyTorch DataLoader worker), "
			 "which keeps the parent's %s mapped at 0x%llx; phos's CRIU plugin handles it, but this "
			 "CRIU ran without it: start phosfs with --criu-plugins DIR",
			 mpid, file, a);
	else
		snprintf(what, sizeof(what),
			 "process %d maps %s at 0x%llx, which CRIU cannot save: such a process cannot be "
			 "checkpointed",
			 mpid, file, a);
	snprintf(out, len, "%s: %s", msg, what);
}

/* Advice for the errors that name their own cause in sockets and pids;
 * false if msg is none of them. */
static bool explain_sockets(const char *msg, char *out, size_t len)
{
	int mpid = 0;
	if (strstr(msg, "external") && strstr(msg, "unix"))
		snprintf(out, len,
			 "%s: a process of the tree has a unix socket connected to a process outside it; CRIU "
			 "cannot save that: checkpoint the job that holds both ends",
			 msg);
	else if (sscanf(msg, "Can't fork for %d: File exists", &mpid) == 1)
		snprintf(out, len,
			 "%s: process %d of the image cannot have its pid back, which another process holds now; CRIU "
			 "restores every process with its old pid: end that process first",
			 msg, mpid);
	else if (strstr(msg, "In-flight connection"))
		snprintf(out, len,
			 "%s: a listening TCP socket of the tree has connections it has not accepted yet, which CRIU "
			 "cannot save (their clients would be cut off): checkpoint again once the server has "
			 "accepted them",
			 msg);
	else if ((strstr(msg, "Can't bind inet socket") && strstr(msg, "Address already in use")) ||
		 (strstr(msg, "Can't connect inet socket back") && strstr(msg, "Cannot assign requested address")))
		snprintf(out, len,
			 "%s: a TCP or UDP socket of the image cannot have its address and port back: they are in "
			 "use on this machine, by the original process if it still runs, by another program, or, "
			 "for a minute after the original ended, by its closed connections (TIME_WAIT; a server "
			 "that sets SO_REUSEADDR does not wait for those); end what holds them, or restore where "
			 "they are free",
			 msg);
	else if (strstr(msg, "is not a session leader"))
		snprintf(out, len, "%s: start the job with `phos run`, which makes it a session of its own", msg);
	else
		return false;
	return true;
}

void criu_explain(const char *log, pid_t pid, char *out, size_t len)
{
	*out = 0;
	char missing[256], file[512];
	char *msg = first_error(log, missing, sizeof(missing));
	if (!msg && *missing)
		snprintf(out, len,
			 "CRIU found no %s, which a restored process reads once inside its own mount namespace: the "
			 "image's files must be reachable there",
			 missing);
	if (!msg)
		return;
	unsigned long long a = 0, b = 0;
	int mpid = 0;
	if (sscanf(msg, "File %510s has bad size %llu (expect %llu)", file + 1, &a, &b) == 3) {
		/* CRIU names files relative to the root. */
		file[0] = '/';
		const char *abs = file[1] == '/' ? file + 1 : file;
		snprintf(out, len,
			 "%s: the process's file %s changed size after the checkpoint (%llu bytes now, %llu in the "
			 "image); CRIU cannot restore a file that changed size: run programs under `phos run`, "
			 "which keeps their output where CRIU can restore it",
			 msg, abs, a, b);
	} else if (sscanf(msg, "Can't open file %510s on restore: No such file", file + 1) == 1) {
		file[0] = '/';
		const char *abs = file[1] == '/' ? file + 1 : file;
		bool shm = !strncmp(abs, "/dev/shm/", 9);
		snprintf(out, len,
			 "%s: the image names the file %s, which is gone; CRIU saves a file the job opened by its "
			 "name only%s",
			 msg, abs,
			 shm ? ", and the job's /dev/shm was the machine's: a job started with `phos run --pid-ns` "
			       "has a /dev/shm of its own, which its image carries"
			     : ": put it back, or restore where it is");
	} else if (strstr(msg, "Can't get rlimit") && strstr(msg, "not permitted")) {
		snprintf(out, len,
			 "%s: CRIU may not read the limits of process %d, which belongs to another user, because "
			 "phosfs lacks CAP_SYS_RESOURCE here; run the job as phosfs's user, or give phosfs "
			 "CAP_SYS_RESOURCE",
			 msg, (int)pid);
	} else if (sscanf(msg, "Can't handle non-regular mapping on %d's map %llx", &mpid, &a) == 2) {
		explain_mapping(msg, mpid, a, out, len);
	} else if (strstr(msg, "Can't dump file") && strstr(msg, "of that type")) {
		snprintf(out, len,
			 "%s: a process of the tree holds a file CRIU cannot save (a device, named by its major:minor); "
			 "close it before checkpointing, or, for /dev/nvidia* files of a forked child of a CUDA "
			 "process, start phosfs with --criu-plugins DIR",
			 msg);
	} else if (!explain_sockets(msg, out, len)) {
		snprintf(out, len, "%s", msg);
	}
	free(msg);
}

void criu_limits(char *out, size_t len)
{
	*out = 0;
	char caps[32];
	unsigned long long eff = proc_self_status_field("CapEff", caps, sizeof(caps)) ? ~0ull : strtoull(caps, NULL, 16);
	if (geteuid() != 0)
		snprintf(out, len, "phosfs is not root: CRIU cannot checkpoint or restore anything.");
	else if (!(eff & (1ull << 24))) /* CAP_SYS_RESOURCE */
		snprintf(out, len, "phosfs lacks CAP_SYS_RESOURCE: CRIU cannot checkpoint processes of other users "
				   "(\"Can't get rlimit\"); run jobs as root or give phosfs that capability.");
}

/* The CLOCK_MONOTONIC ns timeout_s seconds from now; 0 (for ever) when
 * timeout_s is not positive. */
static uint64_t deadline_ns(int timeout_s)
{
	return timeout_s > 0 ? engine_now_ns() + (uint64_t)timeout_s * 1000000000u : 0;
}

/* How often a wait that can be cancelled looks at its flag, in ms. */
#define CANCEL_POLL_MS 50
#define KILLED_WAIT_MS 5000 /* how long a killed CRIU is waited for */

/* Whether pid is traced (ptrace) now: CRIU has seized it. */
static bool seized(pid_t pid)
{
	char tracer[32];
	return proc_status_field(pid, "TracerPid", tracer, sizeof(tracer)) == 0 && atoi(tracer) > 0;
}

/* Whether a wait with cancel (NULL: none) is to end now: cancel is set
 * and CRIU does not hold root's tree. While it does, its parasite may be
 * in the tree's processes and their connections in repair mode: killing
 * CRIU then could kill the job, so the dump is left to end (or meet its
 * deadline) and the checkpoint is thrown away after. */
static bool cancelled(const atomic_bool *cancel, pid_t root)
{
	return cancel && atomic_load(cancel) && !seized(root);
}

/* Waits for child c, at most timeout_s seconds (0: for ever) and, with
 * cancel, until cancelled(cancel, root); one that runs longer is killed, with
 * its process group when it leads one (a dump: what it started goes too),
 * and waited for KILLED_WAIT_MS at most; with held, what held it (a FUSE
 * daemon that did not answer) goes there (held_len bytes). Returns 0 (*st
 * its status), -ETIMEDOUT, -ECANCELED, or an errno of waiting. */
static int wait_child(pid_t c, int timeout_s, const atomic_bool *cancel, pid_t root, int *st, char *held,
		      size_t held_len)
{
	int pfd = timeout_s > 0 || cancel ? (int)syscall(SYS_pidfd_open, c, 0) : -1;
	if (pfd >= 0) {
		struct pollfd pf = { pfd, POLLIN, 0 };
		uint64_t end = timeout_s > 0 ? deadline_ns(timeout_s) : UINT64_MAX;
		int n = 0;
		bool stop = false;
		for (uint64_t now; n == 0 && !(stop = cancelled(cancel, root)) && (now = engine_now_ns()) < end;) {
			uint64_t ms = (end - now) / 1000000u + 1;
			n = poll(&pf, 1, cancel && ms > CANCEL_POLL_MS ? CANCEL_POLL_MS : ms > INT_MAX ? INT_MAX : (int)ms);
			if (n < 0 && errno == EINTR)
				n = 0;
		}
		if (n == 0) {
			/* Before it goes: what held it, where a FUSE daemon did. */
			if (held)
				engine_fuse_held(c, held, held_len);
			kill(getpgid(c) == c ? -c : c, SIGKILL);
			/* One that waits in the kernel for a FUSE daemon that read
			 * its request cannot end until it answers: it is left. */
			while ((n = poll(&pf, 1, KILLED_WAIT_MS)) < 0 && errno == EINTR)
				;
			close(pfd);
			while (n > 0 && waitpid(c, st, 0) < 0 && errno == EINTR)
				;
			return stop ? -ECANCELED : -ETIMEDOUT;
		}
		close(pfd);
	}
	while (waitpid(c, st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

/* Starts argv[0] with argv: stdin from /dev/null, stdout and stderr to
 * out (-1: /dev/null), the nkeep fds of keep as 3, 4, ... (a -1 there:
 * /dev/null), nothing else open; in a process group of its own if group,
 * in the cgroups of cg if not NULL.
 * One that cannot be run says so on out and exits 127. Returns its pid,
 * or fork's negative errno. */
static pid_t spawn(char *const argv[], int out, const int *keep, int nkeep, bool group, const engine_cgroups *cg)
{
	pid_t c = fork();
	if (c < 0)
		return -errno;
	if (c > 0 && group)
		setpgid(c, c); /* before the parent may kill the group; the child does the same */
	if (c == 0) {
		if (group)
			setpgid(0, 0);
		int nul = open("/dev/null", O_RDWR);
		/* Above the targets first: a kept fd may be another's target. */
		int high[4];
		bool moved = nul >= 0 && nkeep <= 4;
		for (int i = 0; moved && i < nkeep; i++)
			moved = (high[i] = fcntl(keep[i] >= 0 ? keep[i] : nul, F_DUPFD, 3 + nkeep)) >= 0;
		moved = moved && dup2(nul, 0) == 0 && dup2(out >= 0 ? out : nul, 1) == 1 &&
			dup2(out >= 0 ? out : nul, 2) == 2;
		for (int i = 0; moved && i < nkeep; i++)
			moved = dup2(high[i], 3 + i) == 3 + i;
		if (!moved) {
			dprintf(out >= 0 ? out : 2, "Error (phos): cannot set up %s's descriptors: %s\n", argv[0],
				strerror(errno));
			_exit(127);
		}
		close_range(3 + (unsigned)nkeep, ~0u, 0);
		const char *refused = "";
		int e = cg ? engine_cgroups_enter(cg, &refused) : 0;
		if (e) {
			dprintf(2, "Error (phos): cannot join the cgroup of %s: %s\n", refused, strerror(-e));
			_exit(127);
		}
		execvp(argv[0], argv);
		dprintf(2, "Error (phos): cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	return c;
}

/* What criu c, run for what (of pid's tree) with its log at log, ended
 * with, waiting for it until end_ns (0: for ever) or *cancel (cancel
 * NULL: none): 0 or an error with er. */
static int ended(pid_t c, const char *log, const char *what, pid_t pid, uint64_t end_ns, int timeout_s,
		 const atomic_bool *cancel, perr *er)
{
	uint64_t now = engine_now_ns();
	int left = !end_ns ? 0 : end_ns > now ? (int)((end_ns - now + 999999999u) / 1000000000u) : 1;
	int st;
	char held[1100] = "";
	int e = wait_child(c, left, cancel, pid, &st, held, sizeof(held));
	if (e == -ETIMEDOUT)
		return pr_err(er, e, "criu %s did not finish within %d s and was stopped%s (log: %s)", what, timeout_s,
			      held, log);
	if (e == -ECANCELED)
		return pr_err(er, e, "cancelled: criu %s was stopped before it finished (log: %s)", what, log);
	if (e)
		return pr_perror(er, e, "waiting for criu");
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	char why[1400];
	criu_explain(log, pid, why, sizeof(why));
	if (!*why)
		snprintf(why, sizeof(why), "it logged no error, and %s %d", WIFSIGNALED(st) ? "was killed by signal" : "exited with status",
			 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	return pr_err(er, -EIO, "criu %s failed: %s (log: %s)", what, why, log);
}

/* Starts criu (argv) with its log at log and the nkeep fds of keep as 3,
 * 4, ..., in a process group of its own if group, in cg's cgroups if not
 * NULL; *c is its pid. */
static int start(char *const argv[], const char *log, const int *keep, int nkeep, bool group,
		 const engine_cgroups *cg, pid_t *c, perr *er)
{
	int lfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (lfd < 0)
		return pr_err(er, -errno, "cannot open CRIU's log %s: %s", log, strerror(errno));
	*c = spawn(argv, lfd, keep, nkeep, group, cg);
	close(lfd);
	if (*c < 0)
		return pr_perror(er, *c, "cannot start criu");
	return 0;
}

static int run(char *const argv[], const char *log, const char *what, pid_t pid, int timeout_s,
	       const engine_cgroups *cg, perr *er)
{
	pid_t c;
	int e = start(argv, log, NULL, 0, false, cg, &c, er);
	if (e)
		return e;
	return ended(c, log, what, pid, deadline_ns(timeout_s), timeout_s, NULL, er);
}

/* `criu --help` of the criu last asked ("" if it could not be run). */
static char asked[PATH_MAX];
static char help[32768];

static const char *criu_help(const char *criu)
{
	if (!strcmp(asked, criu))
		return help;
	int out = memfd_create("criu-help", MFD_CLOEXEC);
	char *argv[] = { (char *)criu, "--help", NULL };
	pid_t c = out < 0 ? -1 : spawn(argv, out, NULL, 0, false, NULL);
	int st = 0;
	bool ok = c > 0 && wait_child(c, 5, NULL, 0, &st, NULL, 0) == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
	ssize_t n = ok ? pread(out, help, sizeof(help) - 1, 0) : -1;
	if (out >= 0)
		close(out);
	help[n > 0 ? n : 0] = 0;
	snprintf(asked, sizeof(asked), "%s", criu);
	return help;
}

bool criu_parallel_pages(const char *criu)
{
	return strstr(criu_help(criu), "--parallel-pages") != NULL;
}

bool criu_snapshot_pages(const char *criu)
{
	return strstr(criu_help(criu), "--snapshot-pages") != NULL;
}

bool criu_start_fd(const char *criu)
{
	return strstr(criu_help(criu), "--start-fd") != NULL;
}

int criu_pages_threads(const char *criu)
{
	if (!strstr(criu_help(criu), "--pages-threads"))
		return 0;
	const char *env = getenv("PHOS_RESTORE_PAGE_THREADS");
	char *end;
	long n = env && *env ? strtol(env, &end, 10) : -1;
	if (env && *env && (*end || n < 0 || n > 64))
		n = -1; /* not a count: the default */
	if (n < 0) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		n = cpus < 1 ? 1 : cpus < 8 ? cpus : 8;
	}
	return (int)n;
}

/* Whether pid leads its own session: CRIU needs --shell-job otherwise. */
static bool session_leader(pid_t pid)
{
	return getsid(pid) == pid;
}

/* Whether pid is in a mount namespace other than ours (a job of `phos
 * run --pid-ns`, with its own /proc). */
static bool own_mounts(pid_t pid)
{
	char path[64];
	struct stat mine, its;
	snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)pid);
	return stat("/proc/self/ns/mnt", &mine) == 0 && stat(path, &its) == 0 &&
	       (mine.st_ino != its.st_ino || mine.st_dev != its.st_dev);
}

/* Whether the CRIU images in dir hold a mount namespace (CRIU writes one
 * mountpoints-ID.img for each it dumped). */
static bool has_mounts(const char *dir)
{
	DIR *d = opendir(dir);
	bool found = false;
	for (struct dirent *de; d && !found && (de = readdir(d));)
		found = !strncmp(de->d_name, "mountpoints-", 12);
	if (d)
		closedir(d);
	return found;
}

/* A job's mount namespace is its private copies of the host's mounts,
 * and its own /proc: CRIU dumps the /proc, and takes every other mount
 * for an external one (auto-detected), which the restore binds again
 * from the same paths here, under / as the new namespace's root. */
#define EXTERNAL_MOUNTS "mnt[]"

/* Less free space than this in the store after a failed dump: it is full. */
#define STORE_FULL_BYTES (1u << 20)

/* A dump's error e, as a full store where that is what it was. */
static int dump_failed(int e, const char *dir, perr *er)
{
	/* A full store fails CRIU's writes; its log (on the same store) may
	 * not say so. */
	struct statvfs vs;
	if (e == -EIO && statvfs(dir, &vs) == 0 && (uint64_t)vs.f_bavail * vs.f_frsize < STORE_FULL_BYTES) {
		char was[PERR_MAX];
		snprintf(was, sizeof(was), "%s", er ? er->msg : "");
		e = pr_err(er, -ENOSPC, "the store holding %s is full (%s): %s", dir, strerror(ENOSPC), was);
	}
	return e;
}

/* Waits until criu c says its tree runs on (a byte on status, which it
 * then closes) or ends, until end_ns or cancelled(cancel, root). Returns
 * 1 when the tree runs on, 0 when criu ended, the time is up or the wait
 * was cancelled (ended() then says how). */
static int resumed(int status, pid_t c, uint64_t end_ns, const atomic_bool *cancel, pid_t root)
{
	int pfd = (int)syscall(SYS_pidfd_open, c, 0);
	struct pollfd pf[2] = { { status, POLLIN, 0 }, { pfd, POLLIN, 0 } };
	int slice = cancel ? CANCEL_POLL_MS : 1000;
	for (uint64_t now; !cancelled(cancel, root) && (now = engine_now_ns()) < end_ns;) {
		uint64_t ms = (end_ns - now) / 1000000u + 1;
		int n = poll(pf, pfd >= 0 ? 2 : 1, ms > (uint64_t)slice ? slice : (int)ms);
		if (n < 0 && errno != EINTR)
			break;
		if (n > 0 && pf[0].revents) {
			char b;
			ssize_t r;
			while ((r = read(status, &b, 1)) < 0 && errno == EINTR)
				;
			if (pfd >= 0)
				close(pfd);
			return r == 1;
		}
		if (n > 0 && pf[1].revents)
			break;
	}
	if (pfd >= 0)
		close(pfd);
	return 0;
}

/* The argv of d's dump (into argv, 32 room; spid holds its pid), with
 * --start-fd 4 if ahead. */
static void dump_argv(criu_dumper *d, char **argv, char spid[16], bool ahead)
{
	int n = 0;
	snprintf(spid, 16, "%d", (int)d->root);
	argv[n++] = d->criu;
	argv[n++] = "dump";
	argv[n++] = "-t";
	argv[n++] = spid;
	argv[n++] = "-D";
	argv[n++] = d->dir;
	argv[n++] = "-o";
	argv[n++] = d->log;
	argv[n++] = "-v2";
	if (d->leave == CRIU_LEAVE_RUNNING)
		argv[n++] = "--leave-running";
	else if (d->leave == CRIU_LEAVE_STOPPED)
		argv[n++] = "--leave-stopped";
	if (d->snapshot) {
		/* implies --parallel-pages; fd 3 says when the tree runs on */
		argv[n++] = "--snapshot-pages";
		argv[n++] = "--status-fd";
		argv[n++] = "3";
	} else if (criu_parallel_pages(d->criu)) {
		argv[n++] = "--parallel-pages";
	}
	if (ahead) {
		argv[n++] = "--start-fd";
		argv[n++] = "4";
	}
	/* TCP connections are saved, their sockets in repair mode while CRIU
	 * reads them, with no firewall rule around them: the checkpoint
	 * (job/stall.c) refused a job with one whose peer is outside it
	 * (tcp.c), and a connection
	 * between the frozen tree's own processes carries nothing while CRIU
	 * reads it. */
	argv[n++] = "--tcp-established";
	argv[n++] = "--network-lock";
	argv[n++] = "skip";
	if (!session_leader(d->root))
		argv[n++] = "--shell-job";
	if (own_mounts(d->root)) {
		argv[n++] = "--external";
		argv[n++] = EXTERNAL_MOUNTS;
	}
	if (engine_criu_plugins && *engine_criu_plugins) {
		argv[n++] = "-L";
		argv[n++] = (char *)engine_criu_plugins;
	}
	argv[n] = NULL;
}

/* Starts d's CRIU (with go as its --start-fd when ahead), with a status
 * pipe when it saves pages after the stall. */
static int dump_spawn(criu_dumper *d, int go, perr *er)
{
	int status[2] = { -1, -1 };
	if (d->snapshot && pipe2(status, O_CLOEXEC))
		return pr_perror(er, -errno, "cannot make a pipe for criu");
	char *argv[32], spid[16]; /* room for every option of dump_argv */
	dump_argv(d, argv, spid, go >= 0);
	int keep[2] = { status[1], go };
	int e = start(argv, d->log, keep, go >= 0 ? 2 : 1, true, NULL, &d->pid, er);
	if (status[1] >= 0)
		close(status[1]);
	if (e) {
		if (status[0] >= 0)
			close(status[0]);
		d->pid = 0;
		return e;
	}
	d->status = status[0];
	return 0;
}

int criu_dump_ready(const char *criu, pid_t pid, const char *dir, int leave, int timeout_s, const char *log,
		    bool tail, criu_dumper *d, perr *er)
{
	*d = (criu_dumper){ .root = pid, .leave = leave, .timeout_s = timeout_s, .go = -1, .status = -1 };
	if (snprintf(d->criu, sizeof(d->criu), "%s", criu) >= (int)sizeof(d->criu) ||
	    snprintf(d->dir, sizeof(d->dir), "%s", dir) >= (int)sizeof(d->dir) ||
	    snprintf(d->log, sizeof(d->log), "%s", log) >= (int)sizeof(d->log))
		return pr_err(er, -ENAMETOOLONG, "a path for CRIU's dump of %d is too long (%s)", (int)pid, dir);
	d->snapshot = tail && leave == CRIU_LEAVE_RUNNING && criu_snapshot_pages(criu);
	if (!criu_start_fd(criu))
		return 0; /* it starts at criu_dump_go */
	/* A socket, not a pipe: a byte for a CRIU that died is EPIPE, never
	 * SIGPIPE. */
	int go[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, go))
		return pr_perror(er, -errno, "cannot make a socket pair for criu");
	int e = dump_spawn(d, go[0], er);
	close(go[0]);
	if (e) {
		close(go[1]);
		return e;
	}
	d->go = go[1];
	return 0;
}

int criu_dump_go(criu_dumper *d, criu_tail *tail, perr *er)
{
	uint64_t end = deadline_ns(d->timeout_s);
	int e = 0;
	if (tail)
		*tail = (criu_tail){ .pid = 0 };
	/* Cancelled before CRIU was let go: it never touches the tree
	 * (criu_dump_drop tells it so). */
	if (d->cancel && atomic_load(d->cancel))
		return pr_err(er, -ECANCELED, "cancelled before criu dump began");
	if (d->go >= 0) {
		/* A CRIU that died while it waited reads nothing: EPIPE here,
		 * and its log says why below. */
		char b = 1;
		while (send(d->go, &b, 1, MSG_NOSIGNAL) < 0 && errno == EINTR)
			;
		close(d->go);
		d->go = -1;
	} else {
		e = dump_spawn(d, -1, er);
	}
	pid_t c = d->pid;
	d->pid = 0;
	/* Without tail, the byte is read all the same (CRIU must not write
	 * into a closed pipe), and the whole dump waited for below. */
	if (!e && d->snapshot && resumed(d->status, c, end ? end : UINT64_MAX, d->cancel, d->root) && tail) {
		/* The tree runs on; CRIU writes its pages (criu_dump_wait). */
		close(d->status);
		d->status = -1;
		*tail = (criu_tail){
			.pid = c, .root = d->root, .end_ns = end, .timeout_s = d->timeout_s, .cancel = d->cancel
		};
		snprintf(tail->log, sizeof(tail->log), "%s", d->log);
		snprintf(tail->dir, sizeof(tail->dir), "%s", d->dir);
		return 0;
	}
	if (d->status >= 0)
		close(d->status);
	d->status = -1;
	if (!e)
		e = ended(c, d->log, "dump", d->root, end, d->timeout_s, d->cancel, er);
	return dump_failed(e, d->dir, er);
}

void criu_dump_cancel_on(criu_dumper *d, const atomic_bool *cancel)
{
	d->cancel = cancel;
}

void criu_dump_drop(criu_dumper *d)
{
	if (d->go >= 0)
		close(d->go); /* EOF: CRIU ends without touching the tree */
	d->go = -1;
	if (d->status >= 0)
		close(d->status);
	d->status = -1;
	if (d->pid > 0) {
		/* It has seized nothing: one that does not end at once is
		 * killed, with whatever it started. */
		int st;
		wait_child(d->pid, 2, NULL, 0, &st, NULL, 0);
	}
	d->pid = 0;
}

int criu_dump(const char *criu, pid_t pid, const char *dir, int leave, int timeout_s, const char *log,
	      criu_tail *tail, perr *er)
{
	criu_dumper d;
	int e = criu_dump_ready(criu, pid, dir, leave, timeout_s, log, tail != NULL, &d, er);
	if (!e)
		e = criu_dump_go(&d, tail, er);
	criu_dump_drop(&d);
	return e;
}

int criu_dump_wait(criu_tail *tail, perr *er)
{
	if (!tail->pid)
		return 0;
	int e = ended(tail->pid, tail->log, "dump", tail->root, tail->end_ns, tail->timeout_s, tail->cancel, er);
	tail->pid = 0;
	return dump_failed(e, tail->dir, er);
}

int criu_restore(const char *criu, const char *dir, const char *lazy_dir, const char *script, const char *log,
		 const engine_cgroups *cg, pid_t *root, criu_restore_stats *st, perr *er)
{
	char pidfile[PATH_MAX];
	if (snprintf(pidfile, sizeof(pidfile), "%s.pid", log) >= (int)sizeof(pidfile))
		return pr_err(er, -ENAMETOOLONG, "CRIU's log path %s is too long", log);
	unlink(pidfile);
	/* room for every option below (26 at most) */
	/* -v3: CRIU logs some causes of a failed restore at info level only;
	 * with PHOS_DEBUG, -v4: every step, timed. */
	const char *debug = getenv("PHOS_DEBUG");
	const char *level = debug && *debug ? "-v4" : "-v3";
	char *argv[32] = { (char *)criu, "restore", "-D", (char *)dir, "-o", (char *)log, (char *)level, "-d", "--shell-job",
			   "--pidfile", pidfile, "--tcp-established" };
	int n = 12;
	if (engine_criu_plugins && *engine_criu_plugins) {
		argv[n++] = "-L";
		argv[n++] = (char *)engine_criu_plugins;
	}
	/* CRIU's work directory, where it writes its statistics: never the
	 * image's own folder, which stays as it was checkpointed. */
	char work[PATH_MAX + 8];
	snprintf(work, sizeof(work), "%s.work", log);
	if (lazy_dir) {
		argv[n++] = "--lazy-pages";
		argv[n++] = "-W";
		argv[n++] = (char *)lazy_dir;
	} else if (mkdir(work, 0700) == 0 || errno == EEXIST) {
		argv[n++] = "-W";
		argv[n++] = work;
	}
	if (has_mounts(dir)) {
		argv[n++] = "--root";
		argv[n++] = "/";
		argv[n++] = "--external";
		argv[n++] = EXTERNAL_MOUNTS;
	}
	if (script) {
		argv[n++] = "--action-script";
		argv[n++] = (char *)script;
	}
	if (cg)
		argv[n++] = "--manage-cgroups=ignore"; /* the tree stays in CRIU's, cg's */
	char threads[16];
	int nt = criu_pages_threads(criu);
	if (nt > 1) {
		snprintf(threads, sizeof(threads), "%d", nt);
		argv[n++] = "--pages-threads";
		argv[n++] = threads;
	}
	argv[n] = NULL;
	int e = run(argv, log, "restore", 0, 0, cg, er);
	if (st && criu_restore_stats_read(lazy_dir ? lazy_dir : work, st))
		memset(st, 0, sizeof(*st));
	if (!lazy_dir) {
		char stats[PATH_MAX + 32];
		snprintf(stats, sizeof(stats), "%s/stats-restore", work);
		unlink(stats);
		rmdir(work);
	}
	FILE *f = e ? NULL : fopen(pidfile, "re");
	int pid = 0;
	if (f && fscanf(f, "%d", &pid) != 1)
		pid = 0;
	if (f)
		fclose(f);
	unlink(pidfile);
	if (!e && pid <= 0)
		e = pr_err(er, -EIO, "criu restore succeeded but wrote no pid to %s", pidfile);
	*root = pid;
	return e;
}

int criu_pages_start(const char *criu, const char *dir, const char *work, const char *log, pid_t *daemon,
		     perr *er)
{
	*daemon = 0;
	int ready[2];
	if (pipe2(ready, O_CLOEXEC) != 0)
		return pr_perror(er, -errno, "pipe");
	/* --status-fd: CRIU writes a byte there once it listens. */
	char *argv[] = { (char *)criu, "lazy-pages", "-D", (char *)dir, "-W", (char *)work, "-o", (char *)log,
			 "-v2", "--status-fd", "3", NULL };
	pid_t c = spawn(argv, -1, &ready[1], 1, false, NULL);
	close(ready[1]);
	if (c < 0) {
		close(ready[0]);
		return pr_perror(er, c, "cannot start criu lazy-pages");
	}
	char b;
	ssize_t n;
	while ((n = read(ready[0], &b, 1)) < 0 && errno == EINTR)
		;
	close(ready[0]);
	if (n == 1) {
		*daemon = c;
		return 0;
	}
	while (waitpid(c, NULL, 0) < 0 && errno == EINTR)
		;
	char why[1400];
	criu_explain(log, 0, why, sizeof(why));
	return pr_err(er, -EIO, "criu lazy-pages did not start: %s (log: %s)",
		      *why ? why : "no error logged", log);
}

int criu_pages_wait(pid_t daemon, const char *log, perr *er)
{
	int st;
	while (waitpid(daemon, &st, 0) < 0)
		if (errno != EINTR)
			return pr_perror(er, -errno, "waiting for criu lazy-pages");
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	char why[1400];
	criu_explain(log, 0, why, sizeof(why));
	return pr_err(er, -EIO, "criu lazy-pages failed (%s %d): %s (log: %s)",
		      WIFSIGNALED(st) ? "killed by signal" : "exit status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
		      *why ? why : "no error logged", log);
}
