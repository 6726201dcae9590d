/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phos send (cli.h): a checkpoint of a process, written as a stream
 * (stream.h, doc/STREAM.md) while it is taken, to stdout or into a
 * command's stdin (`phos send PID recopy --kill -- ssh HOST phos
 * receive`). gpu.data goes as the mount serves it, each byte once it is
 * final; the rest of the image once it is published.
 *
 * With --kill, the checkpoint holds the process stopped after its dump
 * (hold=SECONDS): it ends only once the command has said, on its stdout,
 * that the other end has the whole image ("received"), and restored it
 * where it restores ("restored PID"). A stream cut, a command that fails
 * or says nothing in time lets the process run on where it is.
 */
#include <errno.h>
#include <getopt.h>
#include <fcntl.h>
#include <dirent.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "stream.h"

#define SEND_HOLD_S 600 /* how long the process waits, stopped, by default */
#define SEND_PIECE (1u << 20) /* bytes of gpu.data a record carries */

typedef struct send_args {
	long pid;
	const char *proto; /* NULL: phosfs's default */
	bool kill;
	int hold_s;
	char **cmd; /* COMMAND, or NULL: stdout */
	char name[STREAM_NAME_MAX + 1];
	char ctl[PATH_MAX], status[PATH_MAX], image[PATH_MAX];
	char stored[PATH_MAX]; /* the image in phosfs's store, once published; "" if unknown */
} send_args;

/* The command at the other end: its stdin is the stream, its stdout the
 * answers. Without a command, out is stdout and there are none. */
typedef struct peer {
	pid_t pid;
	int out;
	FILE *answers;
} peer;

static int send_usage(void)
{
	fprintf(stderr, "usage: phos send PID [cow|recopy|stop] [--kill] [--name NAME] [--hold SECONDS] [-- COMMAND...]\n");
	return 2;
}

/* The options before "--" (end) into a. 0, or phos's exit status. */
static int send_options(int end, char **argv, send_args *a)
{
	static const struct option opts[] = { { "kill", no_argument, NULL, 'k' },
					      { "name", required_argument, NULL, 'n' },
					      { "hold", required_argument, NULL, 'h' },
					      { 0 } };
	const char *name = NULL;
	optind = 0;
	for (int o; (o = getopt_long(end, argv, "", opts, NULL)) != -1;) {
		char *x = NULL;
		if (o == 'k')
			a->kill = true;
		else if (o == 'n')
			name = optarg;
		else if (o == 'h' && (a->hold_s = (int)strtol(optarg, &x, 10)) >= 1 && a->hold_s <= 3600 && !*x)
			continue;
		else if (o == 'h')
			return fprintf(stderr, "phos send: --hold '%s': expected seconds, from 1 to 3600\n", optarg), 2;
		else
			return send_usage();
	}
	char *x = NULL;
	a->pid = optind < end ? strtol(argv[optind], &x, 10) : 0;
	if (!x || *x || a->pid <= 0 || end - optind > 2)
		return send_usage();
	a->proto = end - optind == 2 ? argv[optind + 1] : NULL;
	if (a->proto && strcmp(a->proto, "cow") && strcmp(a->proto, "recopy") && strcmp(a->proto, "stop"))
		return send_usage();
	if (name && (!job_name_ok(name) || !strcmp(name, "latest")))
		return fprintf(stderr, "phos send: --name '%s': 1 to 64 of A-Z a-z 0-9 . _ -, not starting with '.', "
				       "not 'latest'\n", name), 2;
	snprintf(a->name, sizeof(a->name), "%s", name ? name : "");
	return 0;
}

static int send_parse(int argc, char **argv, send_args *a)
{
	memset(a, 0, sizeof(*a));
	a->hold_s = SEND_HOLD_S;
	int end = argc;
	for (int i = 1; i < argc && end == argc; i++)
		if (!strcmp(argv[i], "--"))
			end = i;
	if (end < argc && end + 1 == argc)
		return send_usage();
	a->cmd = end < argc ? argv + end + 1 : NULL;
	int e = send_options(end, argv, a);
	if (e)
		return e;
	if (a->kill && !a->cmd) {
		fprintf(stderr, "phos send: --kill ends the process only once the other end says it has the whole image: "
				"give the command that reaches it, as in phos send %ld recopy --kill -- ssh HOST phos receive\n",
			a->pid);
		return 2;
	}
	if (!a->cmd && isatty(1)) {
		fprintf(stderr, "phos send: it writes a stream: pipe it into phos receive (phos send %ld | ssh HOST phos "
				"receive), or give the command after --\n", a->pid);
		return 2;
	}
	if (!*a->name)
		snprintf(a->name, sizeof(a->name), "sent-%lld-%d", (long long)time(NULL), (int)getpid());
	snprintf(a->ctl, sizeof(a->ctl), "%s/%ld/ctl", cli_mount(), a->pid);
	snprintf(a->status, sizeof(a->status), "%s/%ld/status", cli_mount(), a->pid);
	snprintf(a->image, sizeof(a->image), "%s/%ld/checkpoints/%s", cli_mount(), a->pid, a->name);
	char store[PATH_MAX];
	if (!cli_store(store, sizeof(store)))
		snprintf(a->stored, sizeof(a->stored), "%.4000s/%ld/%s", store, a->pid, a->name);
	return 0;
}

/* Starts cmd with a pipe on its stdin and one on its stdout. */
static int peer_start(char **cmd, peer *p)
{
	int in[2], out[2];
	if (pipe2(in, O_CLOEXEC))
		return -errno;
	if (pipe2(out, O_CLOEXEC)) {
		int e = -errno;
		close(in[0]), close(in[1]);
		return e;
	}
	pid_t c = fork();
	if (c == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		execvp(cmd[0], cmd);
		fprintf(stderr, "phos send: %s: %s\n", cmd[0], strerror(errno));
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	if (c < 0) {
		int e = -errno;
		close(in[1]), close(out[0]);
		return e;
	}
	*p = (peer){ .pid = c, .out = in[1], .answers = fdopen(out[0], "r") };
	return p->answers ? 0 : -ENOMEM;
}

static int send_meta(const send_args *a, int out, char *buf, uint64_t *total, char *why, size_t len);

/* Whether the image is published: its manifest is in the store. */
static bool published(const send_args *a)
{
	char path[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/manifest.phos", a->stored);
	return *a->stored && access(path, F_OK) == 0;
}

/* Sends one file of the image (rel: its path in it) whole. With meta (for
 * gpu.data), once the image is published, the rest of it goes (send_meta)
 * before the bytes of gpu.data not sent yet: the other end can restore
 * while they come. */
static int send_file(const send_args *a, int out, const char *rel, char *buf, uint64_t *total, bool *meta, char *why,
		     size_t len)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%.3800s/%.255s", a->image, rel);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return snprintf(why, len, "%.1500s: %s", path, strerror(errno)), -EIO;
	int e = 0;
	uint64_t off = 0;
	for (;;) {
		if (meta && !*meta && published(a)) {
			*meta = true;
			if ((e = send_meta(a, out, buf, total, why, len)))
				break;
		}
		/* gpu.data in pieces of 1 MiB: publication is seen between
		 * them, however slowly the stream drains. */
		ssize_t n = read(fd, buf, meta ? SEND_PIECE : STREAM_DATA_MAX);
		if (n < 0 && errno == EINTR)
			continue; /* the mount gave up a wait: it goes on */
		if (n <= 0) {
			if (n < 0)
				snprintf(why, len, "%.1500s: %s", path, strerror(errno)), e = -EIO;
			break;
		}
		if ((e = stream_write_rec(out, STREAM_FILE, rel, off, buf, (uint64_t)n)))
			break;
		off += (uint64_t)n;
	}
	*total += off;
	close(fd);
	return e;
}

/* Sends what is in folder sub of the image ("" or "criu") but gpu.data and
 * the manifest. */
static int send_folder(const send_args *a, int out, const char *sub, char *buf, uint64_t *total, char *why, size_t len)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%.4000s%s%.10s", a->image, *sub ? "/" : "", sub);
	DIR *d = opendir(path);
	if (!d)
		return snprintf(why, len, "%.1500s: %s", path, strerror(errno)), -EIO;
	int e = *sub ? stream_write_rec(out, STREAM_DIR, sub, 0, NULL, 0) : 0;
	struct dirent *de;
	while (!e && (de = readdir(d))) {
		char rel[STREAM_PATH_MAX + 1];
		if (de->d_name[0] == '.' || (!*sub && (!strcmp(de->d_name, "gpu.data") || !strcmp(de->d_name, "criu") ||
							!strcmp(de->d_name, "manifest.phos"))))
			continue;
		snprintf(rel, sizeof(rel), "%.4s%s%.200s", sub, *sub ? "/" : "", de->d_name);
		e = send_file(a, out, rel, buf, total, NULL, why, len);
	}
	closedir(d);
	return e;
}

/* What status says went wrong, into why. */
static void status_error(const send_args *a, char *why, size_t len)
{
	char *st = cli_slurp(a->status), err[1024] = "";
	if (st && cli_field(st, "error", err, sizeof(err)) && strcmp(err, "none"))
		snprintf(why, len, "the checkpoint failed: %.900s", err);
	else
		snprintf(why, len, "the checkpoint failed (%.1500s says no more)", a->status);
	free(st);
}

/* All of the image but gpu.data, once it is published: the CRIU files,
 * the other data files, the index, the manifest; then META, with
 * gpu.data's size. */
static int send_meta(const send_args *a, int out, char *buf, uint64_t *total, char *why, size_t len)
{
	int e = send_folder(a, out, "criu", buf, total, why, len);
	if (!e)
		e = send_folder(a, out, "", buf, total, why, len);
	if (!e)
		e = send_file(a, out, "manifest.phos", buf, total, NULL, why, len);
	/* Its size in the store (the mount may still show 0 from before). */
	char path[PATH_MAX], shown[PATH_MAX];
	snprintf(path, sizeof(path), "%.4000s/gpu.data", a->stored);
	snprintf(shown, sizeof(shown), "%.4000s/gpu.data", a->image);
	struct stat st;
	if (!e && (!*a->stored || stat(path, &st)) && stat(shown, &st))
		e = -EIO, snprintf(why, len, "%.1500s: %s", shown, strerror(errno));
	return e ? e : stream_write_rec(out, STREAM_META, "", (uint64_t)st.st_size, NULL, 0);
}

/* The image, as it is written: gpu.data, each byte once it is final; once
 * the image is published, the rest of it (send_meta), then what is left
 * of gpu.data; END. */
static int send_image(const send_args *a, int out, uint64_t *total, char *why, size_t len)
{
	char *buf = malloc(STREAM_DATA_MAX);
	if (!buf)
		return snprintf(why, len, "out of memory"), -ENOMEM;
	bool meta = false;
	int e = send_file(a, out, "gpu.data", buf, total, &meta, why, len);
	if (e == -EIO && access(a->image, F_OK) != 0)
		status_error(a, why, len);
	if (!e && !meta)
		e = send_meta(a, out, buf, total, why, len);
	if (!e)
		e = stream_write_rec(out, STREAM_END, "", *total, NULL, 0);
	free(buf);
	return e;
}

/* Reads the command's answers until its stdout ends or deadline_s pass:
 * "received …" sets *received; "restored PID" gives the pid; "error: …"
 * goes to said. */
static void peer_answers(peer *p, int deadline_s, bool *received, char *restored, size_t rlen, char *said, size_t slen)
{
	time_t until = time(NULL) + deadline_s;
	char line[1024];
	for (;;) {
		struct pollfd pf = { .fd = fileno(p->answers), .events = POLLIN };
		int left = (int)(until - time(NULL));
		if (left <= 0 || poll(&pf, 1, left * 1000) <= 0 || !fgets(line, sizeof(line), p->answers))
			return;
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "received ", 9))
			*received = true;
		else if (!strncmp(line, "restored ", 9))
			snprintf(restored, rlen, "%.20s", line + 9);
		else if (!strncmp(line, "error: ", 7))
			snprintf(said, slen, "%s", line + 7);
	}
}

/* Whether the checkpoint whose status job line holds mine ("name=N ")
 * still runs. */
static bool running(const send_args *a, const char *mine)
{
	char *st = cli_slurp(a->status), job[200] = "";
	bool on = st && cli_field(st, "job", job, sizeof(job) - 1) && strstr(strcat(job, " "), mine);
	free(st);
	return on;
}

/* Ends the held process (end), or lets it run on: a checkpoint still under
 * way is cancelled (the process runs on, nothing is published), a held
 * one released. Then waits for the job to end. */
static int settle(const send_args *a, bool end)
{
	char reply[1200], mine[STREAM_NAME_MAX + 8];
	snprintf(mine, sizeof(mine), "name=%s ", a->name);
	/* Only this checkpoint is cancelled, never one started after it. */
	int e = end ? cli_ctl(a->ctl, "release kill\n", reply, sizeof(reply))
		    : running(a, mine) ? cli_ctl(a->ctl, "cancel\n", reply, sizeof(reply)) : 0;
	for (int i = 0; end && e == -EBUSY && i < 200; i++, usleep(50000))
		e = cli_ctl(a->ctl, "release kill\n", reply, sizeof(reply));
	/* Then the job ends: the process has ended, or runs again. */
	for (int i = 0; i < 6000 && running(a, mine); i++)
		usleep(50000);
	return end ? e : 0;
}

/* The command's answers, and the end of it: 0 when it said the other end
 * has the whole image and ended well; else why. */
static int peer_end(const send_args *a, peer *p, char *restored, size_t rlen, char *why, size_t len)
{
	bool received = false;
	char said[1024] = "";
	peer_answers(p, a->hold_s, &received, restored, rlen, said, sizeof(said));
	fclose(p->answers);
	int st = 0;
	if (!received)
		kill(p->pid, SIGTERM);
	waitpid(p->pid, &st, 0);
	if (received && WIFEXITED(st) && !WEXITSTATUS(st))
		return 0;
	if (*said)
		snprintf(why, len, "the other end said: %s", said);
	else if (!received)
		snprintf(why, len, "the other end never said it had the whole image (%s)", a->cmd[0]);
	else
		snprintf(why, len, "%s ended with %s %d", a->cmd[0], WIFSIGNALED(st) ? "signal" : "status",
			 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	return -EIO;
}

int cmd_send(int argc, char **argv)
{
	send_args a;
	int e = send_parse(argc, argv, &a);
	if (e)
		return e;
	signal(SIGPIPE, SIG_IGN);
	peer p = { .pid = 0, .out = 1 };
	if (a.cmd && (e = peer_start(a.cmd, &p)))
		return fprintf(stderr, "phos send: %s: %s\n", a.cmd[0], strerror(-e)), 1;
	char cmd[256], reply[1200], why[2048] = "", restored[32] = "";
	snprintf(cmd, sizeof(cmd), "checkpoint%s%s name=%s", a.proto ? " " : "", a.proto ? a.proto : "", a.name);
	if (a.kill)
		snprintf(cmd + strlen(cmd), sizeof(cmd) - strlen(cmd), " hold=%d", a.hold_s);
	strcat(cmd, "\n");
	e = cli_ctl(a.ctl, cmd, reply, sizeof(reply));
	bool started = !e, headed = false;
	if (e)
		snprintf(why, sizeof(why), "%s", !strncmp(reply, "error: ", 7) ? reply + 7 : strerror(-e));
	uint64_t total = 0;
	if (!e && !(e = stream_write_head(p.out, (pid_t)a.pid, a.name))) {
		headed = true;
		e = send_image(&a, p.out, &total, why, sizeof(why));
	}
	if (e == -EPIPE)
		snprintf(why, sizeof(why), "the stream was cut after %llu bytes", (unsigned long long)total);
	else if (e && headed)
		stream_write_rec(p.out, STREAM_ABORT, "", 0, why, strlen(why));
	if (p.out != 1)
		close(p.out);
	/* A process held for a stream that failed runs on before anything
	 * else is waited for. */
	if (e && started)
		settle(&a, false);
	if (p.pid && !e)
		e = peer_end(&a, &p, restored, sizeof(restored), why, sizeof(why));
	else if (p.pid)
		peer_end(&a, &p, restored, sizeof(restored), why + strlen(why), 0);
	if (e) {
		if (started)
			settle(&a, false);
		fprintf(stderr, "phos send: process %ld runs on: %s\n", a.pid, why);
		return 1;
	}
	fprintf(stderr, "phos send: checkpoint %s of process %ld: %llu bytes sent%s%s%s\n", a.name, a.pid,
		(unsigned long long)total, p.pid ? ", received whole" : "", *restored ? ", restored there as " : "",
		restored);
	if (a.kill && settle(&a, true))
		return fprintf(stderr, "phos send: process %ld could not be ended: it ran on after its hold\n", a.pid), 1;
	if (a.kill)
		fprintf(stderr, "phos send: process %ld ended\n", a.pid);
	return 0;
}
