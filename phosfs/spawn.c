/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Starting a job process (`phosfs --job …`, job/main.c), with the
 * memfd it shares with phosfs.
 */
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "phosfs.h"

job_shared *job_shared_make(int *fd)
{
	int sfd = memfd_create("phos-job", MFD_CLOEXEC);
	if (sfd < 0 || ftruncate(sfd, sizeof(job_shared)) != 0) {
		int e = errno;
		if (sfd >= 0)
			close(sfd);
		errno = e;
		return NULL;
	}
	job_shared *sh = mmap(NULL, sizeof(job_shared), PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
	if (sh == MAP_FAILED) {
		close(sfd);
		errno = ENOMEM;
		return NULL;
	}
	*fd = sfd;
	return sh;
}

/* Starts `phosfs --job KIND [--pid ROOT] --shared FD` (the words for
 * people reading ps; the request is in the shared memfd), with the fds
 * the request names left open in it; a restore takes a job of the pool
 * where one is ready (pool.c). */
int spawn_job(const job_request *req, spawn *s, perr *er)
{
	if (req->kind == JOB_RESTORE && pool_take(req, s) == 0)
		return 0;
	int sfd = -1;
	s->sh = job_shared_make(&sfd);
	if (!s->sh)
		return pr_perror(er, -errno, "cannot make the job's shared memory");
	s->sh->req = *req;
	char sfd_s[16], pid_s[16];
	snprintf(sfd_s, sizeof(sfd_s), "%d", sfd);
	snprintf(pid_s, sizeof(pid_s), "%d", (int)req->checkpoint.pid);
	const char *kind = job_kind_name(req->kind);
	char *argv[8] = { "phosfs", "--job", (char *)(kind ? kind : "?") };
	int n = 3;
	if (req->kind == JOB_CHECKPOINT) {
		argv[n++] = "--pid";
		argv[n++] = pid_s;
	}
	argv[n++] = "--shared";
	argv[n++] = sfd_s;
	s->child = fork();
	if (s->child == 0) {
		/* Its own session: signals meant for phosfs's group do not end it. */
		setsid();
		/* No signal blocked: phosfs blocks those that end it in
		 * every thread (phosfs_signals_block). */
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		fcntl(sfd, F_SETFD, 0);
		const job_checkpoint_req *cr = &req->checkpoint;
		for (uint32_t i = 0; req->kind == JOB_CHECKPOINT && i < cr->nmembers && i < JOB_MEMBERS_MAX; i++)
			fcntl(cr->members[i].conn, F_SETFD, 0);
		if (req->kind == JOB_CHECKPOINT && cr->staging_fd >= 0)
			fcntl(cr->staging_fd, F_SETFD, 0);
		execv(phosfs_self, argv);
		_exit(127);
	}
	int e = s->child < 0 ? -errno : 0;
	close(sfd);
	if (e) {
		munmap(s->sh, sizeof(job_shared));
		return pr_perror(er, e, "cannot start the job");
	}
	return 0;
}
