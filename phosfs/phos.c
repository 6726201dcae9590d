/*
 * phos: the command line, a thin layer over the files of a phosfs mount
 * ($PHOS_MOUNT, or /phos).
 *
 *   phos run [-d] [--pid-ns|--host-pids] [--] CMD…
 *                                run CMD under the tracer, without a tty;
 *                                with --pid-ns in a pid namespace of its
 *                                own (run.c)
 *   phos ls                      the processes phosfs shows
 *   phos checkpoint PID [cow|recopy|stop] [--name N] [--kill] [--timeout SECONDS] [--wait]
 *   phos restore DIR [eager|lazy] [--lazy-pages] [--device OLD=NEW[,OLD=NEW…]] [--wait]
 *   phos status PID
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run.h"

#ifndef PHOS_LIBDIR
#define PHOS_LIBDIR "/usr/local/lib"
#endif

static const char *mnt(void)
{
	const char *m = getenv("PHOS_MOUNT");
	return m && *m ? m : "/phos";
}

static int usage(FILE *f)
{
	fprintf(f, "usage: phos run [-d] [--pid-ns|--host-pids] [--] CMD...\n"
		   "       phos ls\n"
		   "       phos checkpoint PID [cow|recopy|stop] [--name NAME] [--kill] [--timeout SECONDS] [--wait]\n"
		   "       phos restore DIR [eager|lazy] [--lazy-pages] [--device OLD=NEW[,OLD=NEW...]] [--wait]\n"
		   "       phos status PID\n");
	return f == stdout ? 0 : 2;
}

/* Reads a whole (small) file of the mount into a malloc'd string. */
static char *slurp(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 4096, len = 0;
	char *s = malloc(cap);
	for (ssize_t n; s; len += (size_t)n) {
		if (len + 1 >= cap) {
			char *t = realloc(s, cap *= 2);
			if (!t) {
				free(s);
				s = NULL;
				break;
			}
			s = t;
		}
		n = read(fd, s + len, cap - len - 1);
		if (n <= 0)
			break;
	}
	close(fd);
	if (s)
		s[len] = 0;
	return s;
}

/* The value of "key: value" in text, into out. */
static bool field(const char *text, const char *key, char *out, size_t len)
{
	size_t k = strlen(key);
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (!strncmp(l, key, k) && l[k] == ':' && l[k + 1] == ' ') {
			size_t n = strcspn(l + k + 2, "\n");
			snprintf(out, len, "%.*s", (int)n, l + k + 2);
			return true;
		}
	}
	return false;
}

/* Why a file of the mount could not be opened, in words a person can act
 * on; who: who may open it. */
static void open_failed(const char *ctl_path, int e, const char *who)
{
	char v[PATH_MAX];
	snprintf(v, sizeof(v), "%s/version", mnt());
	bool mounted = access(v, F_OK) == 0;
	if (!mounted)
		fprintf(stderr, "phos: %s: phosfs is not mounted at %s (set PHOS_MOUNT)\n", ctl_path, mnt());
	else if (e == ENOENT)
		fprintf(stderr, "phos: %s: no such process: it is not running, and phosfs knows no checkpoint of it\n",
			ctl_path);
	else if (e == EACCES || e == EPERM)
		fprintf(stderr, "phos: %s: permission denied: %s\n", ctl_path, who);
	else
		fprintf(stderr, "phos: %s: %s\n", ctl_path, strerror(e));
}

/* Writes one command to a ctl file and reads back phosfs's answer into
 * reply ("restore 3", "ok", or "error: …"). On failure says why; who:
 * who may write it. */
static int ctl(const char *ctl_path, const char *cmd, const char *who, char *reply, size_t len)
{
	*reply = 0;
	int fd = open(ctl_path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		open_failed(ctl_path, errno, who);
		return 1;
	}
	ssize_t n = write(fd, cmd, strlen(cmd));
	int e = n < 0 ? errno : 0;
	ssize_t got = read(fd, reply, len - 1);
	reply[got > 0 ? got : 0] = 0;
	reply[strcspn(reply, "\n")] = 0;
	close(fd);
	if (!e)
		return 0;
	if (!strncmp(reply, "error: ", 7))
		fprintf(stderr, "phos: %s\n", reply + 7);
	else
		fprintf(stderr, "phos: %s: %s\n", ctl_path, strerror(e));
	return 1;
}

static int cmd_run(int argc, char **argv)
{
	bool detach = false, pid_ns = false;
	static const struct option opts[] = { { "detach", no_argument, NULL, 'd' },
					      { "pid-ns", no_argument, NULL, 'p' },
					      { "host-pids", no_argument, NULL, 'H' },
					      { 0 } };
	optind = 0; /* the options end at the command: "+" */
	for (int o; (o = getopt_long(argc, argv, "+d", opts, NULL)) != -1;) {
		if (o == 'd')
			detach = true;
		else if (o == 'p' || o == 'H')
			pid_ns = o == 'p';
		else
			return usage(stderr);
	}
	int i = optind;
	if (i == argc)
		return usage(stderr);
	char vpath[PATH_MAX], store[PATH_MAX] = "";
	snprintf(vpath, sizeof(vpath), "%s/version", mnt());
	char *v = slurp(vpath);
	const char *sl = v ? strstr(v, "\nstore ") : NULL;
	if (sl)
		snprintf(store, sizeof(store), "%.*s", (int)strcspn(sl + 7, "\n"), sl + 7);
	if (!*store) {
		fprintf(stderr, "phos: phosfs is not mounted at %s (set PHOS_MOUNT)\n", mnt());
		free(v);
		return 1;
	}
	free(v);
	const char *lib = getenv("PHOS_LIBPHOS");
	char libpath[PATH_MAX];
	snprintf(libpath, sizeof(libpath), "%s", lib && *lib ? lib : PHOS_LIBDIR "/libphos.so");
	run_opts o = { .store = store, .libphos = libpath, .mount = mnt(), .pid_ns = pid_ns };
	pid_t job = 0, root = 0;
	char why[256], msg[PATH_MAX + 64];
	if (run_job(argv + i, &o, &job, &root, why, sizeof(why), msg, sizeof(msg))) {
		fprintf(stderr, "phos: %s\n", msg);
		return 127;
	}
	printf("%d\n", (int)job);
	fflush(stdout);
	if (*why)
		fprintf(stderr, "phos: %s: it has this machine's pids, and a restore needs them free\n", why);
	fprintf(stderr, "phos: process %d; output in %s/run/%d.out and .err\n", (int)job, store, (int)job);
	if (detach)
		return 0;
	int st;
	while (waitpid(root, &st, 0) < 0)
		if (errno != EINTR)
			return 1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int cmd_ls(void)
{
	DIR *d = opendir(mnt());
	if (!d) {
		fprintf(stderr, "phos: %s: %s\n", mnt(), strerror(errno));
		return 1;
	}
	printf("%-8s %-14s %-9s %-12s %s\n", "PID", "STATE", "TRACED", "LAST", "JOB");
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		char p[PATH_MAX];
		snprintf(p, sizeof(p), "%s/%s/status", mnt(), de->d_name);
		char *st = slurp(p);
		if (!st)
			continue;
		char state[64] = "?", traced[64] = "?", last[80] = "-", job[200] = "none";
		field(st, "state", state, sizeof(state));
		field(st, "traced", traced, sizeof(traced));
		field(st, "last checkpoint", last, sizeof(last));
		field(st, "job", job, sizeof(job));
		printf("%-8s %-14s %-9.9s %-12s %s\n", de->d_name, state, traced, last, job);
		free(st);
	}
	closedir(d);
	return 0;
}

/* Polls status until the job ends; a progress bar on a tty. */
static int wait_job(const char *status_path)
{
	bool tty = isatty(2);
	for (;;) {
		char *st = slurp(status_path);
		if (!st) {
			fprintf(stderr, "phos: %s: %s\n", status_path, strerror(errno));
			return 1;
		}
		char job[256] = "", prog[128] = "", step[64] = "", last[300] = "", err[1024] = "";
		field(st, "job", job, sizeof(job));
		if (strcmp(job, "none")) {
			if (tty && field(st, "progress", prog, sizeof(prog))) {
				unsigned long long done = 0, total = 0;
				sscanf(prog, "%llu/%llu", &done, &total);
				field(st, "step", step, sizeof(step));
				int pct = total ? (int)(done * 100 / total) : 0, w = 30, fill = pct * w / 100;
				fprintf(stderr, "\r%-18s [%.*s%*s] %3d%% %llu/%llu MiB", step, fill,
					"##############################", w - fill, "", pct, done >> 20, total >> 20);
			}
			free(st);
			usleep(100000);
			continue;
		}
		if (tty)
			fprintf(stderr, "\r%-80s\r", "");
		field(st, "last job", last, sizeof(last));
		field(st, "error", err, sizeof(err));
		char stall[64] = "";
		field(st, "stall ms", stall, sizeof(stall));
		free(st);
		size_t l = strlen(last);
		if (l >= 6 && !strcmp(last + l - 6, "failed")) {
			fprintf(stderr, "phos: %s\n", err);
			return 1;
		}
		printf("%s (stall %s ms)\n", last, *stall ? stall : "?");
		return 0;
	}
}

static int cmd_checkpoint(int argc, char **argv)
{
	const char *proto = NULL, *name = NULL; /* NULL: phosfs's default (cow where it can) */
	const char *timeout = NULL;              /* NULL: phosfs's --checkpoint-timeout */
	bool kill = false, wait = false;
	static const struct option opts[] = { { "kill", no_argument, NULL, 'k' },
					      { "wait", no_argument, NULL, 'w' },
					      { "name", required_argument, NULL, 'n' },
					      { "timeout", required_argument, NULL, 't' },
					      { 0 } };
	optind = 0;
	for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
		if (o == 'k')
			kill = true;
		else if (o == 'w')
			wait = true;
		else if (o == 'n')
			name = optarg;
		else if (o == 't')
			timeout = optarg;
		else
			return usage(stderr);
	}
	/* PID, then at most one protocol. */
	char *end = NULL;
	long pid = optind < argc ? strtol(argv[optind], &end, 10) : 0;
	if (!end || *end || pid <= 0 || argc - optind > 2)
		return usage(stderr);
	if (argc - optind == 2) {
		proto = argv[optind + 1];
		if (strcmp(proto, "cow") && strcmp(proto, "recopy") && strcmp(proto, "stop"))
			return usage(stderr);
	}
	char cmd[256], c[PATH_MAX], s[PATH_MAX];
	snprintf(cmd, sizeof(cmd), "checkpoint%s%s%s%.70s%s%s%.40s\n", proto ? " " : "", proto ? proto : "",
		 name ? " name=" : "", name ? name : "", kill ? " kill" : "", timeout ? " timeout=" : "",
		 timeout ? timeout : "");
	snprintf(c, sizeof(c), "%s/%ld/ctl", mnt(), pid);
	snprintf(s, sizeof(s), "%s/%ld/status", mnt(), pid);
	char reply[1200];
	int r = ctl(c, cmd, "only root and the owner of the process may checkpoint it", reply, sizeof(reply));
	return r || !wait ? r : wait_job(s);
}

/* Follows restore id in /restores/ID until its tree runs (with wait: until
 * all its memory is back too); prints the restored pid, or why it failed. */
static int wait_restore(unsigned id, bool wait)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/restores/%u", mnt(), id);
	bool told = false, tty = isatty(2);
	for (;;) {
		char *st = slurp(path), state[32] = "", pid[32] = "?", moved[600] = "", err[2048] = "", pos[16] = "";
		if (!st) {
			fprintf(stderr, "phos: restore %u: %s: %s\n", id, path, strerror(errno));
			return 1;
		}
		field(st, "state", state, sizeof(state));
		field(st, "restored pid", pid, sizeof(pid));
		field(st, "moved gpus", moved, sizeof(moved));
		field(st, "error", err, sizeof(err));
		field(st, "queue position", pos, sizeof(pos));
		free(st);
		if (!strcmp(state, "failed")) {
			fprintf(stderr, "phos: %s\n", err);
			return 1;
		}
		if (!strcmp(state, "queued") && tty && !told) {
			fprintf(stderr, "phos: restore %u waits for others to end (place %s in the queue)\n", id, pos);
			told = true;
		}
		if (!strcmp(state, "done") || (!wait && !strcmp(state, "resumed"))) {
			if (*moved)
				fprintf(stderr, "phos: GPUs moved (image ordinal -> this machine's): %s\n", moved);
			printf("%s\n", pid);
			return 0;
		}
		usleep(2000);
	}
}

static int cmd_restore(int argc, char **argv)
{
	const char *dir = NULL, *mode = NULL, *devices = NULL;
	bool lazy_pages = false, wait = false;
	static const struct option opts[] = { { "lazy-pages", no_argument, NULL, 'l' },
					      { "wait", no_argument, NULL, 'w' },
					      { "device", required_argument, NULL, 'D' },
					      { 0 } };
	optind = 0;
	for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
		if (o == 'l')
			lazy_pages = true;
		else if (o == 'w')
			wait = true;
		else if (o == 'D')
			devices = optarg;
		else
			return usage(stderr);
	}
	/* DIR, then at most one mode. */
	if (optind == argc || argc - optind > 2)
		return usage(stderr);
	dir = argv[optind];
	if (argc - optind == 2) {
		mode = argv[optind + 1];
		if (strcmp(mode, "eager") && strcmp(mode, "lazy"))
			return usage(stderr);
	}
	char abs[PATH_MAX];
	if (!realpath(dir, abs)) {
		fprintf(stderr, "phos: %s: %s\n", dir, strerror(errno));
		return 1;
	}
	char cmd[2 * PATH_MAX + 64], c[PATH_MAX];
	snprintf(cmd, sizeof(cmd), "restore %s%s%s%s%s%s\n", abs, mode ? " " : "", mode ? mode : "",
		 lazy_pages ? " lazy-pages" : "", devices ? " device=" : "", devices ? devices : "");
	snprintf(c, sizeof(c), "%s/ctl", mnt());
	char reply[1200];
	unsigned id = 0;
	if (ctl(c, cmd, "only root may restore", reply, sizeof(reply)))
		return 1;
	if (sscanf(reply, "restore %u", &id) != 1) {
		fprintf(stderr, "phos: %s: unexpected answer '%s'\n", c, reply);
		return 1;
	}
	return wait_restore(id, wait);
}

static int cmd_status(int argc, char **argv)
{
	if (argc != 1)
		return usage(stderr);
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s/status", mnt(), argv[0]);
	char *st = slurp(p);
	if (!st) {
		open_failed(p, errno, "only root and the owner of the process may see it");
		return 1;
	}
	fputs(st, stdout);
	free(st);
	return 0;
}

int main(int argc, char **argv)
{
	const char *base = argc > 0 ? strrchr(argv[0], '/') : NULL;
	if (argc > 0 && !strcmp(base ? base + 1 : argv[0], "phos-init"))
		return run_init(argc, argv);
	if (argc < 2)
		return usage(stderr);
	const char *c = argv[1];
	/* getopt's own messages then begin "phos CMD:". */
	static char who[64];
	snprintf(who, sizeof(who), "phos %.50s", c);
	argv[1] = who;
	if (!strcmp(c, "run"))
		return cmd_run(argc - 1, argv + 1);
	if (!strcmp(c, "ls"))
		return cmd_ls();
	if (!strcmp(c, "checkpoint"))
		return cmd_checkpoint(argc - 1, argv + 1);
	if (!strcmp(c, "restore"))
		return cmd_restore(argc - 1, argv + 1);
	if (!strcmp(c, "status"))
		return cmd_status(argc - 2, argv + 2);
	if (!strcmp(c, "-h") || !strcmp(c, "--help") || !strcmp(c, "help"))
		return usage(stdout);
	fprintf(stderr, "phos: unknown command '%s'\n", c);
	return usage(stderr);
}
