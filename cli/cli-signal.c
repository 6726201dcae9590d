/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phos run --on-signal SIG=ACTION[,nopass] (cli.h): the grammar, and the
 * checkpoint an action takes through the job's ctl.
 *
 *   ACTION   checkpoint | cow | recopy | stop      the job runs on; then
 *                                                   SIG is passed on to it
 *            checkpoint-kill | cow-kill |           the checkpoint ends the
 *            recopy-kill | stop-kill                job (phosfs's kill)
 *   ,nopass  (not after -kill) SIG is not passed on: the job runs on
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define POLL_US 20000

int signal_number(const char *name)
{
	if (!name || !*name)
		return -EINVAL;
	char *end;
	long v = strtol(name, &end, 10);
	if (end != name && !*end)
		return v > 0 && v < ON_SIGNAL_MAX && v <= SIGRTMAX ? (int)v : -EINVAL;
	if (!strncasecmp(name, "SIG", 3))
		name += 3;
	for (int s = 1; s < ON_SIGNAL_MAX && s < SIGRTMIN; s++) {
		const char *n = sigabbrev_np(s);
		if (n && !strcasecmp(n, name))
			return s;
	}
	return -EINVAL;
}

const char *signal_name(int sig)
{
	const char *n = sig > 0 ? sigabbrev_np(sig) : NULL;
	return n ? n : "?";
}

/* ACTION (without ,nopass) into a. -EINVAL for none. */
static int parse_action(const char *s, size_t n, on_signal *a)
{
	static const struct {
		const char *word;
		enum sig_proto proto;
	} protos[] = { { "checkpoint", SIG_DEFAULT }, { "cow", SIG_COW }, { "recopy", SIG_RECOPY }, { "stop", SIG_STOP } };
	for (size_t i = 0; i < sizeof(protos) / sizeof(*protos); i++) {
		size_t w = strlen(protos[i].word);
		if (strncmp(s, protos[i].word, w))
			continue;
		if (n == w || (n == w + 5 && !strncmp(s + w, "-kill", 5))) {
			a->proto = protos[i].proto;
			a->kill = n != w;
			return 0;
		}
	}
	return -EINVAL;
}

int on_signal_parse(const char *spec, on_signals *set, char *why, size_t len)
{
	const char *eq = strchr(spec, '=');
	if (!eq) {
		snprintf(why, len, "--on-signal '%s': expected SIG=ACTION, such as TERM=checkpoint", spec);
		return -EINVAL;
	}
	char name[32];
	snprintf(name, sizeof(name), "%.*s", (int)(eq - spec < 31 ? eq - spec : 31), spec);
	int sig = signal_number(name);
	if (sig < 0) {
		snprintf(why, len, "--on-signal '%s': unknown signal '%s' (a name such as TERM, USR1, SIGINT, or a number)",
			 spec, name);
		return -EINVAL;
	}
	if (sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD) {
		snprintf(why, len, "--on-signal '%s': SIG%s %s", spec, signal_name(sig),
			 sig == SIGCHLD ? "tells phos run that its job ended; choose another signal"
					: "cannot be caught, so nothing can be done before it; choose another signal");
		return -EINVAL;
	}
	if (set->by[sig].sig) {
		snprintf(why, len, "--on-signal '%s': SIG%s has an action already", spec, signal_name(sig));
		return -EINVAL;
	}
	const char *act = eq + 1, *comma = strchr(act, ',');
	on_signal a = { .sig = sig, .pass = true };
	if (parse_action(act, comma ? (size_t)(comma - act) : strlen(act), &a)) {
		snprintf(why, len,
			 "--on-signal '%s': unknown action '%.*s' (expected checkpoint, cow, recopy or stop, each "
			 "with -kill or not, then ,nopass or not)",
			 spec, comma ? (int)(comma - act) : (int)strlen(act), act);
		return -EINVAL;
	}
	if (comma && strcmp(comma, ",nopass")) {
		snprintf(why, len, "--on-signal '%s': unknown '%s' after the action (expected ,nopass)", spec, comma + 1);
		return -EINVAL;
	}
	if (comma && a.kill) {
		snprintf(why, len, "--on-signal '%s': an action that ends the job passes nothing on: drop ,nopass", spec);
		return -EINVAL;
	}
	a.pass = !comma && !a.kill;
	set->by[sig] = a;
	set->n++;
	return 0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The name=N of a job line ("checkpoint cow name=3 kill") into name. */
static void job_line_name(const char *line, char *name, size_t len)
{
	const char *n = strstr(line, " name=");
	if (n)
		snprintf(name, len, "%.*s", (int)strcspn(n + 6, " :"), n + 6);
}

/* Waits until status shows no job running, up to the deadline. 0, or
 * -ETIMEDOUT, or -errno of reading status. Sets name (when not NULL)
 * from the running job's line; *text gets status as last read. */
static int wait_idle(const char *status, double deadline, char *name, size_t nlen, char **text)
{
	for (;;) {
		char *st = cli_slurp(status), job[300] = "";
		if (!st)
			return -errno;
		cli_field(st, "job", job, sizeof(job));
		if (!strcmp(job, "none")) {
			*text = st;
			return 0;
		}
		if (name && !*name)
			job_line_name(job, name, nlen);
		free(st);
		if (now_s() > deadline)
			return -ETIMEDOUT;
		usleep(POLL_US);
	}
}

/* The outcome of the checkpoint named name (nlen bytes; "" when it was
 * not seen running: then the last job's), from status st (its job has
 * ended): 0 with image and stall, or -EIO with why. */
static int outcome(const char *st, pid_t job, const char *store, char *name, size_t nlen, char *image,
		   size_t ilen, double *stall_ms, char *why, size_t len)
{
	char last[300] = "", err[1024] = "", stall[32] = "";
	cli_field(st, "last job", last, sizeof(last));
	cli_field(st, "error", err, sizeof(err));
	cli_field(st, "stall ms", stall, sizeof(stall));
	if (!*name)
		job_line_name(last, name, nlen);
	size_t l = strlen(last);
	if (strncmp(last, "checkpoint", 10) || l < 6 || strcmp(last + l - 6, ": done")) {
		snprintf(why, len, "%s", *err && strcmp(err, "none") ? err : *last ? last : "it did not end");
		return -EIO;
	}
	snprintf(image, ilen, "%s/%d/%s", store, (int)job, name);
	*stall_ms = atof(stall);
	return 0;
}

int signal_checkpoint(const on_signal *a, pid_t job, const char *store, int timeout_s, char *image, size_t ilen,
		      double *stall_ms, char *why, size_t len)
{
	static const char *const words[] = { "", " cow", " recopy", " stop" };
	char ctl[PATH_MAX], status[PATH_MAX], cmd[64], reply[1200], name[128] = "";
	snprintf(ctl, sizeof(ctl), "%s/%d/ctl", cli_mount(), (int)job);
	snprintf(status, sizeof(status), "%s/%d/status", cli_mount(), (int)job);
	snprintf(cmd, sizeof(cmd), "checkpoint%s%s\n", words[a->proto], a->kill ? " kill" : "");
	double deadline = now_s() + timeout_s;
	char *st = NULL;
	int e = cli_ctl(ctl, cmd, reply, sizeof(reply));
	if (e == -EBUSY) { /* another checkpoint runs: ours comes after it */
		e = wait_idle(status, deadline, NULL, 0, &st);
		free(st);
		st = NULL;
		e = e ? e : cli_ctl(ctl, cmd, reply, sizeof(reply));
	}
	if (e) {
		snprintf(why, len, "%s: %s", ctl,
			 !strncmp(reply, "error: ", 7) ? reply + 7 : e == -ETIMEDOUT ? "another checkpoint did not end in time"
											: strerror(-e));
		return e;
	}
	e = wait_idle(status, deadline, name, sizeof(name), &st);
	if (e == -ETIMEDOUT) {
		cli_ctl(ctl, "cancel\n", reply, sizeof(reply));
		snprintf(why, len, "it did not end in %d s (--on-signal-timeout); cancelled", timeout_s);
		return e;
	}
	if (e) {
		snprintf(why, len, "%s: %s", status, strerror(-e));
		return e;
	}
	e = outcome(st, job, store, name, sizeof(name), image, ilen, stall_ms, why, len);
	free(st);
	return e;
}
