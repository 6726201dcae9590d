/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phos: the command line, a thin layer over the files of a phosfs mount
 * ($PHOS_MOUNT, or /phos).
 *
 *   phos run [-d] [--pid-ns|--host-pids] [--name JOB] [--on-signal SIG=ACTION]…
 *            [--on-signal-timeout SECONDS] [--restore-from DIR|latest] [--keep N]
 *            [--checkpoint-every DURATION|auto [--mtbf DURATION]] [--] CMD…
 *                                run CMD under the tracer, without a tty;
 *                                with --pid-ns in a pid namespace of its
 *                                own (run.c); then wait for it, taking
 *                                checkpoints on signals (cli-wait.c,
 *                                cli-signal.c), linked under the job's
 *                                name (cli-jobs.c); or first restore its
 *                                newest good image (cli-resume.c)
 *   phos ls [--json]             the processes phosfs shows (cli-json.c)
 *   phos checkpoint PID [cow|recopy|stop] [--name N] [--kill] [--timeout SECONDS] [--wait]
 *   phos restore DIR [eager|lazy] [--lazy-pages] [--device OLD=NEW[,OLD=NEW…]] [--wait]
 *   phos status [--json] PID
 *   phos send PID [cow|recopy|stop] [--kill] [--name NAME] [--hold SECONDS] [-- COMMAND…]
 *                                a checkpoint as a stream, to stdout or
 *                                into COMMAND (send.c, stream.c)
 *   phos receive [--dir DIR] [--no-restore] [eager|lazy] [--device OLD=NEW[,…]]
 *                                that stream into an image, then restored
 *                                (receive.c)
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

#include "../common/procstatus.h"
#include "cli.h"
#include "run.h"

#ifndef PHOS_LIBDIR
#define PHOS_LIBDIR "/usr/local/lib"
#endif

static int usage(FILE *f)
{
	fprintf(f, "usage: phos run [-d] [--pid-ns|--host-pids] [--name JOB] [--on-signal SIG=ACTION]...\n"
		   "                [--on-signal-timeout SECONDS] [--restore-from DIR|latest] [--keep N]\n"
		   "                [--checkpoint-every DURATION|auto [--mtbf DURATION]] [--] CMD...\n"
		   "       phos ls [--json]\n"
		   "       phos checkpoint PID [cow|recopy|stop] [--name NAME] [--kill] [--timeout SECONDS] [--wait]\n"
		   "       phos restore DIR [eager|lazy] [--lazy-pages] [--device OLD=NEW[,OLD=NEW...]] [--wait]\n"
		   "       phos status [--json] PID\n"
		   "       phos send PID [cow|recopy|stop] [--kill] [--name NAME] [--hold SECONDS] [-- COMMAND...]\n"
		   "       phos receive [--dir DIR] [--no-restore] [eager|lazy] [--device OLD=NEW[,OLD=NEW...]]\n");
	return f == stdout ? 0 : 2;
}

/* Writes one command to a ctl file and reads back phosfs's answer into
 * reply ("restore 3", "ok", or "error: …"). On failure says why; who:
 * who may write it. 0, or 1. */
static int ctl(const char *ctl_path, const char *cmd, const char *who, char *reply, size_t len)
{
	int fd = open(ctl_path, O_RDWR | O_CLOEXEC);
	if (fd < 0 && errno == EACCES)
		fd = open(ctl_path, O_WRONLY | O_CLOEXEC); /* an older phosfs: cli_ctl */
	if (fd < 0) {
		cli_open_failed(ctl_path, errno, who);
		return 1;
	}
	close(fd);
	int e = cli_ctl(ctl_path, cmd, reply, len);
	if (!e)
		return 0;
	if (!strncmp(reply, "error: ", 7))
		fprintf(stderr, "phos: %s\n", reply + 7);
	else
		fprintf(stderr, "phos: %s: %s\n", ctl_path, strerror(-e));
	return 1;
}

/* phos run's options. */
typedef struct run_args {
	bool detach, pid_ns, pid_ns_given;
	const char *name, *from; /* --name, --restore-from */
	const char *every, *mtbf; /* --checkpoint-every, --mtbf */
	int keep, timeout_s;
	on_signals acts;
	sigset_t sigs; /* what phos run catches while it waits */
} run_args;

/* A whole number from min to max in s, into *v; false for none. */
static bool whole(const char *s, int min, int max, int *v)
{
	char *end;
	errno = 0;
	long n = strtol(s, &end, 10);
	if (end == s || *end || errno || n < min || n > max)
		return false;
	*v = (int)n;
	return true;
}

/* One option of phos run (o, its getopt code) into a. 0, or phos's exit
 * status for a usage error, said. */
static int run_option(int o, run_args *a)
{
	char why[512];
	switch (o) {
	case 'd':
		a->detach = true;
		return 0;
	case 'p':
	case 'H':
		a->pid_ns = o == 'p';
		a->pid_ns_given = true;
		return 0;
	case 'n':
		a->name = optarg;
		return 0;
	case 'r':
		a->from = optarg;
		return 0;
	case 's':
		if (!on_signal_parse(optarg, &a->acts, why, sizeof(why)))
			return 0;
		fprintf(stderr, "phos run: %s\n", why);
		return 2;
	case 't':
		if (whole(optarg, 1, 86400, &a->timeout_s))
			return 0;
		fprintf(stderr, "phos run: --on-signal-timeout '%s': expected seconds, from 1 to 86400\n", optarg);
		return 2;
	case 'e':
		a->every = optarg;
		return 0;
	case 'm':
		a->mtbf = optarg;
		return 0;
	case 'k':
		if (whole(optarg, 0, 1000000, &a->keep))
			return 0;
		fprintf(stderr, "phos run: --keep '%s': expected a number of images (0: all)\n", optarg);
		return 2;
	}
	return usage(stderr);
}

/* phos run's options into a; the index of CMD in argv, or minus phos's
 * exit status for a usage error, said. */
static int run_parse(int argc, char **argv, run_args *a)
{
	static const struct option opts[] = { { "detach", no_argument, NULL, 'd' },
					      { "pid-ns", no_argument, NULL, 'p' },
					      { "host-pids", no_argument, NULL, 'H' },
					      { "name", required_argument, NULL, 'n' },
					      { "on-signal", required_argument, NULL, 's' },
					      { "on-signal-timeout", required_argument, NULL, 't' },
					      { "restore-from", required_argument, NULL, 'r' },
					      { "keep", required_argument, NULL, 'k' },
					      { "checkpoint-every", required_argument, NULL, 'e' },
					      { "mtbf", required_argument, NULL, 'm' },
					      { 0 } };
	memset(a, 0, sizeof(*a));
	a->keep = 2;
	a->timeout_s = 600;
	optind = 0; /* the options end at the command: "+" */
	for (int o, e; (o = getopt_long(argc, argv, "+d", opts, NULL)) != -1;)
		if ((e = run_option(o, a)))
			return -e;
	const char *slurm = getenv("SLURM_JOB_ID");
	if (!a->name && slurm && *slurm)
		a->name = slurm;
	if (a->name && !job_name_ok(a->name)) {
		fprintf(stderr, "phos run: --name '%s': 1 to 64 of A-Z a-z 0-9 . _ -, not starting with '.'\n", a->name);
		return -2;
	}
	if (a->from && !strcmp(a->from, "latest") && !a->name) {
		fprintf(stderr, "phos run: --restore-from latest needs the job's name: --name JOB (or SLURM_JOB_ID)\n");
		return -2;
	}
	char why[512];
	if (every_parse(a->every, a->mtbf, why, sizeof(why))) {
		fprintf(stderr, "phos run: %s\n", why);
		return -2;
	}
	if (a->detach && a->acts.n) {
		fprintf(stderr, "phos run: --on-signal needs phos run to wait for its job: not with -d\n");
		return -2;
	}
	/* A job that may come back in another run restores beside anything. */
	if (!a->pid_ns_given && (a->name || a->from))
		a->pid_ns = true;
	run_passed_signals(&a->sigs);
	for (int sig = 1; sig < ON_SIGNAL_MAX; sig++)
		if (a->acts.by[sig].sig)
			sigaddset(&a->sigs, sig);
	return optind < argc ? optind : -usage(stderr);
}

/* The root of restored job pid: its init (its parent) when it is pid 2
 * of a namespace of its own, else itself. */
static pid_t restored_root(pid_t pid)
{
	char parent[32], ns[256];
	if (proc_status_field(pid, "PPid", parent, sizeof(parent)) || proc_status_field(pid, "NSpid", ns, sizeof(ns)))
		return pid;
	pid_t ppid = (pid_t)atoi(parent);
	/* More than one pid: pid 1 or 2 of a namespace below the host's. */
	return strpbrk(ns, " \t") && ppid > 1 ? ppid : pid;
}

/* --restore-from: the newest good image of a->from comes back. 0 with
 * *w (but its signals) set for it, -1 when there is none (CMD runs
 * afresh), or phos's exit status when phos run must give up (said). */
static int run_resume(const run_args *a, const char *store, char *const cmd[], run_watch *w)
{
	char from[PATH_MAX], used[PATH_MAX], out[PATH_MAX + 32], outpath[PATH_MAX] = "?";
	if (!strcmp(a->from, "latest"))
		job_dir(store, a->name, from, sizeof(from));
	else
		snprintf(from, sizeof(from), "%s", a->from);
	char **imgs = NULL;
	int n = 0, e = job_images(from, &imgs, &n);
	if (e == -ENOMEM) {
		fprintf(stderr, "phos: --restore-from %s: out of memory\n", from);
		return 1;
	}
	pid_t pid = 0;
	bool none = e || !n;
	e = none ? -ENOENT : resume_newest(imgs, n, &pid, used, sizeof(used));
	cli_free_paths(imgs, n);
	if (e == -ENOENT) {
		fprintf(stderr, "phos: --restore-from: no %simage in %s: starting %s afresh\n", none ? "" : "good ", from,
			cmd[0]);
		return -1;
	}
	if (e)
		return 1;
	w->job = pid;
	w->root = restored_root(pid);
	w->child = false;
	printf("%d\n", (int)pid);
	fflush(stdout);
	snprintf(out, sizeof(out), "/proc/%d/fd/1", (int)pid);
	ssize_t k = readlink(out, outpath, sizeof(outpath) - 1);
	outpath[k > 0 ? k : 1] = 0;
	fprintf(stderr, "phos: process %d restored from %s; output in %s\n", (int)pid, used, outpath);
	return 0;
}

/* Starts CMD afresh. 0 with *w (but its signals) set for it, or phos's
 * exit status when it could not start (said). */
static int run_fresh(const run_args *a, const char *store, char *const cmd[], const sigset_t *mask, run_watch *w)
{
	const char *lib = getenv("PHOS_LIBPHOS");
	char libpath[PATH_MAX];
	snprintf(libpath, sizeof(libpath), "%s", lib && *lib ? lib : PHOS_LIBDIR "/libphos.so");
	run_opts o = { .store = store, .libphos = libpath, .mount = cli_mount(), .pid_ns = a->pid_ns, .mask = mask };
	pid_t job = 0, root = 0;
	char why[256], msg[PATH_MAX + 64];
	if (run_job(cmd, &o, &job, &root, why, sizeof(why), msg, sizeof(msg))) {
		fprintf(stderr, "phos: %s\n", msg);
		return 127;
	}
	printf("%d\n", (int)job);
	fflush(stdout);
	if (*why)
		fprintf(stderr, "phos: %s: it has this machine's pids, and a restore needs them free\n", why);
	fprintf(stderr, "phos: process %d; output in %s/run/%d.out and .err\n", (int)job, store, (int)job);
	w->job = job;
	w->root = root;
	w->child = true;
	return 0;
}

static int cmd_run(int argc, char **argv)
{
	run_args a;
	int i = run_parse(argc, argv, &a);
	if (i < 0)
		return -i;
	char store[PATH_MAX], status[PATH_MAX] = "";
	if (cli_store(store, sizeof(store))) {
		fprintf(stderr, "phos: phosfs is not mounted at %s (set PHOS_MOUNT)\n", cli_mount());
		return 1;
	}
	/* Blocked from here on, the signals wait in a signalfd for the job
	 * to be up (the job starts with the mask phos run had). */
	sigset_t old;
	sigprocmask(SIG_BLOCK, a.detach ? NULL : &a.sigs, &old);
	run_watch w = { .store = store, .name = a.name, .keep = a.keep, .timeout_s = a.timeout_s, .acts = &a.acts,
			.status_file = status, .events = -1 };
	int e = a.from ? run_resume(&a, store, argv + i, &w) : -1;
	if (e < 0)
		e = run_fresh(&a, store, argv + i, &old, &w);
	if (!e && a.every) {
		/* Named, phos run links and keeps the images; else phosfs keeps them. */
		every_start(w.job, a.every, a.mtbf, a.name ? 0 : a.keep);
		if (a.name && !a.detach)
			w.events = every_events_open();
	}
	if (e || a.detach)
		return e;
	/* Only an init says how its job ended: where the root is the job
	 * itself, there is no file (and the child's status says it). */
	if (w.root != w.job && run_status_path(store, w.root, status, sizeof(status)))
		*status = 0;
	e = run_wait(&w, &a.sigs);
	if (w.events >= 0)
		close(w.events);
	return e;
}

static int cmd_ls(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--json"))
		return cli_ls_json();
	if (argc != 1)
		return usage(stderr);
	DIR *d = opendir(cli_mount());
	if (!d) {
		fprintf(stderr, "phos: %s: %s\n", cli_mount(), strerror(errno));
		return 1;
	}
	printf("%-8s %-14s %-9s %-12s %s\n", "PID", "STATE", "TRACED", "LAST", "JOB");
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		char p[PATH_MAX];
		snprintf(p, sizeof(p), "%s/%s/status", cli_mount(), de->d_name);
		char *st = cli_slurp(p);
		if (!st)
			continue;
		char state[64] = "?", traced[64] = "?", last[80] = "-", job[200] = "none";
		cli_field(st, "state", state, sizeof(state));
		cli_field(st, "traced", traced, sizeof(traced));
		cli_field(st, "last checkpoint", last, sizeof(last));
		cli_field(st, "job", job, sizeof(job));
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
		char *st = cli_slurp(status_path);
		if (!st) {
			fprintf(stderr, "phos: %s: %s\n", status_path, strerror(errno));
			return 1;
		}
		char job[256] = "", prog[128] = "", step[64] = "", last[300] = "", err[1024] = "";
		cli_field(st, "job", job, sizeof(job));
		if (strcmp(job, "none")) {
			if (tty && cli_field(st, "progress", prog, sizeof(prog))) {
				unsigned long long done = 0, total = 0;
				sscanf(prog, "%llu/%llu", &done, &total);
				cli_field(st, "step", step, sizeof(step));
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
		cli_field(st, "last job", last, sizeof(last));
		cli_field(st, "error", err, sizeof(err));
		char stall[64] = "";
		cli_field(st, "stall ms", stall, sizeof(stall));
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
	snprintf(c, sizeof(c), "%s/%ld/ctl", cli_mount(), pid);
	snprintf(s, sizeof(s), "%s/%ld/status", cli_mount(), pid);
	char reply[1200];
	int r = ctl(c, cmd, "only root and the owner of the process may checkpoint it", reply, sizeof(reply));
	return r || !wait ? r : wait_job(s);
}

/* Follows restore id in /restores/ID until its tree runs (with wait: until
 * all its memory is back too); prints the restored pid, or why it failed. */
static int wait_restore(unsigned id, bool wait)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/restores/%u", cli_mount(), id);
	bool told = false, tty = isatty(2);
	char seen[32] = "", ran[32] = ""; /* the last state read, and the pid it ran as */
	for (;;) {
		char *st = cli_slurp(path), state[32] = "", pid[32] = "?", moved[600] = "", err[2048] = "", pos[16] = "";
		if (!st) {
			int e = errno;
			if (*seen)
				/* phosfs went away (or came back, knowing nothing of it):
				 * the restore's job runs on its own. */
				fprintf(stderr,
					"phos: restore %u: phosfs went away while it was %s (%s: %s): the restore may have "
					"gone on, %s%s; once phosfs is back, `phos ls` lists the process when its tracer "
					"registers again, and the restore's log is in the store's .logs\n",
					id, seen, path, strerror(e),
					*ran ? "and its process ran as pid " : "and its process may run", ran);
			else
				fprintf(stderr, "phos: restore %u: %s: %s\n", id, path, strerror(e));
			return 1;
		}
		cli_field(st, "state", state, sizeof(state));
		cli_field(st, "restored pid", pid, sizeof(pid));
		cli_field(st, "moved gpus", moved, sizeof(moved));
		cli_field(st, "error", err, sizeof(err));
		cli_field(st, "queue position", pos, sizeof(pos));
		free(st);
		snprintf(seen, sizeof(seen), "%s", *state ? state : "under way");
		if (strcmp(pid, "?") && strcmp(pid, "none") && atoi(pid) > 0)
			snprintf(ran, sizeof(ran), "%s", pid);
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
	snprintf(c, sizeof(c), "%s/ctl", cli_mount());
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
	if (argc == 2 && (!strcmp(argv[0], "--json") || !strcmp(argv[1], "--json")))
		return cli_status_json(strcmp(argv[0], "--json") ? argv[0] : argv[1]);
	if (argc != 1)
		return usage(stderr);
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s/status", cli_mount(), argv[0]);
	char *st = cli_slurp(p);
	if (!st) {
		cli_open_failed(p, errno, "only root and the owner of the process may see it");
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
		return cmd_ls(argc - 1, argv + 1);
	if (!strcmp(c, "checkpoint"))
		return cmd_checkpoint(argc - 1, argv + 1);
	if (!strcmp(c, "restore"))
		return cmd_restore(argc - 1, argv + 1);
	if (!strcmp(c, "status"))
		return cmd_status(argc - 2, argv + 2);
	if (!strcmp(c, "send"))
		return cmd_send(argc - 1, argv + 1);
	if (!strcmp(c, "receive"))
		return cmd_receive(argc - 1, argv + 1);
	if (!strcmp(c, "-h") || !strcmp(c, "--help") || !strcmp(c, "help"))
		return usage(stdout);
	fprintf(stderr, "phos: unknown command '%s'\n", c);
	return usage(stderr);
}
