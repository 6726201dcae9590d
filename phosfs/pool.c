/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The pool of restore jobs started ahead (phosfs --job-pool N, phosfs.h):
 * each is `phosfs --job pool --shared FD --wake FD`, a job process that
 * has loaded the driver (dlopen and cuInit, which a restore's first step
 * would otherwise pay) and waits for its request (job/main.c). A restore
 * takes a ready one instead of starting a process: phosfs writes the
 * request into the memory they share, then a byte on its wake socket, and
 * starts another in its place. When phosfs lets go of the pool (or dies),
 * the wake sockets close and the waiting jobs end.
 *
 * The pool holds no CUDA context: a context would hold device memory and
 * a GPU in exclusive-process mode.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "phosfs.h"

typedef struct pooled {
	job_shared *sh; /* mapped, or NULL: an empty slot */
	pid_t child;
	int wake; /* phosfs's end of its wake socket (close-on-exec here) */
} pooled;

/* Guarded by lock: slots (nslots of them, fixed at pool_start). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pooled *slots;
static int nslots;

/* Fills slot p with a new job started ahead; p stays empty if it cannot
 * be started (a restore then starts its own). */
static void start_one(pooled *p)
{
	int sfd = -1, w[2] = { -1, -1 };
	*p = (pooled){ .wake = -1 };
	job_shared *sh = job_shared_make(&sfd);
	/* A socket, not a pipe: a byte for a job that died is EPIPE, never
	 * SIGPIPE, which would end phosfs. */
	if (!sh || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, w)) {
		if (sh)
			munmap(sh, sizeof(*sh));
		if (sfd >= 0)
			close(sfd);
		return;
	}
	char sfd_s[16], wake_s[16];
	snprintf(sfd_s, sizeof(sfd_s), "%d", sfd);
	snprintf(wake_s, sizeof(wake_s), "%d", w[0]);
	char *argv[] = { "phosfs", "--job", "pool", "--shared", sfd_s, "--wake", wake_s, NULL };
	pid_t c = fork();
	if (c == 0) {
		/* Its own session, as every job's: signals meant for phosfs's
		 * group do not end a restore it took. */
		setsid();
		/* No signal blocked: phosfs blocks those that end it in
		 * every thread (phosfs_signals_block). */
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		fcntl(sfd, F_SETFD, 0);
		fcntl(w[0], F_SETFD, 0);
		execv(phosfs_self, argv);
		_exit(127);
	}
	close(sfd);
	close(w[0]);
	if (c < 0) {
		close(w[1]);
		munmap(sh, sizeof(*sh));
		return;
	}
	*p = (pooled){ .sh = sh, .child = c, .wake = w[1] };
}

/* Empties slot p, whose job has been reaped: what phosfs holds of it
 * goes. */
static void forget(pooled *p)
{
	close(p->wake);
	munmap(p->sh, sizeof(*p->sh));
	*p = (pooled){ .wake = -1 };
}

/* Empties slot p: its job ends (it holds nothing worth keeping; one
 * stuck in the driver's initialisation is not waited for). */
static void let_go(pooled *p)
{
	if (!p->sh)
		return;
	kill(p->child, SIGKILL);
	while (waitpid(p->child, NULL, 0) < 0 && errno == EINTR)
		;
	forget(p);
}

/* Writes the byte that wakes a job of the pool. Errors: -EPIPE (it died
 * since). */
static int wake(int fd)
{
	char go = 1;
	ssize_t n;
	while ((n = send(fd, &go, 1, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	return n == 1 ? 0 : -EPIPE;
}

int pool_start(int n)
{
	if (n <= 0)
		return 0;
	pooled *v = calloc((size_t)n, sizeof(*v));
	if (!v)
		return -ENOMEM;
	pthread_mutex_lock(&lock);
	slots = v;
	nslots = n;
	for (int i = 0; i < n; i++)
		start_one(&slots[i]);
	pthread_mutex_unlock(&lock);
	return 0;
}

int pool_take(const job_request *req, spawn *s)
{
	int e = -EAGAIN;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < nslots && e; i++) {
		pooled *p = &slots[i];
		if (p->sh && waitpid(p->child, NULL, WNOHANG) != 0) {
			/* it died (killed, or it could not start): start another */
			forget(p);
			start_one(p);
			continue;
		}
		if (!p->sh || !atomic_load(&p->sh->pool_ready))
			continue;
		p->sh->req = *req;
		/* its wake socket is read by it alone; a full one cannot be */
		if (wake(p->wake)) {
			let_go(p);
			start_one(p);
			continue;
		}
		close(p->wake);
		*s = (spawn){ .sh = p->sh, .child = p->child };
		start_one(p);
		e = 0;
	}
	for (int i = 0; i < nslots && e; i++)
		if (!slots[i].sh)
			start_one(&slots[i]);
	pthread_mutex_unlock(&lock);
	return e;
}

void pool_stop(void)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; i < nslots; i++)
		let_go(&slots[i]);
	free(slots);
	slots = NULL;
	nslots = 0;
	pthread_mutex_unlock(&lock);
}
