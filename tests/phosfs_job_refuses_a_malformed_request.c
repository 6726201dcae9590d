/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A job process checks the request phosfs left in their shared memory
 * before it acts on anything (phosfs/request.h): a request that is not
 * phosfs's, or that is malformed, is refused with a message naming the
 * field, in the shared memory (where phosfs reads it) and on stderr, and
 * the job exits 2 having touched nothing.
 *
 * Then 300 restore requests with random bytes in every field (magic,
 * version, size and kind kept) are given to jobs: none may crash or
 * hang, and each ends with an error. A well-formed restore of an image
 * that does not exist passes the check and fails on the image instead.
 * Needs no root and no GPU.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "../job/shared.h"
#include "tap.h"
#include "testpath.h"

static char phosfs[PATH_MAX];

/* Runs `phosfs --job KIND --shared FD` on sh's request, with its stderr
 * to /dev/null, for up to 20 s. Its exit status, 128+signal, or -1 when
 * it had to be killed. */
static int run_job(job_shared *sh, int fd)
{
	char fd_s[16];
	snprintf(fd_s, sizeof(fd_s), "%d", fd);
	pid_t c = fork();
	if (c == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 2);
		const char *kind = job_kind_name(sh->req.kind);
		execl(phosfs, "phosfs", "--job", kind ? kind : "?", "--shared", fd_s, (char *)NULL);
		_exit(127);
	}
	for (int t = 0; t < 2000; t++) {
		int st;
		if (waitpid(c, &st, WNOHANG) == c)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		usleep(10000);
	}
	kill(c, SIGKILL);
	waitpid(c, NULL, 0);
	return -1;
}

/* A well-formed restore request of a missing image, in sh. */
static void good_restore(job_shared *sh)
{
	memset(sh, 0, sizeof(*sh));
	job_request_init(&sh->req, JOB_RESTORE, "/nonexistent/phos-image", "/nonexistent/criu", "/dev/null", NULL);
	sh->req.restore.lazy = true;
}

/* Runs sh's request; 1 when the job refused it with exit 2 and an error
 * that holds want. */
static int refused(job_shared *sh, int fd, const char *want, const char *what)
{
	int rc = run_job(sh, fd);
	int ok_ = rc == 2 && atomic_load(&sh->finished) && sh->result < 0 && strstr(sh->err, want);
	if (!ok_)
		diag("%s: exit %d, result %d, error '%s'", what, rc, (int)sh->result, sh->err);
	return ok_;
}

int main(void)
{
	snprintf(phosfs, sizeof(phosfs), "%s", test_path("PHOS_PHOSFS", "../phosfs/phosfs"));
	if (access(phosfs, X_OK))
		skip_all("phosfs is not built");
	setenv("LD_LIBRARY_PATH", test_path("PHOS_SIMCUDA", "../simcuda"), 1);
	plan(10);
	int fd = memfd_create("phos-job-test", 0);
	if (fd < 0 || ftruncate(fd, sizeof(job_shared)))
		bail("memfd: %s", strerror(errno));
	job_shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (sh == MAP_FAILED)
		bail("mmap: %s", strerror(errno));

	good_restore(sh);
	sh->req.magic ^= 1;
	ok(refused(sh, fd, "is not one this phosfs makes", "bad magic"), "a request with another magic is refused");

	good_restore(sh);
	memset(sh->req.image, 'x', sizeof(sh->req.image));
	ok(refused(sh, fd, "image is empty or not ended", "image"), "an image path that does not end is refused");

	good_restore(sh);
	memset(sh->req.restore.cgroups, '0', sizeof(sh->req.restore.cgroups));
	ok(refused(sh, fd, "cgroups do not end", "cgroups"), "a restore's cgroups that do not end are refused");

	good_restore(sh);
	sh->req.kind = 7;
	ok(refused(sh, fd, "kind 7 is unknown", "kind"), "an unknown kind of job is refused");

	good_restore(sh);
	sh->req.kind = JOB_CHECKPOINT;
	sh->req.checkpoint = (job_checkpoint_req){ .pid = getpid(), .staging_fd = -1, .chunk = 3u << 20 };
	ok(refused(sh, fd, "chunk size 3145728 is not a power of two", "chunk"),
	   "a checkpoint with a chunk size that is not a power of two is refused");

	good_restore(sh);
	sh->req.kind = JOB_CHECKPOINT;
	sh->req.checkpoint = (job_checkpoint_req){ .pid = getpid(), .staging_fd = -1, .chunk = 4u << 20,
						   .dump_timeout_s = 86401 };
	ok(refused(sh, fd, "dump timeout of 86401 s is longer than a day", "dump timeout"),
	   "a checkpoint with a dump timeout longer than a day is refused");

	good_restore(sh);
	sh->req.kind = JOB_CHECKPOINT;
	sh->req.checkpoint = (job_checkpoint_req){ .pid = getpid(), .staging_fd = -1, .chunk = 4u << 20, .hold_ms = 1000 };
	ok(refused(sh, fd, "holds its tree (1000 ms) without ending it", "hold"),
	   "a checkpoint that holds its tree without kill is refused");

	good_restore(sh);
	sh->req.kind = JOB_CHECKPOINT;
	sh->req.checkpoint = (job_checkpoint_req){ .pid = getpid(), .staging_fd = -1, .chunk = 4u << 20, .nmembers = 1 };
	sh->req.checkpoint.members[0] = (job_member){ getpid(), 987, getpid(), 1, 1, 0 };
	ok(refused(sh, fd, "traced process 0", "member"), "a traced process whose connection is not open is refused");

	good_restore(sh);
	int rc = run_job(sh, fd);
	int past = rc == 1 && sh->result < 0 && !strstr(sh->err, "job request") && strstr(sh->err, "nonexistent");
	if (!past)
		diag("good request: exit %d, error '%s'", rc, sh->err);
	ok(past, "a well-formed request passes the check and fails on its missing image (%s)", sh->err);

	unsigned seed = (unsigned)time(NULL);
	srand(seed);
	int crashed = 0, hung = 0, accepted = 0;
	for (int i = 0; i < 300; i++) {
		good_restore(sh);
		unsigned char *b = (unsigned char *)&sh->req + offsetof(job_request, kind) + sizeof(uint32_t);
		size_t n = sizeof(job_request) - (offsetof(job_request, kind) + sizeof(uint32_t));
		for (int k = 0; k < 64; k++) /* 64 random bytes anywhere past the kind */
			b[(size_t)rand() % n] = (unsigned char)rand();
		if (rand() % 2) /* or a whole field of noise */
			for (size_t k = 0; k < sizeof(sh->req.image); k++)
				sh->req.image[k] = (char)(rand() % 255 + 1);
		int r = run_job(sh, fd);
		crashed += r > 128 || r == 127;
		hung += r == -1;
		accepted += r == 0;
	}
	ok(!crashed && !hung && !accepted,
	   "300 restore requests with random bytes (seed %u): %d crashed, %d hung, %d succeeded", seed, crashed, hung,
	   accepted);
	munmap(sh, sizeof(*sh));
	close(fd);
	return done();
}
