/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phos run waits for its job (cli.h): it stands for the job, so that
 * what a batch system or a terminal does to it reaches the job. A
 * signal with an --on-signal action is taken first: the checkpoint,
 * linked under the job's name; then the signal goes on, or the job has
 * ended with the checkpoint. The job's root is followed by a pidfd: a
 * child is waited for; a restored root (which is no child of phos run)
 * says how its job ended in its status file (run_status_path).
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

/* How the job ended, once root has: its exit status, as phos run's. */
static int ended(const run_watch *w)
{
	if (w->child) {
		int st;
		while (waitpid(w->root, &st, 0) < 0)
			if (errno != EINTR)
				return 1;
		if (*w->status_file)
			unlink(w->status_file);
		return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	}
	char *s = *w->status_file ? cli_slurp(w->status_file) : NULL;
	if (!s) {
		fprintf(stderr, "phos: process %d ended without saying how its job ended (it was killed)\n", (int)w->root);
		return 128 + SIGKILL;
	}
	int code = atoi(s);
	free(s);
	unlink(w->status_file);
	return code;
}

/* After an action that ended the job: root is gone (the checkpoint
 * killed its tree); a child is reaped, and killed first if it is not
 * gone within 5 s. */
static void reap_killed(const run_watch *w, int pidfd)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };
	if (pidfd >= 0 && poll(&p, 1, 5000) == 0) {
		fprintf(stderr, "phos: process %d outlived the checkpoint that ended its job: killing it\n", (int)w->root);
		kill(w->root, SIGKILL);
	}
	if (w->child)
		while (waitpid(w->root, NULL, 0) < 0 && errno == EINTR)
			;
	if (*w->status_file)
		unlink(w->status_file);
}

/* The image linked last under the job's name: its event, read after
 * the signal that took it, is not linked again. */
static char recorded[PATH_MAX];

/* Links an image of the job under its name, saying so. */
static void record(const run_watch *w, const char *image)
{
	if (!w->name || !strcmp(image, recorded))
		return;
	snprintf(recorded, sizeof(recorded), "%s", image);
	char dir[PATH_MAX];
	job_dir(w->store, w->name, dir, sizeof(dir));
	int e = job_record(w->store, w->name, image, w->keep);
	if (e == -ELOOP)
		fprintf(stderr, "phos: cannot link %s as job %s's latest image in %s: %s/jobs or %s is a symbolic link, "
				"which phos did not make and does not follow: remove it\n",
			image, w->name, dir, w->store, dir);
	else if (e)
		fprintf(stderr, "phos: cannot link %s as job %s's latest image in %s: %s\n", image, w->name, dir,
			strerror(-e));
	else
		fprintf(stderr, "phos: %s/latest is now %s\n", dir, image);
}

/* every_events_take's callback: an image phosfs published of the job. */
static void published(const char *image, void *arg)
{
	record(arg, image);
}

/* Takes sig's action, if it has one, then passes sig on. Returns phos
 * run's exit status when the action ended the job, else -1. */
static int on_signal_taken(const run_watch *w, int sig, int pidfd)
{
	const on_signal *a = sig < ON_SIGNAL_MAX && w->acts && w->acts->by[sig].sig ? &w->acts->by[sig] : NULL;
	if (!a) {
		kill(w->root, sig);
		return -1;
	}
	fprintf(stderr, "phos: SIG%s: checkpointing process %d%s\n", signal_name(sig), (int)w->job,
		a->kill ? ", which then ends" : "");
	char image[PATH_MAX], why[2048];
	double stall = 0;
	int e = signal_checkpoint(a, w->job, w->store, w->timeout_s, image, sizeof(image), &stall, why, sizeof(why));
	if (e) {
		fprintf(stderr, "phos: SIG%s: the checkpoint of process %d failed: %s; passing SIG%s on\n",
			signal_name(sig), (int)w->job, why, signal_name(sig));
		kill(w->root, sig);
		return -1;
	}
	fprintf(stderr, "phos: SIG%s: checkpoint of process %d done (stall %.1f ms): %s\n", signal_name(sig),
		(int)w->job, stall, image);
	/* What phosfs's schedule published before it, in order, first. */
	if (w->events >= 0)
		every_events_take(w->events, w->job, published, (void *)w);
	record(w, image);
	if (a->kill) {
		reap_killed(w, pidfd);
		fprintf(stderr, "phos: the job ended with its checkpoint\n");
		return 128 + sig;
	}
	if (a->pass)
		kill(w->root, sig);
	return -1;
}

int run_wait(const run_watch *w, const sigset_t *set)
{
	int sfd = signalfd(-1, set, SFD_CLOEXEC);
	int pfd = pidfd_open(w->root, 0);
	if (sfd < 0 || (pfd < 0 && errno != ESRCH)) {
		fprintf(stderr, "phos: cannot follow process %d: %s\n", (int)w->root, strerror(errno));
		if (sfd >= 0)
			close(sfd);
		return 1;
	}
	int code = -1;
	bool events = w->events >= 0;
	while (code < 0) {
		struct pollfd p[3] = { { .fd = pfd, .events = POLLIN },
				       { .fd = sfd, .events = POLLIN },
				       { .fd = w->events, .events = POLLIN } };
		if (pfd >= 0 && poll(p, events ? 3 : 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			code = 1;
			break;
		}
		if (pfd < 0 || p[0].revents) {
			code = ended(w);
			break;
		}
		if (events && p[2].revents) {
			events = every_events_take(w->events, w->job, published, (void *)w) == 0;
			if (!p[1].revents)
				continue;
		}
		struct signalfd_siginfo si;
		if (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
			code = on_signal_taken(w, (int)si.ssi_signo, pfd);
	}
	close(sfd);
	if (pfd >= 0)
		close(pfd);
	return code;
}
