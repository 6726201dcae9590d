/*
 * Starting a job process (`phosfs --job …`, job-process.c), with the
 * memfd it shares with phosfs.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "phosfs.h"

/* Starts `phosfs --job ARGS… --shared FD`, with the shared memfd and the
 * fds keep[0..nkeep) left open in it. */
int spawn_job(char *const *args, const int *keep, int nkeep, spawn *s, char *err, size_t errlen)
{
	int sfd = memfd_create("phos-job", MFD_CLOEXEC);
	if (sfd < 0 || ftruncate(sfd, sizeof(engine_shared)) != 0) {
		int e = -errno;
		if (sfd >= 0)
			close(sfd);
		return engine_fail(e, err, errlen, "cannot make the job's shared memory: %s", strerror(-e));
	}
	s->sh = mmap(NULL, sizeof(engine_shared), PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
	if (s->sh == MAP_FAILED) {
		close(sfd);
		return engine_fail(-ENOMEM, err, errlen, "cannot map the job's shared memory");
	}
	char sfd_s[16];
	snprintf(sfd_s, sizeof(sfd_s), "%d", sfd);
	int nargs = 0;
	while (args[nargs])
		nargs++;
	char **argv = calloc((size_t)nargs + 5, sizeof(*argv));
	if (!argv) {
		munmap(s->sh, sizeof(engine_shared));
		close(sfd);
		return engine_fail(-ENOMEM, err, errlen, "out of memory");
	}
	int n = 0;
	argv[n++] = "phosfs";
	argv[n++] = "--job";
	for (int i = 0; i < nargs; i++)
		argv[n++] = args[i];
	argv[n++] = "--shared";
	argv[n++] = sfd_s;
	argv[n] = NULL;
	s->child = fork();
	if (s->child == 0) {
		/* Its own session: signals meant for phosfs's group do not end it. */
		setsid();
		fcntl(sfd, F_SETFD, 0);
		for (int i = 0; i < nkeep; i++)
			fcntl(keep[i], F_SETFD, 0);
		execv(phosfs_self, argv);
		_exit(127);
	}
	int e = s->child < 0 ? -errno : 0;
	free(argv);
	close(sfd);
	if (e) {
		munmap(s->sh, sizeof(engine_shared));
		return engine_fail(e, err, errlen, "cannot start the job: %s", strerror(-e));
	}
	return 0;
}

