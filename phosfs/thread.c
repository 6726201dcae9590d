/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The signals that end phosfs (phosfs.h).
 *
 * SIGTERM, SIGINT and SIGHUP are blocked in every thread of phosfs (the
 * main thread blocks them before any other starts, and each inherits
 * that) and taken by one thread of their own (ender_main), which ends
 * the FUSE session and then asks the mount for a name that is not there:
 * a loop thread reads that request, sees the session ended, and the loop
 * ends (the request is never answered: the unmount ends it). With
 * libfuse's own handlers the signal could land just before the loop's
 * main thread went back to waiting for its workers, or on one of
 * phosfs's own threads: the session was marked ended, no thread woke,
 * and phosfs ran on until its mount's next request (as after SIGCONT,
 * then SIGTERM, to a phosfs that was stopped).
 */
#define FUSE_USE_VERSION 31
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <fuse_lowlevel.h>

#include "phosfs.h"

static sigset_t ending;
static pthread_t ender;
static bool ender_up;
static struct fuse_session *session;
static char mount_at[PATH_MAX];
static volatile sig_atomic_t ended_by; /* the signal, once taken */

void phosfs_signals_block(void)
{
	sigemptyset(&ending);
	sigaddset(&ending, SIGTERM);
	sigaddset(&ending, SIGINT);
	sigaddset(&ending, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &ending, NULL);
	signal(SIGPIPE, SIG_IGN);
}

static void *ender_main(void *arg)
{
	(void)arg;
	int sig = 0;
	if (sigwait(&ending, &sig) != 0)
		return NULL;
	ended_by = sig;
	fuse_session_exit(session);
	/* A name never asked for before, so that no cache answers for the
	 * loop: its request wakes a thread of it. */
	char poke[PATH_MAX + 64];
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	snprintf(poke, sizeof(poke), "%.4000s/.phosfs-ends-%d-%lld", mount_at, (int)getpid(), (long long)ts.tv_nsec);
	struct stat st;
	stat(poke, &st);
	return NULL;
}

int phosfs_signals_start(struct fuse_session *se, const char *mnt)
{
	session = se;
	snprintf(mount_at, sizeof(mount_at), "%s", mnt);
	int e = pthread_create(&ender, NULL, ender_main, NULL);
	ender_up = e == 0;
	return e;
}

int phosfs_signals_stop(void)
{
	int by = ended_by;
	if (ender_up && by) {
		/* Its request is answered by no one once the loop has ended: it
		 * ends at the unmount, or with the process. */
		pthread_detach(ender);
	} else if (ender_up) {
		pthread_kill(ender, SIGTERM); /* the loop ended otherwise: it ends too */
		pthread_join(ender, NULL);
	}
	ender_up = false;
	return by;
}
